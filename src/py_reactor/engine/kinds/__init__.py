"""One handler per step kind, chosen from a table: a Step class, an inline function, a
composed child reactor, a map.

The step runner and rollback call ``guard()``, ``run()``, ``compensate(error)`` and
``undo(result)`` on the unit :func:`make_unit` builds, and never look at what kind of step it
is. A kind that runs a nested reactor (compose, map) does it through ``Run.nest``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from py_reactor.dsl.declaration import StepDeclaration, StepKind
from py_reactor.dsl.inputs import Inputs
from py_reactor.dsl.step import Step
from py_reactor.engine.kinds.compose import ReactorUnit
from py_reactor.engine.kinds.inline import InlineUnit
from py_reactor.engine.kinds.map import MapUnit
from py_reactor.engine.run import Run

__all__ = ["defines", "make_unit"]

#: Builds the unit of one step: ``(declaration, step name, validated values, run)``.
Build = Callable[[StepDeclaration, str, dict[str, Any], Run], Any]


def _class_unit(decl: StepDeclaration, name: str, values: dict[str, Any], run: Run) -> Any:
    return decl.target(Inputs(values), run.context)


_BUILD: dict[StepKind, Build] = {
    StepKind.CLASS: _class_unit,
    StepKind.INLINE: InlineUnit,
    StepKind.MAP: MapUnit,
    StepKind.REACTOR: ReactorUnit,
}


def make_unit(decl: StepDeclaration, name: str, values: dict[str, Any], run: Run) -> Any:
    """An object with ``guard``, ``run``, ``compensate`` and ``undo`` for this step."""
    return _BUILD[decl.kind](decl, name, values, run)


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
