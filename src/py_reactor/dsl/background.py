"""``@background``: hand a reactor's run (or the rest of it, from one step on) to a worker.

``@background`` runs the whole execution in a worker; ``@background(after="reserve")`` runs
``reserve`` and every step before it in the caller and the rest in a worker;
``@background(before="charge")`` hands off at ``charge``. ``run()`` then returns a
``DispatchedResult`` at once. ``@background(namespace="shop")`` names the application its
executions belong to (by default its module's top-level package): the workers serving it run
them. One hand-off per reactor, naming one of its steps; a class defined
inside a function cannot be dispatched (a worker finds reactors by ``module:qualname``).
"""

from __future__ import annotations

from typing import Any, TypeVar, overload

from py_reactor.config import check_namespace
from py_reactor.dsl.reactor import Reactor
from py_reactor.errors import DefinitionError

__all__ = ["HANDOFF_ATTRIBUTE", "NAMESPACE_ATTRIBUTE", "background"]

#: On a ``@background`` reactor: the step where the run leaves the caller.
HANDOFF_ATTRIBUTE = "__py_reactor_handoff__"
#: On a ``@background(namespace=...)`` reactor: the namespace its executions are stored in.
NAMESPACE_ATTRIBUTE = "__py_reactor_namespace__"

R = TypeVar("R", bound=type[Reactor])


@overload
def background(cls: R, /) -> R: ...
@overload
def background(
    *, after: str | None = None, before: str | None = None, namespace: str | None = None
) -> Any: ...


def background(
    cls: Any = None,
    /,
    *,
    after: str | None = None,
    before: str | None = None,
    namespace: str | None = None,
) -> Any:
    """Run the reactor (from the hand-off step on) in a worker; ``run()`` returns at once.
    ``namespace``: the application its executions belong to (default: ``configure(namespace=)``,
    else its module's top-level package).

    Raises:
        DefinitionError: both ``after`` and ``before``, a step name the reactor does not have,
            a second ``@background``, a class defined inside a function, not a Reactor, or a
            ``namespace`` that is not one.
    """
    if cls is not None:
        return _apply(cls, None, None, None)
    if after is not None and before is not None:
        raise DefinitionError("@background takes after= or before=, not both: one hand-off")
    for option, value in (("after", after), ("before", before)):
        if value is not None and (not isinstance(value, str) or not value):
            raise DefinitionError(f"@background({option}=...) takes a step name, got {value!r}")
    if namespace is not None:
        try:
            check_namespace(namespace, "@background(namespace=...)")
        except ValueError as exc:
            raise DefinitionError(str(exc)) from None
    return lambda target: _apply(target, after, before, namespace)


def _apply(cls: Any, after: str | None, before: str | None, namespace: str | None) -> Any:
    if not (isinstance(cls, type) and issubclass(cls, Reactor)):
        raise DefinitionError(f"@background decorates a Reactor subclass, got {cls!r}")
    where = cls.__qualname__
    if "<locals>" in where:
        raise DefinitionError(
            f"@background on {where}: a reactor defined inside a function cannot be dispatched "
            "(a worker imports reactors by module:qualname); define it at module level",
            reactor=where,
        )
    if HANDOFF_ATTRIBUTE in cls.__dict__:
        raise DefinitionError(
            f"@background on {where}: it already has a hand-off; keep one @background",
            reactor=where,
        )
    order: tuple[str, ...] = tuple(cls.__py_reactor_order__)
    named = after if after is not None else before
    if named is not None and named not in order:
        raise DefinitionError(
            f"@background({'after' if after is not None else 'before'}={named!r}) on {where}: "
            f"{where} has no step {named!r}; its steps are {', '.join(order) or 'none'}",
            reactor=where,
        )
    handoff: str | None
    if after is not None:
        index = order.index(after) + 1
        if index == len(order):
            raise DefinitionError(
                f"@background(after={after!r}) on {where}: {after!r} is its last step, so "
                "nothing would be left for the worker; drop @background, or hand off earlier",
                reactor=where,
            )
        handoff = order[index]
    elif before is not None:
        handoff = before
    else:
        handoff = order[0] if order else None
    setattr(cls, HANDOFF_ATTRIBUTE, handoff or "")
    if namespace is not None:
        setattr(cls, NAMESPACE_ATTRIBUTE, namespace)
    return cls
