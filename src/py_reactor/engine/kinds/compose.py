"""A composed child reactor: run inside the parent's execution (same root id), as a nested
run of the parent (``Run.nest``), so a park or a pause inside it suspends the whole run."""

from __future__ import annotations

from typing import Any

from py_reactor.dsl.declaration import StepDeclaration
from py_reactor.dsl.registry import class_path
from py_reactor.dsl.signals import Failure, Halt, Success
from py_reactor.engine.answers import Parked, Paused
from py_reactor.engine.context import Context, Status
from py_reactor.engine.results import (
    HaltedResult,
    Outcome,
    ParkedResult,
    PausedResult,
    SuccessResult,
    nested_failure,
)
from py_reactor.engine.run import Run

__all__ = ["RESUMES", "NestedUnit", "ReactorUnit", "ended_as", "paused_signal"]

#: A child context in one of these statuses carries on where it stopped (not built anew).
RESUMES = (Status.WAITING, Status.PAUSED)


def paused_signal(outcome: PausedResult) -> Paused:
    """What a step whose nested run paused at an interrupt answers: the whole run pauses."""
    return Paused(outcome.step_name, outcome.correlation_id, outcome.deadline)


def ended_as(outcome: Outcome) -> Success | Halt | Parked | Paused | None:
    """What a nested run's ``outcome`` makes the step answer; None: it failed."""
    if isinstance(outcome, ParkedResult):
        parked: Parked = outcome.parked
        return parked
    if isinstance(outcome, PausedResult):
        return paused_signal(outcome)
    if isinstance(outcome, SuccessResult):
        return Success(outcome.value)
    if isinstance(outcome, HaltedResult):
        return Halt(outcome.reason)
    return None


class NestedUnit:
    """A step that runs a reactor nested in the run (``Run.nest``): a composed child, a map's
    elements. Their failures roll themselves back and rollback undoes what they completed (it
    knows the step's kind), so ``guard``, ``compensate`` and ``undo`` have nothing to do here.
    ``child``: the failure outcome of the nested run that failed the step, if one did."""

    __slots__ = ("child", "decl", "name", "parent", "values")

    def __init__(self, decl: StepDeclaration, name: str, values: dict[str, Any], parent: Run):
        self.decl = decl
        self.name = name
        self.values = values
        self.parent = parent
        self.child: Any = None

    def guard(self) -> Any:
        return None

    def compensate(self, error: Any) -> Any:
        return None

    def undo(self, result: Any) -> Any:
        return None


class ReactorUnit(NestedUnit):
    """Runs a composed child reactor in the parent's execution."""

    __slots__ = ()

    def run(self) -> Any:
        child_cls = self.decl.target
        parent_context: Context = self.parent.context
        child = parent_context.children.get(self.name)
        if child is None or child.status not in RESUMES:  # else: a parked child resumes
            child = parent_context.child(class_path(child_cls), dict(self.values))
            parent_context.children[self.name] = child
        outcome = self.parent.nest(child_cls, child, self.name, validated=True)
        signal = ended_as(outcome)
        if signal is not None:
            return signal
        for failure in getattr(outcome, "rollback_failures", ()):
            self.parent.rollback_failures.append(nested_failure(self.name, failure))
        self.child = outcome
        return Failure(outcome.error, retryable=getattr(outcome, "retryable", False))
