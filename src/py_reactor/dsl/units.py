"""``async_step`` and ``async_reactor``: steps that run as executions of their own, in a worker.

The reactor that declares one dispatches it and goes on; a step that reads its ``Result`` waits
for it. Each unit runs in its own job, under an owner of its own, so the coordination it
declares is taken where its work runs (never in the dispatching process). A worker finds a unit
by ``module:qualname`` like any reactor: an ``async_reactor`` runs its child reactor class, and
an ``async_step`` runs a one-step reactor built when the declaring reactor is defined
(``Parent.<step name>``, registered with it; ``dsl.reactor`` builds it, as part of defining
the reactor), so that whatever imports the reactor's module can run its units.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, overload

from py_reactor.dsl.declaration import StepDeclaration, StepKind
from py_reactor.dsl.reactor import UNIT_ATTRIBUTE, Reactor, build_unit_reactors
from py_reactor.dsl.step import Step, normalize_wait_for, normalize_wiring, step
from py_reactor.errors import DefinitionError

__all__ = ["UNIT_ATTRIBUTE", "async_reactor", "async_step", "build_unit_reactors"]


@overload
def async_step(
    target: type[Step] | Callable[..., Any],
    /,
    *,
    wait_for: Iterable[str] | str | None = ...,
    **wiring: Any,
) -> StepDeclaration: ...


@overload
def async_step(
    *, wait_for: Iterable[str] | str | None = ..., **wiring: Any
) -> Callable[[Callable[..., Any]], StepDeclaration]: ...


def async_step(
    target: type[Step] | Callable[..., Any] | None = None,
    /,
    *,
    wait_for: Iterable[str] | str | None = None,
    **wiring: Any,
) -> StepDeclaration | Callable[[Callable[..., Any]], StepDeclaration]:
    """Declare a step that runs in a worker, as an execution of its own.

    ``name = async_step(SomeStep, arg=Input("x"))`` or ``@async_step(...)`` above a function,
    wired exactly as :func:`~py_reactor.step`. The reactor dispatches it and goes on; a step
    wired to ``Result("name")`` waits for it. Its coordination (lock, semaphore, rate limit,
    period, ordered lock) is taken in the worker, under an owner of its own; a dispatch that
    would wait on a key its own execution holds is refused (``HandoffRefusedError``).

    Raises:
        DefinitionError: as for ``step``.
    """
    if target is None:
        make = step(wait_for=wait_for, **wiring)

        def decorate(fn: Any) -> StepDeclaration:
            return _asynchronous(make(fn))

        return decorate
    return _asynchronous(step(target, wait_for=wait_for, **wiring))


def async_reactor(
    reactor: type[Reactor], /, *, wait_for: Iterable[str] | str | None = None, **wiring: Any
) -> StepDeclaration:
    """Declare a child reactor that runs in a worker, as an execution of its own.

    Its inputs are wired as for :func:`~py_reactor.compose`; its value is the child's
    ``returns`` value, read (and waited for) by steps wired to ``Result(name)``. The child takes
    its own reactor-level and step-level coordination in the worker.

    Raises:
        DefinitionError: ``reactor`` is not a Reactor subclass, or is defined inside a function
            (a worker imports it by ``module:qualname``).
    """
    owner = f"async_reactor({getattr(reactor, '__qualname__', reactor)!r})"
    if not (isinstance(reactor, type) and issubclass(reactor, Reactor)):
        raise DefinitionError(f"{owner}: expected a Reactor subclass, got {reactor!r}")
    if "<locals>" in reactor.__qualname__:
        raise DefinitionError(
            f"{owner}: {reactor.__qualname__} is defined inside a function, so a worker cannot "
            "import it (it finds reactors by module:qualname); define it at module level"
        )
    declaration = StepDeclaration(
        StepKind.REACTOR,
        reactor,
        contract=reactor.__py_reactor_contract__,
        wiring=normalize_wiring(owner, wiring),
        wait_for=normalize_wait_for(owner, wait_for),
    )
    declaration.asynchronous = True
    return declaration


def _asynchronous(declaration: StepDeclaration) -> StepDeclaration:
    declaration.asynchronous = True
    return declaration
