"""``compose(Child, **wiring)``: run a whole reactor as one step of another."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from py_reactor.dsl.declaration import StepDeclaration, StepKind
from py_reactor.dsl.reactor import Reactor
from py_reactor.dsl.step import normalize_wait_for, normalize_wiring
from py_reactor.errors import DefinitionError

__all__ = ["compose"]


def compose(
    reactor: type[Reactor], /, *, wait_for: Iterable[str] | str | None = None, **wiring: Any
) -> StepDeclaration:
    """Declare the reactor ``reactor`` as a step.

    The child's inputs resolve like a step's arguments: explicit wiring first, else the parent's
    input of the same name. The step's value is the child's ``returns`` value. If the child
    fails, it rolls itself back and the parent then rolls back; if a later parent step fails,
    the child's completed steps are undone, newest first.
    """
    owner = f"compose({getattr(reactor, '__qualname__', reactor)!r})"
    if not (isinstance(reactor, type) and issubclass(reactor, Reactor)):
        raise DefinitionError(f"{owner}: expected a Reactor subclass, got {reactor!r}")
    return StepDeclaration(
        StepKind.REACTOR,
        reactor,
        contract=reactor.__py_reactor_contract__,
        wiring=normalize_wiring(owner, wiring),
        wait_for=normalize_wait_for(owner, wait_for),
    )
