"""What the reactors of the Celery tests use inside the worker processes.

The reactors run in other processes than the test, so they report through Redis (the store's
own server): ``record`` appends ``"<what>:<pid>"`` to the list ``celery-test:<key>`` (the test
reads it with ``tests.transport._harness.records``), and a body that must wait for the test
blocks in ``hold_until_told`` on ``celery-test:<key>:go`` (the test pushes to it, see
``_harness.go``). ``apply_settings`` applies the settings the test passes to a worker through
its environment (``_harness.Worker``/``serving``); every reactors module calls it once, at
import, so that importing this module changes nothing.
"""

from __future__ import annotations

import os
import time
from typing import Any

from py_reactor import configure
from py_reactor.storage import current_store

__all__ = ["apply_settings", "client", "hold_until_told", "record"]

#: py_reactor's option for each environment variable a test may give its workers.
SETTINGS = {
    "PY_REACTOR_TEST_LEASE": "execution_lease",
    "PY_REACTOR_TEST_PARK_CAP": "park_max_attempts",
    "PY_REACTOR_TEST_PARK_DELAY": "park_delay",
    "PY_REACTOR_TEST_PARK_JITTER": "park_jitter",
    "PY_REACTOR_TEST_UNIMPORTABLE_GRACE": "unimportable_grace",
}


def apply_settings() -> None:
    """``configure`` this worker process with the ``PY_REACTOR_TEST_*`` settings set in its
    environment (the others keep the library's defaults)."""
    for variable, option in SETTINGS.items():
        if os.environ.get(variable):
            configure(**{option: float(os.environ[variable])})


def client() -> Any:
    """The store's Redis client (strings decoded)."""
    return current_store().client  # type: ignore[attr-defined]


def record(key: str, what: str) -> None:
    """Append ``"<what>:<pid>"`` to ``celery-test:<key>``."""
    client().rpush(f"celery-test:{key}", f"{what}:{os.getpid()}")


def hold_until_told(key: str, timeout: float = 30, *, keep: bool = False) -> None:
    """Block until the test pushes to ``celery-test:<key>:go`` (in short BLPOPs: the store's
    client gives up reading after its 5 s socket timeout); with ``keep``, put the word back,
    so that every body held on ``key`` (or a re-run of this one) passes once told, and the
    test may also say it in advance. Never told within ``timeout`` seconds: raise, naming the
    key (the step fails instead of going on as if told)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client().blpop([f"celery-test:{key}:go"], timeout=1):
            if keep:
                client().rpush(f"celery-test:{key}:go", "go")
            return
    raise AssertionError(f"the test never told the body waiting on {key!r} to go on")
