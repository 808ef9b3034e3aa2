"""``interrupt(...)``: a step where the run pauses until ``Reactor.resume`` brings a payload.

The run is stored ``"paused"`` at the step (its reactor-level holds given back), and goes on
when somebody resumes it, by execution id or by correlation id, with a payload validated against
the interrupt's model. The payload is the step's result. A timeout fails the step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel

from py_reactor.dsl.contracts import Contract
from py_reactor.dsl.declaration import REFUSES_COORDINATION, StepDeclaration, StepKind
from py_reactor.dsl.step import normalize_wait_for
from py_reactor.errors import DefinitionError

__all__ = ["RESUME_MODES", "InterruptOptions", "interrupt"]

#: Where a resumed run goes on: in the process that resumes it, or in a worker.
RESUME_MODES = ("inline", "background")

#: ``interrupt(...)`` options the engine reads, kept on the declaration.
OPTIONS = "__py_reactor_interrupt__"


class InterruptOptions:
    """What an interrupt step declares (read by the engine and by ``resume``)."""

    __slots__ = ("correlation_id", "payload", "resume", "timeout")

    def __init__(
        self,
        payload: type[BaseModel] | None,
        correlation_id: Callable[[Mapping[str, Any]], Any] | str | None,
        timeout: float | None,
        resume: str,
    ) -> None:
        self.payload = payload
        self.correlation_id = correlation_id
        self.timeout = timeout
        self.resume = resume


def interrupt(
    payload: type[BaseModel] | None = None,
    *,
    correlation_id: Callable[[Mapping[str, Any]], Any] | str | None = None,
    timeout: float | None = None,
    resume: str = "inline",
    wait_for: Iterable[str] | str | None = None,
) -> StepDeclaration:
    """Declare a step at which the run pauses until it is resumed with a payload.

    Args:
        payload: a pydantic model the resume payload must validate against (its result is the
            payload as a JSON object: ``model_dump(mode="json")``); None accepts any JSON
            object.
        correlation_id: a function of the reactor's inputs (a read-only mapping) returning the
            id a resume may find the run by (``Reactor.resume(correlation_id=...)``), or a
            constant; unique per reactor while its run is paused.
        timeout: seconds after the pause at which the step fails if nobody resumed the run
            (a worker's recovery loop fails it); None waits for ever.
        resume: ``"inline"``: the resumed run goes on in the process that resumes it, and
            ``resume`` returns its outcome; ``"background"``: it goes on in a worker and
            ``resume`` returns a ``DispatchedResult``.
        wait_for: steps that must finish before the run pauses here.

    Raises:
        DefinitionError: a bad option (the message names it).
    """
    owner = "interrupt(...)"
    if payload is not None and not (isinstance(payload, type) and issubclass(payload, BaseModel)):
        raise DefinitionError(
            f"{owner}: payload= takes a pydantic model class (or None for any JSON object), "
            f"got {payload!r}"
        )
    if correlation_id is not None and not (
        callable(correlation_id) or (isinstance(correlation_id, str) and correlation_id)
    ):
        raise DefinitionError(
            f"{owner}: correlation_id= takes a function of the reactor's inputs (or a "
            f"non-empty str), got {correlation_id!r}"
        )
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise DefinitionError(
            f"{owner}: timeout= takes a number of seconds > 0 (or None: no timeout), "
            f"got {timeout!r}"
        )
    if resume not in RESUME_MODES:
        raise DefinitionError(f"{owner}: resume= takes 'inline' or 'background', got {resume!r}")
    declaration = StepDeclaration(
        StepKind.INTERRUPT,
        payload,
        contract=Contract("interrupt", None),
        wait_for=normalize_wait_for(owner, wait_for),
    )
    setattr(
        declaration,
        OPTIONS,
        InterruptOptions(
            payload, correlation_id, None if timeout is None else float(timeout), resume
        ),
    )
    setattr(
        declaration,
        REFUSES_COORDINATION,
        "an interrupt step cannot declare step-level coordination: the run is split across "
        "the pause, so a hold would span the gap (days, perhaps). Declare it on the reactor "
        "instead (@with_lock(...) above the Reactor class): reactor-level holds are given "
        "back when the run pauses and taken again when it resumes",
    )
    return declaration


def options_of(declaration: StepDeclaration) -> InterruptOptions:
    """The options of the interrupt step ``declaration``."""
    found: InterruptOptions = getattr(declaration, OPTIONS)
    return found
