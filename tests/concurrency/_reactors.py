"""Reactors and process entry points for the concurrency tests.

They live at module level in a module of their own so that ``spawn`` children can import them
by name. Every reactor runs one step, ``Occupy``, which records its stay in an
``OverlapRecorder`` (rebuilt in each process from the URL and name it receives as inputs) and,
in threads of the test process, runs the hook the test registered under the recorder's name.
"""

from __future__ import annotations

import functools
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from py_reactor import (
    Reactor,
    Step,
    configure,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
    with_rate_limit,
    with_semaphore,
)
from tests._overlap import OverlapRecorder

__all__ = [
    "HOOKS",
    "REACTORS",
    "describe",
    "hold_forever",
    "run_many",
]

#: What ``Occupy`` does while inside, by recorder name (set by tests, per process).
HOOKS: dict[str, Callable[[Step], Any]] = {}

#: Seconds ``hold_forever``'s lock lives without extension.
KILLABLE_TTL = 1


@functools.cache
def recorder(url: str, name: str) -> OverlapRecorder:
    """One recorder per (url, name) in this process, so its connection is reused."""
    return OverlapRecorder(url, name)


def by_key(inputs: Any) -> str:
    """Every reactor here coordinates on its ``key`` input."""
    return str(inputs["key"])


class Occupy(Step):
    """Stays inside the recorded section for ``hold`` seconds (or while the hook runs)."""

    url: str
    name: str
    hold: float = 0.0

    def run(self) -> Any:
        inside = recorder(self.inputs.url, self.inputs.name)
        label = self.context.root_id
        with inside.inside(label):
            hook = HOOKS.get(self.inputs.name)
            if hook is not None:
                return hook(self)
            if self.inputs.hold:
                time.sleep(self.inputs.hold)  # the work itself: it takes this long
        return label


@with_lock(by_key, wait=30)
class LockedOccupy(Reactor):
    key: str
    url: str
    name: str
    hold: float = 0.0
    occupy = step(Occupy)
    returns = "occupy"


@with_lock(by_key, ttl=KILLABLE_TTL, wait=5)
class ShortLockedOccupy(Reactor):
    key: str
    url: str
    name: str
    hold: float = 0.0
    occupy = step(Occupy)
    returns = "occupy"


@with_semaphore(by_key, limit=3, wait=30)
class SemaphoreOccupy(Reactor):
    key: str
    url: str
    name: str
    hold: float = 0.0
    occupy = step(Occupy)
    returns = "occupy"


@with_rate_limit(by_key, limit=7, period="minute")
class RateLimitedOccupy(Reactor):
    key: str
    url: str
    name: str
    hold: float = 0.0
    occupy = step(Occupy)
    returns = "occupy"


@with_period(by_key, every="day")
class DailyOccupy(Reactor):
    key: str
    url: str
    name: str
    hold: float = 0.0
    occupy = step(Occupy)
    returns = "occupy"


@with_ordered_lock(by_key, strict=True)
class OrderedOccupy(Reactor):
    key: str
    url: str
    name: str
    hold: float = 0.0
    occupy = step(Occupy)
    returns = "occupy"


#: The reactors above by name, so process entry points receive a plain string.
REACTORS: dict[str, type[Reactor]] = {
    cls.__name__: cls
    for cls in (
        LockedOccupy,
        ShortLockedOccupy,
        SemaphoreOccupy,
        RateLimitedOccupy,
        DailyOccupy,
        OrderedOccupy,
    )
}


def describe(outcome: Any) -> tuple[str, str | None]:
    """An outcome as plain data: ``(status, error class or halt reason)``."""
    if outcome.status == "failed":
        return outcome.status, type(outcome.error).__name__
    if outcome.status == "halted":
        return outcome.status, outcome.reason
    return outcome.status, None


def run_many(
    url: str,
    reactor: str,
    key: str,
    name: str,
    runs: int,
    hold: float,
    start: Any,
    results: Any,
) -> None:
    """Process entry point: wait at ``start`` (a Barrier), run ``reactor`` ``runs`` times.

    Puts ``("ok", [describe(outcome), ...])`` on ``results``, or ``("error", traceback)``.
    """
    try:
        configure(redis_url=url)
        cls = REACTORS[reactor]
        start.wait(60)
        seen = [describe(cls.run(key=key, url=url, name=name, hold=hold)) for _ in range(runs)]
        results.put(("ok", seen))
    except BaseException:
        results.put(("error", traceback.format_exc()))


def hold_forever(url: str, key: str, name: str, inside: Any) -> None:
    """Process entry point: take ``key`` through ShortLockedOccupy, signal ``inside``, never leave.

    The test kills this process with SIGKILL; nothing of it runs again.
    """
    configure(redis_url=url)

    def block(occupy: Step) -> None:
        inside.set()
        threading.Event().wait()

    HOOKS[name] = block
    ShortLockedOccupy.run(key=key, url=url, name=name)
