"""A map step: its child reactor once per element.

Either way the elements go through the one scheduler (``engine.scheduler``), in index order.
In place (the default), one after the other, each run here as a nested run of the step (same
root id, ``Run.nest``), so an element that parks parks the run and resumes where it stopped;
elements that ended are not run again. With ``fan_out=True``, each element as an execution of
its own, in a worker job, ``batch_size`` at once (``engine.kinds.fan_out``). A failed map's
compensate undoes the elements done before the failure (rollback: ``compensation.undo_elements``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from py_reactor.dsl.map import MapResult, fans_out
from py_reactor.dsl.reactor import ITEMS
from py_reactor.dsl.registry import class_path
from py_reactor.dsl.signals import Failure, Success
from py_reactor.dsl.sources import Element
from py_reactor.engine.context import Context, Status, element_key
from py_reactor.engine.kinds.compose import RESUMES, NestedUnit, ended_as
from py_reactor.engine.kinds.fan_out import FanOut
from py_reactor.engine.resolve import read_source
from py_reactor.engine.results import nested_failure
from py_reactor.engine.scheduler import Scheduler

__all__ = ["InPlace", "MapUnit"]


class MapUnit(NestedUnit):
    """Runs a map step's child reactor once per element (see the module); ``child`` is the
    failing element's outcome (``fail_fast``)."""

    __slots__ = ()

    def run(self) -> Any:
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
            fan = FanOut(run, self.name, self.decl, list(items), self.inputs_of)
            fanned = fan.run_elements()
            self.child = fan.child
            return fanned
        return InPlace(self, list(items)).run_elements()

    def inputs_of(self, element: Any) -> dict[str, Any]:
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


class InPlace(Scheduler[int]):
    """A map step's elements in this execution, on the one scheduler: one at a time, in index
    order, each run here as a nested run of the step; an element that ended before (the run
    parked on a later one and resumed) is not run again."""

    all_here = True

    def __init__(self, unit: MapUnit, elements: list[Any]) -> None:
        self.unit = unit
        self.elements = elements
        self.collect = unit.decl.mode == "collect"
        self.done: dict[int, Any] = {}
        self.failed: dict[int, str] = {}
        self.stop: Any = None  # what the step answers when an element stopped it

    def run_elements(self) -> Any:
        """The step's value, or what stopped it: a failure, a halt, a park or a pause."""
        self.schedule(list(range(len(self.elements))))
        if self.stop is not None:
            return self.stop
        count = len(self.done) + len(self.failed)
        ordered = [self.done.get(i) for i in range(count)]
        if not self.collect:
            return Success(ordered)
        return Success(MapResult(values=ordered, successes=self.done, failures=self.failed))

    # -- the scheduler's hooks (``engine.scheduler``) ----------------------------------------

    def in_flight(self) -> int:
        return 0  # every element runs here, to its end

    def run_here(self, item: int) -> Any:
        """Element ``item``'s child run: carried on where it stopped, or started; its outcome
        (or the context it ended with before, when it needs no more running)."""
        unit, run = self.unit, self.unit.parent
        context, child_cls = run.context, unit.decl.target
        key = element_key(unit.name, item)
        child = context.children.get(key)
        if child is not None and child.status is Status.COMPLETED:
            return child
        if child is not None and child.status is Status.FAILED and self.collect:
            return child
        if child is None or child.status not in RESUMES:
            child = context.child(class_path(child_cls), unit.inputs_of(self.elements[item]))
            context.children[key] = child
        return run.nest(child_cls, child, key, validated=False)

    def settle(self, item: int, answer: Any) -> None:
        """Count the element done or failed, or stop the step (a park, a pause, a halt, or a
        failure without ``collect``)."""
        unit, returns = self.unit, self.unit.decl.target.returns
        if isinstance(answer, Context):  # ended before this run: read, not run again
            if answer.status is Status.COMPLETED:
                self.done[item] = answer.results.get(returns) if returns else None
            else:
                self.failed[item] = answer.map_error or "failed"
            return
        signal = ended_as(answer)
        if isinstance(signal, Success):
            self.done[item] = signal.value
            return
        if signal is not None:  # parked, paused or halted: the step answers the same
            self.stop, self.stopping = signal, True
            return
        key = element_key(unit.name, item)
        for failure in getattr(answer, "rollback_failures", ()):
            unit.parent.rollback_failures.append(nested_failure(key, failure))
        if not self.collect:
            unit.child = answer
            self.stop = Failure(answer.error, retryable=getattr(answer, "retryable", False))
            self.stopping = True
            return
        self.failed[item] = str(answer.error)
        unit.parent.context.children[key].map_error = self.failed[item]
