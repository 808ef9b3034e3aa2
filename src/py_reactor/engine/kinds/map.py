"""A map step: its child reactor once per element.

In place (the default), one after the other, each as a nested run of the step (same root id,
``Run.nest``), so an element that parks parks the run and resumes where it stopped; elements
that ended are not run again. With ``fan_out=True``, each element as an execution of its own,
in a worker job (``engine._fan_out``). A failed map's compensate undoes the elements done
before the failure (rollback does it: ``compensation.undo_elements``).
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
from py_reactor.engine._fan_out import FanOut
from py_reactor.engine.context import Status, element_key
from py_reactor.engine.kinds.compose import RESUMES, NestedUnit, ended_as
from py_reactor.engine.resolve import read_source
from py_reactor.engine.results import nested_failure

__all__ = ["MapUnit"]


class MapUnit(NestedUnit):
    """Runs a map step's child reactor once per element (see the module); ``child`` is the
    failing element's outcome (``fail_fast``)."""

    __slots__ = ()

    def run(self) -> Any:
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
            fan = FanOut(run, self.name, self.decl, list(items), self._inputs_of)
            fanned = fan.run_elements()
            self.child = fan.child
            return fanned
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
                failed[index] = child.map_error or "failed"
                continue
            if child is None or child.status not in RESUMES:
                child = context.child(class_path(child_cls), self._inputs_of(element))
                context.children[key] = child
            outcome = run.nest(child_cls, child, key, validated=False)
            signal = ended_as(outcome)
            if isinstance(signal, Success):
                done[index] = signal.value
                continue
            if signal is not None:  # parked, paused or halted: the step answers the same
                return signal
            for failure in getattr(outcome, "rollback_failures", ()):
                run.rollback_failures.append(nested_failure(key, failure))
            if not collect:
                self.child = outcome
                return Failure(outcome.error, retryable=getattr(outcome, "retryable", False))
            failed[index] = str(outcome.error)
            child.map_error = failed[index]
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
