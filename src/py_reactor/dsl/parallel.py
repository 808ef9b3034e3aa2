"""``@parallel``: run a reactor's independent ready steps at the same time, on threads.

Opt-in per reactor class, because it changes what a step may assume: with ``@parallel`` two
steps that do not depend on each other (neither reads the other's ``Result`` nor waits for it)
may run at once, each in a thread of its own. ``@parallel(max_branches=4)`` caps how many run at
once (default 8). The engine reads the cap from ``__py_reactor_parallel__``; subclasses inherit
it, and may declare their own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

from py_reactor.dsl.reactor import Reactor
from py_reactor.errors import DefinitionError

__all__ = ["DEFAULT_MAX_BRANCHES", "PARALLEL_ATTRIBUTE", "parallel"]

#: On a ``@parallel`` reactor: how many of its steps may run at once.
PARALLEL_ATTRIBUTE = "__py_reactor_parallel__"

#: ``max_branches`` when ``@parallel`` is used bare.
DEFAULT_MAX_BRANCHES = 8

R = TypeVar("R", bound=type[Reactor])


@overload
def parallel(cls: R, /, *, max_branches: int = DEFAULT_MAX_BRANCHES) -> R: ...
@overload
def parallel(*, max_branches: int = DEFAULT_MAX_BRANCHES) -> Callable[[R], R]: ...


def parallel(cls: Any = None, /, *, max_branches: Any = DEFAULT_MAX_BRANCHES) -> Any:
    """Run the reactor's independent ready steps concurrently, at most ``max_branches`` at once.

    ``@parallel``, ``@parallel(max_branches=4)``, or ``parallel(SomeReactor, max_branches=4)``.

    Raises:
        DefinitionError: ``max_branches`` is not an integer >= 1, the target is not a Reactor
            subclass, or the class already declares ``@parallel`` itself.
    """
    if cls is not None:
        return _apply(cls, max_branches)
    _check(max_branches, None)
    return lambda target: _apply(target, max_branches)


def _check(max_branches: Any, reactor: str | None) -> int:
    """``max_branches`` if it is an integer >= 1 (bools are not)."""
    if isinstance(max_branches, bool) or not isinstance(max_branches, int) or max_branches < 1:
        where = "@parallel" if reactor is None else f"@parallel on {reactor}"
        raise DefinitionError(
            f"{where}: max_branches must be an integer >= 1 (how many steps of one run may run "
            f"at once), got {max_branches!r}",
            reactor=reactor,
        )
    return max_branches


def _apply(cls: Any, max_branches: Any) -> Any:
    if not (isinstance(cls, type) and issubclass(cls, Reactor)):
        raise DefinitionError(
            f"@parallel decorates a Reactor subclass, got {cls!r}; a step runs in one thread "
            "(declare @parallel on the reactor whose steps should run at once)"
        )
    where = cls.__qualname__
    limit = _check(max_branches, where)
    if PARALLEL_ATTRIBUTE in cls.__dict__:
        raise DefinitionError(
            f"@parallel on {where}: it is already declared parallel (max_branches="
            f"{cls.__dict__[PARALLEL_ATTRIBUTE]}); keep one @parallel",
            reactor=where,
        )
    setattr(cls, PARALLEL_ATTRIBUTE, limit)
    return cls
