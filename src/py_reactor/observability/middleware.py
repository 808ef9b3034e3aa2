"""``Middleware``: the one extension seam. Subclass it and override the hooks you need.

Every event class has exactly one hook, ``on_<subject>_<verb>``, found through a table keyed by
event class (never by building strings at dispatch time). A hook that raises is logged on the
``py_reactor`` logger and the run goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from py_reactor.observability import events as ev

__all__ = ["HOOKS", "Middleware", "emit"]

logger = logging.getLogger("py_reactor")


class Middleware:
    """Receives lifecycle events. Every hook is a no-op until overridden."""

    def on_reactor_started(self, event: ev.ReactorStarted) -> None:
        """A reactor run began."""

    def on_reactor_completed(self, event: ev.ReactorCompleted) -> None:
        """A reactor run succeeded."""

    def on_reactor_failed(self, event: ev.ReactorFailed) -> None:
        """A reactor run failed, after its rollback."""

    def on_reactor_halted(self, event: ev.ReactorHalted) -> None:
        """A reactor run stopped on ``Halt``."""

    def on_step_started(self, event: ev.StepStarted) -> None:
        """An attempt at a step began."""

    def on_step_completed(self, event: ev.StepCompleted) -> None:
        """A step succeeded."""

    def on_step_skipped(self, event: ev.StepSkipped) -> None:
        """A step was skipped."""

    def on_step_failed(self, event: ev.StepFailed) -> None:
        """A step failed for good."""

    def on_step_retried(self, event: ev.StepRetried) -> None:
        """A step attempt failed and will be retried."""

    def on_rollback_started(self, event: ev.RollbackStarted) -> None:
        """Rollback began."""

    def on_rollback_finished(self, event: ev.RollbackFinished) -> None:
        """Rollback ended."""

    def on_compensation_started(self, event: ev.CompensationStarted) -> None:
        """A compensate began."""

    def on_compensation_completed(self, event: ev.CompensationCompleted) -> None:
        """A compensate succeeded."""

    def on_compensation_failed(self, event: ev.CompensationFailed) -> None:
        """A compensate failed."""

    def on_undo_started(self, event: ev.UndoStarted) -> None:
        """An undo began."""

    def on_undo_completed(self, event: ev.UndoCompleted) -> None:
        """An undo succeeded."""

    def on_undo_failed(self, event: ev.UndoFailed) -> None:
        """An undo failed."""

    def on_lock_acquired(self, event: ev.LockAcquired) -> None:
        """A lock was taken."""

    def on_lock_released(self, event: ev.LockReleased) -> None:
        """A lock was released."""

    def on_lock_acquisition_failed(self, event: ev.LockAcquisitionFailed) -> None:
        """A lock stayed busy for the whole wait."""

    def on_semaphore_acquired(self, event: ev.SemaphoreAcquired) -> None:
        """A semaphore slot was taken."""

    def on_semaphore_released(self, event: ev.SemaphoreReleased) -> None:
        """A semaphore slot was given back."""

    def on_semaphore_acquisition_failed(self, event: ev.SemaphoreAcquisitionFailed) -> None:
        """Every semaphore slot stayed taken for the whole wait."""

    def on_rate_limit_acquired(self, event: ev.RateLimitAcquired) -> None:
        """A rate limit was charged one call (there is no release)."""

    def on_rate_limit_acquisition_failed(self, event: ev.RateLimitAcquisitionFailed) -> None:
        """A rate limit's window was full."""

    def on_period_acquired(self, event: ev.PeriodAcquired) -> None:
        """A period's current bucket was claimed: the work is due."""

    def on_period_released(self, event: ev.PeriodReleased) -> None:
        """A period claim was given back."""

    def on_period_acquisition_failed(self, event: ev.PeriodAcquisitionFailed) -> None:
        """Another owner kept the period's bucket claimed for the whole wait."""

    def on_ordered_lock_acquired(self, event: ev.OrderedLockAcquired) -> None:
        """An ordered lock position got its turn."""

    def on_ordered_lock_released(self, event: ev.OrderedLockReleased) -> None:
        """An ordered lock turn (or place in line) was passed on."""

    def on_ordered_lock_acquisition_failed(self, event: ev.OrderedLockAcquisitionFailed) -> None:
        """An ordered lock turn did not come within the wait."""

    def on_step_parked(self, event: ev.StepParked) -> None:
        """A step met contention in a worker; the execution parks instead of failing."""

    def on_reactor_parked(self, event: ev.ReactorParked) -> None:
        """The reactor's coordination met contention in a worker; the execution parks."""

    def on_step_paused(self, event: ev.StepPaused) -> None:
        """The run reached an interrupt step and pauses until it is resumed."""

    def on_step_resumed(self, event: ev.StepResumed) -> None:
        """A resume brought an interrupt step's payload; the run goes on."""

    def on_execution_recovered(self, event: ev.ExecutionRecovered) -> None:
        """A dead runner's execution was made due again by the recovery loop."""

    def on_unit_dispatched(self, event: ev.UnitDispatched) -> None:
        """An async unit was handed to a worker as an execution of its own."""


#: Which Middleware method receives which event class.
HOOKS: dict[type[ev.Event], str] = {
    ev.ReactorStarted: "on_reactor_started",
    ev.ReactorCompleted: "on_reactor_completed",
    ev.ReactorFailed: "on_reactor_failed",
    ev.ReactorHalted: "on_reactor_halted",
    ev.StepStarted: "on_step_started",
    ev.StepCompleted: "on_step_completed",
    ev.StepSkipped: "on_step_skipped",
    ev.StepFailed: "on_step_failed",
    ev.StepRetried: "on_step_retried",
    ev.RollbackStarted: "on_rollback_started",
    ev.RollbackFinished: "on_rollback_finished",
    ev.CompensationStarted: "on_compensation_started",
    ev.CompensationCompleted: "on_compensation_completed",
    ev.CompensationFailed: "on_compensation_failed",
    ev.UndoStarted: "on_undo_started",
    ev.UndoCompleted: "on_undo_completed",
    ev.UndoFailed: "on_undo_failed",
    ev.LockAcquired: "on_lock_acquired",
    ev.LockReleased: "on_lock_released",
    ev.LockAcquisitionFailed: "on_lock_acquisition_failed",
    ev.SemaphoreAcquired: "on_semaphore_acquired",
    ev.SemaphoreReleased: "on_semaphore_released",
    ev.SemaphoreAcquisitionFailed: "on_semaphore_acquisition_failed",
    ev.RateLimitAcquired: "on_rate_limit_acquired",
    ev.RateLimitAcquisitionFailed: "on_rate_limit_acquisition_failed",
    ev.PeriodAcquired: "on_period_acquired",
    ev.PeriodReleased: "on_period_released",
    ev.PeriodAcquisitionFailed: "on_period_acquisition_failed",
    ev.OrderedLockAcquired: "on_ordered_lock_acquired",
    ev.OrderedLockReleased: "on_ordered_lock_released",
    ev.OrderedLockAcquisitionFailed: "on_ordered_lock_acquisition_failed",
    ev.StepParked: "on_step_parked",
    ev.ReactorParked: "on_reactor_parked",
    ev.StepPaused: "on_step_paused",
    ev.StepResumed: "on_step_resumed",
    ev.ExecutionRecovered: "on_execution_recovered",
    ev.UnitDispatched: "on_unit_dispatched",
}


def emit(middleware: Sequence[Middleware], event: ev.Event) -> None:
    """Deliver ``event`` to each middleware in order; a raising hook is logged, never re-raised."""
    hook = HOOKS[type(event)]
    for mw in middleware:
        try:
            getattr(mw, hook)(event)
        except Exception:
            logger.exception(
                "middleware %s raised in %s for %s (execution %s); the run continues",
                type(mw).__qualname__,
                hook,
                event.name,
                event.execution_id,
            )
