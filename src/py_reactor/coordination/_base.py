"""What every primitive shares: finding its store late, holds that release once, and entry
from a coroutine.

Building a primitive never connects (a decorator builds one at import to check its options);
the store is resolved on first use. Lock and semaphore holds share one shape: one store call
to release, one to extend, both keyed by owner.

On an event loop every primitive is entered with ``async with`` (or ``await aacquire()``): the
same synchronous code runs in a bridge (``py_reactor.aio``), so the same Lua and the same ledger
decide, and a waiter awaits the release on the loop instead of blocking a thread. The plain
``with``/``acquire()`` refuse to run on a loop: they would block it for the whole wait.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from py_reactor.aio import call, in_coroutine
from py_reactor.coordination._extender import forget
from py_reactor.coordination.store import Store, default_store

__all__ = ["Acquirable", "Hold", "TaskStacks", "UsesStore", "refuse_on_loop"]

logger = logging.getLogger("py_reactor")


def refuse_on_loop(what: str, instead: str) -> None:
    """Refuse a blocking entry (``what``) from a coroutine, naming the ``instead`` to await.

    Raises:
        RuntimeError: this thread runs an event loop and this is not py_reactor's own bridge.
    """
    if in_coroutine():
        raise RuntimeError(
            f"{what} would block the running event loop while it waits; use {instead} there"
        )


class TaskStacks:
    """What each task entered with ``async with`` on one primitive, innermost last (tasks
    share the loop's thread, so a thread-local stack would mix theirs)."""

    __slots__ = ("_stacks",)

    def __init__(self) -> None:
        self._stacks: weakref.WeakKeyDictionary[asyncio.Task[Any], list[Any]] = (
            weakref.WeakKeyDictionary()
        )

    def push(self, item: Any) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._stacks.setdefault(task, []).append(item)

    def pop(self) -> Any:
        task = asyncio.current_task()
        assert task is not None
        return self._stacks[task].pop()


class UsesStore:
    """Mixin: ``self.store`` is the store given, else the configured one on first use; and
    what each task entered with ``async with`` (:class:`TaskStacks`, made on first use)."""

    _store: Store | None
    _tasks: TaskStacks | None = None

    def _task_entered(self, item: Any) -> None:
        """This task entered the primitive (``__aenter__``) and got ``item``."""
        if self._tasks is None:
            self._tasks = TaskStacks()
        self._tasks.push(item)

    def _task_leaving(self) -> Any:
        """What this task's innermost ``async with`` on the primitive got (``__aexit__``)."""
        assert self._tasks is not None
        return self._tasks.pop()

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

    async def arelease(self) -> None:
        """:meth:`release` from a coroutine (the round trip awaited on the loop)."""
        await call(self.release)

    def __enter__(self) -> Self:
        return self

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.arelease()

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

    Holds are kept per thread (per task on a loop), so one primitive object can be entered from
    several threads and tasks.
    """

    _local: threading.local

    def acquire(self, *, wait: float | None = None) -> H:
        """Take a hold (implemented by each primitive)."""
        raise NotImplementedError

    async def aacquire(self, *, wait: float | None = None) -> H:
        """:meth:`acquire` from a coroutine: the same scripts, and a busy key's release
        awaited on the loop (no thread waits). Release the hold with ``await
        hold.arelease()``, or use ``async with``."""
        return await call(self.acquire, wait=wait)

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

    async def __aenter__(self) -> H:
        hold = await self.aacquire()
        self._task_entered(hold)
        return hold

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._task_leaving().arelease()
