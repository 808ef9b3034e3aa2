"""Lifecycle events: frozen dataclasses named subject + past-tense verb.

Each carries the execution id, the reactor and (for step events) the step, plus one stable dotted
``name`` used by logs and tracing. Middleware receives them through one method per event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = [
    "ALL_EVENTS",
    "CompensationCompleted",
    "CompensationFailed",
    "CompensationStarted",
    "Event",
    "ExecutionRecovered",
    "LockAcquired",
    "LockAcquisitionFailed",
    "LockReleased",
    "OrderedLockAcquired",
    "OrderedLockAcquisitionFailed",
    "OrderedLockReleased",
    "PeriodAcquired",
    "PeriodAcquisitionFailed",
    "PeriodReleased",
    "RateLimitAcquired",
    "RateLimitAcquisitionFailed",
    "ReactorCompleted",
    "ReactorFailed",
    "ReactorHalted",
    "ReactorParked",
    "ReactorStarted",
    "RollbackFinished",
    "RollbackStarted",
    "SemaphoreAcquired",
    "SemaphoreAcquisitionFailed",
    "SemaphoreReleased",
    "StepCompleted",
    "StepFailed",
    "StepParked",
    "StepPaused",
    "StepResumed",
    "StepRetried",
    "StepSkipped",
    "StepStarted",
    "UndoCompleted",
    "UndoFailed",
    "UndoStarted",
    "UnitDispatched",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """Base of every event: which execution, which reactor, which step (None: the reactor)."""

    name: ClassVar[str] = "event"
    execution_id: str
    reactor: str
    step: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReactorStarted(Event):
    """A reactor run began (before its inputs are validated)."""

    name: ClassVar[str] = "reactor.started"


@dataclass(frozen=True, slots=True, kw_only=True)
class ReactorCompleted(Event):
    """A reactor run succeeded; ``value`` is what it returns."""

    name: ClassVar[str] = "reactor.completed"
    value: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReactorFailed(Event):
    """A reactor run failed (after its rollback); ``step`` is the step that failed, if any."""

    name: ClassVar[str] = "reactor.failed"
    error: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReactorHalted(Event):
    """A step returned ``Halt``: the run stopped cleanly, with no rollback."""

    name: ClassVar[str] = "reactor.halted"
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepStarted(Event):
    """An attempt at a step's work began (``attempt`` counts from 1)."""

    name: ClassVar[str] = "step.started"
    attempt: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCompleted(Event):
    """A step succeeded with ``value``."""

    name: ClassVar[str] = "step.completed"
    attempt: int = 1
    value: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StepSkipped(Event):
    """A step returned ``Skipped`` (from its guard or its run)."""

    name: ClassVar[str] = "step.skipped"
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StepFailed(Event):
    """A step failed for good: no attempts left, not retryable, or refused before its work."""

    name: ClassVar[str] = "step.failed"
    attempt: int = 1
    error: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRetried(Event):
    """An attempt failed and another follows after ``delay`` seconds."""

    name: ClassVar[str] = "step.retried"
    attempt: int = 1
    delay: float = 0.0
    error: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RollbackStarted(Event):
    """Rollback began after the failure of ``step``."""

    name: ClassVar[str] = "rollback.started"


@dataclass(frozen=True, slots=True, kw_only=True)
class RollbackFinished(Event):
    """Rollback ended; ``failures`` counts compensations and undos that did not succeed."""

    name: ClassVar[str] = "rollback.finished"
    failures: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class CompensationStarted(Event):
    """A failing step's ``compensate`` began."""

    name: ClassVar[str] = "compensation.started"


@dataclass(frozen=True, slots=True, kw_only=True)
class CompensationCompleted(Event):
    """A failing step's ``compensate`` succeeded."""

    name: ClassVar[str] = "compensation.completed"


@dataclass(frozen=True, slots=True, kw_only=True)
class CompensationFailed(Event):
    """A failing step's ``compensate`` returned a failure or raised."""

    name: ClassVar[str] = "compensation.failed"
    error: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class UndoStarted(Event):
    """A completed step's ``undo`` began."""

    name: ClassVar[str] = "undo.started"


@dataclass(frozen=True, slots=True, kw_only=True)
class UndoCompleted(Event):
    """A completed step's ``undo`` succeeded."""

    name: ClassVar[str] = "undo.completed"


@dataclass(frozen=True, slots=True, kw_only=True)
class UndoFailed(Event):
    """A completed step's ``undo`` returned a failure or raised."""

    name: ClassVar[str] = "undo.failed"
    error: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LockAcquired(Event):
    """The execution took lock ``key`` (``step`` None: declared on the reactor)."""

    name: ClassVar[str] = "lock.acquired"
    key: str = ""
    fencing_token: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class LockReleased(Event):
    """The execution released lock ``key``."""

    name: ClassVar[str] = "lock.released"
    key: str = ""
    lost: bool = False  # the hold had expired before the release: others may have entered


@dataclass(frozen=True, slots=True, kw_only=True)
class LockAcquisitionFailed(Event):
    """Lock ``key`` stayed busy for the whole wait (``error`` says why)."""

    name: ClassVar[str] = "lock.acquisition_failed"
    key: str = ""
    error: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SemaphoreAcquired(Event):
    """The execution took a slot of semaphore ``key``."""

    name: ClassVar[str] = "semaphore.acquired"
    key: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class SemaphoreReleased(Event):
    """The execution gave back its slot of semaphore ``key``."""

    name: ClassVar[str] = "semaphore.released"
    key: str = ""
    lost: bool = False  # the slot's lease had expired before the release


@dataclass(frozen=True, slots=True, kw_only=True)
class SemaphoreAcquisitionFailed(Event):
    """Every slot of semaphore ``key`` stayed taken for the whole wait."""

    name: ClassVar[str] = "semaphore.acquisition_failed"
    key: str = ""
    error: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimitAcquired(Event):
    """The execution was charged one call of rate limit ``key`` (a charge is spent: there is
    no release)."""

    name: ClassVar[str] = "rate_limit.acquired"
    key: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimitAcquisitionFailed(Event):
    """A window of rate limit ``key`` was full (``error.retry_after`` says for how long)."""

    name: ClassVar[str] = "rate_limit.acquisition_failed"
    key: str = ""
    error: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PeriodAcquired(Event):
    """The execution claimed the current bucket of period ``key``: its work is due."""

    name: ClassVar[str] = "period.acquired"
    key: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PeriodReleased(Event):
    """The execution gave back its claim on period ``key`` (marking the bucket done if the
    work succeeded)."""

    name: ClassVar[str] = "period.released"
    key: str = ""
    lost: bool = False  # the claim had lapsed before the release: another may have run it


@dataclass(frozen=True, slots=True, kw_only=True)
class PeriodAcquisitionFailed(Event):
    """Another owner kept running this bucket of period ``key`` for the whole wait."""

    name: ClassVar[str] = "period.acquisition_failed"
    key: str = ""
    error: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OrderedLockAcquired(Event):
    """The execution's position on ordered lock ``key`` got its turn."""

    name: ClassVar[str] = "ordered_lock.acquired"
    key: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class OrderedLockReleased(Event):
    """The execution passed its turn (or its place in line) on ordered lock ``key`` on."""

    name: ClassVar[str] = "ordered_lock.released"
    key: str = ""
    lost: bool = False  # the turn had been skipped or fenced meanwhile: the release changed nothing


@dataclass(frozen=True, slots=True, kw_only=True)
class OrderedLockAcquisitionFailed(Event):
    """The turn on ordered lock ``key`` did not come within the wait (an earlier position
    was still in flight)."""

    name: ClassVar[str] = "ordered_lock.acquisition_failed"
    key: str = ""
    error: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StepParked(Event):
    """A step met contention in a worker: the execution parks (no failure) until ``until``
    (wall clock) or the release of ``key``, whichever comes first."""

    name: ClassVar[str] = "step.parked"
    primitive: str = ""
    key: str = ""
    attempt: int = 0
    until: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ReactorParked(Event):
    """The reactor's own coordination met contention in a worker: the execution parks."""

    name: ClassVar[str] = "reactor.parked"
    primitive: str = ""
    key: str = ""
    attempt: int = 0
    until: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class StepPaused(Event):
    """The run reached the interrupt ``step`` (a dotted path inside composed children) and
    pauses until a resume brings its payload, or ``deadline`` (wall clock; 0.0: none)."""

    name: ClassVar[str] = "step.paused"
    correlation_id: str | None = None
    deadline: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class StepResumed(Event):
    """A resume brought the payload of the interrupt ``step``: it is the step's result."""

    name: ClassVar[str] = "step.resumed"
    payload: Any = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionRecovered(Event):
    """The recovery loop made an execution due again: its runner's lease lapsed (it died)."""

    name: ClassVar[str] = "execution.recovered"


@dataclass(frozen=True, slots=True, kw_only=True)
class UnitDispatched(Event):
    """An async unit (``step``) was handed to a worker as an execution of its own,
    ``unit_execution_id``; the run goes on without waiting for it."""

    name: ClassVar[str] = "unit.dispatched"
    unit_execution_id: str = ""


ALL_EVENTS: tuple[type[Event], ...] = (
    ReactorStarted,
    ReactorCompleted,
    ReactorFailed,
    ReactorHalted,
    StepStarted,
    StepCompleted,
    StepSkipped,
    StepFailed,
    StepRetried,
    RollbackStarted,
    RollbackFinished,
    CompensationStarted,
    CompensationCompleted,
    CompensationFailed,
    UndoStarted,
    UndoCompleted,
    UndoFailed,
    LockAcquired,
    LockReleased,
    LockAcquisitionFailed,
    SemaphoreAcquired,
    SemaphoreReleased,
    SemaphoreAcquisitionFailed,
    RateLimitAcquired,
    RateLimitAcquisitionFailed,
    PeriodAcquired,
    PeriodReleased,
    PeriodAcquisitionFailed,
    OrderedLockAcquired,
    OrderedLockReleased,
    OrderedLockAcquisitionFailed,
    StepParked,
    ReactorParked,
    StepPaused,
    StepResumed,
    ExecutionRecovered,
    UnitDispatched,
)
