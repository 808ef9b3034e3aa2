"""What the executor, the step runner and rollback share about one run in progress."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from py_reactor.engine.context import Context
from py_reactor.engine.handoff import NO_UNITS, UnitBackend
from py_reactor.engine.results import RollbackFailure
from py_reactor.errors import StaleExecution
from py_reactor.observability.events import Event
from py_reactor.observability.middleware import Middleware, emit

__all__ = [
    "MAX_BACKTRACE_CHARS",
    "Parked",
    "Paused",
    "Run",
    "StaleExecution",
    "StepFailure",
    "WorkerMode",
    "describe_exception",
    "error_text",
]

#: A failure's backtrace keeps at most this many trailing characters.
MAX_BACKTRACE_CHARS = 8000


@dataclass(frozen=True, slots=True)
class WorkerMode:
    """How a run in a worker differs from one in the caller: it parks instead of waiting.

    Attributes:
        park_max_attempts: parks on contention one step may make before it gets in (ordered
            turns exempt).
        checkpoint: called after every step (of the root or of a composed child) to persist
            the root context; raises :class:`StaleExecution` when another runner owns it now.
        root: the root context, where parks are counted and traced.
        prefix: the dotted path of the composed child running now (``"child."``).
        recovered: this run resumes one whose runner was presumed dead (its lease lapsed):
            that runner may still be inside a step, so its lock and semaphore levels are
            re-entered beside, never adopted or given back (they lapse with their ttl).
    """

    park_max_attempts: float
    checkpoint: Callable[[Context], None] | None = None
    root: Context | None = None  # the execution's root context: parks are counted and traced
    prefix: str = ""  # "child." while a composed child runs: parks name "child.charge"
    recovered: bool = False


@dataclass(slots=True)
class Parked:
    """The run cannot go on in this worker now; park it and dispatch it again later.

    Attributes:
        step: the step that parked (None: the reactor's own coordination).
        primitive, key: what it waits on (None for a retry waiting out its backoff).
        attempt: the step's parks so far (contention) or the attempts made (a retry).
        delay: seconds until the timer dispatches it again; None: the configured park delay
            (a release of ``key`` wakes it sooner).
        limit: a semaphore's slots, and ``bucket`` a busy period claim's bucket (to tell,
            when the park is written, whether the key is free by then).
    """

    step: str | None
    primitive: str | None
    key: str | None
    attempt: int
    delay: float | None
    limit: int | None = None
    bucket: str | None = None


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


class Run:
    """One execution of one reactor in this process: its context, middleware and reports.

    ``worker`` is set when the run executes in a worker (it parks instead of waiting);
    ``handoff`` names the step where a run in the caller stops and is dispatched.
    """

    __slots__ = ("context", "handoff", "middleware", "prefix", "reactor_name",
                 "rollback_failures", "root", "units", "worker")  # fmt: skip

    def __init__(
        self,
        reactor_name: str,
        context: Context,
        middleware: tuple[Middleware, ...],
        *,
        worker: WorkerMode | None = None,
        handoff: str | None = None,
        root: Context | None = None,
        prefix: str = "",
        units: UnitBackend | None = None,
    ) -> None:
        self.reactor_name = reactor_name
        self.context = context
        self.middleware = middleware
        self.rollback_failures: list[RollbackFailure] = []
        self.worker = worker
        self.handoff = handoff
        #: The execution's root context (where pauses are traced and resumes are found), and
        #: the dotted path of this run from it (``"child."`` for a composed child's run).
        self.root = context if root is None else root
        self.prefix = prefix
        #: Where async units are dispatched and read, and pauses stored: given by the runtime
        #: that drives this run (the engine itself never reaches a store).
        self.units: UnitBackend = NO_UNITS if units is None else units

    def emit(self, event_class: type[Event], step: str | None = None, **fields: Any) -> None:
        """Build and deliver an event, only if someone listens (no cost otherwise)."""
        if self.middleware:
            event = event_class(
                execution_id=self.context.execution_id,
                reactor=self.reactor_name,
                step=step,
                **fields,
            )
            emit(self.middleware, event)

    def record(self, kind: str, step: str | None, started_at: float, **details: Any) -> None:
        """Append one trace entry."""
        entry = {"type": kind, "step": step, "started_at": started_at, "finished_at": time.time()}
        entry.update(details)
        self.context.trace.append(entry)


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


def describe_exception(error: Any) -> tuple[str | None, str | None]:
    """The qualified class name and bounded traceback of ``error`` if it is an exception."""
    if not isinstance(error, BaseException):
        return None, None
    cls = type(error)
    name = (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )
    text = "".join(traceback.format_exception(error))
    return name, text[-MAX_BACKTRACE_CHARS:]


def error_text(error: Any) -> str:
    """A readable, JSON-friendly rendering of an error for the trace."""
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"
    return str(error)
