"""The state of one execution, everything a resume needs: inputs, results, trace, bookkeeping.

The executor reads and writes only this object, so an execution can stop in one process and
carry on in another from its JSON form (see ``engine.serializer``).
"""

from __future__ import annotations

import contextlib
import uuid
import warnings
from collections.abc import Callable, Coroutine, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from py_reactor.aio import here
from py_reactor.coordination.holds import Ledger
from py_reactor.coordination.owner import (
    HeldBy,
    bind_held_by,
    bind_owner,
    running_held_by,
    running_owner,
    unbind_held_by,
    unbind_owner,
)
from py_reactor.engine.state import (
    FanOutWindow,
    InterruptPause,
    UnitOrigin,
    UnitRef,
    UnitWait,
    legacy_private,
)
from py_reactor.states import Status

__all__ = [
    "Context",
    "Status",
    "carried",
    "carried_coroutine",
    "element_key",
    "new_id",
    "running",
    "running_context",
]

P = ParamSpec("P")
T = TypeVar("T")


def new_id() -> str:
    """A fresh execution id."""
    return uuid.uuid4().hex


# The context of the execution running in this thread, and that thread (see ``running``).
_running: ContextVar[tuple[Context, tuple[int, object]] | None] = ContextVar(
    "py_reactor_context", default=None
)


def running_context() -> Context | None:
    """The context of the execution running in this thread, if any.

    A reactor run or a step invocation started from inside it (a step body calling
    ``Child.run()`` or ``X.invoke()``) becomes part of that execution: same root id, so it
    re-enters the execution's holds. Another thread never does, even with a copied context.
    """
    current = _running.get()
    if current is None or current[1] != here():
        return None
    return current[0]


def carried(fn: Callable[P, T]) -> Callable[P, T]:
    """``fn``, to be called in another thread as part of the execution running here (a plain
    step body a run on an event loop hands to a thread): there it reads this execution as
    running, and its holds as this execution's. ``fn`` itself when none runs here."""
    current = _running.get()
    if current is None or current[1] != here():
        return fn
    context, owner, by = current[0], running_owner(), running_held_by()

    def in_thread(*args: P.args, **kwargs: P.kwargs) -> T:
        with running(context, owner=owner), holds_taken_by(by):
            return fn(*args, **kwargs)

    return in_thread


def carried_coroutine(coroutine: Coroutine[Any, Any, T]) -> Coroutine[Any, Any, T]:
    """``coroutine`` (an ``async def`` body), to be awaited by another task as part of the
    execution running here (a body run on a loop of its own, outside any loop of the run's):
    there it reads this execution as running, and its holds as this execution's."""
    current = _running.get()
    if current is None or current[1] != here():
        return coroutine
    context, owner, by = current[0], running_owner(), running_held_by()

    async def in_task() -> T:
        with running(context, owner=owner), holds_taken_by(by):
            return await coroutine

    return in_task()


@contextlib.contextmanager
def holds_taken_by(by: HeldBy | None) -> Iterator[None]:
    """Name ``by`` in the holds taken in this thread for the block (nothing if None)."""
    if by is None:
        yield
        return
    token = bind_held_by(by)
    try:
        yield
    finally:
        unbind_held_by(token)


@contextlib.contextmanager
def running(context: Context, *, owner: str | None = None) -> Iterator[None]:
    """Run the block as ``context``'s execution in this thread.

    Holds taken in it belong to ``owner`` if given, else to the owner of the execution this
    thread is already running (a nested run joins it), else to ``context.root_id``.
    """
    bound = bind_owner(owner or running_owner() or context.root_id, context.holds)
    token = _running.set((context, here()))
    try:
        yield
    finally:
        _running.reset(token)
        unbind_owner(bound)


@dataclass(eq=False, slots=True)
class Context:
    """One execution's state.

    Attributes:
        reactor: ``module:qualname`` of the reactor (or step) being run.
        inputs: the validated inputs (raw ones until validation).
        execution_id: this execution; ``root_id`` the outermost execution of the tree, which
            owns every coordination hold taken inside it; ``parent_id`` the execution this one
            is nested in (composed, or run or invoked from one of its steps).
        results: each finished step's value (skipped steps included).
        arguments: the validated arguments each finished step ran with (what undo needs).
        completed: names of steps that succeeded and can be undone, oldest first.
        trace: one entry per thing that happened (run, skip, retry, failure, compensate, undo).
        children: contexts of composed child reactors, by step name.
        holds: the ledger of what the execution tree holds (one per tree: a child shares its
            root's), as records a process that loads this context can extend, adopt or release.
        attempts: attempts already made by a step whose retry is waiting in a worker.
        parks: how many times this execution parked on contention, in all.
        step_parks: parks on contention per dotted step path (``""``: the root reactor's own
            coordination) since that step last got in; ``park_max_attempts`` caps each.

    Bookkeeping of the library's features (``engine.state``; kept for a resume):
        units: the async units this run dispatched, by step name.
        unit_waits: a worker run's waits on units (and fan-out elements), across its parks.
        deferred: a unit's inputs that read other units' results, ``{input: execution id}``.
        unit_of: where this unit (or fanned-out map element) was dispatched from, else None.
        interrupts: the interrupts reached and not yet resumed, by dotted step path.
        resumed: the payloads resumes brought, by step path, taken when the step is reached.
        paused_at: the step path the run is paused at now, else None.
        fan_out: the windows of fanned-out map steps in progress, by step name.
        map_error: the error text of a map element that failed in a ``collect`` map.
        retry_of: the execution this one retries (``Reactor.retry``), else None.
        carried: what middleware stores with a dispatched or parked execution (the trace
            context, say): JSON-safe, keys namespaced by the middleware (``"otel.…"``).
    """

    reactor: str
    inputs: dict[str, Any]
    execution_id: str = field(default_factory=new_id)
    root_id: str = ""
    parent_id: str | None = None
    status: Status = Status.PENDING
    results: dict[str, Any] = field(default_factory=dict)
    arguments: dict[str, dict[str, Any]] = field(default_factory=dict)
    completed: list[str] = field(default_factory=list)
    trace: list[dict[str, Any]] = field(default_factory=list)
    children: dict[str, Context] = field(default_factory=dict)
    holds: Ledger = field(default_factory=Ledger)
    attempts: dict[str, int] = field(default_factory=dict)
    parks: int = 0
    step_parks: dict[str, int] = field(default_factory=dict)
    units: dict[str, UnitRef] = field(default_factory=dict)
    unit_waits: dict[str, UnitWait] = field(default_factory=dict)
    deferred: dict[str, str] = field(default_factory=dict)
    unit_of: UnitOrigin | None = None
    interrupts: dict[str, InterruptPause] = field(default_factory=dict)
    resumed: dict[str, Any] = field(default_factory=dict)
    paused_at: str | None = None
    fan_out: dict[str, FanOutWindow] = field(default_factory=dict)
    map_error: str | None = None
    retry_of: str | None = None
    carried: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.root_id:
            self.root_id = self.execution_id

    @property
    def private(self) -> dict[str, Any]:
        """Deprecated: the bookkeeping fields in the shape of the old ``private`` dict.

        A read-only copy (``{"async_units": {name: {"id", "kind"}}, ...}``, what ``carried``
        holds at the top level); read the typed fields instead (``context.units[name].id``).
        """
        warnings.warn(
            "Context.private is deprecated: read the typed fields instead (context.units, "
            "unit_waits, deferred, unit_of, interrupts, resumed, paused_at, fan_out, map_error, "
            "retry_of, carried); it is a read-only copy",
            DeprecationWarning,
            stacklevel=2,
        )
        return legacy_private(
            units=self.units,
            unit_waits=self.unit_waits,
            deferred=self.deferred,
            unit_of=self.unit_of,
            interrupts=self.interrupts,
            resumed=self.resumed,
            paused_at=self.paused_at,
            fan_out=self.fan_out,
            map_error=self.map_error,
            retry_of=self.retry_of,
            carried=self.carried,
        )

    @property
    def held_keys(self) -> list[str]:
        """What the execution tree holds right now, one entry per hold (``"lock:<key>"``, ...).

        A view of ``holds``, shared by composed children and nested runs; empty when nothing
        is held.
        """
        return self.holds.held_keys

    def holder(self, step: str | None) -> str:
        """How the ledger names the scope of ``step`` (None: this reactor's own) here."""
        return f"{self.execution_id}:{step or ''}"

    def child(self, reactor: str, inputs: dict[str, Any]) -> Context:
        """A context for work nested in this execution: same root, this one as parent.

        The child shares this execution's ledger of holds, so holds taken anywhere in the tree
        are visible to all of it.
        """
        return Context(
            reactor=reactor,
            inputs=inputs,
            root_id=self.root_id,
            parent_id=self.execution_id,
            holds=self.holds,
        )

    def __repr__(self) -> str:
        return (
            f"<Context {self.reactor} id={self.execution_id} status={self.status.value} "
            f"steps_done={len(self.results)}>"
        )


def element_key(step: str, index: int) -> str:
    """Where a map step's element ``index`` keeps its context: ``children["<step>[<i>]"]``."""
    return f"{step}[{index}]"
