"""An inline step: a plain function declared with ``@step``, and its attached hooks."""

from __future__ import annotations

from typing import Any

from py_reactor.dsl.declaration import StepDeclaration
from py_reactor.engine.bodies import call_body
from py_reactor.engine.run import Run

__all__ = ["InlineUnit"]


class InlineUnit:
    """Calls the function with the step's arguments; ``compensate``/``undo`` call the hooks
    attached with ``@<step>.compensate`` / ``@<step>.undo``, if any."""

    __slots__ = ("decl", "values")

    def __init__(self, decl: StepDeclaration, name: str, values: dict[str, Any], run: Run) -> None:
        self.decl = decl
        self.values = values

    def guard(self) -> Any:
        return None

    def run(self) -> Any:
        return call_body(self.decl.target, **self.values)

    def compensate(self, error: Any) -> Any:
        hook = self.decl.compensate_hook
        return None if hook is None else call_body(hook, error, **self.values)

    def undo(self, result: Any) -> Any:
        hook = self.decl.undo_hook
        return None if hook is None else call_body(hook, result, **self.values)
