"""The bridge between asyncio and the one synchronous engine.

py_reactor's engine, coordination and storage are written once, synchronously. On an event loop
a run is that same code running in a *bridge*: a greenlet (the technique SQLAlchemy's asyncio
extension uses) that hands every wait -- a Redis round trip, the BLPOP a waiter blocks on until a
release hands it the key, a backoff, an ``async def`` step body -- to the coroutine that started
it, which awaits it on the loop and switches back with the answer. So the loop never blocks, no
thread is held while a run waits, and there is no second engine to keep in step with the first.

Outside a bridge every helper here does the plain synchronous thing, so the code that calls them
never asks where it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any, ParamSpec, TypeVar

import greenlet

__all__ = [
    "Branches",
    "at_loop_end",
    "await_",
    "call",
    "close_loop_resources",
    "here",
    "in_bridge",
    "in_coroutine",
    "is_async_callable",
    "loop_running",
    "run",
    "run_coroutine",
    "sleep",
    "to_thread",
]

T = TypeVar("T")
P = ParamSpec("P")


class _Bridge(greenlet.greenlet):
    """A greenlet whose waits are awaited by the coroutine that switched into it."""

    #: The coroutine driving it is being closed (its loop is gone): nothing can be awaited.
    closing = False


def in_bridge() -> bool:
    """Whether this code runs in a bridge (its waits are awaited on a loop)."""
    return type(greenlet.getcurrent()) is _Bridge


def loop_running() -> bool:
    """Whether this thread runs an event loop right now (in a bridge or in a coroutine)."""
    return asyncio.events._get_running_loop() is not None  # the cheap form: no exception


def here() -> tuple[int, object]:
    """Where code runs, as far as ownership goes: this thread, and the task of its loop that
    runs now (None outside one). Work handed to another thread or another task is another
    owner, even when it carries a copy of the context variables."""
    loop = asyncio.events._get_running_loop()
    return threading.get_ident(), None if loop is None else asyncio.current_task(loop)


def in_coroutine() -> bool:
    """Whether a task of a running loop is executing right now, outside a bridge: blocking
    here would block that loop. (Playwright's sync API keeps a loop "running" in its thread
    while your code runs between its calls, with no task executing: blocking is right there.)
    """
    loop = asyncio.events._get_running_loop()
    if loop is None or type(greenlet.getcurrent()) is _Bridge:
        return False
    return asyncio.current_task(loop) is not None


def await_(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` on the loop from synchronous code running in a bridge.

    Raises:
        RuntimeError: not in a bridge (synchronous code outside :func:`call`).
    """
    current = greenlet.getcurrent()
    if type(current) is not _Bridge:
        raise RuntimeError(
            "py_reactor: await_() is only for code that py_reactor.aio.call() runs on a loop"
        )
    if current.closing:
        raise RuntimeError("py_reactor: the event loop this run was on is gone")
    parent = current.parent
    assert parent is not None
    return parent.switch(awaitable)  # type: ignore[no-any-return]


async def call(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run the synchronous ``fn`` in a bridge, awaiting each of its waits, and return what it
    returned. It runs in this task's context variables: what it sets (and resets) is what a
    coroutine it awaits sees.

    Cancelling the awaiting task raises ``CancelledError`` where ``fn`` waits: ``fn`` unwinds
    (its ``finally`` blocks may still await, e.g. to release a key), then the task ends
    cancelled.
    """
    here = greenlet.getcurrent()
    bridge = _Bridge(fn, here)
    bridge.gr_context = here.gr_context  # the task's own context, not a copy
    value: Any = bridge.switch(*args, **kwargs)
    while not bridge.dead:
        try:
            result = await value
        except GeneratorExit:  # this coroutine is closed unfinished (its loop is gone)
            bridge.closing = True  # fn unwinds at once: each wait left raises
            with contextlib.suppress(BaseException):
                bridge.throw(GeneratorExit)
            raise
        except BaseException as exc:  # CancelledError included: unwind fn where it waits
            value = bridge.throw(exc)
        else:
            value = bridge.switch(result)
    return value  # type: ignore[no-any-return]


def sleep(seconds: float) -> None:
    """Sleep ``seconds``: on the loop in a bridge, else in this thread."""
    if type(greenlet.getcurrent()) is _Bridge:
        await_(asyncio.sleep(seconds))
    else:
        time.sleep(seconds)


def run_coroutine(coroutine: Coroutine[Any, Any, T]) -> T:
    """The value of ``coroutine``, a user's ``async def`` body, called from synchronous code.

    In a bridge it is awaited by the bridge's task, in the context the bridge runs in (so it
    sees the execution it belongs to, and re-enters what that execution holds). Elsewhere (a
    reactor run synchronously, a thread worker, a Celery worker) it runs on an event loop of its
    own, started for it and closed after it (:func:`run`).

    Raises:
        RuntimeError: called outside a bridge in a thread whose event loop is running (the
            caller blocks that loop): run the reactor with ``arun``.
    """
    if type(greenlet.getcurrent()) is _Bridge:
        return await_(coroutine)
    if loop_running():
        coroutine.close()
        raise RuntimeError(
            "py_reactor: an async step body was called synchronously from inside a running "
            "event loop; await Reactor.arun(...) (or aresume, aundo...) instead of the sync verb"
        )
    return run(coroutine)


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coroutine)``, closing what py_reactor opened on that loop before it ends
    (its Redis connections: :func:`at_loop_end`)."""

    async def main() -> T:
        try:
            return await coroutine
        finally:
            await close_loop_resources()

    return asyncio.run(main())


def to_thread(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """Run the synchronous ``fn`` (a user's blocking step body) in the loop's thread pool
    and wait for it on the loop; in a copy of this context's variables.

    A thread cannot be interrupted: if the awaiting task is cancelled, the cancellation is
    delivered once ``fn`` has returned, so whatever ``fn`` ran under (a lock) is held until it
    has.
    """
    loop = asyncio.get_running_loop()
    call_in_context = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await_(_uninterruptible(loop.run_in_executor(None, call_in_context)))


async def _uninterruptible(future: asyncio.Future[T]) -> T:
    cancelled: asyncio.CancelledError | None = None
    while True:
        try:
            result = await asyncio.shield(future)
        except asyncio.CancelledError as exc:
            if future.done():
                raise
            cancelled = exc  # the thread goes on: wait for it, then deliver the cancellation
            continue
        if cancelled is not None:
            raise cancelled
        return result


class Branches:
    """Callables run side by side: in a pool of threads in synchronous code, as tasks (each in
    a bridge of its own) on a loop. A ``@parallel`` reactor's steps run as these."""

    def __init__(self, limit: int, name: str) -> None:
        self._limit = limit
        self._name = name
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, fn: Callable[..., T], /, *args: Any) -> Future[T] | asyncio.Task[T]:
        """Start ``fn(*args)`` in a copy of this context's variables."""
        if type(greenlet.getcurrent()) is _Bridge:
            return asyncio.get_running_loop().create_task(call(fn, *args))
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self._limit, thread_name_prefix=self._name)
        return self._pool.submit(contextvars.copy_context().run, fn, *args)

    def first_done(self, started: Iterable[Any]) -> set[Any]:
        """Wait until one or more of ``started`` (what :meth:`submit` returned) have ended."""
        pending = tuple(started)
        if type(greenlet.getcurrent()) is _Bridge:
            done, _ = await_(asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED))
            return done
        finished, _ = wait_futures(pending, return_when=FIRST_COMPLETED)
        return finished

    @staticmethod
    def abandon(started: Any) -> None:
        """Stop waiting for ``started``: a task is cancelled (it unwinds where it waits); a
        thread cannot be, and goes on to its end."""
        if isinstance(started, asyncio.Task):
            started.cancel()

    def close(self) -> None:
        """Let the threads go (at once: everything started was waited for or abandoned)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


# -- what py_reactor opened on a loop, closed with it ----------------------------------------

_Closer = Callable[[], Awaitable[object]]
_at_end: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_Closer]] = (
    weakref.WeakKeyDictionary()
)


def at_loop_end(closer: _Closer) -> None:
    """Have :func:`close_loop_resources` await ``closer()`` on the running loop (a Redis client
    made for this loop closes its connections there)."""
    _at_end.setdefault(asyncio.get_running_loop(), []).append(closer)


async def close_loop_resources() -> None:
    """Close what py_reactor opened on the running loop (its Redis connections). The asyncio
    worker's ``astop()`` calls it; call it at the end of an app's lifespan otherwise."""
    for closer in _at_end.pop(asyncio.get_running_loop(), []):
        await closer()


def is_async_callable(fn: object) -> bool:
    """Whether calling ``fn`` makes a coroutine (an ``async def`` function or method)."""
    return inspect.iscoroutinefunction(fn)
