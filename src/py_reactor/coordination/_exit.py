"""A clean exit gives back what the process still holds, instead of leaving it to the ttl.

A script that ends (or calls ``sys.exit``) with a ``Lock(...).acquire()`` it never released
would otherwise keep the key from everyone for the rest of the hold's ttl. At interpreter exit
the extender (``coordination._extender``, whose registry lists every live hold of this process)
stops its thread and hands its holds here, oldest first; they are released newest first, so
nested holds unwind as a ``with`` would. Each kind of hold says how it goes back at exit, by
``release_for_exit`` (the ``ExitReleasable`` protocol), so this module knows none of them:

* lock holds and semaphore slots (``Hold``, with or without auto-extend): released;
* period claims: released without marking the bucket done (the work did not finish), so the
  next caller is due at once;
* ordered-lock positions: left alone. A position is data another process may wait on and
  release (it is taken where work is enqueued and served elsewhere); a dead one is skipped
  after ``poison_pill_timeout``, as before.

Releasing also covers holds of threads still running at exit (daemon threads): the process is
going away, and the fencing token guards against a write one of them might still make. The
exit never raises and never hangs: store errors are logged and the holds of a store that failed
are left to their ttl; the whole release is bounded by ``EXIT_TIMEOUT`` (in the main thread, a
blocked round trip is interrupted by ``SIGALRM``). Nothing here runs after ``kill -9`` or
``os._exit``: those holds free themselves after their ttl. A forked child releases nothing of
its parent's (its registry starts empty).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any, Protocol, runtime_checkable

__all__ = ["EXIT_TIMEOUT", "ExitReleasable", "release_at_exit"]

logger = logging.getLogger("py_reactor")

#: Seconds the releases at exit may take in all; holds not released by then lapse by their ttl.
EXIT_TIMEOUT = 2.0


@runtime_checkable
class ExitReleasable(Protocol):
    """A hold that a clean exit gives back (one without it, an ordered-lock heartbeat, stays).

    The hold names its own way back, so that this module, below every primitive, imports none.
    """

    released: bool

    def release_for_exit(self) -> object:
        """Give the hold back as an interrupted holder would (the work did not finish)."""
        ...


class _TimedOut(BaseException):
    """Raised by the exit alarm; a BaseException so that no ``except Exception`` swallows it."""


def release_at_exit(holds: Sequence[Any], timeout: float = EXIT_TIMEOUT) -> None:
    """Release ``holds`` (oldest first, as the extender lists them) newest first, within
    ``timeout`` seconds; never raises.

    Args:
        holds: the live hold objects of this process, in the order they were taken.
        timeout: seconds the whole release may take.
    """
    todo = [(hold, release) for hold in reversed(holds) if (release := _releaser(hold))]
    if not todo:
        return
    deadline = time.monotonic() + timeout
    failed: dict[int, int] = {}  # id(store) -> holds of it left to their ttl
    left = 0
    released: list[Any] = []
    try:
        with _alarm(timeout):
            for index, (hold, release) in enumerate(todo):
                store = _store_of(hold)
                if id(store) in failed:
                    failed[id(store)] += 1
                    continue
                if time.monotonic() >= deadline:
                    left = len(todo) - index
                    break
                what = repr(hold)  # before: a release marks the hold released at once
                try:
                    release()
                except Exception as exc:  # a store error: the hold lapses by its ttl
                    failed[id(store)] = 1
                    cause = exc.__cause__ or exc  # the store's own words are about acquiring
                    logger.warning(
                        "py_reactor: %s could not be released at exit (%s: %s); it and the "
                        "other holds on %s are left to lapse by their ttl",
                        what,
                        type(cause).__name__,
                        cause,
                        getattr(store, "description", store),
                    )
                else:
                    released.append(hold)
    except (_TimedOut, KeyboardInterrupt):  # out of time (or interrupted): stop here
        left = len(todo) - len(released) - sum(failed.values())
    if left:
        logger.warning(
            "py_reactor: %d hold(s) could not be released at exit within %g s (the store did "
            "not answer); they lapse by their ttl",
            left,
            timeout,
        )
    if released:
        logger.info("py_reactor: released at exit: %s", ", ".join(map(repr, released)))


def _releaser(hold: Any) -> Callable[[], object] | None:
    """How to give ``hold`` back at exit; None when it is released already or stays as it is
    (an ordered-lock heartbeat: the position may be served by another process)."""
    if not isinstance(hold, ExitReleasable) or hold.released:
        return None
    return hold.release_for_exit


def _store_of(hold: Any) -> object:
    return getattr(hold, "store", None) or getattr(hold, "_store", None)


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """Interrupt the body with ``_TimedOut`` after ``seconds`` (main thread only; elsewhere
    the body runs unbounded per round trip, and only the loop's own deadline applies)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "setitimer"
    ):
        yield
        return
    armed = True

    def ring(signum: int, frame: FrameType | None) -> None:
        if armed:
            raise _TimedOut

    try:
        previous = signal.signal(signal.SIGALRM, ring)
    except (ValueError, OSError):  # not allowed here (a subinterpreter, an embedding)
        yield
        return
    pending = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous if previous is not None else signal.SIG_DFL)
        if pending[0] > 0:  # someone else's alarm was pending: let it ring (about) as planned
            signal.setitimer(signal.ITIMER_REAL, *pending)
