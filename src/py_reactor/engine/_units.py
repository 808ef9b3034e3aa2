"""One calling convention for the three kinds of step: Step class, inline function, child reactor.

The step runner and rollback call ``guard()``, ``run()``, ``compensate(error)`` and
``undo(result)`` on a unit and never look at what kind of step it is.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from py_reactor.dsl.declaration import StepDeclaration, StepKind
from py_reactor.dsl.inputs import Inputs
from py_reactor.dsl.map import MapResult, fans_out
from py_reactor.dsl.reactor import ITEMS
from py_reactor.dsl.registry import class_path
from py_reactor.dsl.signals import Failure, Halt, Success
from py_reactor.dsl.sources import Element
from py_reactor.dsl.step import Step
from py_reactor.engine.context import Context, Status
from py_reactor.engine.resolve import read_source
from py_reactor.engine.results import PausedResult, nested_failure
from py_reactor.engine.run import Paused

if TYPE_CHECKING:
    from py_reactor.engine.run import Run

__all__ = ["defines", "element_key", "make_unit", "paused_signal"]

#: A child context in one of these statuses carries on where it stopped (not built anew).
_RESUMES = (Status.WAITING, Status.PAUSED)


def make_unit(decl: StepDeclaration, name: str, values: dict[str, Any], run: Run) -> Any:
    """An object with ``guard``, ``run``, ``compensate`` and ``undo`` for this step."""
    if decl.kind is StepKind.CLASS:
        return decl.target(Inputs(values), run.context)
    if decl.kind is StepKind.INLINE:
        return _InlineUnit(decl, values)
    if decl.kind is StepKind.MAP:
        return _MapUnit(decl, name, values, run)
    return _ReactorUnit(decl, name, values, run)


def defines(decl: StepDeclaration, hook: str) -> bool:
    """Whether the step has its own ``guard``/``compensate``/``undo`` worth calling."""
    if decl.kind is StepKind.CLASS:
        return getattr(decl.target, hook) is not getattr(Step, hook)
    if decl.kind is StepKind.INLINE:
        return (
            decl.compensate_hook
            if hook == "compensate"
            else decl.undo_hook
            if hook == "undo"
            else None
        ) is not None
    if decl.kind is StepKind.MAP:  # a failed map undoes the elements done before the failure
        return hook == "compensate"
    return False  # a child reactor rolls itself back; its undo is handled by rollback


class _InlineUnit:
    __slots__ = ("decl", "values")

    def __init__(self, decl: StepDeclaration, values: dict[str, Any]) -> None:
        self.decl = decl
        self.values = values

    def guard(self) -> Any:
        return None

    def run(self) -> Any:
        return self.decl.target(**self.values)

    def compensate(self, error: Any) -> Any:
        hook = self.decl.compensate_hook
        return None if hook is None else hook(error, **self.values)

    def undo(self, result: Any) -> Any:
        hook = self.decl.undo_hook
        return None if hook is None else hook(result, **self.values)


class _ReactorUnit:
    """Runs a composed child reactor inside the parent's execution (same root id)."""

    __slots__ = ("child", "decl", "name", "parent", "values")

    def __init__(self, decl: StepDeclaration, name: str, values: dict[str, Any], parent: Run):
        self.decl = decl
        self.name = name
        self.values = values
        self.parent = parent
        self.child: Any = None  # the child's failure outcome, once it failed

    def guard(self) -> Any:
        return None

    def run(self) -> Any:
        from py_reactor.engine.executor import execute

        child_cls = self.decl.target
        parent_context: Context = self.parent.context
        worker = self.parent.worker
        child = parent_context.children.get(self.name)
        if child is None or child.status not in _RESUMES:  # else: a parked child resumes
            child = parent_context.child(class_path(child_cls), dict(self.values))
            parent_context.children[self.name] = child
        if worker is not None:  # parks inside the child are named "<this step>.<its step>"
            worker = dataclasses.replace(worker, prefix=f"{worker.prefix}{self.name}.")
        outcome = execute(
            child_cls,
            child,
            middleware=self.parent.middleware,
            validated=True,
            worker=worker,
            root=self.parent.root,
            prefix=f"{self.parent.prefix}{self.name}.",
            units=self.parent.units,
        )
        if outcome.status == "waiting":
            return outcome.parked  # type: ignore[attr-defined]
        if isinstance(outcome, PausedResult):
            return paused_signal(outcome)
        if outcome.status == "completed":
            return Success(outcome.value)
        if outcome.status == "halted":
            return Halt(getattr(outcome, "reason", "halted"))
        for failure in getattr(outcome, "rollback_failures", ()):
            self.parent.rollback_failures.append(nested_failure(self.name, failure))
        self.child = outcome
        return Failure(outcome.error, retryable=getattr(outcome, "retryable", False))

    def compensate(self, error: Any) -> Any:
        return None

    def undo(self, result: Any) -> Any:
        return None


def paused_signal(outcome: PausedResult) -> Paused:
    """What a step whose nested run paused at an interrupt answers: the whole run pauses."""
    return Paused(outcome.step_name, outcome.correlation_id, outcome.deadline)


def element_key(step: str, index: int) -> str:
    """Where a map step's element ``index`` keeps its context: ``children["<step>[<i>]"]``."""
    return f"{step}[{index}]"


class _MapUnit:
    """Runs a map step's child reactor once per element. In place (the default), one after
    the other, each as a composed child of the run (same root id), so an element that parks
    parks the run and resumes where it stopped; elements that ended are not run again. With
    ``fan_out=True``, each element as an execution of its own, in a worker job
    (``engine._fan_out``)."""

    __slots__ = ("child", "decl", "name", "parent", "values")

    def __init__(self, decl: StepDeclaration, name: str, values: dict[str, Any], parent: Run):
        self.decl = decl
        self.name = name
        self.values = values
        self.parent = parent
        self.child: Any = None  # the failing element's outcome (fail_fast)

    def guard(self) -> Any:
        return None

    def run(self) -> Any:
        from py_reactor.engine.executor import execute

        child_cls = self.decl.target
        run, context = self.parent, self.parent.context
        items = self.values.get(ITEMS)
        if ITEMS not in self.values:
            items = self.decl.items(MappingProxyType(dict(context.inputs)))
        if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
            return Failure(
                TypeError(
                    f"map step {self.name!r} of {run.reactor_name}: its source gave "
                    f"{type(items).__name__} {items!r:.80}; it must give a list of elements"
                ),
                retryable=False,
            )
        if fans_out(self.decl):
            from py_reactor.engine._fan_out import FanOut

            fan = FanOut(run, self.name, self.decl, list(items), self._inputs_of)
            signal = fan.run_elements()
            self.child = fan.child
            return signal
        collect = self.decl.mode == "collect"
        done: dict[int, Any] = {}
        failed: dict[int, str] = {}
        for index, element in enumerate(list(items)):
            key = element_key(self.name, index)
            child = context.children.get(key)
            if child is not None and child.status is Status.COMPLETED:
                done[index] = child.results.get(child_cls.returns) if child_cls.returns else None
                continue
            if child is not None and child.status is Status.FAILED and collect:
                failed[index] = str(child.private.get("map_error", "failed"))
                continue
            if child is None or child.status not in _RESUMES:
                child = context.child(class_path(child_cls), self._inputs_of(element))
                context.children[key] = child
            worker = run.worker
            if worker is not None:  # parks inside an element are named "<step>[<i>].<its step>"
                worker = dataclasses.replace(worker, prefix=f"{worker.prefix}{key}.")
            outcome = execute(
                child_cls,
                child,
                middleware=run.middleware,
                worker=worker,
                root=run.root,
                prefix=f"{run.prefix}{key}.",
                units=run.units,
            )
            if outcome.status == "waiting":
                return outcome.parked  # type: ignore[attr-defined]
            if isinstance(outcome, PausedResult):
                return paused_signal(outcome)
            if outcome.status == "halted":
                return Halt(getattr(outcome, "reason", "halted"))
            if outcome.status == "completed":
                done[index] = outcome.value
                continue
            for failure in getattr(outcome, "rollback_failures", ()):
                run.rollback_failures.append(nested_failure(key, failure))
            if not collect:
                self.child = outcome
                return Failure(outcome.error, retryable=getattr(outcome, "retryable", False))
            failed[index] = str(outcome.error)
            child.private["map_error"] = failed[index]
        count = len(done) + len(failed)
        ordered = [done.get(i) for i in range(count)]
        if not collect:
            return Success(ordered)

        return Success(MapResult(values=ordered, successes=done, failures=failed))

    def _inputs_of(self, element: Any) -> dict[str, Any]:
        """The child's inputs for one element: the step's resolved wiring, with each
        ``Element`` source read from ``element``.

        Raises:
            ArgumentResolutionError: an ``Element`` field the element does not have.
        """

        reactor = self.parent.reactor_name
        return {
            arg: read_source(value, element, arg, self.name, reactor)
            if isinstance(value, Element)
            else value
            for arg, value in self.values.items()
            if arg != ITEMS
        }

    def compensate(self, error: Any) -> Any:
        from py_reactor.engine.compensation import undo_elements

        undo_elements(self.parent, self.name, self.decl)
        return None

    def undo(self, result: Any) -> Any:
        return None
