"""One background thread per process that keeps live holds from expiring.

A hold registers itself with ``keep_alive(hold, every)`` and is dropped with ``forget(hold)``
when released; the thread calls ``hold.extend()`` about every ``every`` seconds in between. One
shared thread, not one per hold, so an uncontended acquire/release costs a dict insert (under
an uncontended lock) and a dict delete, and a released hold costs the thread nothing. The
thread wakes on a tick of half the shortest interval it serves (between ``MIN_TICK`` and
``MAX_TICK``), so a hold is extended at most ``every + tick`` (<= 1.5 ``every``) after the last
time; with ``every = ttl / 3`` that is well inside its ttl.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Protocol

__all__ = ["Extendable", "forget", "keep_alive"]

logger = logging.getLogger("py_reactor")

#: Shortest and longest sleep of the thread between looks at its holds (seconds).
MIN_TICK = 0.005
MAX_TICK = 1.0

#: Consecutive failed extensions after which a hold is given up (each comes ``every`` apart).
GIVE_UP_AFTER = 3


class Extendable(Protocol):
    """What the extender needs from a hold."""

    released: bool

    def extend(self) -> bool:
        """Push the hold's expiry out again; False when the hold is no longer ours."""
        ...


class _Entry:
    __slots__ = ("due", "every", "failures", "hold")

    def __init__(self, hold: Extendable, every: float) -> None:
        self.hold = hold
        self.every = every
        self.due = time.monotonic() + every
        self.failures = 0


class _Extender:
    def __init__(self) -> None:
        self._live: dict[int, _Entry] = {}
        self._changed = threading.Condition()
        self._tick = MAX_TICK
        self._pid = -1

    def add(self, hold: Extendable, every: float) -> None:
        entry = _Entry(hold, every)
        tick = max(MIN_TICK, every / 2)
        with self._changed:  # an uncontended lock: cheap, and no entry can be lost in a race
            if self._pid != os.getpid():  # first use, or a forked child: no thread runs yet
                self._live = {}
                self._tick = MAX_TICK
                self._pid = os.getpid()
                threading.Thread(target=self._loop, name="py_reactor-extender", daemon=True).start()
            self._live[id(hold)] = entry
            if tick < self._tick:
                self._tick = tick
                self._changed.notify()

    def forget(self, hold: Extendable) -> None:
        self._live.pop(id(hold), None)  # a single dict operation: atomic under the GIL

    def _loop(self) -> None:
        while True:
            with self._changed:
                self._changed.wait(self._tick)
                now = time.monotonic()
                entries = list(self._live.values())  # one C-level copy: safe while others write
                due = [entry for entry in entries if entry.due <= now]
                shortest = min((entry.every for entry in entries), default=MAX_TICK)
                self._tick = min(MAX_TICK, max(MIN_TICK, shortest / 2))
            for entry in due:
                self._extend(entry)

    def _extend(self, entry: _Entry) -> None:
        hold = entry.hold
        try:
            alive = not hold.released and hold.extend()
            entry.failures = 0
        except Exception as exc:
            entry.failures += 1
            alive = entry.failures < GIVE_UP_AFTER
            logger.warning(
                "py_reactor: extending %r failed (%s: %s); %s",
                hold,
                type(exc).__name__,
                exc,
                "will try again" if alive else "giving up, the hold lapses by its ttl",
            )
        if alive:
            entry.due = time.monotonic() + entry.every
        else:
            if getattr(hold, "lost", False):
                logger.warning(
                    "py_reactor: %r expired before it could be extended (the process stalled "
                    "longer than its ttl?); others may enter while its holder still runs",
                    hold,
                )
            self.forget(hold)

    def reset_after_fork(self) -> None:
        """In a forked child: fresh state and lock (the parent's thread did not come along, and
        its lock may have been held at the moment of the fork)."""
        self._live = {}
        self._changed = threading.Condition()
        self._tick = MAX_TICK
        self._pid = -1


_extender = _Extender()
os.register_at_fork(after_in_child=_extender.reset_after_fork)


def keep_alive(hold: Extendable, every: float) -> None:
    """Extend ``hold`` about every ``every`` seconds until it is released or lost."""
    _extender.add(hold, every)


def forget(hold: Extendable) -> None:
    """Stop extending ``hold`` (call on release)."""
    _extender.forget(hold)
