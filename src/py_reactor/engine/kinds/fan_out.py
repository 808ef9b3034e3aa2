"""A map step's elements as executions of their own: ``map_step(..., fan_out=True)``.

Each element is dispatched exactly as an ``async_reactor`` unit is (``engine.async_units``): an
execution of its own, run by a worker (the thread worker, or Celery), whose id is derived from
the run's id and ``"<step>[<i>]"`` (so a run that dispatches again after a crash sends nothing
twice) and which takes its own coordination under its own owner (that id). The elements go
through the one scheduler (``engine.scheduler``) as a plain reactor's steps do, in index order,
each launched by dispatching it: at most ``batch_size`` dispatched and not yet known to have
ended. When that window is full (or everything is dispatched) the scheduler waits for the oldest
element still in flight, through the same wait a reader of an async unit does: in the caller
a blocking wait (``async_wait_timeout``); in a worker a short grace, then it *parks* on it
(primitive ``"async_unit"``), giving the thread back, and the element's end wakes it.

What was dispatched and what ended lives in the run's ``context.fan_out[<step>]`` (a
``FanOutWindow``), so a run that parked and resumes (possibly in another process) neither
dispatches an element again nor loses one: elements ``[0, sent)`` were dispatched, those below
``low`` have ended (a completed one's context is in ``context.children["<step>[<i>]"]``, as the
in-process map keeps it, so rollback undoes it highest index first; a failed one compensated
itself in its own job, and only its error text is kept).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from py_reactor.coordination.holds import HELD
from py_reactor.dsl.declaration import StepDeclaration, StepKind
from py_reactor.dsl.map import MapResult
from py_reactor.dsl.reactor import Reactor
from py_reactor.dsl.registry import class_path
from py_reactor.dsl.signals import Failure, Halt, Success
from py_reactor.engine.answers import Parked, StepFailure
from py_reactor.engine.async_units import (
    _exclusive,
    _exclusive_keys,
    _wait,
    holder_of,
    unit_id,
)
from py_reactor.engine.context import Context, element_key
from py_reactor.engine.results import nested_failure
from py_reactor.engine.run import Run
from py_reactor.engine.scheduler import Scheduler
from py_reactor.engine.state import FanOutStop, FanOutWindow, UnitOrigin
from py_reactor.errors import (
    ArgumentResolutionError,
    CoordinationError,
    DispatchError,
    HandoffRefusedError,
    InputValidationError,
    ReactorError,
)
from py_reactor.observability import events as ev
from py_reactor.states import Status, TraceKind

if TYPE_CHECKING:
    from py_reactor.engine.results import Outcome

__all__ = ["FanOut", "element_id"]


def element_id(context: Context, key: str) -> str:
    """The execution id of the element kept at ``children[key]`` (``"<step>[<i>]"``): derived,
    so the same for the same run and element in every process."""
    return unit_id(context, key)


class FanOut(Scheduler[int]):
    """One map step's elements, fanned out as worker jobs, in one run (fresh or resumed), on
    the one scheduler: an element is launched by dispatching it, at most ``batch_size`` are in
    flight, they start and settle in index order, and waiting for them means waiting for the
    oldest (which in a worker may park the run).

    ``inputs_of(element)`` gives the child's inputs for one element (the step's resolved
    wiring, ``Element`` read from it). After :meth:`run_elements`, ``child`` is the failed element's
    own failure outcome when the step failed on one (``fail_fast``).
    """

    def __init__(
        self,
        run: Run,
        name: str,
        decl: StepDeclaration,
        elements: list[Any],
        inputs_of: Callable[[Any], dict[str, Any]],
    ) -> None:
        self.run = run
        self.name = name
        self.decl = decl
        self.elements = elements
        self.inputs_of = inputs_of
        self.limit = decl.batch_size
        self.state = FanOutWindow(count=len(elements))
        self.child: Outcome | None = None
        self._failure: Outcome | None = None  # the stopping element's outcome, if seen here
        self._refusal: ReactorError | None = None  # a dispatch the store refused, if here

    def run_elements(self) -> Success | Failure | Halt | Parked:
        """Dispatch and wait for the elements until all ended (or one stopped the step); a
        :class:`Parked` when the run parks on the oldest element in flight (in a worker)."""
        context = self.run.context
        state = context.fan_out.get(self.name)
        count = len(self.elements)
        if state is None:
            refused = self._before_any_dispatch()
            if refused is not None:
                self._forget()
                return Failure(refused, retryable=False)
            state = context.fan_out[self.name] = FanOutWindow(count=count)
        elif state.count != count:
            self._forget()
            return Failure(self._changed(state.count, count), retryable=False)
        self.state = state
        self.stopping = state.stop is not None  # an element failed, halted or was refused
        stopped = self.schedule(list(range(state.sent, count)))
        if isinstance(stopped, Parked):
            return stopped
        if isinstance(stopped, StepFailure):  # waited (or parked) too long for the element
            context.unit_waits.pop(self._key(state.low), None)
            self._forget()
            self.run.rollback_failures.extend(state.rollback_failures)
            return Failure(stopped.error, retryable=False)
        return self._finish(state)

    # -- the scheduler's hooks (``engine.scheduler``) ----------------------------------------

    def in_flight(self) -> int:
        return self.state.sent - self.state.low

    def launch(self, item: int) -> None:
        self._dispatch(self.state)
        self.stopping = self.state.stop is not None  # it could not be dispatched

    def ended(self) -> list[tuple[int, object]] | object:
        """The elements at the front of the window that have ended, without waiting; if none
        has, the oldest one's end waited for: an outcome, or a park (in a worker) or a
        timeout's failure, which stop the walk here."""
        state = self.state
        front: list[tuple[int, object]] = []
        for index in range(state.low, state.sent):
            outcome = self.run.units.wait(self._id(index), 0)
            if outcome is None:
                break
            front.append((index, outcome))
        if front:
            return front
        index = state.low
        outcome = _wait(self.run, self._key(index), self._id(index), self.name, True, report=False)
        if isinstance(outcome, Parked | StepFailure):
            return outcome
        return [(index, outcome)]

    def settle(self, item: int, answer: object) -> None:
        """Take the oldest element in flight's outcome into the run (it has ended)."""
        state, ended, index = self.state, cast("Outcome", answer), item
        key = self._key(index)
        if ended.status == Status.COMPLETED:
            self.run.context.children[key] = ended.context  # undone with the run's rollback
        elif ended.status == Status.HALTED:
            if state.stop is None:
                reason = str(getattr(ended, "reason", "halted"))
                state.stop = FanOutStop(index=index, how="halted", reason=reason)
        else:  # failed, aborted, cancelled: it compensated itself (or never ran) in its job
            state.failed[index] = str(ended.error)
            state.rollback_failures.extend(  # reported when the step ends
                nested_failure(key, f) for f in getattr(ended, "rollback_failures", ())
            )
            if self.decl.mode != "collect" and state.stop is None:
                state.stop = FanOutStop(index=index, how="failed")
                self._failure = ended
        state.low = index + 1
        self.stopping = state.stop is not None

    def _dispatch(self, state: FanOutWindow) -> None:
        """Dispatch the next element in index order (or stop the step if it cannot be sent)."""
        run, context = self.run, self.run.context
        index = state.sent
        key = self._key(index)
        started = time.time()
        child_cls: type[Reactor] = self.decl.target
        try:
            inputs = self.inputs_of(self.elements[index])
        except ArgumentResolutionError as exc:  # resolved before anything was dispatched
            state.stop = FanOutStop(index=index, how="refused", error=str(exc))
            self._refusal = exc
            return
        element = Context(
            reactor=class_path(child_cls),
            inputs=inputs,
            execution_id=self._id(index),
            parent_id=context.execution_id,
            unit_of=UnitOrigin(
                reactor=context.reactor,
                step=self.name,
                execution=context.execution_id,
                element=index,
            ),
        )
        try:
            self.run.units.dispatch(child_cls, element)
        except ReactorError as exc:  # not stored, not sent: no more elements go out
            state.stop = FanOutStop(index=index, how="refused", error=str(exc))
            self._refusal = exc
            return
        state.sent = index + 1
        run.record(TraceKind.DISPATCHED, key, started, execution_id=element.execution_id)
        run.emit(ev.UnitDispatched, key, unit_execution_id=element.execution_id)

    def _finish(self, state: FanOutWindow) -> Success | Failure | Halt:
        """Every element dispatched has ended: the step's value, or why it failed or halted."""
        self._forget()
        # the failed elements' own, kept across parks
        self.run.rollback_failures.extend(state.rollback_failures)
        stop = state.stop
        if stop is not None and stop.how == "failed":
            ended = self._failure or self.run.units.wait(self._id(stop.index), 0)
            if ended is None:  # pragma: no cover - it ended when it was settled
                return Failure(state.failed[stop.index], retryable=False)
            self.child = ended
            return Failure(ended.error, retryable=False)
        if stop is not None and stop.how == "halted":
            return Halt(stop.reason or "halted")
        if stop is not None:  # a dispatch was refused: the elements sent before it ended
            return Failure(self._refusal or DispatchError(stop.error or ""), retryable=False)
        child_cls: type[Reactor] = self.decl.target
        returns = child_cls.returns
        done: dict[int, Any] = {}
        failed: dict[int, str] = {}
        for index in range(state.count):
            text = state.failed.get(index)
            if text is not None:
                failed[index] = text
                continue
            child = self.run.context.children.get(self._key(index))
            done[index] = child.results.get(returns) if child is not None and returns else None
        ordered = [done.get(i) for i in range(state.count)]
        if self.decl.mode != "collect":
            return Success(ordered)

        return Success(MapResult(values=ordered, successes=done, failures=failed))

    # -- before anything is dispatched --------------------------------------------------------

    def _before_any_dispatch(self) -> ReactorError | None:
        """Why no element may be dispatched at all, or None: an element's inputs cannot be
        resolved, a key function fails, or the hand-off deadlock guard refuses an element."""
        inputs: list[dict[str, Any]] = []
        for element in self.elements:
            try:
                inputs.append(self.inputs_of(element))
            except ArgumentResolutionError as exc:
                return exc
        try:
            self._guard(inputs)
        except CoordinationError as exc:  # HandoffRefusedError, CoordinationKeyError
            return exc
        return None

    def _guard(self, inputs: list[dict[str, Any]]) -> None:
        """Refuse the fan-out if an element would take an exclusive lock (or a limit-1
        semaphore) on a key this execution holds: the element, under an owner of its own,
        would wait for the key while this execution waits for the element.

        Raises:
            HandoffRefusedError: the collision, naming the element, the key and the remedy.
            CoordinationKeyError: a key function of the child raised, or returned nothing.
        """
        run = self.run
        child_cls: type[Reactor] = self.decl.target
        if not _declares_exclusive(child_cls):
            return
        as_unit = StepDeclaration(
            StepKind.REACTOR, child_cls, contract=child_cls.__py_reactor_contract__
        )
        held = {(r.primitive, r.key): r for r in run.context.holds if r.state == HELD}
        contract = child_cls.__py_reactor_contract__
        for index, raw in enumerate(inputs):
            key = self._key(index)
            try:
                values = contract.validate(raw, reactor=child_cls.__py_reactor_name__)
            except InputValidationError:
                continue  # the element fails in its own job, as it would run in place
            for primitive, coordination_key, declared_by in _exclusive_keys(
                run, key, as_unit, values
            ):
                record = held.get((primitive, coordination_key))
                if record is None:
                    continue
                holder = holder_of(record)
                who = (
                    f"{child_cls.__qualname__}'s {declared_by[len('its ') :]}"
                    if declared_by.startswith("its ")
                    else f"{child_cls.__qualname__} (reactor-level)"
                )
                message = (
                    f"reactor {run.reactor_name}, step {self.name!r} (map_step with "
                    f"fan_out=True): refused to dispatch element {index}: {who} declares a "
                    f"{primitive} on {coordination_key!r}, which {holder} already holds (owner "
                    f"{record.owner}). Each element runs as its own execution, under an owner "
                    f"of its own, so it would wait for that key while this execution waits "
                    f"for the element. Take the {primitive} inside the element only (drop it "
                    f"where it is held now), or leave fan_out out (the elements then run in "
                    f"this execution and re-enter its holds). Nothing was dispatched"
                )
                raise HandoffRefusedError(
                    message,
                    primitive=primitive,
                    key=coordination_key,
                    holder=holder,
                    reactor=run.reactor_name,
                    step=self.name,
                )

    # -- small helpers ----------------------------------------------------------------------

    def _key(self, index: int) -> str:
        return element_key(self.name, index)

    def _id(self, index: int) -> str:
        return element_id(self.run.context, self._key(index))

    def _forget(self) -> None:
        """Drop this step's bookkeeping (it ended, or failed before dispatching anything)."""
        self.run.context.fan_out.pop(self.name, None)

    def _changed(self, before: int, now: int) -> ArgumentResolutionError:
        return ArgumentResolutionError(
            f"reactor {self.run.reactor_name}, step {self.name!r} (map_step with fan_out=True): "
            f"its source gave {before} element(s) when the step started and {now} when it "
            "resumed; a fanned-out map's source must give the same elements each time it is "
            "read (use Input(...) or Result(...), or a function of the inputs that does not "
            "change)",
            reactor=self.run.reactor_name,
            step=self.name,
        )


def _declares_exclusive(child: type[Reactor]) -> bool:
    """Whether ``child`` (or one of its steps) declares a lock or a limit-1 semaphore."""
    if any(_exclusive(p, d) for p, d in child.coordination.items()):
        return True
    return any(
        _exclusive(p, d)
        for plan in child.__py_reactor_plan__.values()
        for p, d in plan.declaration.coordination.items()
    )
