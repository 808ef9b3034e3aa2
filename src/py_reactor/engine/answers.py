"""What a step answers, and what a run waits on when it cannot go on here.

Every step kind (a Step class, an inline function, a composed child, a map, an async unit, an
interrupt) answers one of ``Completed | SkippedStep | Halted | StepFailure | Parked | Paused``;
the walk reads the answer and never asks which kind of step gave it. ``Parked`` and ``Paused``
are the two suspensions: the run stops here and comes back through the runtime, woken by what
its :class:`WaitKind` names.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "STORE",
    "Completed",
    "Halted",
    "Parked",
    "Paused",
    "SkippedStep",
    "StepAnswer",
    "StepFailure",
    "WaitKind",
]

#: What a run suspended by a store outage waits on (``waiting_on["primitive"]``; no key).
STORE = "store"


class WaitKind(enum.StrEnum):
    """What brings a suspended run back."""

    KEY = "key"  # a busy coordination key: its release wakes the run, else the backstop timer
    UNTIL = "until"  # a time: a retry's backoff, a rate limit's retry_after
    EXECUTION = "execution"  # another execution (an async unit, a fan-out element) ending
    STORE = "store"  # the store coming back after an outage (retried after a delay)
    SIGNAL = "signal"  # a resume with a payload, or the interrupt's deadline


@dataclass(slots=True)
class Completed:
    """The step succeeded with ``value``."""

    value: Any


@dataclass(slots=True)
class SkippedStep:
    """The step was skipped; ``value`` still flows on."""

    value: Any
    reason: str | None


@dataclass(slots=True)
class Halted:
    """The step asked the whole run to stop cleanly."""

    reason: str


@dataclass(slots=True)
class Parked:
    """The run cannot go on in this worker now; park it and dispatch it again later.

    Attributes:
        step: the step that parked (None: the reactor's own coordination).
        primitive, key: what it waits on (None for a retry waiting out its backoff, or an
            async unit not ended yet; ``primitive`` is :data:`STORE` for a store outage).
        attempt: the step's parks so far (contention) or the attempts made (a retry).
        delay: seconds until the timer dispatches it again; None: the configured park delay
            (a release of ``key`` wakes it sooner).
        limit: a semaphore's slots, ``bucket`` a busy period claim's bucket and ``turn`` an
            ordered position waiting for its turn (``"<epoch>:<number>"``): to tell, when the
            park is written, whether the key is free (or the turn has come) by then.
    """

    step: str | None
    primitive: str | None
    key: str | None
    attempt: int
    delay: float | None
    limit: int | None = None
    bucket: str | None = None
    turn: str | None = None

    @property
    def kind(self) -> WaitKind:
        """What wakes the run: a key's release, the store's return, or only the timer."""
        if self.primitive == STORE:
            return WaitKind.STORE
        if self.key is not None:
            return WaitKind.KEY
        return WaitKind.UNTIL


@dataclass(slots=True)
class Paused:
    """The run stopped at an interrupt step: stored ``paused`` until a resume brings the
    payload (or its timeout fails the step).

    Attributes:
        step: the interrupt step, as a dotted path from the root (``"child.review"``).
        correlation_id: what ``Reactor.resume(correlation_id=...)`` finds the run by, or None.
        deadline: wall-clock time at which the timeout fails the step, or None (no timeout).
    """

    step: str
    correlation_id: str | None
    deadline: float | None

    kind = WaitKind.SIGNAL


@dataclass(slots=True)
class StepFailure:
    """Why a step failed, and whether its work had started (which decides compensation)."""

    step: str | None  # None: the reactor's own inputs were refused
    error: Any
    retryable: bool
    work_started: bool
    arguments: dict[str, Any] | None = None
    attempts: int = 0
    validation_errors: list[dict[str, Any]] = field(default_factory=list)
    unit: Any = None  # the object whose work failed: compensate runs on it
    work_error: Any = None  # set when ``error`` is not the work's own (a refused retry)
    holds: Any = None  # the StepGate whose holds are kept so that compensate runs under them
    held: Mapping[str, str] | None = None  # the keys of that coordination, by primitive
    child: Any = None  # the failure outcome of the composed child / async unit that failed

    def release_holds(self) -> None:
        """Release the coordination the failed step still holds (once; then a no-op)."""
        holds, self.holds = self.holds, None
        if holds is not None:
            holds.release_failed()

    @property
    def compensation_error(self) -> Any:
        """What ``compensate`` receives: the work's own last error."""
        return self.error if self.work_error is None else self.work_error


#: Everything a step can answer.
StepAnswer = Completed | SkippedStep | Halted | StepFailure | Parked | Paused
