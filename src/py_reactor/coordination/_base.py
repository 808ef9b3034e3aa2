"""What every primitive shares: finding its store late, and holds that release once.

Building a primitive never connects (a decorator builds one at import to check its options);
the store is resolved on first use. Lock and semaphore holds share one shape: one store call
to release, one to extend, both keyed by owner.
"""

from __future__ import annotations

import logging
import threading
from types import TracebackType
from typing import Generic, Self, TypeVar

from py_reactor.coordination._extender import forget
from py_reactor.coordination.store import Store, default_store

__all__ = ["Acquirable", "Hold", "UsesStore"]

logger = logging.getLogger("py_reactor")


class UsesStore:
    """Mixin: ``self.store`` is the store given, else the configured one on first use."""

    _store: Store | None

    @property
    def store(self) -> Store:
        """The store this primitive uses (the configured one, resolved on first use)."""
        if self._store is None:
            self._store = default_store()
        return self._store


class Hold:
    """One owner's hold on a key: release it once (extra releases are ignored).

    Attributes:
        key: the primitive's key.
        owner: who holds it.
        count: the nesting depth when this hold was taken (1: the outermost).
        released: whether ``release()`` has run.
        lost: set when the store said the hold was no longer ours (it expired).
    """

    __slots__ = ("_ttl_ms", "count", "key", "lost", "owner", "released", "store")

    def __init__(self, store: Store, key: str, owner: str, count: int, *, ttl_ms: int) -> None:
        self.store = store
        self.key = key
        self.owner = owner
        self.count = count
        self.released = False
        self.lost = False
        self._ttl_ms = ttl_ms

    def _give_back(self) -> int:
        """Release one level in the store: the count left, 0 when freed, -1 when not held."""
        raise NotImplementedError

    def _renew(self) -> bool:
        """Push the expiry out by the ttl in the store; False when no longer held."""
        raise NotImplementedError

    def release(self) -> None:
        """Give up this hold (one round trip); the key frees when the outermost is released.

        Raises:
            StoreUnavailableError: the store cannot be reached (the hold then lapses by itself).
        """
        if self.released:
            return
        self.released = True
        forget(self)
        if self._give_back() == -1:
            self.lost = True
            logger.warning(
                "py_reactor: %r was no longer held when released: it expired (ttl or lease too "
                "short, auto_extend off, or the process stalled); others may have entered",
                self,
            )

    def extend(self) -> bool:
        """Push the expiry out by the ttl again; False when the hold is no longer ours."""
        if self.released:
            return False
        alive = self._renew()
        if not self.released:  # a release that raced this call is not a loss
            self.lost = not alive
        return alive

    def release_for_exit(self) -> None:
        """At a clean exit of the process: release, as ``release`` does (``ExitReleasable``)."""
        self.release()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"<{type(self).__name__} {self.key!r} count={self.count} {state}>"


H = TypeVar("H", bound=Hold)


class Acquirable(UsesStore, Generic[H]):
    """Mixin: ``with primitive as hold:`` acquires on entry and releases that hold on exit.

    Holds are kept per thread, so one primitive object can be entered from several threads.
    """

    _local: threading.local

    def acquire(self) -> H:
        """Take a hold (implemented by each primitive)."""
        raise NotImplementedError

    def __enter__(self) -> H:
        hold = self.acquire()
        self._local.__dict__.setdefault("stack", []).append(hold)
        return hold

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._local.stack.pop().release()
