"""What the executor, the step runner and rollback share about one run in progress."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any

from py_reactor.engine.context import Context
from py_reactor.engine.handoff import NO_UNITS, UnitBackend
from py_reactor.engine.results import Outcome, RollbackFailure
from py_reactor.engine.waiter import BLOCKING, Waiter
from py_reactor.errors import StaleExecution
from py_reactor.observability.events import Event
from py_reactor.observability.middleware import Middleware, emit
from py_reactor.states import TraceKind

__all__ = [
    "MAX_BACKTRACE_CHARS",
    "Nest",
    "Run",
    "StaleExecution",
    "describe_exception",
    "error_text",
]

#: A failure's backtrace keeps at most this many trailing characters.
MAX_BACKTRACE_CHARS = 8000

#: How a run runs a reactor nested in it (a composed child, a map element): ``nest(run, cls,
#: context, step, validated)``. The executor gives it, so that a step kind running a nested
#: reactor needs no import of the executor.
Nest = Callable[["Run", Any, Context, str, bool], Outcome]


def _no_nesting(run: Run, cls: Any, context: Context, step: str, validated: bool) -> Outcome:
    raise RuntimeError(f"{run.reactor_name}: this run cannot run the nested reactor of {step!r}")


class Run:
    """One execution of one reactor in this process: its context, middleware and reports.

    ``waiter`` says what a Wait means here (the caller blocks, a worker parks); ``handoff``
    names the step where a run in the caller stops and is dispatched.
    """

    __slots__ = ("_nest", "context", "handoff", "middleware", "prefix", "reactor_name",
                 "rollback_failures", "root", "units", "waiter")  # fmt: skip

    def __init__(
        self,
        reactor_name: str,
        context: Context,
        middleware: tuple[Middleware, ...],
        *,
        waiter: Waiter = BLOCKING,
        handoff: str | None = None,
        root: Context | None = None,
        prefix: str = "",
        units: UnitBackend | None = None,
        nest: Nest = _no_nesting,
    ) -> None:
        self.reactor_name = reactor_name
        self.context = context
        self.middleware = middleware
        self.rollback_failures: list[RollbackFailure] = []
        self.waiter = waiter
        self.handoff = handoff
        #: The execution's root context (where pauses are traced and resumes are found), and
        #: the dotted path of this run from it (``"child."`` for a composed child's run).
        self.root = context if root is None else root
        self.prefix = prefix
        #: Where async units are dispatched and read, and pauses stored: given by the runtime
        #: that drives this run (the engine itself never reaches a store).
        self.units: UnitBackend = NO_UNITS if units is None else units
        self._nest = nest

    def nest(self, cls: Any, context: Context, step: str, *, validated: bool) -> Outcome:
        """Run ``cls`` from wherever ``context`` stopped, as ``step`` of this run (a composed
        child, a map element ``"step[i]"``): same root, middleware, units and waiter."""
        return self._nest(self, cls, context, step, validated)

    def branch(self, context: Context, root: Context | None) -> Run:
        """A run of one parallel branch: the step runs against ``context`` (the branch's own
        copy), tracing parks on ``root`` (None: ``context``); the scheduler checkpoints, after
        merging the branch, so the branch's waiter does not."""
        return Run(
            self.reactor_name,
            context,
            self.middleware,
            waiter=self.waiter.branch(root or context),
            root=root,
            prefix=self.prefix,
            units=self.units,
            nest=self._nest,
        )

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

    def record(self, kind: TraceKind, step: str | None, started_at: float, **details: Any) -> None:
        """Append one trace entry (its ``type`` the kind's plain string, as stored)."""
        entry = {
            "type": str(kind),  # the plain string (str() of a StrEnum is its value)
            "step": step,
            "started_at": started_at,
            "finished_at": time.time(),
        }
        entry.update(details)
        self.context.trace.append(entry)


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
