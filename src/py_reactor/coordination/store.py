"""The small protocol every primitive talks to, and how the current store is found.

A primitive never speaks Redis itself: it names a Lua script (one file per operation in
``py_reactor/storage/lua/``) and passes keys and arguments, so each acquire and each release is
exactly one ``run_script`` call, one round trip. ``wait_signal`` is the one blocking call: a
waiter sleeps on a per-waiter list that a release pushes to, which is how a holder hands its
key to the next waiter without anyone polling.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

__all__ = ["DUE_KEY", "NAMESPACE", "READY_KEY", "Store", "default_store", "namespaced", "parked"]

#: Every Redis key the library writes starts with this.
NAMESPACE = "py_reactor"


def namespaced(primitive: str, key: str, *parts: str) -> str:
    """The Redis key for ``key`` of ``primitive``: ``py_reactor:<primitive>:<key>[:<part>...]``."""
    base = f"{NAMESPACE}:{primitive}:{key}"
    return base if not parts else base + ":" + ":".join(parts)


#: Parked executions by the time they are due (server ms), and the list dispatchers block on;
#: a release of a key makes the oldest execution parked on it due now (see ``workers``).
DUE_KEY = f"{NAMESPACE}:exec:due"
READY_KEY = f"{NAMESPACE}:exec:ready"


def parked(primitive: str, key: str) -> tuple[str, str, str]:
    """The keys a release of ``key`` passes so that it wakes what is parked on it: the list of
    execution ids parked on the key, the due set and the ready list."""
    return namespaced(primitive, key, "parked"), DUE_KEY, READY_KEY


@runtime_checkable
class Store(Protocol):
    """Where coordination state lives (Redis, a private server or the embedded default)."""

    #: A human description for error messages, e.g. ``redis://host:6379/0`` or the socket path.
    description: str

    def run_script(self, name: str, keys: Sequence[str], args: Sequence[str | int | float]) -> Any:
        """Run Lua script ``name`` atomically in one round trip and return its reply.

        Raises:
            StoreUnavailableError: the store cannot be reached.
        """
        ...

    def wait_signal(self, key: str, timeout: float) -> str | None:
        """Block up to ``timeout`` seconds for a value pushed to list ``key``; None on timeout.

        Raises:
            StoreUnavailableError: the store cannot be reached.
        """
        ...


def default_store() -> Store:
    """The store configured with ``configure(redis_url=...)``, else the embedded server.

    The storage package is imported here, on first use, so that ``import py_reactor`` never
    imports ``redis``.
    """
    from py_reactor.storage import current_store

    return current_store()
