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

__all__ = ["NAMESPACE", "Store", "default_store", "namespaced"]

#: Every Redis key the library writes starts with this.
NAMESPACE = "py_reactor"


def namespaced(primitive: str, key: str, *parts: str) -> str:
    """The Redis key for ``key`` of ``primitive``: ``py_reactor:<primitive>:<key>[:<part>...]``."""
    base = f"{NAMESPACE}:{primitive}:{key}"
    return base if not parts else base + ":" + ":".join(parts)


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
