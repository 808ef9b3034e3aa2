"""Structured ``key=value`` log lines for what an operator acts on: parks, wakes, recoveries,
guard refusals and contention give-ups.

``configure(middleware=[LoggingMiddleware()])`` writes one line per such event on the
``py_reactor`` logger, for example (one line, wrapped here)::

    event=park execution_id=9f0c... reactor=Checkout step=charge primitive=lock
    key="order 7" attempt=1 until=2025-05-01T12:00:05.000Z

Fields come in a fixed order (``event`` first); a field that does not apply is left out; a value
with a space, a quote or an ``=`` is double-quoted (quotes and backslashes escaped). Each
record also carries the fields as a dict, ``record.py_reactor``, for JSON formatters.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from py_reactor.errors import CONTENTION, HandoffRefusedError
from py_reactor.observability import events as ev
from py_reactor.observability.middleware import Middleware
from py_reactor.observability.propagation import HandoffHooks, qualname_of, wake_of

if TYPE_CHECKING:
    from py_reactor.engine.context import Context

__all__ = ["LoggingMiddleware", "render"]

_NEEDS_QUOTES = frozenset(' \t\n\r"=\\')


class LoggingMiddleware(Middleware, HandoffHooks):
    """Logs one ``key=value`` line per park, wake, recovery, guard refusal and give-up.

    Args:
        logger: where the lines go; default the ``py_reactor`` logger.

    Lines and levels:

    - ``event=park`` (INFO): a step (or the reactor's own coordination) met contention in a
      worker and the execution parked: ``step primitive key attempt until``.
    - ``event=wake`` (INFO): a worker resumes a parked execution: ``step primitive key attempt
      waited_ms``.
    - ``event=recovery`` (WARNING): the recovery loop made an execution due again because its
      runner's lease lapsed (the runner died).
    - ``event=guard_refusal`` (ERROR): dispatch of an async unit was refused, as the unit wants
      a key its own execution holds: ``step primitive key holder error``.
    - ``event=give_up`` (WARNING): contention failed a step or reactor: ``cause=park_cap`` in a
      worker after ``park_max_attempts`` parks (``parks``), ``cause=wait`` where the primitive
      waited its ``wait`` (in the caller): ``step primitive key error``.

    Add it in every process that runs executions (the caller, each worker) to see all lines.

    .. versionadded:: 0.1
    """

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger("py_reactor")
        self._reported: deque[Any] = deque(maxlen=64)  # give-ups already logged (by identity)
        self._reported_lock = threading.Lock()

    def _log(self, level: int, fields: Mapping[str, Any]) -> None:
        kept = {k: v for k, v in fields.items() if v is not None}
        if self.logger.isEnabledFor(level):
            self.logger.log(level, "%s", render(kept), extra={"py_reactor": kept})

    # -- park and wake -----------------------------------------------------------------------

    def on_step_parked(self, event: ev.StepParked) -> None:
        """``event=park`` for a step."""
        self._park(event, event.primitive, event.key, event.attempt, event.until)

    def on_reactor_parked(self, event: ev.ReactorParked) -> None:
        """``event=park`` for the reactor's own coordination."""
        self._park(event, event.primitive, event.key, event.attempt, event.until)

    def _park(self, event: ev.Event, primitive: str, key: str, attempt: int, until: float) -> None:
        self._log(
            logging.INFO,
            {
                **_where(event, "park"),
                "primitive": primitive,
                "key": key,
                "attempt": attempt,
                "until": _timestamp(until),
            },
        )

    def on_step_paused(self, event: ev.StepPaused) -> None:
        """``event=pause`` at an interrupt step."""
        deadline = _timestamp(event.deadline) if event.deadline else None
        self._log(
            logging.INFO,
            {**_where(event, "pause"), "correlation_id": event.correlation_id, "until": deadline},
        )

    def on_step_resumed(self, event: ev.StepResumed) -> None:
        """``event=resume`` when a resume's payload reaches its interrupt step."""
        self._log(logging.INFO, _where(event, "resume"))

    def on_worker_start(self, context: Context) -> None:
        """``event=wake`` when the run resumes a parked execution."""
        wake = wake_of(context)
        if wake is None:
            return
        self._log(
            logging.INFO,
            {
                "event": "wake",
                "execution_id": context.execution_id,
                "reactor": qualname_of(context.reactor),
                "step": wake.step,
                "primitive": wake.primitive,
                "key": wake.key,
                "attempt": wake.attempt,
                "waited_ms": round(wake.waited * 1000),
            },
        )

    # -- recovery, refusals, give-ups --------------------------------------------------------

    def on_execution_recovered(self, event: ev.ExecutionRecovered) -> None:
        """``event=recovery``."""
        self._log(logging.WARNING, _where(event, "recovery"))

    def on_step_failed(self, event: ev.StepFailed) -> None:
        """``event=guard_refusal`` or ``event=give_up``, by the step's error."""
        error = event.error
        if isinstance(error, HandoffRefusedError):
            self._log(
                logging.ERROR,
                {
                    **_where(event, "guard_refusal"),
                    "primitive": error.primitive,
                    "key": error.key,
                    "holder": error.holder,
                    "error": str(error),
                },
            )
        elif isinstance(error, CONTENTION):
            self._give_up(event, error)

    def on_reactor_failed(self, event: ev.ReactorFailed) -> None:
        """``event=give_up`` for the reactor's own coordination (a step's was logged when the
        step failed)."""
        if isinstance(event.error, CONTENTION):
            self._give_up(event, event.error)

    def _give_up(self, event: ev.Event, error: Any) -> None:
        with self._reported_lock:  # a step's error fails its reactor (and a parent) too
            if any(seen is error for seen in self._reported):
                return
            self._reported.append(error)
        capped = error.parks is not None  # set by the park cap, in a worker
        self._log(
            logging.WARNING,
            {
                **_where(event, "give_up"),
                "primitive": error.primitive,
                "key": error.key,
                "cause": "park_cap" if capped else "wait",
                "parks": error.parks,
                "error": str(error),
            },
        )


def _where(event: ev.Event, name: str) -> dict[str, Any]:
    return {
        "event": name,
        "execution_id": event.execution_id,
        "reactor": event.reactor,
        "step": event.step,
    }


def _timestamp(moment: float) -> str:
    """``moment`` (wall clock, seconds) as ISO 8601 UTC with milliseconds."""
    text = datetime.fromtimestamp(moment, UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def render(fields: Mapping[str, Any]) -> str:
    """``fields`` as one ``key=value`` line, in order; values with spaces, quotes, ``=`` or
    backslashes (or empty ones) double-quoted, with ``"`` and ``\\`` escaped."""
    return " ".join(f"{key}={_value(value)}" for key, value in fields.items())


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if text and not _NEEDS_QUOTES.intersection(text):
        return text
    escaped = (
        text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    )
    return f'"{escaped}"'
