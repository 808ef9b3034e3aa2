"""The walk of every reactor: its steps on the one scheduler (``engine.scheduler``), in
dependency order, at most ``max_branches`` at once.

A plain reactor is the walk with ``max_branches=1``: each step runs in the scheduler's thread
against the execution's context, in the reactor's order (dependencies first), and nothing is
forked or merged. A ``@parallel`` reactor runs independent ready steps at once, each on a
thread. Either way the walk ends one way (``finish``): a failure rolls back, a halt, a pause or
a park ends the run, a hand-off in the caller dispatches it, else it completes.

A step is *ready* when every step it depends on has a result (an async unit it reads counts
once dispatched: the step waits for the unit itself). The scheduler — the thread that runs the
reactor — starts ready steps as *branches*, at most ``max_branches`` at once, and is the only
thread that writes the execution's context:

* a branch runs its step against a **branch context** of its own: a copy of what the step reads
  (inputs, results, arguments, the bookkeeping fields, the step's own composed children) sharing
  the tree's ledger of holds (which is thread-safe). When the branch ends, the scheduler merges
  what it wrote — results, arguments, ``completed`` (appended in the order branches *finish*),
  trace, children, attempts, bookkeeping (units, waits, windows, pauses...), parks — and
  checkpoints (in a worker);
* each branch works under an owner of its own, ``"<owner>/<step>"``, so the store keeps two
  siblings on one key apart like two executions, while the reactor's own holds (taken by the
  scheduler under the root id) are still re-entered (see ``coordination.scope``). Siblings that
  *declare* the same lock, limit-1 semaphore, ordered lock or period key are not even started
  together: the scheduler starts the second when the first has ended, as a sequential run
  would take them one after the other;
* async unit dispatches and interrupt steps run in the scheduler thread (they never block long);
  a unit is dispatched once no running branch holds a key (the hand-off guard refuses a unit
  that wants a key its execution holds, and a sibling's step-long hold is not such a key).

When a step fails, halts, pauses or parks, no new branch starts; the running ones finish their
step and are merged; then the run ends as a sequential one would. A failure wins over the rest
and rolls back: the steps that failed too are compensated (newest first), then the first failure
to be merged is the run's — compensated, and the completed steps undone newest-finished first.
A parked branch's step runs again when the parked run resumes; one that a failure or halt
overtook gives back what it kept.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import threading
from collections.abc import Mapping
from typing import Any

from py_reactor.aio import Branches
from py_reactor.coordination.holds import HELD, Ledger
from py_reactor.coordination.owner import branch_owner, encloses, running_owner
from py_reactor.coordination.scope import TAKER, compute_key
from py_reactor.dsl.declaration import StepDeclaration, StepKind
from py_reactor.dsl.parallel import PARALLEL_ATTRIBUTE
from py_reactor.dsl.reactor import Reactor, StepPlan
from py_reactor.engine.answers import Completed, Halted, Parked, Paused, SkippedStep, StepFailure
from py_reactor.engine.async_units import Sent, await_units
from py_reactor.engine.compensation import compensate_failed, rollback, undo_child, undo_elements
from py_reactor.engine.context import Context, Status, running
from py_reactor.engine.release import release_ledger
from py_reactor.engine.resolve import resolve_arguments
from py_reactor.engine.results import DispatchedResult, Outcome, ParkedResult, SuccessResult
from py_reactor.engine.run import Run
from py_reactor.engine.scheduler import Scheduler
from py_reactor.engine.state import BOOKKEEPING
from py_reactor.engine.stepping import after_step, check_storable, fail, run_one
from py_reactor.observability import events as ev

__all__ = ["walk"]

_MISSING: Any = object()

#: What a step answers when the walk goes on (a unit dispatched answers ``Sent``), and what
#: stops it short of a failure.
_GOES_ON = frozenset({Completed, SkippedStep, Sent})
_STOPS = (Halted, Paused, Parked)

#: Declared primitives that siblings on one key take one after the other (a wider semaphore
#: is shared by design, and a rate limit only counts).
_TAKEN_IN_TURN = ("lock", "ordered_lock", "period")


def walk(cls: type[Reactor], run: Run) -> Outcome:
    """Run every step of ``cls`` not yet done (``@parallel``: independent ready ones at once);
    roll back on failure. In a worker the context is checkpointed after every step; in the
    caller, with a hand-off, only the steps before the hand-off step run here."""
    walk = _Walk(cls, run)
    handoff = None if run.waiter.parks else run.handoff
    order = cls.__py_reactor_order__
    todo = list(order[: order.index(handoff)] if handoff in order else order)
    try:
        walk.drive(todo)
        return walk.finish(handoff)
    except BaseException:
        walk.abort()
        raise
    finally:
        walk.close()


@dataclasses.dataclass(frozen=True, slots=True)
class _Base:
    """What a branch context started from, to tell what the branch wrote."""

    results: dict[str, Any]
    arguments: dict[str, Any]
    completed: int
    trace: int
    books: dict[str, Any]  # the bookkeeping fields (``BOOKKEEPING``), deep copies
    children: dict[str, Context]
    attempts: dict[str, int]
    parks: int
    step_parks: dict[str, int]


@dataclasses.dataclass(eq=False, slots=True)
class _Branch:
    """One step running in a thread of its own, against its own context."""

    name: str
    owner: str
    run: Run
    base: _Base
    claims: frozenset[tuple[str, str]]
    root: Context | None = None  # the branch's copy of the execution's root, if not its context
    root_base: _Base | None = None
    result: object = None
    finished: int = 0  # the order branches finished in (1, 2, ...)


class _Walk(Scheduler[str]):
    """The steps of one run on the scheduler: runs them here or as branches, merges the
    branches, decides the end."""

    def __init__(self, cls: type[Reactor], run: Run) -> None:
        self.cls = cls
        self.run = run
        self.context = run.context
        self.plan: Mapping[str, StepPlan] = cls.__py_reactor_plan__
        self.limit = int(getattr(cls, PARALLEL_ATTRIBUTE, None) or 1)
        self.all_here = self.in_order = self.limit == 1  # a plain reactor: every step here
        self.checkpoint = run.waiter.checkpoint
        self.owner = running_owner() or run.context.root_id
        self.running: dict[Any, _Branch] = {}  # a future or a task (aio.Branches) per branch
        self.failures: list[StepFailure] = []
        self.stops: list[tuple[str, object]] = []  # (step, Halted | Paused | Parked)
        self._branches = Branches(self.limit, f"py-reactor-{run.reactor_name}")
        self._claimed: dict[str, frozenset[tuple[str, str]]] = {}
        self._order = itertools.count(1)
        self._order_guard = threading.Lock()

    # -- the scheduler's hooks (``engine.scheduler``) ----------------------------------------

    def drive(self, todo: list[str]) -> None:
        """Run the steps of ``todo`` not done yet until all are done or the walk stops."""
        self.schedule([name for name in todo if not self._done(name)])
        if self.pending and not self.stopping:  # a valid plan never gets here: say so, loudly
            raise RuntimeError(
                f"reactor {self.run.reactor_name}: steps {', '.join(self.pending)} never "
                "became ready in the parallel walk (their dependencies have no result)"
            )

    def in_flight(self) -> int:
        return len(self.running)

    def ready(self, item: str) -> bool:
        """Every step it depends on is done (a plain reactor's order has them done already);
        an async unit waits while a running branch holds a key (the hand-off guard would take
        a sibling's passing hold for the execution's own)."""
        plan = self.plan[item]
        if not all(self._done(dependency) for dependency in plan.depends_on):
            return False
        return not (plan.declaration.asynchronous and self.running and self._branches_hold())

    def here(self, item: str) -> bool:
        """A plain reactor runs every step here; a parallel one its async dispatches and
        interrupts (they never block long)."""
        decl = self.plan[item].declaration
        return decl.asynchronous or decl.kind is StepKind.INTERRUPT

    def admit(self, item: str) -> bool:
        """No running sibling declares a key the step takes in turn (it starts after)."""
        claims = self._claimed.get(item)
        if claims is None:  # its arguments are known and fixed once it is ready
            claims = self._claimed[item] = self._claims(self.plan[item])
        return not any(claims & branch.claims for branch in self.running.values())

    def run_here(self, item: str) -> object:
        return run_one(self.run, self.cls, self.plan[item])

    def launch(self, item: str) -> None:
        self._spawn(item, self._claimed[item])

    def ended(self) -> list[tuple[str, object]]:
        """The branches that ended, merged into the execution's context in the order they
        finished (a branch that raised — KeyboardInterrupt... — aborts the walk)."""
        done = self._branches.first_done(self.running)
        merged: list[tuple[str, object]] = []
        for future in sorted(done, key=lambda f: self.running[f].finished):
            branch = self.running.pop(future)
            future.result()
            self._merge(branch)
            merged.append((branch.name, branch.result))
        return merged

    def _done(self, name: str) -> bool:
        """Whether step ``name`` needs no more running: it has a result, or it is an async
        unit already dispatched (its readers wait for it)."""
        if name in self.context.results:
            return True
        return self.plan[name].declaration.asynchronous and name in self.context.units

    def _branches_hold(self) -> bool:
        """Whether a running branch holds a key now (its own, or inside the reactor's).

        An async unit is dispatched only when none does: the dispatch refuses a unit that
        wants a key the execution holds (it would deadlock on it), and a sibling's step-long
        hold is not one the unit would have to wait for forever.
        """
        for record in self.context.holds:
            if record.state != HELD:
                continue
            holder = record.data.get(TAKER) or record.owner
            if holder != self.owner and encloses(self.owner, holder):
                return True
        return False

    def _claims(self, plan: StepPlan) -> frozenset[tuple[str, str]]:
        """``(primitive, key)`` of what the step declares that siblings take in turn; empty
        when its keys cannot be known here (its branch meets the problem and reports it)."""
        decl = plan.declaration
        if decl.kind not in (StepKind.CLASS, StepKind.INLINE) or not decl.coordination:
            return frozenset()
        wanted = {
            primitive: declared
            for primitive, declared in decl.coordination.items()
            if primitive in _TAKEN_IN_TURN
            or (primitive == "semaphore" and getattr(declared, "limit", 0) == 1)
        }
        if not wanted:
            return frozenset()
        reactor, where = self.run.reactor_name, f"reactor {self.run.reactor_name}"
        try:
            args = resolve_arguments(plan, self.context, reactor)
            values = decl.contract.validate(args, reactor=reactor, step=plan.name)
            return frozenset(
                (primitive, compute_key(declared, values, f"{where}, step {plan.name!r}"))
                for primitive, declared in wanted.items()
            )
        except Exception:
            return frozenset()

    def _spawn(self, name: str, claims: frozenset[tuple[str, str]]) -> None:
        """Start step ``name`` as a branch, in a thread of the walk's pool."""
        run = self.run
        context, base = _fork(self.context, name)
        root: Context | None = None
        root_base: _Base | None = None
        if run.root is not run.context:  # a nested run: parks and pauses are traced up there
            root, root_base = _fork(run.root, None)
        branch_run = run.branch(context, root)
        branch = _Branch(
            name, branch_owner(self.owner, name), branch_run, base, claims, root, root_base
        )
        # The scheduler's context variables (a tracing span, say) carry over to the branch.
        self.running[self._branches.submit(self._branch, branch)] = branch

    def _branch(self, branch: _Branch) -> _Branch:
        """A branch thread: run the one step under the branch's own owner and context."""
        try:
            with running(branch.run.context, owner=branch.owner):
                branch.result = run_one(branch.run, self.cls, self.plan[branch.name])
        finally:
            with self._order_guard:
                branch.finished = next(self._order)
        return branch

    # -- merging ---------------------------------------------------------------------------

    def _merge(self, branch: _Branch) -> None:
        """Take what ``branch`` wrote into the execution's context (the scheduler's only)."""
        mine, base, main = branch.run.context, branch.base, self.context
        _merge_identity(main.results, base.results, mine.results)
        _merge_identity(main.arguments, base.arguments, mine.arguments)
        _merge_identity(main.children, base.children, mine.children)
        for name in mine.completed[base.completed :]:
            if name not in main.completed:  # two readers may take one async unit
                main.completed.append(name)
        main.trace.extend(mine.trace[base.trace :])
        _merge_books(main, base.books, mine)
        _merge_flat(main.attempts, base.attempts, mine.attempts)
        main.parks += mine.parks - base.parks
        _merge_flat(main.step_parks, base.step_parks, mine.step_parks)
        if branch.root is not None and branch.root_base is not None:
            root, root_base = self.run.root, branch.root_base
            root.trace.extend(branch.root.trace[root_base.trace :])
            _merge_books(root, root_base.books, branch.root)
            root.parks += branch.root.parks - root_base.parks
            _merge_flat(root.step_parks, root_base.step_parks, branch.root.step_parks)
        self.run.rollback_failures.extend(branch.run.rollback_failures)
        result = branch.result
        if isinstance(result, StepFailure):  # its compensate runs in the scheduler's run
            unit = result.unit
            if getattr(unit, "parent", None) is branch.run:
                unit.parent = self.run
            if getattr(unit, "context", None) is mine:
                unit.context = main

    def settle(self, item: str, answer: object) -> None:
        """Record how step ``item`` ended: go on (checkpointed in a worker), or stop."""
        if type(answer) in _GOES_ON and self.checkpoint is None:
            return  # the common case: nothing to store, nothing stops
        if isinstance(answer, StepFailure):
            self.failures.append(answer)
        elif isinstance(answer, _STOPS):
            self.stops.append((item, answer))
        else:
            ended = after_step(self.run, item, answer, self.checkpoint)
            if isinstance(ended, StepFailure):  # its result cannot be stored
                self.failures.append(ended)
            elif isinstance(ended, ParkedResult):  # the store is unreachable: suspend the run
                self.stops.append((item, ended.parked))
        self.stopping = bool(self.failures or self.stops)  # a step failed, halted, paused...

    # -- the end ---------------------------------------------------------------------------

    def finish(self, handoff: str | None) -> Outcome:
        """The run's outcome once no branch runs: rolled back, halted, paused, parked,
        dispatched (a hand-off in the caller) or completed."""
        run, context = self.run, self.context
        declarations = {n: p.declaration for n, p in self.plan.items()}
        if self.failures:
            return self._roll_back(declarations)
        for kind in (Halted, Paused, Parked):
            found = next(((n, r) for n, r in self.stops if isinstance(r, kind)), None)
            if found is None:
                continue
            if kind is Halted:  # terminal: a parked sibling will never come back for its keys
                for name, _ in self._parked():
                    self._give_back(name, undo=False)
            ended = after_step(run, found[0], found[1], None)
            assert isinstance(ended, Outcome)
            return ended
        if handoff is not None:
            unstorable = check_storable(run, None)
            if unstorable is not None:  # a worker could never pick it up: roll back here
                self.failures.append(unstorable)
                return self._roll_back(declarations)
            return DispatchedResult(context, finish=run.units.finish)  # the worker goes on
        if self.cls.returns is not None and self.cls.returns not in context.results:
            reading = await_units(run, (self.cls.returns,), None)  # an unread unit's value
            ended = after_step(run, self.cls.returns, reading, None)
            if isinstance(ended, StepFailure):
                self.failures.append(ended)
                return self._roll_back(declarations)
            if ended is not None:
                return ended
        context.status = Status.COMPLETED
        value = context.results.get(self.cls.returns) if self.cls.returns is not None else None
        run.emit(ev.ReactorCompleted, value=value)
        return SuccessResult(context, value)

    def _roll_back(self, declarations: Mapping[str, StepDeclaration]) -> Outcome:
        """Compensate every failed step (the others first, newest first), give back what
        parked siblings kept, then roll back for the first failure: its compensate, and the
        completed steps undone newest-finished first."""
        first, *others = self.failures
        self.context.status = Status.ROLLING_BACK
        for failure in reversed(others):
            compensate_failed(self.run, declarations, failure)
        for name, _ in self._parked():
            self._give_back(name, undo=True)
        rollback(self.run, declarations, first)
        return fail(self.run, first)

    def _parked(self) -> list[tuple[str, object]]:
        return [(name, result) for name, result in self.stops if isinstance(result, Parked)]

    def _give_back(self, name: str, *, undo: bool) -> None:
        """Release what parked step ``name`` (and the children it composed) kept for its
        resume, which will not come: the run ends here. With ``undo``, also undo what its
        composed child or map elements completed before it parked."""
        context = self.context
        holder = context.holder(name)
        inside = {
            child.execution_id
            for key, top in context.children.items()
            if key == name or key.startswith(f"{name}[")
            for child in _tree(top)
        }
        records = [
            r
            for r in context.holds
            if r.holder in (holder, f"{holder}/rollback") or r.holder.partition(":")[0] in inside
        ]
        if records:
            scratch = Context(
                reactor=context.reactor,
                inputs={},
                execution_id=context.execution_id,
                root_id=context.root_id,
                children=context.children,
                holds=Ledger(records),
            )
            release_ledger(self.cls, scratch)
            for record in records:
                context.holds.remove(record)
        decl = self.plan[name].declaration
        if undo and decl.kind is StepKind.REACTOR:
            undo_child(self.run, name, decl)
        elif undo and decl.kind is StepKind.MAP:
            undo_elements(self.run, name, decl)

    def abort(self) -> None:
        """The walk is interrupted (or raised): no rollback runs. Branches still running go on
        to the end of their step in their threads; what a failed one kept is given back then."""
        self.context.status = Status.ABORTED
        for failure in self.failures:
            failure.release_holds()  # interrupted before its rollback released them
        for future in self.running:
            future.add_done_callback(_release_late)
            self._branches.abandon(future)  # a task unwinds now; a thread ends its step
        self.running.clear()

    def close(self) -> None:
        """Let the pool's threads go (at once: every branch has been merged or abandoned)."""
        self._branches.close()


def _release_late(future: Any) -> None:
    """A branch that ended after its walk was aborted: release what its failure kept."""
    if future.cancelled() or future.exception() is not None:
        return
    result = future.result().result
    if isinstance(result, StepFailure):
        result.release_holds()


# -- branch contexts -------------------------------------------------------------------------


def _fork(context: Context, step: str | None) -> tuple[Context, _Base]:
    """A branch's own copy of ``context`` and what it started from. The children of ``step``
    (its composed child, its map elements) are copied too, as the branch writes them; the
    others are only read. The ledger is shared."""
    children = {
        key: _clone(child) if step is not None and _of(key, step) else child
        for key, child in context.children.items()
    }
    fork = Context(
        reactor=context.reactor,
        inputs=dict(context.inputs),
        execution_id=context.execution_id,
        root_id=context.root_id,
        parent_id=context.parent_id,
        status=context.status,
        results=dict(context.results),
        arguments=dict(context.arguments),
        completed=list(context.completed),
        trace=list(context.trace),
        children=children,
        holds=context.holds,
        attempts=dict(context.attempts),
        parks=context.parks,
        step_parks=dict(context.step_parks),
        **_books(context),
    )
    base = _Base(
        results=dict(context.results),
        arguments=dict(context.arguments),
        completed=len(context.completed),
        trace=len(context.trace),
        books=_books(context),
        children=dict(context.children),  # the originals: a copied child is always merged
        attempts=dict(context.attempts),
        parks=context.parks,
        step_parks=dict(context.step_parks),
    )
    return fork, base


def _of(key: str, step: str) -> bool:
    """Whether ``children[key]`` belongs to ``step`` (its composed child or a map element)."""
    return key == step or key.startswith(f"{step}[")


def _clone(context: Context) -> Context:
    """A full copy of a child context (and of its children), sharing the ledger."""
    return dataclasses.replace(
        context,
        inputs=dict(context.inputs),
        results=dict(context.results),
        arguments=dict(context.arguments),
        completed=list(context.completed),
        trace=list(context.trace),
        children={key: _clone(child) for key, child in context.children.items()},
        attempts=dict(context.attempts),
        **_books(context),
    )


def _tree(context: Context) -> list[Context]:
    """``context`` and every context nested in it."""
    found = [context]
    for child in context.children.values():
        found.extend(_tree(child))
    return found


def _books(context: Context) -> dict[str, Any]:
    """Deep copies of ``context``'s bookkeeping fields, by name (a branch writes its own)."""
    return {name: copy.deepcopy(getattr(context, name)) for name in BOOKKEEPING}


def _merge_books(target: Context, base: Mapping[str, Any], branch: Context) -> None:
    """Apply to ``target``'s bookkeeping what ``branch`` changed since ``base``: entry by entry
    in a mapping (two branches that each dispatch a unit, or each reach an interrupt, keep
    both); a scalar field (``paused_at``, ``unit_of``...) replaced when the branch changed it.
    ``carried`` is the middleware's: its mapping values are merged one level further down."""
    for name in BOOKKEEPING:
        old, new = base[name], getattr(branch, name)
        if name == "carried":
            _merge_nested(target.carried, old, new)
        elif isinstance(new, dict):
            _merge_flat(getattr(target, name), old, new)
        elif old != new:
            setattr(target, name, copy.deepcopy(new))


def _merge_identity(target: dict[str, Any], base: dict[str, Any], branch: dict[str, Any]) -> None:
    """Apply to ``target`` the keys ``branch`` set (a new object) or dropped since ``base``."""
    for key, value in branch.items():
        if base.get(key, _MISSING) is not value:
            target[key] = value
    for key in base.keys() - branch.keys():
        target.pop(key, None)


def _merge_flat(target: dict[str, Any], base: dict[str, Any], branch: dict[str, Any]) -> None:
    """Apply to ``target`` the keys whose value ``branch`` changed (or dropped) since ``base``."""
    for key in base.keys() | branch.keys():
        new = branch.get(key, _MISSING)
        if base.get(key, _MISSING) == new:
            continue
        if new is _MISSING:
            target.pop(key, None)
        else:
            target[key] = new


def _merge_nested(target: dict[str, Any], base: dict[str, Any], branch: dict[str, Any]) -> None:
    """``_merge_flat`` one level down for mappings (a middleware's entry of ``carried`` may be
    a mapping two branches each add to: both are kept). A mapping left empty is dropped."""
    for key in base.keys() | branch.keys():
        old, new, now = base.get(key, _MISSING), branch.get(key, _MISSING), target.get(key)
        if old == new:
            continue
        mappings = all(v is _MISSING or isinstance(v, dict) for v in (old, new))
        if mappings and (now is None or isinstance(now, dict)):
            merged = dict(now or {})
            _merge_flat(merged, {} if old is _MISSING else old, {} if new is _MISSING else new)
            if merged:
                target[key] = merged
            else:
                target.pop(key, None)
        elif new is _MISSING:
            target.pop(key, None)
        else:
            target[key] = new
