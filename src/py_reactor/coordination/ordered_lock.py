"""``OrderedLock``: work on one key runs one at a time, in the order it was enqueued.

A lock alone says "one at a time" but not "in which order": the waiter that happens to ask
first wins. Some work must happen in arrival order (ledger entries for one account, messages of
one conversation), so the ordered lock hands out numbered positions when work arrives (or is
enqueued) and lets position ``n`` pass only when ``n == last_completed + 1``.

A queue of positions is only as live as its slowest member, so every position heartbeats from
the moment it is taken until it is released, using the server's clock. A blocker whose
heartbeat is older than ``poison_pill_timeout`` (its process died) is skipped as a poison pill;
a live position that merely waits for its turn keeps heartbeating and is never skipped. In
strict mode a failure short-circuits the rest of the batch: every later position of the same
epoch is told not to do its work (and still releases, to pass the turn on). When the sequence
drains, the counters reset and the epoch increments, which fences off stragglers of the old
batch.

Waiting does not poll: the release of a position pushes to a wake list of the position that
becomes current, which its waiter blocks on; the block is capped so that a blocker that stops
heartbeating is noticed around the moment it turns stale. Taking a position, checking a turn,
releasing and heartbeating are one store call (one round trip) each; see
``storage/lua/ordered_lock_*.lua`` and ``storage/keys.py`` for the Redis layout.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from py_reactor.aio import call
from py_reactor.config import options as opt
from py_reactor.coordination._base import UsesStore, refuse_on_loop
from py_reactor.coordination._extender import keep_alive
from py_reactor.coordination._waiting import sleep_for
from py_reactor.coordination.store import ORDERED_UNCHANGED, Store
from py_reactor.errors import CoordinationError, DefinitionError, OrderedLockWaitError

__all__ = ["OrderedLock", "OrderedLockState", "Position", "Turn"]

logger = logging.getLogger("py_reactor")

PRIMITIVE = "ordered_lock"

#: Shortest interval between two heartbeats of one position (seconds). Heartbeats run every
#: ``poison_pill_timeout / 3`` seconds, but never more often than this.
MIN_HEARTBEAT = 0.05


@dataclass(frozen=True, slots=True)
class Position:
    """A place in an ordered lock's sequence (plain data: store it as JSON, rebuild it with
    ``Position(**data)``).

    Attributes:
        key: the ordered lock's key.
        epoch: the batch this position belongs to; a position of an ended epoch never passes.
        number: the place in line, starting at 1 within an epoch.
    """

    key: str
    epoch: int
    number: int


@dataclass(frozen=True, slots=True)
class OrderedLockState:
    """A snapshot of an ordered lock's counters (for tests and dashboards).

    Attributes:
        epoch: the current epoch (0 when the key is unused or has expired).
        next_position: the number the next ``take_position`` gets.
        last_completed: the last position released or skipped in this epoch (0: none yet).
        in_flight: positions taken and not yet released or skipped.
        failed: a position of this epoch released as failed under ``strict``.
    """

    epoch: int
    next_position: int
    last_completed: int
    in_flight: int
    failed: bool

    @property
    def drained(self) -> bool:
        """No position is in flight: the next position taken starts a batch."""
        return self.in_flight == 0


class OrderedLock(UsesStore):
    """Positions on ``key`` pass one at a time, in the order they were taken.

    Args:
        key: what to order, e.g. ``"account:42"``.
        ttl: seconds the lock's keys live after their last write (default one day); every
            heartbeat pushes it out again.
        poison_pill_timeout: seconds after its last heartbeat that a position blocking the
            line is skipped as dead (default 600). Positions heartbeat every
            ``poison_pill_timeout / 3`` seconds (at least every ``MIN_HEARTBEAT``), so keep it
            well above that.
        strict: after a position of a batch fails, later positions of the batch get a turn
            with ``short_circuit`` set and must not do their work (default True).
        wait: seconds ``wait_turn`` waits before raising; None (default) waits as long as it
            takes, which dead blockers cannot stretch beyond about ``poison_pill_timeout``
            each.
        store: the store to use; default the configured one, resolved on first use.

    Raises:
        DefinitionError: an option is invalid (the message names it).

    ``with OrderedLock("account:42") as turn:`` takes a position, waits for its turn and
    releases it (as failed if the block raised); skip the work when ``turn.short_circuit``.
    """

    primitive = PRIMITIVE

    def __init__(
        self,
        key: str,
        *,
        ttl: float = 86400,
        poison_pill_timeout: float = 600,
        strict: bool = True,
        wait: float | None = None,
        store: Store | None = None,
    ) -> None:
        where = f"OrderedLock({key!r})"
        self.key = opt.check_key(where, key)
        self.ttl = opt.check_positive(where, "ttl", ttl)
        self.poison_pill_timeout = opt.check_positive(
            where, "poison_pill_timeout", poison_pill_timeout
        )
        self.strict = opt.check_bool(where, "strict", strict)
        self.wait = None if wait is None else opt.check_non_negative(where, "wait", wait)
        if store is not None and not isinstance(store, Store):
            raise DefinitionError(f"{where}: store must be a py_reactor Store, got {store!r}")
        self._store = store
        self._ttl_ms = max(1, math.ceil(self.ttl * 1000))
        self._poison_ms = max(1, math.ceil(self.poison_pill_timeout * 1000))
        self._every = max(self.poison_pill_timeout / 3, MIN_HEARTBEAT)
        self._local = threading.local()

    def take_position(self) -> Position:
        """Get the next place in line (one round trip) and start heartbeating it.

        The position heartbeats every ``poison_pill_timeout / 3`` seconds from here until it is
        released or abandoned (or the store says it is no longer pending), so a live position
        waiting for its turn is never skipped.

        Returns:
            The position; numbers start at 1 in each epoch.

        Raises:
            StoreUnavailableError: the store cannot be reached.
        """
        epoch, number = self.store.ordered_lock_take(self.key, self._ttl_ms)
        position = Position(self.key, epoch, number)
        self._watch(position)
        return position

    def wait_turn(self, position: Position) -> Turn:
        """Block until every earlier position has finished or been skipped as dead.

        Each check is one round trip; between checks the caller blocks on the position's wake
        list (a release pushes to it), at most until the blocking position would turn stale.
        The position heartbeats while it waits (also when it was taken in another process).

        Args:
            position: a position taken from an ordered lock on the same key.

        Returns:
            The turn. When ``turn.short_circuit`` is set, skip the work; release it either way.

        Raises:
            OrderedLockWaitError: the turn did not come within ``wait`` seconds (the position is
                still taken: call ``wait_turn`` again, or ``abandon`` it), or it never will
                (``stale``: the position was skipped as a poison pill, or its epoch ended).
            StoreUnavailableError: the store cannot be reached.
            CoordinationError: ``position`` belongs to another key.
        """
        refuse_on_loop(f"{self!r}.wait_turn()", "`async with`")
        self._check(position)
        store = self.store
        heartbeat = self._watch(position)
        deadline = None if self.wait is None else time.monotonic() + self.wait
        key, epoch, number = self.key, position.epoch, position.number
        while True:
            reply = store.ordered_lock_turn(key, epoch, number, self._poison_ms, self._ttl_ms)
            if reply.outcome == "turn":
                return Turn(self, position, self.strict and reply.failed, heartbeat)
            if reply.outcome == "never":
                self._unwatch(position)
                raise self._never(position)
            remaining = math.inf if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                raise self._timed_out(position, reply.blocker)
            store.ordered_lock_wait(key, epoch, number, sleep_for(remaining, reply.stale_in_ms))

    def abandon(self, position: Position) -> None:
        """Give up a position without doing its work (one round trip); it is not a failure.

        A position not yet current is skipped the moment it comes up, instead of after the
        poison-pill timeout; the current one passes the turn on. Abandoning a position that
        was already released, skipped or fenced changes nothing.

        Args:
            position: a position taken from an ordered lock on the same key.

        Raises:
            StoreUnavailableError: the store cannot be reached (the position, no longer
                heartbeating, is then skipped after the poison-pill timeout).
            CoordinationError: ``position`` belongs to another key.
        """
        self._check(position)
        self._finish(position, failed=False)

    def state(self) -> OrderedLockState:
        """The lock's counters right now (one read-only round trip).

        Raises:
            StoreUnavailableError: the store cannot be reached.
        """
        info = self.store.ordered_lock_state(self.key)
        return OrderedLockState(
            epoch=info.epoch,
            next_position=info.issued + 1,
            last_completed=info.done,
            in_flight=info.issued - info.done,
            failed=info.failed,
        )

    def __enter__(self) -> Turn:
        """Take a position and wait for its turn; on failure to get it, abandon the position."""
        refuse_on_loop(f"`with {self!r}`", "`async with`")  # before a position is taken
        turn = self._take_turn()
        stack: list[Turn] = self._local.__dict__.setdefault("stack", [])
        stack.append(turn)
        return turn

    async def __aenter__(self) -> Turn:
        """``with``'s entry from a coroutine: the turn is awaited on the loop."""
        turn = await call(self._take_turn)
        self._task_entered(turn)
        return turn

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Release the turn, as failed when the block raised."""
        turn: Turn = self._task_leaving()
        await turn.arelease(failed=exc is not None)

    def _take_turn(self) -> Turn:
        position = self.take_position()
        try:
            return self.wait_turn(position)
        except BaseException:
            with contextlib.suppress(CoordinationError):
                self.abandon(position)
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Release the turn, as failed when the block raised."""
        self._local.stack.pop().release(failed=exc is not None)

    def __repr__(self) -> str:
        wait = "None" if self.wait is None else f"{self.wait:g}"
        return (
            f"OrderedLock({self.key!r}, ttl={self.ttl:g}, "
            f"poison_pill_timeout={self.poison_pill_timeout:g}, strict={self.strict}, "
            f"wait={wait})"
        )

    # -- internals -------------------------------------------------------------------------

    def _check(self, position: Any) -> None:
        if not isinstance(position, Position) or position.key != self.key:
            raise CoordinationError(
                f"ordered lock {self.key!r} was given {position!r}, which is not one of its "
                "positions; pass a Position taken from an ordered lock on the same key",
                primitive=PRIMITIVE,
                key=self.key,
            )

    def _watch(self, position: Position) -> _Heartbeat:
        """The position's heartbeat in this process, started if it is not running yet."""
        return _heartbeats.watch(self, position)

    def _unwatch(self, position: Position, only: _Heartbeat | None = None) -> None:
        """Stop heartbeating the position in this process (only ``only``, when given)."""
        _heartbeats.unwatch(position, only)

    def _beat(self, position: Position) -> bool:
        """Refresh the position's heartbeat (one round trip); False when no longer pending."""
        return self.store.ordered_lock_heartbeat(
            self.key, position.epoch, position.number, self._ttl_ms
        )

    def _finish(self, position: Position, *, failed: bool) -> int:
        """Release or abandon the position (one round trip); the release script's outcome."""
        self._unwatch(position)
        return self.store.ordered_lock_release(
            self.key,
            position.epoch,
            position.number,
            failed=failed and self.strict,
            poison_ms=self._poison_ms,
            ttl_ms=self._ttl_ms,
        )

    def _never(self, position: Position) -> OrderedLockWaitError:
        return OrderedLockWaitError(
            f"ordered lock {self.key!r}: position {position.number} (epoch {position.epoch}) "
            "is no longer in the sequence: it was skipped as a poison pill (no heartbeat for "
            f"{self.poison_pill_timeout:g} s), abandoned or released, or its epoch ended; its "
            "turn will never come. Take a new position",
            stale=True,
            primitive=PRIMITIVE,
            key=self.key,
        )

    def _timed_out(self, position: Position, blocker: int) -> OrderedLockWaitError:
        return OrderedLockWaitError(
            f"ordered lock {self.key!r}: position {position.number} (epoch {position.epoch}) "
            f"did not get its turn within {self.wait or 0:g} s; position {blocker} is still "
            f"in progress (last completed: {blocker - 1}). Position {position.number} is still "
            "taken: call wait_turn again, or abandon it so later positions need not wait for it",
            turn=f"{position.epoch}:{position.number}",
            primitive=PRIMITIVE,
            key=self.key,
        )


class Turn:
    """A position's turn: do the work (unless ``short_circuit``), then release exactly once.

    Attributes:
        position: the position whose turn this is.
        short_circuit: strict mode and an earlier position of this epoch failed: do not do the
            work; still release, which passes the turn on.
        released: whether ``release()`` has run.
    """

    __slots__ = ("_heartbeat", "_lock", "_once", "position", "released", "short_circuit")

    def __init__(
        self, lock: OrderedLock, position: Position, short_circuit: bool, heartbeat: _Heartbeat
    ) -> None:
        self.position = position
        self.short_circuit = short_circuit
        self.released = False
        self._lock = lock
        self._heartbeat = heartbeat
        self._once = threading.Lock()

    async def arelease(self, *, failed: bool) -> bool:
        """:meth:`release` from a coroutine."""
        return await call(self.release, failed=failed)

    def release(self, *, failed: bool) -> bool:
        """Pass the turn on (one round trip); later calls do nothing (and return False).

        Advances the last completed position to this one, wakes the next position, and ends
        the epoch when nothing else is in flight. A turn that was skipped meanwhile (its
        heartbeat lapsed) or fenced by a new epoch changes nothing, and a warning is logged.

        Args:
            failed: the work failed; under ``strict`` the rest of this epoch short-circuits.

        Returns:
            True if the turn had been skipped or fenced meanwhile (the release changed
            nothing).

        Raises:
            StoreUnavailableError: the store cannot be reached (the position, no longer
                heartbeating, is then skipped after the poison-pill timeout).
        """
        with self._once:
            if self.released:
                return False
            self.released = True
        self._heartbeat.released = True
        outcome = self._lock._finish(self.position, failed=failed)
        if outcome == ORDERED_UNCHANGED:
            logger.warning(
                "py_reactor: ordered lock %r: position %d (epoch %d) was skipped or fenced "
                "while it held its turn (no heartbeat for %g s); its release changed nothing",
                self._lock.key,
                self.position.number,
                self.position.epoch,
                self._lock.poison_pill_timeout,
            )
        return outcome == ORDERED_UNCHANGED

    def extend(self) -> bool:
        """Refresh this position's heartbeat now (one round trip).

        Heartbeats already run in the background from ``take_position`` on; this is for
        callers that drive heartbeats themselves (e.g. with ``keep_alive``).

        Returns:
            False once the turn is released or the store no longer knows the position.

        Raises:
            StoreUnavailableError: the store cannot be reached.
        """
        if self.released:
            return False
        return self._lock._beat(self.position)

    def __repr__(self) -> str:
        return (
            f"<Turn {self.position.key!r} #{self.position.number} epoch {self.position.epoch}"
            f"{' short-circuit' if self.short_circuit else ''}"
            f"{' released' if self.released else ''}>"
        )


class _Heartbeat:
    """Keeps one position's heartbeat fresh (a ``keep_alive`` target)."""

    __slots__ = ("lock", "position", "released")

    def __init__(self, lock: OrderedLock, position: Position) -> None:
        self.lock = lock
        self.position = position
        self.released = False

    def extend(self) -> bool:
        alive = self.lock._beat(self.position)
        if not alive:
            self.lock._unwatch(self.position, self)
        return alive

    def __repr__(self) -> str:
        return f"<ordered lock {self.lock.key!r} heartbeat of position {self.position.number}>"


class _Heartbeats:
    """The positions this process heartbeats: one heartbeat per position, whichever
    ``OrderedLock`` object took or waits for it, so a release through any of them stops it."""

    def __init__(self) -> None:
        self._running: dict[Position, _Heartbeat] = {}
        self._guard = threading.Lock()
        self._pid = os.getpid()

    def watch(self, lock: OrderedLock, position: Position) -> _Heartbeat:
        with self._guard:
            if self._pid != os.getpid():  # a forked child: the parent's heartbeats do not run
                self._running.clear()
                self._pid = os.getpid()
            heartbeat = self._running.get(position)
            if heartbeat is None:
                heartbeat = _Heartbeat(lock, position)
                self._running[position] = heartbeat
                keep_alive(heartbeat, lock._every)
        return heartbeat

    def unwatch(self, position: Position, only: _Heartbeat | None) -> None:
        with self._guard:
            heartbeat = self._running.get(position)
            if heartbeat is None or (only is not None and heartbeat is not only):
                return
            del self._running[position]
        heartbeat.released = True


_heartbeats = _Heartbeats()
