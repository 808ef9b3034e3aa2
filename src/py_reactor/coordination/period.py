"""Once per period: work that must run at most once per UTC calendar bucket (or N seconds).

Why a claim and not just a marker: "check the marker, do the work, write the marker" lets two
callers that check at the same moment both do the work. So checking and claiming are one
atomic script: the first caller in a bucket takes an exclusive in-flight claim and is *due*;
a caller that finds the claim taken waits to be woken when it is released, then checks again.
The marker is written only when the claimant succeeds, so if it fails the next caller becomes
due instead, and the bucket is never marked done for work that did not happen::

    timeline (two workers, one day bucket)
    A: claim -> due, runs the report ........ release(mark=True) -> marker written, wakes B
    B:     claim -> busy, waits ............................... woken -> claim -> not due

Buckets come from the server's clock: ``"minute"``, ``"hour"``, ``"day"``, ``"week"`` (ISO,
from Monday), ``"month"``, ``"year"`` in UTC, or ``floor(now / every)`` for a number of
seconds. A bucket's marker expires 60 s after the bucket ends; its claim holds a lease that a
background thread extends while the work runs, so a claimant that dies frees the bucket when
it lapses (the Redis layout is in ``storage/keys.py``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from types import TracebackType

from py_reactor.aio import call
from py_reactor.config.options import (
    check_key,
    check_non_negative,
    check_positive,
    check_positive_int,
)
from py_reactor.coordination import _waiting
from py_reactor.coordination._base import UsesStore, refuse_on_loop
from py_reactor.coordination._extender import keep_alive
from py_reactor.coordination.owner import owner_or_new
from py_reactor.coordination.store import Store
from py_reactor.errors import DefinitionError, PeriodBusyError

__all__ = ["CALENDAR", "Period", "PeriodClaim"]

logger = logging.getLogger("py_reactor")

#: The calendar buckets ``every`` may name (UTC; a week starts on Monday, as in ISO 8601).
CALENDAR = ("minute", "hour", "day", "week", "month", "year")


class PeriodClaim:
    """The outcome of ``Period.claim``: whether this bucket's work is due, and the claim if so.

    Attributes:
        key: the period's key.
        due: True if the caller holds the claim and must do the work (then ``release`` it);
            False if the bucket is already done (nothing is held).
        bucket: the bucket id, e.g. ``"2024-05-01"``.
        owner: who holds the claim.
        released: True once released (always True for a claim that is not due).
    """

    def __init__(
        self,
        period: Period,
        store: Store,
        *,
        due: bool,
        bucket: str,
        expire_at: int,
        owner: str,
    ) -> None:
        self.key = period.key
        self.due = due
        self.bucket = bucket
        self.owner = owner
        self.released = not due
        self._period = period
        self._store = store
        self._expire_at = expire_at

    async def arelease(self, *, mark: bool) -> bool:
        """:meth:`release` from a coroutine."""
        return await call(self.release, mark=mark)

    def release(self, *, mark: bool) -> bool:
        """Give the claim back, marking the bucket done if ``mark``; wakes every waiter.

        Idempotent, and free (no round trip) for a claim that is not due.

        Args:
            mark: True if the work succeeded: the bucket recorded at claim time is marked
                done (the marker expires 60 s after that bucket ends). False leaves it
                unmarked, so the next caller in the bucket is due.

        Returns:
            True if the claim had lapsed before this release (another caller may have run
            the same bucket); False otherwise, and on a repeated release.

        Raises:
            StoreUnavailableError: the store cannot be reached (the claim then lapses with
                its lease).
        """
        if self.released:
            return False
        self.released = True
        remaining = self._store.period_release(
            self.key, self.bucket, self.owner, mark=mark, expire_at=self._expire_at
        )
        if remaining < 0:
            logger.warning(
                "py_reactor: the claim on period %r (bucket %s) lapsed before it was "
                "released; another caller may have run the same bucket",
                self.key,
                self.bucket,
            )
        return remaining < 0

    def release_for_exit(self) -> bool:
        """At a clean exit of the process: release unmarked, since the work did not finish, so
        the next caller in the bucket is due at once (``ExitReleasable``)."""
        return self.release(mark=False)

    def extend(self) -> bool:
        """Push the claim's lease out by another ``lease`` seconds (the extender calls this).

        Returns:
            True if the claim is still ours, False if it was lost or released.

        Raises:
            StoreUnavailableError: the store cannot be reached.
        """
        if self.released:
            return False
        return self._store.period_extend(self.key, self.bucket, self.owner, self._period.lease_ms)

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"<PeriodClaim {self.key!r} bucket={self.bucket} due={self.due} {state}>"


class Period(UsesStore):
    """Run something at most once per bucket of ``every`` for ``key``, across processes.

    ::

        with Period("daily-report", every="day") as claim:
            if claim.due:
                send_report()

    On exit the bucket is marked done only if the claim was due and the block raised nothing.
    """

    primitive = "period"

    def __init__(
        self,
        key: str,
        *,
        every: str | int,
        wait: float = 60,
        lease: float = 60,
        store: Store | None = None,
    ) -> None:
        """Declare a period; nothing is contacted until the first check or claim.

        Args:
            key: the name the bucket markers are shared under (a non-empty str).
            every: ``"minute"``, ``"hour"``, ``"day"``, ``"week"``, ``"month"``, ``"year"``
                (UTC calendar buckets; a week starts on Monday) or a whole number of
                seconds >= 1 (bucket ``floor(now / every)``).
            wait: seconds ``claim`` waits for another caller's claim on the bucket to be
                released before it raises.
            lease: seconds a claim survives without being extended; a background thread
                extends it every ``lease / 3`` seconds while it is held, so only a claimant
                that died lets it lapse.
            store: where markers and claims live; None uses the configured store, found on
                first use.

        Raises:
            DefinitionError: an option is out of range (the message names it).
        """
        where = f"Period({key!r})"
        self.key = check_key(where, key)
        if isinstance(every, str):
            if every not in CALENDAR:
                raise DefinitionError(
                    f"{where}: every {every!r} is not a period; use one of "
                    f"{', '.join(CALENDAR)} or a number of seconds"
                )
            self.every: str | int = every
        else:
            self.every = check_positive_int(where, "every", every)
        self.wait = check_non_negative(where, "wait", wait)
        self.lease = check_positive(where, "lease", lease)
        self.lease_ms = max(1, math.ceil(self.lease * 1000))
        self._store = store
        self._entered = threading.local()  # per thread: claims of the open ``with`` blocks

    def is_done(self) -> bool:
        """Whether the current bucket is already marked done (one read-only round trip).

        Returns:
            True if this bucket's work has succeeded, False if it is still due (or running).

        Raises:
            StoreUnavailableError: the store cannot be reached.
        """
        store = self._store or self.store
        return store.period_check(self.key, self.every)

    def claim(self, owner: str | None = None, *, wait: float | None = None) -> PeriodClaim:
        """Claim the current bucket: due if its work has not succeeded yet and nobody runs it.

        One atomic script checks the marker and takes the claim. If another owner holds the
        claim, waits (up to ``wait`` seconds) to be woken when it is released, then checks
        again: the bucket is then done (not due) or the claimant failed (due). The same owner
        claiming the same bucket again nests (re-entrant) and must release as often; claims
        are per bucket, so a claim made after the bucket rolled over is a claim on the new
        bucket, not a nested one. (A reactor run's nested declarations never reach this: the
        run notes the claim it holds and does not claim again.)

        Args:
            owner: who claims; None uses the running execution's root id, else a fresh id.
            wait: seconds to wait for another owner's claim (default: the period's ``wait``;
                0 answers busy at once, as a worker that parks instead does).

        Returns:
            A ``PeriodClaim``; if ``due``, release it with ``release(mark=...)``.

        Raises:
            PeriodBusyError: another owner held the claim for the whole ``wait``.
            StoreUnavailableError: the store cannot be reached.
        """
        refuse_on_loop(f"{self!r}.claim()", "`async with` or `await ....aclaim()`")
        owner = owner_or_new(owner)
        store = self._store or self.store
        wait = self.wait if wait is None else check_non_negative(repr(self), "wait", wait)
        deadline = time.monotonic() + wait
        ticket = None
        if wait > 0:
            ticket = _waiting.new_ticket("period", self.key, owner, self.lease_ms, wait)
        while True:
            if ticket is not None:  # queued until the wait ends, and a little longer
                stay_ms = max(0, math.ceil((deadline - time.monotonic()) * 1000)) + 5000
                ticket = ticket._replace(wait_ms=stay_ms)
            reply = store.period_claim(self.key, self.every, owner, self.lease_ms, waiter=ticket)
            if reply.outcome != "busy":
                claim = PeriodClaim(
                    self,
                    store,
                    due=reply.outcome == "due",
                    bucket=reply.bucket,
                    expire_at=reply.expire_at,
                    owner=owner,
                )
                if claim.due:
                    keep_alive(claim, max(self.lease / 3, 0.001))
                return claim
            remaining = deadline - time.monotonic()
            if ticket is None or remaining <= 0:
                raise PeriodBusyError(
                    f"period {self.key!r}: bucket {reply.bucket} is being run by another caller "
                    f"and its claim was not released within wait={wait:g} s. Pass a "
                    "larger wait=, or retry later (if it fails, the next caller is due)",
                    bucket=reply.bucket,
                    key=self.key,
                )
            store.wait_for_handoff(ticket, _waiting.sleep_for(remaining, reply.busy_ms))

    async def aclaim(self, owner: str | None = None, *, wait: float | None = None) -> PeriodClaim:
        """:meth:`claim` from a coroutine: a busy claim's release is awaited on the loop."""
        return await call(self.claim, owner, wait=wait)

    async def __aenter__(self) -> PeriodClaim:
        claim = await self.aclaim()
        self._task_entered(claim)
        return claim

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        claim: PeriodClaim = self._task_leaving()
        await claim.arelease(mark=exc_type is None)

    def __enter__(self) -> PeriodClaim:
        claim = self.claim()
        stack: list[PeriodClaim] | None = getattr(self._entered, "stack", None)
        if stack is None:
            stack = self._entered.stack = []
        stack.append(claim)
        return claim

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        claim: PeriodClaim = self._entered.stack.pop()
        claim.release(mark=exc_type is None)

    def __repr__(self) -> str:
        return f"Period({self.key!r}, every={self.every!r}, wait={self.wait:g})"
