"""Randomized stress of step-level coordination: whatever the runs do, nothing stays held.

Each seed builds four reactors of 2-4 steps with ``type(...)`` and the decorators: Step
classes (some with a guard) and inline steps (declarations below or above ``@step``), each
declaring a random subset of ``with_lock``, ``with_semaphore``, ``with_rate_limit``,
``with_period`` and ``with_ordered_lock`` on keys drawn from small shared pools (a key given
as a constant or as a function of the step's arguments; waits mostly long, sometimes 20 ms),
some with ``@retries``; some reactors also compose a generated child reactor. Every run gives
each step a script drawn from the seed: its key function may raise or return None; its guard
allows or refuses; per attempt, its work returns a value, a retryable or final ``Failure``,
``Halt`` or ``Skipped``, raises, or runs a nested reactor / invokes a nested step re-declaring
keys it holds; its compensate and undo succeed, return a ``Failure``, raise, or nest the same
way. Eight threads run twelve executions each, all at once; some executions invoke one step
class alone instead of running a reactor.

Checked while the runs go: at most one thread inside a lock key's or an ordered-lock key's
work (and a lock's compensate/undo), at most ``limit`` inside a semaphore key's, and a step
that failed for good stays inside its keys until its compensate ends; the step's keys are in
``context.held_keys`` when its StepStarted is emitted, while its work runs and while its
compensate/undo run; one work per StepStarted; a nested run on keys the step holds is never
refused; an ordered lock's works run in position order; at most one successful work per
period bucket.

Checked afterwards: no run raised out of ``run()`` or hung; every outcome's ``held_keys`` is
empty; every lock is free, every semaphore has no holder and no waiter, no ordered lock has a
position in flight, no period claim is left, every step that failed for good was compensated,
no rate-limit window admitted more than its limit and every admitted call is one work that ran.

The scripts come from the seed (the interleaving does not): rerun one seed with
``-k 'seed-<n>' -s`` to see its summary.
"""

from __future__ import annotations

import functools
import itertools
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, cast

import pytest
import redis

from py_reactor import (
    Failure,
    Halt,
    Lock,
    Middleware,
    OrderedLock,
    Reactor,
    Semaphore,
    Skipped,
    Step,
    compose,
    configure,
    retries,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
    with_rate_limit,
    with_semaphore,
)
from py_reactor.coordination.owner import running_owner
from py_reactor.dsl.declaration import StepDeclaration
from py_reactor.engine.context import Context, running_context
from py_reactor.engine.results import Outcome
from py_reactor.observability import events as ev
from py_reactor.storage import keys
from tests._holds import ordered_positions
from tests.engine.coordination._helpers import lock_is_free

SEEDS = (3, 17, 29, 41, 58, 71, 86, 97)
THREADS = 8
RUNS_PER_THREAD = 12
REACTORS = 4
#: Seconds a coordination usually waits (lock, slot, period claim, ordered turn, rollback)...
WAIT = 5.0
#: ... and sometimes only this long, so that contention also ends in refusals.
SHORT_WAIT = 0.02
#: Seconds all the runs of one seed may take before the test calls it a hang.
DEADLINE = 60.0

#: What a step's work does on one attempt, with its weight.
ACTIONS = {
    "value": 10,
    "fail": 2,  # Failure(retryable=True): retried under @retries
    "final": 1,  # Failure(retryable=False)
    "raise": 2,
    "halt": 1,
    "skip": 1,
    "nested": 4,  # a nested run or invoke on keys the step holds, then a value
}
#: Work actions that end in a plain success (the period bucket is then marked).
SUCCEEDS = frozenset({"value", "nested"})
#: What a compensate or undo does, with its weight ("nested": as in the work, then succeed).
HOOK_ACTIONS = {"ok": 4, "fail": 1, "raise": 1, "nested": 2}
#: What a key function of the step does in a run: return the key, raise, or return None.
KEY_ACTIONS = {"key": 40, "raise": 1, "none": 1}
#: What a step class's guard says, with its weight.
GUARD_ACTIONS = {"allow": 12, "skip": 1, "fail": 1, "halt": 1, "false": 1}

#: The primitives a step holds while its work runs, and while its compensate/undo run.
WORK = frozenset({"lock", "semaphore", "ordered_lock", "period"})
ROLLBACK = frozenset({"lock", "semaphore"})


def _pick(rng: random.Random, weights: Mapping[str, int]) -> str:
    return rng.choices(list(weights), weights=list(weights.values()))[0]


@dataclass(frozen=True)
class Spec:
    """One generated step: where it lives, what it declares, what its nested step declares."""

    name: str  # the attribute its reactor binds it to (unique in a reactor tree)
    label: str  # unique in the seed, for messages
    inline: bool
    lock: str | None
    semaphore: tuple[str, int] | None  # key, limit
    rate: tuple[str, int] | None  # key, limit per day
    period: tuple[str, int] | None  # key, every (seconds)
    ordered: tuple[str, bool] | None  # key, strict
    attempts: int  # max attempts (1: no @retries)
    guards: bool  # a step class with a guard
    compensates: bool
    undoes: bool
    nested: frozenset[str]  # what its nested step re-declares (empty: no nesting)

    def entries(self, names: Collection[str]) -> list[str]:
        """The ``held_keys`` entries of the primitives ``names`` that this step declares."""
        entries = []
        if "lock" in names and self.lock:
            entries.append(f"lock:{self.lock}")
        if "semaphore" in names and self.semaphore:
            entries.append(f"semaphore:{self.semaphore[0]}")
        if "ordered_lock" in names and self.ordered:
            entries.append(f"ordered_lock:{self.ordered[0]}")
        if "period" in names and self.period:
            entries.append(f"period:{self.period[0]}@{self.period[1]}")
        return entries

    def slots(self, names: Collection[str]) -> list[tuple[str, int]]:
        """(key, most threads allowed inside) for the excluding primitives among ``names``."""
        slots = []
        if "lock" in names and self.lock:
            slots.append((f"lock:{self.lock}", 1))
        if "semaphore" in names and self.semaphore:
            slots.append((f"semaphore:{self.semaphore[0]}", self.semaphore[1]))
        if "ordered_lock" in names and self.ordered:
            slots.append((f"ordered_lock:{self.ordered[0]}", 1))
        return slots


@dataclass(frozen=True)
class Script:
    """What one step does in one run."""

    alone: bool  # the step is invoked alone (no retries), not run by a reactor
    key: str
    guard: str
    attempts: tuple[str, ...]  # the action of each attempt (the last one repeats)
    compensate: str
    undo: str
    nested_via: str  # "run" or "invoke"
    nested_mode: str  # "ok" or "fail"
    nap: float  # seconds inside the work, to widen the windows where runs meet


class World:
    """One seed's pools, generated reactors, scripts, and what the step bodies observed."""

    def __init__(self, seed: int, prefix: str, client: redis.Redis) -> None:
        self.seed = seed
        self.prefix = prefix
        self.client = client
        self.rng = random.Random(seed)
        rng = self.rng
        self.locks = [f"{prefix}-lock{i}" for i in range(3)]
        self.semaphores = {f"{prefix}-sem{i}": rng.randint(1, 2) for i in range(2)}
        self.rates = {f"{prefix}-rate0": 10_000, f"{prefix}-rate1": rng.randint(15, 40)}
        self.periods = {f"{prefix}-period{i}": rng.randint(1, 2) for i in range(2)}
        self.ordered = [f"{prefix}-ordered{i}" for i in range(2)]

        self._guard = threading.Lock()
        self._inside: dict[str, Counter[int]] = defaultdict(Counter)
        self.peak: Counter[str] = Counter()
        self.violations: list[str] = []
        self.period_wins: Counter[tuple[str, str]] = Counter()
        self.rate_works: Counter[str] = Counter()
        self.ran: Counter[str] = Counter()  # "started", "work", "compensate", "undo", ...
        self._attempt: Counter[tuple[str, str]] = Counter()
        #: The work's slots of a step that failed for good, until its compensate ends.
        self.kept: dict[tuple[str, str], list[tuple[str, int]]] = {}
        #: Per ordered-lock key, (epoch, position, run, step) of each work, in the order run.
        self.turns: dict[str, list[tuple[int, int, str, str]]] = defaultdict(list)
        self.scripts: dict[str, dict[str, Script]] = {}
        self._nested: dict[str, tuple[type[Step], type[Reactor]]] = {}
        self._events: dict[tuple[str, str], Spec] = {}  # (event.reactor, event.step): its spec
        self._invocable: list[tuple[type[Step], Spec]] = []
        self._tree: dict[str, list[Spec]] = {}  # its steps and its composed child's
        self.reactors = [self._reactor(i) for i in range(REACTORS)]

    # -- generation ---------------------------------------------------------------------------

    def _key(self, key: str, spec: Spec) -> Any:
        """``key`` as a constant, or as a function of the step's arguments returning it.

        The function does what the run's script of ``spec`` says (a nested step, whose
        arguments have a ``mode``, always gets its key).
        """
        if self.rng.random() < 0.5:
            return key
        suffix = key.removeprefix(self.prefix)

        def key_of(args: Mapping[str, Any]) -> str | None:
            action = self.scripts[args["rid"]][spec.name].key
            if action == "raise" and "mode" not in args:
                raise LookupError("planned key failure")
            if action == "none" and "mode" not in args:
                return None
            return f"{args['ns']}{suffix}"

        return key_of

    def _wait(self) -> float:
        return SHORT_WAIT if self.rng.random() < 0.15 else WAIT

    def _spec(self, owner: str, name: str) -> Spec:
        rng = self.rng
        inline = rng.random() < 0.5
        lock = rng.choice(self.locks) if rng.random() < 0.5 else None
        semaphore = rng.choice(list(self.semaphores.items())) if rng.random() < 0.4 else None
        period = rng.choice(list(self.periods.items())) if rng.random() < 0.2 else None
        ordered = (rng.choice(self.ordered), rng.random() < 0.5) if rng.random() < 0.3 else None
        declared = {
            name
            for name, value in (
                ("lock", lock),
                ("semaphore", semaphore),
                ("period", period),
                ("ordered_lock", ordered),
            )
            if value
        }
        nested = frozenset(p for p in declared if rng.random() < 0.7)
        return Spec(
            name=name,
            label=f"{owner}.{name}",
            inline=inline,
            lock=lock,
            semaphore=semaphore,
            rate=rng.choice(list(self.rates.items())) if rng.random() < 0.3 else None,
            period=period,
            ordered=ordered,
            attempts=rng.choice((1, 1, 2, 3)),
            guards=not inline and rng.random() < 0.5,
            compensates=rng.random() < 0.7,
            undoes=rng.random() < 0.7,
            nested=nested if rng.random() < 0.7 else frozenset(),
        )

    def _declarations(self, spec: Spec, only: Collection[str] = ()) -> list[Callable[[Any], Any]]:
        """The ``with_*`` decorators of ``spec`` (or of its primitives ``only``), shuffled."""
        every = not only
        decorators: list[Callable[[Any], Any]] = []
        if spec.lock and (every or "lock" in only):
            decorators.append(
                with_lock(self._key(spec.lock, spec), wait=self._wait(), rollback_wait=self._wait())
            )
        if spec.semaphore and (every or "semaphore" in only):
            key, limit = spec.semaphore
            decorators.append(
                with_semaphore(
                    self._key(key, spec),
                    limit=limit,
                    wait=self._wait(),
                    rollback_wait=self._wait(),
                )
            )
        if spec.rate and every:
            key, limit = spec.rate
            decorators.append(with_rate_limit(self._key(key, spec), limit=limit, period="day"))
        if spec.period and (every or "period" in only):
            key, seconds = spec.period
            decorators.append(with_period(self._key(key, spec), every=seconds, wait=self._wait()))
        if spec.ordered and (every or "ordered_lock" in only):
            key, strict = spec.ordered
            decorators.append(
                with_ordered_lock(self._key(key, spec), strict=strict, wait=self._wait())
            )
        self.rng.shuffle(decorators)
        return decorators

    def _class_step(self, spec: Spec) -> StepDeclaration:
        world = self

        def run(me: Step) -> Any:
            return world.work(spec, me.inputs["ns"], me.inputs["rid"], me.context)

        def guard(me: Step) -> Any:
            return world.guard(spec, me.inputs["rid"])

        def compensate(me: Step, error: Any) -> Any:
            return world.rollback("compensate", spec, me.inputs["ns"], me.inputs["rid"], me.context)

        def undo(me: Step, result: Any) -> Any:
            return world.rollback("undo", spec, me.inputs["ns"], me.inputs["rid"], me.context)

        namespace: dict[str, Any] = {
            "__module__": __name__,
            "__annotations__": {"ns": str, "rid": str},
            "run": run,
        }
        if spec.guards:
            namespace["guard"] = guard
        if spec.compensates:
            namespace["compensate"] = compensate
        if spec.undoes:
            namespace["undo"] = undo
        name = f"Stress{self.seed}_{spec.label.replace('.', '_')}"
        cls = type(name, (Step,), namespace)
        for declare in self._declarations(spec):
            cls = declare(cls)
        if spec.attempts > 1:
            cls = retries(spec.attempts, backoff="fixed", base_delay=0)(cls)
        self._events[(name, name)] = spec  # invoked alone, it is reactor and step at once
        self._invocable.append((cast(type[Step], cls), spec))
        return step(cast(type[Step], cls))

    def _inline_step(self, spec: Spec) -> StepDeclaration:
        world = self

        def body(ns: str, rid: str) -> Any:
            return world.work(spec, ns, rid, running_context())

        def compensate(error: Any, **arguments: Any) -> Any:
            return world.rollback(
                "compensate", spec, arguments["ns"], arguments["rid"], running_context()
            )

        def undo(result: Any, **arguments: Any) -> Any:
            return world.rollback(
                "undo", spec, arguments["ns"], arguments["rid"], running_context()
            )

        body.__name__ = body.__qualname__ = spec.label.replace(".", "_")
        target: Any = body
        above: list[Callable[[Any], Any]] = []
        for declare in self._declarations(spec):  # below @step (on the function) or above
            if self.rng.random() < 0.5:
                target = declare(target)
            else:
                above.append(declare)
        policy = retries(spec.attempts, backoff="fixed", base_delay=0)
        retry_below = spec.attempts > 1 and self.rng.random() < 0.5
        if retry_below:
            target = policy(target)
        decl: Any = step()(target)
        for declare in above:
            decl = declare(decl)
        if spec.attempts > 1 and not retry_below:
            decl = policy(decl)
        if spec.compensates:
            decl.compensate(compensate)
        if spec.undoes:
            decl.undo(undo)
        return cast(StepDeclaration, decl)

    def _nested_pair(self, spec: Spec) -> tuple[type[Step], type[Reactor]]:
        """A step (and a reactor running it) re-declaring ``spec.nested`` of ``spec``'s keys."""
        world = self

        def run(me: Step) -> Any:
            where = f"{me.inputs['rid']} {spec.label} nested"
            world.expect_held(where, me.context, spec.entries(spec.nested))
            with world.occupying(spec.slots(spec.nested)):
                world.count("nested")
                if me.inputs["mode"] == "ok":
                    return "inner"
                return Failure("planned nested failure", retryable=False)

        fields = {"ns": str, "rid": str, "mode": str}
        label = f"Stress{self.seed}_{spec.label.replace('.', '_')}"
        inner: Any = type(
            f"{label}_Inner",
            (Step,),
            {"__module__": __name__, "__annotations__": fields, "run": run},
        )
        for declare in self._declarations(spec, only=spec.nested):
            inner = declare(inner)
        child: Any = type(
            f"{label}_Nested",
            (Reactor,),
            {
                "__module__": __name__,
                "__annotations__": dict(fields),
                "inner": step(inner),
                "returns": "inner",
            },
        )
        if spec.lock and self.rng.random() < 0.5:  # the nested reactor also locks the key
            child = with_lock(self._key(spec.lock, spec), wait=self._wait())(child)
        return cast(type[Step], inner), cast(type[Reactor], child)

    def _declare(self, spec: Spec) -> StepDeclaration:
        if spec.nested:
            self._nested[spec.label] = self._nested_pair(spec)
        return self._inline_step(spec) if spec.inline else self._class_step(spec)

    def _child(self, index: int) -> tuple[type[Reactor], list[Spec]]:
        """A reactor of 1-2 generated steps, to be composed into reactor ``index``."""
        name = f"Stress{self.seed}_R{index}_Child"
        specs = [self._spec(f"R{index}", f"c{i}") for i in range(self.rng.randint(1, 2))]
        namespace: dict[str, Any] = {
            "__module__": __name__,
            "__annotations__": {"ns": str, "rid": str},
        }
        namespace.update({spec.name: self._declare(spec) for spec in specs})
        self._events.update({(name, spec.name): spec for spec in specs})
        return cast(type[Reactor], type(name, (Reactor,), namespace)), specs

    def _reactor(self, index: int) -> type[Reactor]:
        name = f"Stress{self.seed}_R{index}"
        specs = [self._spec(f"R{index}", f"s{i}") for i in range(self.rng.randint(2, 4))]
        steps: list[tuple[str, StepDeclaration]] = [(s.name, self._declare(s)) for s in specs]
        tree = list(specs)
        if self.rng.random() < 0.35:
            child, child_specs = self._child(index)
            steps.insert(self.rng.randint(0, len(steps)), ("sub", compose(child)))
            tree += child_specs
        namespace: dict[str, Any] = {
            "__module__": __name__,
            "__annotations__": {"ns": str, "rid": str},
            **dict(steps),
        }
        if self.rng.random() < 0.5:
            namespace["returns"] = self.rng.choice(steps)[0]
        self._events.update({(name, spec.name): spec for spec in specs})
        self._tree[name] = tree
        return cast(type[Reactor], type(name, (Reactor,), namespace))

    def plan(self) -> list[list[tuple[str, Callable[[], Outcome]]]]:
        """Each thread's runs (run id, what runs it), with every step's script drawn now.

        Most runs are a reactor's; some invoke a step class alone.
        """
        jobs: list[list[tuple[str, Callable[[], Outcome]]]] = []
        for thread in range(THREADS):
            mine: list[tuple[str, Callable[[], Outcome]]] = []
            for index in range(RUNS_PER_THREAD):
                run = f"t{thread}r{index}"
                if self._invocable and self.rng.random() < 0.15:
                    cls, spec = self.rng.choice(self._invocable)
                    self.scripts[run] = {spec.name: self._script(spec, alone=True)}
                    args = {"ns": self.prefix, "rid": run}
                    mine.append((run, functools.partial(cls.invoke, args)))
                    self.ran["invoked alone"] += 1
                    continue
                reactor = self.rng.choice(self.reactors)
                self.scripts[run] = {
                    spec.name: self._script(spec)
                    for spec in self._tree[reactor.__py_reactor_name__]
                }
                mine.append((run, functools.partial(reactor.run, ns=self.prefix, rid=run)))
            jobs.append(mine)
        return jobs

    def _script(self, spec: Spec, *, alone: bool = False) -> Script:
        rng = self.rng
        return Script(
            alone=alone,
            key=_pick(rng, KEY_ACTIONS),
            guard=_pick(rng, GUARD_ACTIONS),
            attempts=tuple(_pick(rng, ACTIONS) for _ in range(spec.attempts)),
            compensate=_pick(rng, HOOK_ACTIONS),
            undo=_pick(rng, HOOK_ACTIONS),
            nested_via=rng.choice(("run", "invoke")),
            nested_mode="ok" if rng.random() < 0.7 else "fail",
            nap=rng.choice((0.0, 0.001, 0.003, 0.008)),
        )

    # -- what the step bodies do and observe --------------------------------------------------

    def count(self, what: str) -> None:
        with self._guard:
            self.ran[what] += 1

    def violation(self, message: str) -> None:
        with self._guard:
            self.violations.append(message)

    def enter(self, slots: list[tuple[str, int]]) -> None:
        """Count this thread inside each key; note a violation if more threads are than allowed.

        A thread inside a key twice (a nested run on the key it holds) counts once.
        """
        me = threading.get_ident()
        with self._guard:
            for key, allowed in slots:
                inside = self._inside[key]
                inside[me] += 1
                self.peak[key] = max(self.peak[key], len(inside))
                if len(inside) > allowed:
                    self.violations.append(f"{len(inside)} threads inside {key} (max {allowed})")

    def leave(self, slots: list[tuple[str, int]]) -> None:
        """Count this thread out of each key once."""
        me = threading.get_ident()
        with self._guard:
            for key, _ in slots:
                inside = self._inside[key]
                inside[me] -= 1
                if inside[me] == 0:
                    del inside[me]

    @contextmanager
    def occupying(self, slots: list[tuple[str, int]]) -> Iterator[None]:
        """Inside each key for the block."""
        self.enter(slots)
        try:
            yield
        finally:
            self.leave(slots)

    def expect_held(self, where: str, context: Context | None, entries: list[str]) -> None:
        """``context.held_keys`` lists every entry of ``entries``."""
        if context is None:
            if entries:
                self.violation(f"{where}: no running context")
            return
        held = list(context.held_keys)
        missing = [entry for entry in entries if entry not in held]
        if missing:
            self.violation(f"{where}: {missing} not in held_keys {held}")

    def _claimed_bucket(self, where: str, key: str) -> str | None:
        """The bucket of the claim this execution holds on period ``key``."""
        owner = running_owner()
        for claim in self.client.scan_iter(f"{keys.period(key).claim}:*"):
            if self.client.hget(claim, "owner") == owner:
                return str(claim).rsplit(":", 1)[1]
        self.violation(f"{where}: the work runs without a claim on period {key}")
        return None

    def started(self, reactor: str, name: str | None) -> None:
        """At StepStarted of a generated step: its attempt holds every key it declares."""
        spec = self._events.get((reactor, name or ""))
        if spec is None:
            return  # a nested step or reactor, or a composed child as a whole
        self.count("started")
        self.expect_held(f"{reactor}.{name} StepStarted", running_context(), spec.entries(WORK))

    def guard(self, spec: Spec, run: str) -> Any:
        verdict = self.scripts[run][spec.name].guard
        self.count(f"guard {verdict}")
        if verdict == "skip":
            return Skipped(reason="planned guard skip")
        if verdict == "fail":
            return Failure("planned guard refusal")
        if verdict == "halt":
            return Halt("planned guard halt")
        if verdict == "false":
            return False
        return None

    def work(self, spec: Spec, ns: str, run: str, context: Context | None) -> Any:
        where = f"{run} {spec.label} work"
        with self._guard:
            attempt = self._attempt[(run, spec.name)]
            self._attempt[(run, spec.name)] += 1
        script = self.scripts[run][spec.name]
        action = script.attempts[min(attempt, len(script.attempts) - 1)]
        if action == "nested" and not spec.nested:
            action = "value"
        self.expect_held(where, context, spec.entries(WORK))
        if spec.period:
            bucket = self._claimed_bucket(where, spec.period[0])
            if bucket is not None and action in SUCCEEDS:
                with self._guard:
                    self.period_wins[(spec.period[0], bucket)] += 1
        # Failing for good, the step keeps its keys through its compensate: so does the count.
        last = script.alone or attempt + 1 >= spec.attempts  # invoke() never retries
        keep = spec.compensates and (action == "final" or (action in ("fail", "raise") and last))
        slots = spec.slots(WORK)
        self.enter(slots)
        try:
            return self._do(where, spec, action, ns, run, context)
        finally:
            if keep:
                with self._guard:
                    self.kept[(run, spec.name)] = slots
            else:
                self.leave(slots)

    def _turn(self, where: str, spec: Spec, run: str, context: Context | None) -> None:
        """Note which position of its ordered lock this work runs in (an exclusive section)."""
        assert spec.ordered is not None
        key = spec.ordered[0]
        saved = [p for p in ordered_positions(context) if p["key"] == key]
        if len(saved) != 1:
            self.violation(f"{where}: ordered positions {saved} in the context")
            return
        with self._guard:
            self.turns[key].append(
                (int(saved[0]["epoch"]), int(saved[0]["number"]), run, spec.name)
            )

    def _do(
        self, where: str, spec: Spec, action: str, ns: str, run: str, context: Context | None
    ) -> Any:
        script = self.scripts[run][spec.name]
        if spec.ordered:
            self._turn(where, spec, run, context)
        self.count("work")
        if spec.rate:
            with self._guard:
                self.rate_works[spec.rate[0]] += 1
        if script.nap:
            time.sleep(script.nap)  # widens the window where runs meet; syncs nothing
        if action == "fail":
            return Failure("planned failure", retryable=True)
        if action == "final":
            return Failure("planned final failure", retryable=False)
        if action == "raise":
            raise RuntimeError("planned raise")
        if action == "halt":
            return Halt("planned halt")
        if action == "skip":
            return Skipped(reason="planned skip")
        if action == "nested":
            return self._nest(where, spec, ns, run, script.nested_mode)
        return f"{spec.label} {run}"

    def _nest(self, where: str, spec: Spec, ns: str, run: str, mode: str) -> str:
        """Run the nested step or reactor of ``spec``; it must end as ``mode`` says."""
        inner, child = self._nested[spec.label]
        args = {"ns": ns, "rid": run, "mode": mode}
        via = self.scripts[run][spec.name].nested_via
        nested = inner.invoke(args) if via == "invoke" else child.run(**args)
        wanted = "completed" if mode == "ok" else "failed"
        if nested.status != wanted:
            self.violation(
                f"{where}: nested {via} on held keys {sorted(spec.nested)} ended "
                f"{nested.status!r}, not {wanted!r}: {nested.error!r}"
            )
        return f"{spec.label} {run} nested {nested.status}"

    def rollback(self, kind: str, spec: Spec, ns: str, run: str, context: Context | None) -> Any:
        where = f"{run} {spec.label} {kind}"
        self.expect_held(where, context, spec.entries(ROLLBACK))
        script = self.scripts[run][spec.name]
        action = script.compensate if kind == "compensate" else script.undo
        try:
            with self.occupying(spec.slots(ROLLBACK)):
                self.count(kind)
                if action == "fail":
                    return Failure(f"planned {kind} failure")
                if action == "raise":
                    raise RuntimeError(f"planned {kind} raise")
                if action == "nested" and spec.nested and spec.nested <= ROLLBACK:
                    self._nest(where, spec, ns, run, "ok")  # only keys a rollback holds
                return None
        finally:
            if kind == "compensate":
                with self._guard:
                    kept = self.kept.pop((run, spec.name), [])
                self.leave(kept)  # the work's keys, kept since it failed


class Watch(Middleware):
    """Checks, as each attempt of a generated step starts, that its coordination is held."""

    def __init__(self, world: World) -> None:
        self.world = world

    def on_step_started(self, event: ev.StepStarted) -> None:
        self.world.started(event.reactor, event.step)


def _run_all(world: World) -> tuple[list[tuple[str, Outcome]], list[str]]:
    """Run every planned execution on its thread, all released at once; (outcomes, errors)."""
    jobs = world.plan()
    configure(middleware=[Watch(world)])
    outcomes: list[tuple[str, Outcome]] = []
    errors: list[str] = []
    guard = threading.Lock()
    start = threading.Barrier(THREADS, timeout=10)

    def worker(mine: list[tuple[str, Callable[[], Outcome]]]) -> None:
        start.wait()
        for run, call in mine:
            try:
                outcome = call()
            except BaseException as exc:  # the claim: nothing escapes run()
                with guard:
                    errors.append(f"{run}: {type(exc).__name__}: {exc}")
            else:
                with guard:
                    outcomes.append((run, outcome))

    # Daemon threads: a hang fails the test below instead of blocking the session's exit.
    threads = [threading.Thread(target=worker, args=(mine,), daemon=True) for mine in jobs]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + DEADLINE
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    hung = sum(thread.is_alive() for thread in threads)
    assert not hung, f"seed {world.seed}: {hung} thread(s) still running after {DEADLINE:g} s"
    return outcomes, errors


def _rate_counters(client: redis.Redis, key: str) -> list[int]:
    return [int(client.get(k) or 0) for k in client.scan_iter(keys.pattern("rate_limit", key))]


def _summary(world: World, outcomes: list[tuple[str, Outcome]], elapsed: float) -> str:
    statuses = Counter(o.status for _, o in outcomes)
    errors = Counter(type(o.error).__name__ for _, o in outcomes if o.status == "failed")
    rollback = Counter(
        f["reason"] for _, o in outcomes for f in getattr(o, "rollback_failures", ())
    )
    skips = Counter(
        e.get("reason") for _, o in outcomes for e in o.context.trace if e["type"] == "skipped"
    )
    peak = {k.replace(f"{world.prefix}-", ""): n for k, n in sorted(world.peak.items())}
    return (
        f"\nseed {world.seed}: {len(outcomes)} runs in {elapsed:.2f} s\n"
        f"  statuses {dict(statuses)}; failures {dict(errors)}\n"
        f"  skips {dict(skips)}; rollback failures {dict(rollback)}\n"
        f"  ran {dict(sorted(world.ran.items()))}\n"
        f"  peak {peak}; ordered turns seen {sum(map(len, world.turns.values()))}"
    )


@pytest.mark.parametrize("seed", SEEDS, ids=[f"seed-{s}" for s in SEEDS])
def test_any_mix_of_outcomes_leaves_nothing_held(key: str, raw: redis.Redis, seed: int) -> None:
    """After any mix of results, rollbacks and nested runs, every key is free and exclusive."""
    world = World(seed, f"{key}-{seed}", raw)
    day_before = int(raw.time()[0]) // 86400
    began = time.monotonic()
    outcomes, errors = _run_all(world)
    elapsed = time.monotonic() - began
    day_after = int(raw.time()[0]) // 86400
    print(_summary(world, outcomes, elapsed))

    assert errors == [], f"seed {seed}: run() raised"
    assert len(outcomes) == THREADS * RUNS_PER_THREAD
    assert world.violations == [], f"seed {seed}: violations while running"
    assert world.ran["started"] == world.ran["work"], f"seed {seed}: StepStarted without work"
    statuses = Counter(o.status for _, o in outcomes)
    assert set(statuses) <= {"completed", "failed", "halted"}
    assert statuses["completed"], f"seed {seed}: no run completed"
    assert statuses["failed"], f"seed {seed}: no run failed"
    leftovers = {run: o.context.held_keys for run, o in outcomes if o.context.held_keys}
    assert leftovers == {}, f"seed {seed}: outcomes still list held keys"

    assert [k for k in world.locks if not lock_is_free(k)] == [], f"seed {seed}: lock held"
    for k in world.locks:
        assert Lock(k).state().waiters == 0, f"seed {seed}: lock {k} has waiters"
    for k, limit in world.semaphores.items():
        state = Semaphore(k, limit=limit).state()
        assert (state.held, state.waiters) == (0, 0), f"seed {seed}: semaphore {k}: {state}"
    for k in world.ordered:
        turns = OrderedLock(k).state()
        assert turns.in_flight == 0, f"seed {seed}: ordered lock {k}: {turns}"
    # The claims of every period key of this world ("<prefix>-*" globs inside the hash tag).
    claims = sorted(raw.scan_iter(f"{keys.period(world.prefix + '-*').claim}:*"))
    assert claims == [], f"seed {seed}: period claims left"
    assert world.kept == {}, f"seed {seed}: steps failed for good and never compensated"
    for k, entered in world.turns.items():
        for before, after in itertools.pairwise(entered):  # a retry keeps its turn
            assert before[:2] < after[:2] or before == after, f"seed {seed}: {k} out of order"
    repeated = {bucket: n for bucket, n in world.period_wins.items() if n > 1}
    assert repeated == {}, f"seed {seed}: a period bucket's work succeeded more than once"
    for k, limit in world.rates.items():
        counters = _rate_counters(raw, k)
        assert all(n <= limit for n in counters), f"seed {seed}: rate {k}: {counters} > {limit}"
        if day_before == day_after:  # one window, still readable: every charge is one work
            assert sum(counters) == world.rate_works[k], f"seed {seed}: rate {k}"


def test_the_occupancy_count_sees_threads_that_share_a_key(key: str, raw: redis.Redis) -> None:
    """The stress's counter is not blind: two threads in one unlocked key count as two."""
    world = World(0, key, raw)
    both_in = threading.Barrier(2, timeout=10)
    slot = [(f"lock:{key}", 1)]

    def enter() -> None:
        with world.occupying(slot):
            both_in.wait()

    threads = [threading.Thread(target=enter) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert world.peak[f"lock:{key}"] == 2
    assert world.violations == [f"2 threads inside lock:{key} (max 1)"]
