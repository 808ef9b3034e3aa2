"""One background thread per process that keeps live holds from expiring.

A hold registers itself with ``keep_alive(hold, every)`` and is dropped with ``forget(hold)``
when released; the thread calls ``hold.extend()`` about every ``every`` seconds in between. One
shared thread, not one per hold, so an uncontended acquire/release costs a dict insert (under
an uncontended lock) and a dict delete, and a released hold costs the thread nothing. The
thread wakes on a tick of half the shortest interval it serves (between ``MIN_TICK`` and
``MAX_TICK``), so a hold is extended at most ``every + tick`` (<= 1.5 ``every``) after the last
time; with ``every = ttl / 3`` that is well inside its ttl.

The same registry is the list of what this process holds, which a clean exit gives back
(``coordination._exit``; the thread stops first). A hold that must not be extended
(``Lock(auto_extend=False)``) is entered with ``remember(hold, ttl)``: never due, a lock-free
dict insert, and swept once its ttl has passed. ``forget(hold)`` drops a hold either way, so a
hold this process stops looking after (released, lost, or handed over to be kept across a
park) is neither extended nor released at exit. A forked child starts with an empty registry.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import threading
import time
from typing import Protocol

from py_reactor.coordination._exit import release_at_exit

__all__ = ["Extendable", "forget", "keep_alive", "remember"]

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


#: Remembered (never extended) holds are swept for lapsed ones when the registry outgrows this.
PRUNE_AT = 1024


class _Entry:
    __slots__ = ("due", "every", "expires", "failures", "hold")

    def __init__(self, hold: Extendable, every: float, now: float, expires: float) -> None:
        self.hold = hold
        self.every = every  # math.inf: remembered for the exit, never extended
        self.due = now + every
        self.expires = expires  # monotonic time it lapses by itself (inf: while extended)
        self.failures = 0


class _Extender:
    def __init__(self) -> None:
        # Insertion order is the order the holds were taken in: an exit releases newest first.
        self._live: dict[int, _Entry] = {}
        self._changed = threading.Condition()
        self._tick = MAX_TICK
        self._pid = -1  # the process whose thread runs (-1: none started yet)
        self._registry_pid = os.getpid()  # the process whose holds ``_live`` lists
        self._stopped = False
        self._prune_at = PRUNE_AT

    def add(self, hold: Extendable, every: float) -> None:
        now = time.monotonic()
        entry = _Entry(hold, every, now, math.inf)
        tick = max(MIN_TICK, every / 2)
        with self._changed:  # an uncontended lock: cheap, and no entry can be lost in a race
            if self._pid != os.getpid():  # first use, or a forked child: no thread runs yet
                self._own_registry()
                self._tick = MAX_TICK
                self._pid = os.getpid()
                threading.Thread(target=self._loop, name="py_reactor-extender", daemon=True).start()
            self._live[id(hold)] = entry
            if tick < self._tick:
                self._tick = tick
                self._changed.notify()

    def remember(self, hold: Extendable, ttl: float) -> None:
        # One dict insert, no lock: the entry is never due, so the thread need not know.
        live = self._live
        live[id(hold)] = _Entry(hold, math.inf, 0.0, time.monotonic() + ttl)
        if len(live) > self._prune_at:
            self._prune()

    def _prune(self) -> None:
        """Drop remembered holds that lapsed by their ttl (never released: a cooldown, or a
        leak), so a process that never releases them does not grow its registry forever."""
        now = time.monotonic()
        for key, entry in list(self._live.items()):
            if entry.expires < now and self._live.get(key) is entry:
                self._live.pop(key, None)
        self._prune_at = max(PRUNE_AT, 2 * len(self._live))  # amortized: O(1) per remember

    def forget(self, hold: Extendable) -> None:
        self._live.pop(id(hold), None)  # a single dict operation: atomic under the GIL

    def _own_registry(self) -> None:
        """Drop a registry inherited through a fork that skipped the fork hooks."""
        if self._registry_pid != os.getpid():
            self._live = {}
            self._registry_pid = os.getpid()

    def stop(self) -> list[Extendable]:
        """Stop the thread for good; this process's live holds, oldest first (without the
        remembered ones that lapsed by their ttl).

        Never blocks for long: the thread is told through its condition only if that lock is
        free within a moment (it also sees the flag on its next tick, at most ``MAX_TICK``).
        """
        self._stopped = True
        if self._changed.acquire(timeout=0.1):
            try:
                self._changed.notify()
            finally:
                self._changed.release()
        if self._registry_pid != os.getpid():  # inherited from a parent: not ours to release
            return []
        now = time.monotonic()
        return [entry.hold for entry in list(self._live.values()) if entry.expires > now]

    def _loop(self) -> None:
        while not self._stopped:
            with self._changed:
                self._changed.wait(self._tick)
                if self._stopped:
                    return
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
        self._registry_pid = os.getpid()
        self._stopped = False
        self._prune_at = PRUNE_AT

    def at_exit(self) -> None:
        """At interpreter exit: stop the thread, then give back what this process holds."""
        release_at_exit(self.stop())


_extender = _Extender()
os.register_at_fork(after_in_child=_extender.reset_after_fork)
# Runs after the interpreter has joined the non-daemon threads, while daemon threads still run.
atexit.register(_extender.at_exit)


def keep_alive(hold: Extendable, every: float) -> None:
    """Extend ``hold`` about every ``every`` seconds until it is released or lost (and give it
    back at a clean exit)."""
    _extender.add(hold, every)


def remember(hold: Extendable, ttl: float) -> None:
    """Give ``hold`` back at a clean exit of the process unless its ``ttl`` (seconds) ran out
    first; it is never extended."""
    _extender.remember(hold, ttl)


def forget(hold: Extendable) -> None:
    """Stop extending ``hold``, and leave it alone at exit (call on release or hand-over)."""
    _extender.forget(hold)
