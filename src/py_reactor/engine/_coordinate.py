"""Coordination as the engine drives it, for a reactor and for a single step.

The primitives and their order live in ``coordination.scope.Scope``; this module only decides
*when* the engine enters and leaves scopes:

* a reactor's declarations wrap its whole run (``executor``);
* a step's ordered-lock turn spans all of its attempts (the position advances only when the
  step reaches its final result), and everything else is taken around each attempt's work;
* a step's ``compensate``/``undo`` re-take its lock and semaphore only, waiting the
  declaration's ``rollback_seconds``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from py_reactor.coordination.declarations import Declaration
from py_reactor.coordination.gates import Busy
from py_reactor.coordination.owner import HeldBy
from py_reactor.coordination.scope import Admission, Scope
from py_reactor.engine.run import Run
from py_reactor.errors import StaleExecution
from py_reactor.observability import events as ev

__all__ = ["StepGate", "emitter", "held_by", "rollback_scope"]

_EVENTS: dict[str, type[ev.Event]] = {
    "lock.acquired": ev.LockAcquired,
    "lock.released": ev.LockReleased,
    "lock.acquisition_failed": ev.LockAcquisitionFailed,
    "semaphore.acquired": ev.SemaphoreAcquired,
    "semaphore.released": ev.SemaphoreReleased,
    "semaphore.acquisition_failed": ev.SemaphoreAcquisitionFailed,
    "rate_limit.acquired": ev.RateLimitAcquired,
    "rate_limit.acquisition_failed": ev.RateLimitAcquisitionFailed,
    "period.acquired": ev.PeriodAcquired,
    "period.released": ev.PeriodReleased,
    "period.acquisition_failed": ev.PeriodAcquisitionFailed,
    "ordered_lock.acquired": ev.OrderedLockAcquired,
    "ordered_lock.released": ev.OrderedLockReleased,
    "ordered_lock.acquisition_failed": ev.OrderedLockAcquisitionFailed,
}  # no "rate_limit.released": a charge is spent, there is nothing to give back


def emitter(run: Run, step: str | None) -> Callable[..., None] | None:
    """How a scope reports acquisitions: as events of ``run`` naming ``step`` (None: none)."""
    if not run.middleware:
        return None

    def emit(event: str, key: str, **fields: Any) -> None:
        kind = _EVENTS.get(event)
        if kind is not None:
            run.emit(kind, step, key=key, **fields)

    return emit


def held_by(run: Run, step: str | None) -> HeldBy:
    """Who the holds of ``step`` (None: the reactor's own) are taken for, as the store records
    them: the root execution, and the step's dotted path from it (``"child.charge"``; ``"child"``
    for a composed child's own coordination), as parks name it."""
    path = (run.prefix + step) if step is not None else (run.prefix.rstrip(".") or None)
    return HeldBy(run.root.execution_id, path)


class StepGate:
    """The coordination one step takes: its ordered turn once, the rest per attempt.

    Every key is computed when the gate is built, before anything is taken.

    Raises:
        CoordinationKeyError: (from the constructor) a key function raised or returned nothing.
    """

    __slots__ = ("_turn", "_work", "keys", "parking")

    def __init__(
        self, run: Run, step: str, declarations: Mapping[str, Declaration], values: Any
    ) -> None:
        parking = run.waiter.parks  # a worker parks instead of waiting: wait 0
        self.parking = parking

        def scope(names: Mapping[str, Declaration], wait: float | None) -> Scope | None:
            if not names:
                return None
            return Scope(
                names,
                values,
                reactor=run.reactor_name,
                step=step,
                ledger=run.context.holds,
                holder=run.context.holder(step),
                emit=emitter(run, step),
                wait=run.waiter.gate_wait(wait),
                recovered=run.waiter.recovered,
                by=held_by(run, step),
            )

        ordered = {n: d for n, d in declarations.items() if n == "ordered_lock"}
        # In the caller, a step's ordered turn waits only if the declaration gives wait=: out
        # of turn it fails at once (the position is abandoned, not failed: the chain goes on).
        given = getattr(ordered.get("ordered_lock"), "wait", None)
        self._turn = scope(ordered, 0 if given is None else None)
        self._work = scope({n: d for n, d in declarations.items() if n != "ordered_lock"}, None)
        keys: dict[str, str] = {}
        for part in (self._turn, self._work):
            if part is not None:
                keys.update(part.keys)
        self.keys: Mapping[str, str] = MappingProxyType(keys)

    def open(self) -> Admission | Busy:
        """Wait for the ordered lock's turn, if one is declared (once per step); ``Busy``: the
        turn did not come within ``wait``.

        Raises:
            CoordinationError: the store is unreachable.
        """
        return Admission.PROCEED if self._turn is None else self._turn.enter(parking=self.parking)

    def enter(self) -> Admission | Busy:
        """Take period, lock, semaphore and rate limit for one attempt of the work; ``Busy``:
        contention after ``wait``, or a full rate limit.

        Raises:
            CoordinationError: the store is unreachable.
        """
        return Admission.PROCEED if self._work is None else self._work.enter(parking=self.parking)

    def exit(self, *, succeeded: bool) -> None:
        """Release what ``enter`` took, in reverse; mark the period on a plain success."""
        if self._work is not None:
            self._work.exit(succeeded=succeeded, failed=not succeeded)

    def close(self, *, failed: bool) -> None:
        """Give up the ordered turn: the step reached its final result (``failed`` or not)."""
        if self._turn is not None:
            self._turn.exit(succeeded=not failed, failed=failed)

    def detach(self) -> None:
        """The step parks, or was left abnormally: keep its ordered position, stop extending
        it in this process."""
        if self._turn is not None:
            self._turn.detach()

    def interrupted(self, exc: BaseException) -> None:
        """The attempt's work raised ``exc``: release what it took, unless another runner
        claimed the execution meanwhile (``StaleExecution``): the step then hands its holds
        over as a whole (:meth:`hand_over`)."""
        if not isinstance(exc, StaleExecution):
            self.exit(succeeded=False)

    def hand_over(self) -> None:
        """Another runner claimed the execution while this one was inside the step: give
        back only this runner's own lock and semaphore levels; the ordered turn and a period
        claim stay, the claimant's now (``Scope.hand_over``)."""
        for part in (self._work, self._turn):
            if part is not None:
                part.hand_over()

    def refresh(self) -> bool:
        """Push out the expiry of the lock and semaphore kept for a compensate.

        False if one of them was already lost (it expired): the compensate must re-take.
        """
        return self._work is None or self._work.refresh()

    def release_failed(self) -> None:
        """Release everything of a step whose work failed for good (after its compensate).

        Safe to call more than once: a scope with nothing held releases nothing.
        """
        try:
            self.exit(succeeded=False)
        finally:
            self.close(failed=True)


def rollback_scope(
    run: Run, step: str | None, declarations: Mapping[str, Declaration], values: Any
) -> Scope | None:
    """The scope a step's compensate/undo runs in: its lock and semaphore, same keys (``step``
    None: a child reactor's own declarations, around the undo of its steps).

    Waits are the lock's ttl and the semaphore's lease unless ``rollback_wait`` says otherwise
    (``Declaration.for_rollback``): rollback never parks, it waits and then reports.

    Raises:
        CoordinationKeyError: a key function raised or returned nothing for ``values``.
    """
    taken = {}
    for name, decl in declarations.items():
        again = decl.for_rollback()
        if again is not None:
            taken[name] = again
    if not taken:
        return None
    return Scope(
        taken,
        values,
        reactor=run.reactor_name,
        step=step,
        ledger=run.context.holds,
        # Apart from the step's own holds: a failed step's kept holds are released on their own.
        holder=run.context.holder(step) + "/rollback",
        emit=emitter(run, step),
        by=held_by(run, step),
    )
