"""``map_step(Child, source=..., **wiring)``: run a reactor once per element of a list.

The child's inputs are wired as for ``compose``, with ``Element("<map step>")`` for the current
element; the step's value is the children's values in element order (``mode="fail_fast"``), or
a :class:`MapResult` of successes and failures by index (``mode="collect"``). By default the
elements run one after the other in the run's own process or worker; each takes its own steps'
coordination and parks through the same path as any step. With ``fan_out=True`` each element
is an execution of its own (a worker job, as an ``async_reactor`` is), at most ``batch_size``
of them in flight at once (``engine._fan_out``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from py_reactor.dsl.declaration import StepDeclaration, StepKind
from py_reactor.dsl.reactor import Reactor
from py_reactor.dsl.sources import Input, Result
from py_reactor.dsl.step import normalize_wait_for, normalize_wiring
from py_reactor.errors import DefinitionError

__all__ = ["MODES", "MapResult", "fans_out", "map_step"]

#: What a map step does with a failing element.
MODES = ("fail_fast", "collect")


def fans_out(declaration: StepDeclaration) -> bool:
    """Whether the map step ``declaration`` runs each element as a worker job of its own."""
    return declaration.fan_out


class MapResult(dict[str, Any]):
    """What a ``mode="collect"`` map step returns: a mapping (so it is stored as JSON and read
    back the same) with ``values`` (one per element, None where it failed), ``successes``
    (index -> value) and ``failures`` (index -> error text). Indexes are strings once stored."""

    @property
    def values(self) -> list[Any]:  # type: ignore[override]
        """One value per element, in element order (None for a failed one)."""
        found: list[Any] = self["values"]
        return found

    @property
    def successes(self) -> dict[Any, Any]:
        """The value of each element that succeeded, by index."""
        found: dict[Any, Any] = self["successes"]
        return found

    @property
    def failures(self) -> dict[Any, str]:
        """The error of each element that failed, by index."""
        found: dict[Any, str] = self["failures"]
        return found


def map_step(
    reactor: type[Reactor],
    /,
    *,
    source: Input | Result | Callable[[Mapping[str, Any]], Iterable[Any]],
    mode: str = "fail_fast",
    fan_out: bool = False,
    batch_size: int = 50,
    wait_for: Iterable[str] | str | None = None,
    **wiring: Any,
) -> StepDeclaration:
    """Declare a step that runs ``reactor`` once per element of ``source``.

    Args:
        source: ``Input("items")``, ``Result("step")``, or a function of the reactor's inputs
            returning the elements.
        mode: ``"fail_fast"`` (default): the first failing element fails the step (the elements
            done before it are undone, highest index first); ``"collect"``: every element
            runs, and the step's value is a :class:`MapResult`.
        fan_out: each element as an execution of its own, run by a worker (the thread worker,
            or Celery with ``configure(worker="celery")``) and taking its own coordination
            under its own owner; ``reactor`` must then be defined at module level.
        batch_size: with ``fan_out``, the most elements dispatched and not yet ended at once.
        wiring: the child's inputs, as for ``compose``; ``Element(<this step>)`` is the element.

    Raises:
        DefinitionError: a bad option, ``reactor`` is not a Reactor subclass, or (with
            ``fan_out``) it is defined inside a function, where no worker can import it.
    """
    owner = f"map_step({getattr(reactor, '__qualname__', reactor)!r})"
    if not (isinstance(reactor, type) and issubclass(reactor, Reactor)):
        raise DefinitionError(f"{owner}: expected a Reactor subclass, got {reactor!r}")
    if not (isinstance(source, Input | Result) or callable(source)):
        raise DefinitionError(
            f"{owner}: source= takes Input('items'), Result('step') or a function of the "
            f"reactor's inputs returning the elements, got {source!r}"
        )
    if mode not in MODES:
        raise DefinitionError(f"{owner}: mode= takes 'fail_fast' or 'collect', got {mode!r}")
    if not isinstance(fan_out, bool):
        raise DefinitionError(f"{owner}: fan_out= takes True or False, got {fan_out!r}")
    if fan_out and "<locals>" in reactor.__qualname__:
        raise DefinitionError(
            f"{owner}: fan_out=True runs each element as a worker job of its own, and a worker "
            f"imports the child reactor by module:qualname, but {reactor.__qualname__} is "
            "defined inside a function; define it at module level, or leave fan_out out (the "
            "elements then run one after the other in the run's own process or worker)"
        )
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise DefinitionError(f"{owner}: batch_size= takes a whole number >= 1, got {batch_size!r}")
    declaration = StepDeclaration(
        StepKind.MAP,
        reactor,
        contract=reactor.__py_reactor_contract__,
        wiring=normalize_wiring(owner, wiring),
        wait_for=normalize_wait_for(owner, wait_for),
    )
    declaration.items = source
    declaration.mode = mode
    declaration.batch_size = batch_size
    declaration.fan_out = fan_out
    return declaration
