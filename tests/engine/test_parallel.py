"""``@parallel``: independent ready steps run at once, and coordination still holds.

Real threads, the session's private redis-server. Concurrency is shown with barriers (two
steps that both wait at a 2-party barrier can only both pass if they run at the same time) and
counted with the Redis-backed overlap recorder; finish orders are made deterministic with
events, using the one thing the scheduler guarantees: a step that depends on another starts
only once that one's branch has been merged.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from py_reactor import (
    Failure,
    Halt,
    Lock,
    Reactor,
    configure,
    parallel,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
)
from py_reactor.coordination.holds import Ledger
from py_reactor.dsl.parallel import PARALLEL_ATTRIBUTE
from py_reactor.errors import DefinitionError
from tests._overlap import OverlapRecorder
from tests.engine import _parallel_reactors as pr
from tests.engine._parallel_reactors import build, by_key, events

#: Bound on every wait for another thread: far longer than any test needs.
PATIENCE = 10.0


@pytest.fixture(autouse=True)
def _store(redis_url: str) -> Iterator[None]:
    configure(redis_url=redis_url)
    yield
    pr.HOOKS.clear()
    pr.EVENTS.clear()


def hook(key: str, actions: dict[str, Callable[[], Any]]) -> None:
    """Make step ``name`` of the test ``key`` call ``actions[name]`` (others do nothing)."""

    def run(name: str) -> Any:
        action = actions.get(name)
        return None if action is None else action()

    pr.HOOKS[key] = run


def await_event(event: threading.Event) -> None:
    assert event.wait(PATIENCE), "an event the test waits for never came"


def lock_free(name: str) -> bool:
    return Lock(name).state().owner is None


# -- concurrency -------------------------------------------------------------------------------


def test_independent_steps_run_at_the_same_time(key: str, overlap: OverlapRecorder) -> None:
    """Two independent steps that each wait for the other at a barrier both pass (and the
    recorder saw them inside together); sequentially the first would wait alone and fail."""
    shape: dict[str, list[str]] = {"a": [], "b": [], "c": []}
    barrier = threading.Barrier(2, timeout=PATIENCE)

    def meet(label: str) -> Callable[[], None]:
        def inside() -> None:
            with overlap.inside(label):
                barrier.wait()

        return inside

    hook(key, {"a": meet("a"), "b": meet("b")})
    outcome = build("Two", shape).run(key=key)
    assert outcome.status == "completed", outcome
    assert overlap.max_concurrency == 2
    assert dict(outcome.results) == {"a": "a-value", "b": "b-value", "c": "c-value"}

    # The same reactor without @parallel: the first step waits at the barrier alone.
    barrier = threading.Barrier(2, timeout=0.3)
    sequential = build("TwoInTurn", shape, max_branches=None).run(key=key)
    assert sequential.status == "failed"
    assert isinstance(sequential.error, threading.BrokenBarrierError)


def test_a_step_runs_after_its_dependencies_with_their_values(key: str) -> None:
    shape = {"a": [], "b": [], "join": ["a", "b"], "tail": ["join"]}
    seen: dict[str, Any] = {}

    def on_join() -> None:
        seen["ran"] = set(events(key, "run"))

    hook(key, {"join": on_join})
    outcome = build("Diamond", shape, returns="tail").run(key=key)
    assert outcome.status == "completed", outcome
    assert seen["ran"] == {"a", "b", "join"}  # both dependencies ran before join started
    ran = events(key, "run")
    assert ran.index("join") > max(ran.index("a"), ran.index("b"))
    assert ran[-1] == "tail"
    join = next(e for e in outcome.trace if e["step"] == "join" and e["type"] == "run")
    assert join["arguments"] == {"key": key, "d_a": "a-value", "d_b": "b-value"}


def test_max_branches_caps_how_many_steps_run_at_once(key: str, overlap: OverlapRecorder) -> None:
    """Six independent steps, max_branches=2: pairs meet at a barrier (two at once is
    reached), and a third never joins them while they stay inside."""
    barrier = threading.Barrier(2, timeout=PATIENCE)

    def work() -> None:
        with overlap.inside("step"):
            barrier.wait()
            time.sleep(0.02)  # stay inside a while: a third branch, if started, would overlap

    names = [f"s{i}" for i in range(6)]
    hook(key, dict.fromkeys(names, work))
    outcome = build("Capped", dict.fromkeys(names, ()), max_branches=2).run(key=key)
    assert outcome.status == "completed", outcome
    assert overlap.max_concurrency == 2
    assert overlap.entries == 6


# -- coordination between siblings --------------------------------------------------------------


def test_siblings_declaring_one_lock_key_never_overlap_while_others_do(
    key: str, redis_url: str
) -> None:
    """Three steps lock ``<key>:shared``: never two inside at once. Two others lock keys of
    their own and must meet at a barrier: they do overlap."""
    shared = OverlapRecorder(redis_url, f"{key}-shared")
    apart = threading.Barrier(2, timeout=PATIENCE)

    def locked(label: str) -> Callable[[], None]:
        def inside() -> None:
            with shared.inside(label):
                time.sleep(0.03)  # long enough that an unprotected sibling would overlap

        return inside

    hook(key, {"a": locked("a"), "b": locked("b"), "c": locked("c"), "d": apart.wait,
               "e": apart.wait})  # fmt: skip
    shape = dict.fromkeys("abcde", ())
    decorate = {name: with_lock(by_key(":shared"), wait=PATIENCE) for name in "abc"}
    decorate |= {name: with_lock(by_key(f":{name}"), wait=PATIENCE) for name in "de"}
    outcome = build("Shared", shape, decorate=decorate).run(key=key)
    assert outcome.status == "completed", outcome
    assert shared.entries == 3
    assert shared.max_concurrency == 1
    assert outcome.context.held_keys == []
    assert lock_free(f"{key}:shared")


@pytest.mark.parametrize("how", ["invoke", "lock", "helper"])
def test_nested_work_of_two_siblings_on_one_key_excludes_each_other(
    key: str, overlap: OverlapRecorder, how: str
) -> None:
    """Two siblings meet at a barrier (they run at once), then each takes ``<key>:inner`` in
    its body: through ``Inner.invoke``, a plain ``Lock`` or a decorated helper. The scheduler
    cannot see those keys; each branch's own owner makes the store keep them apart."""
    barrier = threading.Barrier(2, timeout=PATIENCE)

    def inside() -> None:
        with overlap.inside("inner"):
            time.sleep(0.03)

    def sibling() -> Any:
        barrier.wait()
        if how == "invoke":
            outcome = pr.Inner.invoke({"key": key})
            assert outcome.status == "completed", outcome
        elif how == "lock":
            with Lock(f"{key}:inner", wait=PATIENCE):
                inside()
        else:
            pr.critical(key, inside)
        return None

    hook(key, {"a": sibling, "b": sibling, "inner": inside})
    outcome = build("Nested", {"a": [], "b": []}).run(key=key)
    assert outcome.status == "completed", outcome
    assert overlap.entries == 2
    assert overlap.max_concurrency == 1
    assert lock_free(f"{key}:inner")


def test_siblings_nested_in_the_reactors_own_lock_take_turns(
    key: str, overlap: OverlapRecorder
) -> None:
    """The reactor holds ``<key>:reactor``; two siblings (at once: a barrier) take it again in
    their bodies through a decorated helper: each re-enters the reactor's hold, never both at
    once, and the run ends with the key free."""
    barrier = threading.Barrier(2, timeout=PATIENCE)
    counts: list[int] = []

    def inside() -> None:
        with overlap.inside("reactor-key"):
            counts.append(Lock(f"{key}:reactor").state().count)
            time.sleep(0.03)

    def sibling() -> None:
        barrier.wait()
        pr.critical_of_reactor(key, inside)

    hook(key, {"a": sibling, "b": sibling})
    reactor = build(
        "InReactorLock",
        {"a": [], "b": []},
        reactor_decorators=[with_lock(by_key(":reactor"), wait=PATIENCE)],
    )
    outcome = reactor.run(key=key)
    assert outcome.status == "completed", outcome
    assert overlap.max_concurrency == 1
    assert counts == [2, 2]  # the reactor's hold, re-entered once at a time
    assert lock_free(f"{key}:reactor")
    assert outcome.context.held_keys == []


@pytest.mark.parametrize("primitive", ["ordered_lock", "period"])
def test_a_siblings_ordered_turn_or_period_claim_is_never_reentered(
    key: str, overlap: OverlapRecorder, primitive: str
) -> None:
    """Both siblings (at once: a barrier) take ``<key>:ordered`` / ``<key>:period`` through a
    decorated helper, b while a is inside. A hold of the tree is re-entered through the ledger
    only if it is this branch's own or an ancestor's: b waits for a's turn (ordered), or waits
    for a's claim and then finds the bucket done (period: the body runs once)."""
    barrier = threading.Barrier(2, timeout=PATIENCE)
    helper = pr.in_order if primitive == "ordered_lock" else pr.once_an_hour
    first_inside = threading.Event()

    def inside() -> str:
        with overlap.inside(primitive):
            first_inside.set()
            time.sleep(0.03)  # b arrives while a is inside
        return "done"

    def first() -> None:
        barrier.wait()
        helper(key, inside)

    def second() -> None:
        barrier.wait()
        await_event(first_inside)  # a holds its turn (its claim) now: b must not share it
        helper(key, inside)

    hook(key, {"a": first, "b": second})
    outcome = build("LedgerTurns", {"a": [], "b": []}).run(key=key)
    assert outcome.status == "completed", outcome
    assert overlap.max_concurrency == 1
    assert overlap.entries == (2 if primitive == "ordered_lock" else 1)
    assert len(outcome.context.holds) == 0


# -- re-entrancy ---------------------------------------------------------------------------------


def test_a_steps_nested_invoke_reenters_its_own_key(key: str) -> None:
    outcome = pr.NestedInvoke.run(key=key)
    assert outcome.status == "completed", outcome
    assert outcome.value == {"status": "completed", "count": 2}
    assert lock_free(f"{key}:inner")


def test_steps_reenter_the_key_their_reactor_holds(key: str) -> None:
    """Both steps lock the reactor's own key: each runs inside the reactor's hold (count 2,
    owned by the execution), the scheduler starts them one after the other, and the key frees
    with the run."""
    seen: list[tuple[str | None, int]] = []

    def look() -> None:
        state = Lock(f"{key}:reactor").state()
        seen.append((state.owner, state.count))

    hook(key, {"first": look, "second": look})
    outcome = pr.ReactorLocked.run(key=key)
    assert outcome.status == "completed", outcome
    root = outcome.context.root_id
    assert seen == [(root, 2), (root, 2)]
    assert lock_free(f"{key}:reactor")
    assert len(outcome.context.holds) == 0


def test_siblings_on_one_period_or_ordered_key_pass_one_after_the_other(key: str) -> None:
    """Two siblings on one period key: the first runs, the second finds the bucket done and is
    skipped, as in a sequential run. Two on one ordered-lock key both pass, in turn."""
    shape = dict.fromkeys(["p1", "p2", "o1", "o2"], ())
    decorate = {n: with_period(by_key(":period"), every="hour") for n in ("p1", "p2")}
    decorate |= {n: with_ordered_lock(by_key(":ordered"), wait=PATIENCE) for n in ("o1", "o2")}
    outcome = build("Turns", shape, decorate=decorate).run(key=key)
    assert outcome.status == "completed", outcome
    ran = events(key, "run")
    assert sorted(n for n in ran if n.startswith("o")) == ["o1", "o2"]
    assert [n for n in ran if n.startswith("p")] == ["p1"]
    skipped = [e["step"] for e in outcome.trace if e["type"] == "skipped"]
    assert skipped == ["p2"]
    assert len(outcome.context.holds) == 0


# -- rollback ------------------------------------------------------------------------------------


def test_rollback_undoes_completed_steps_newest_finished_first(key: str) -> None:
    """c, b, a finish in that order (each waits until the one before it was merged: a probe
    depending on it has started), then f fails. f is compensated; every completed step is undone
    once, newest-finished first, each before the steps it depends on."""
    merged = {name: threading.Event() for name in "cba"}

    def probe(name: str) -> Callable[[], None]:
        return merged[name].set  # a step depending on ``name`` runs: ``name`` was merged

    def after(name: str) -> Callable[[], None]:
        return lambda: await_event(merged[name])

    def explode() -> Failure:
        await_event(merged["a"])
        return Failure("f failed")

    hook(key, {"b": after("c"), "a": after("b"), "f": explode, "probe_c": probe("c"),
               "probe_b": probe("b"), "probe_a": probe("a")})  # fmt: skip
    shape = {"a": [], "b": [], "c": [], "f": [], "probe_a": ["a"], "probe_b": ["b"],
             "probe_c": ["c"]}  # fmt: skip
    outcome = build("FinishOrder", shape).run(key=key)

    assert outcome.status == "failed"
    assert outcome.step_name == "f"
    assert outcome.error == "f failed"
    assert events(key, "compensate") == ["f"]
    undone = events(key, "undo")
    assert sorted(undone) == ["a", "b", "c", "probe_a", "probe_b", "probe_c"]
    assert [n for n in undone if n in "abc"] == ["a", "b", "c"]  # c finished first
    for name in "abc":
        assert undone.index(f"probe_{name}") < undone.index(name)
    log = pr.EVENTS[key]
    assert log.index(("compensate", "f")) < log.index(("undo", undone[0]))
    # ``completed`` was appended in finish order, and rollback emptied it
    assert outcome.context.completed == []
    assert dict(outcome.results) == {}


def test_two_failing_branches_are_both_compensated_and_leak_no_hold(key: str) -> None:
    """f1 and f2 fail at the same time, each under a lock of its own; ok completed under a
    third. The first failure merged is the run's; both are compensated under their locks; ok is
    undone; afterwards nothing is held, in the ledger or in the store."""
    barrier = threading.Barrier(3, timeout=PATIENCE)

    def fail_together() -> None:
        barrier.wait()
        raise RuntimeError("both down")

    hook(key, {"f1": fail_together, "f2": fail_together, "ok": barrier.wait})
    shape = {"ok": [], "f1": [], "f2": []}
    decorate = {n: with_lock(by_key(f":{n}"), wait=PATIENCE) for n in shape}
    outcome = build("TwoFailures", shape, decorate=decorate).run(key=key)
    assert outcome.status == "failed"
    failed = [e["step"] for e in outcome.trace if e["type"] == "failed"]
    assert sorted(failed) == ["f1", "f2"]
    assert outcome.step_name == failed[0]  # the first failure merged is the run's
    assert sorted(events(key, "compensate")) == ["f1", "f2"]
    assert events(key, "undo") == ["ok"]
    compensations = [e for e in outcome.trace if e["type"] == "compensate"]
    assert {e["step"]: e["key"] for e in compensations} == {
        "f1": f"{key}:f1",
        "f2": f"{key}:f2",
    }  # each under the lock its work kept
    assert all(e["ok"] for e in compensations)
    assert outcome.rollback_failures == []
    assert len(outcome.context.holds) == 0
    for name in shape:
        assert lock_free(f"{key}:{name}"), name


def test_a_halt_lets_running_siblings_finish_and_starts_nothing_new(key: str) -> None:
    """``stop`` halts while ``slow`` is still running: ``slow`` finishes and keeps its result,
    ``after_slow`` (which depends on it) never starts, nothing is rolled back."""
    halting = threading.Event()

    def stop() -> Halt:
        halting.set()
        return Halt("enough")

    def slow() -> None:
        await_event(halting)

    hook(key, {"stop": stop, "slow": slow})
    shape = {"slow": [], "stop": [], "after_slow": ["slow"]}
    outcome = build("Halting", shape).run(key=key)
    assert outcome.status == "halted"
    assert outcome.reason == "enough"
    assert outcome.step_name == "stop"
    assert dict(outcome.results) == {"slow": "slow-value"}
    assert "after_slow" not in events(key, "run")
    assert events(key, "undo") == []


# -- everything else -------------------------------------------------------------------------


def test_retries_compose_and_map_work_inside_branches(key: str) -> None:
    """Retries, a composed child and a map step, in branches: the same results as a
    sequential run of the same steps, and a failure after them undoes the children."""
    sequential = pr.features(None).run(key=key, items=[1, 2, 3])
    pr.FLAKY.clear()
    pr.EVENTS.clear()
    outcome = pr.features(8).run(key=key, items=[1, 2, 3])
    assert outcome.status == "completed", outcome
    assert dict(outcome.results) == dict(sequential.results)
    assert outcome.results["mapped"] == [2, 4, 6]
    assert outcome.results["child"] == len(key) * 2
    assert pr.FLAKY[key] == 3
    assert sorted(k for k in outcome.context.children) == [
        "child",
        "mapped[0]",
        "mapped[1]",
        "mapped[2]",
    ]

    pr.FLAKY.clear()
    pr.EVENTS.clear()
    hook(key, {"join": lambda: Failure("join failed")})
    failed = pr.features(8).run(key=key, items=[1, 2])
    assert failed.status == "failed"
    assert failed.step_name == "join"
    undone = events(key, "undo")
    assert sorted(undone) == sorted(["plain", f"double[{len(key)}]", "double[1]", "double[2]"])
    assert undone.index("double[2]") < undone.index("double[1]")  # elements: highest first


def test_an_async_unit_is_dispatched_and_read_in_a_parallel_run(key: str) -> None:
    outcome = pr.WithUnit.run(key=key)
    assert outcome.status == "completed", outcome
    assert outcome.value == "use-value"
    assert outcome.results["fetch"] == "fetched"
    assert sorted(events(key, "run")) == ["fetch", "other", "use"]


def test_an_async_unit_is_dispatched_once_no_sibling_holds_a_key(key: str) -> None:
    """``unit`` becomes ready while ``holder`` holds the key the unit locks; dispatched then,
    the hand-off guard would refuse it (the execution holds the key). It is dispatched once
    ``holder`` is done (``holder`` ends only after ``after_gate``, which the scheduler starts
    when it has looked at ``unit``), and the run completes."""
    holding, after_gate = threading.Event(), threading.Event()

    def holder() -> None:
        holding.set()  # inside its lock
        await_event(after_gate)

    hook(key, {"holder": holder, "gate": lambda: await_event(holding),
               "after_gate": after_gate.set})  # fmt: skip
    order = pr.UnitBesideHolder.__py_reactor_order__
    assert order.index("unit") < order.index("after_gate")
    outcome = pr.UnitBesideHolder.run(key=key)
    assert outcome.status == "completed", outcome
    assert outcome.results["unit"] == "unit-done"
    ran = events(key, "run")
    assert ran.index("unit") > ran.index("after_gate")
    assert lock_free(f"{key}:unit")


def test_an_interrupt_pauses_the_run_once_running_branches_are_merged(key: str) -> None:
    """The scheduler reaches the interrupt while ``slow`` runs: ``slow`` finishes and is kept,
    the run pauses; the resume completes it without running ``slow`` again."""
    out = pr.Reviewed.run(key=key)
    assert out.status == "paused", out
    assert dict(out.results) == {"slow": "slow-value"}
    done = pr.Reviewed.resume(out.execution_id, {"approved": True})
    assert done.status == "completed", done
    assert done.value == "pay-value"
    assert events(key, "run") == ["slow", "pay"]


# -- the shared ledger -------------------------------------------------------------------------


def test_sibling_turns_exclude_siblings_and_admit_one_line_of_descent() -> None:
    """Turns on an entry the reactor holds: a branch, its nested work and its ancestor share
    one; a sibling waits until that line has given all of them back."""
    ledger = Ledger()
    assert ledger.take_turn("lock:k", "root/a", 0)
    assert ledger.take_turn("lock:k", "root/a/x", 0)  # nested in a: the same line
    assert ledger.take_turn("lock:k", "root", 0)  # its ancestor
    assert not ledger.take_turn("lock:k", "root/b", 0)  # a sibling waits
    assert ledger.take_turn("lock:other", "root/b", 0)  # on another entry it does not
    released = threading.Event()

    def release_a() -> None:
        for taker in ("root/a/x", "root", "root/a"):
            ledger.end_turn("lock:k", taker)
        released.set()

    threading.Thread(target=release_a).start()
    assert ledger.take_turn("lock:k", "root/b", PATIENCE)  # once a's line gave its turns back
    assert released.is_set()


# -- declaring it ------------------------------------------------------------------------------


def test_parallel_is_inherited_and_its_mistakes_are_refused() -> None:
    @parallel(max_branches=3)
    class Base(Reactor):
        @step
        def a() -> int:
            return 1

    class Sub(Base):
        pass

    assert getattr(Sub, PARALLEL_ATTRIBUTE) == 3
    assert getattr(parallel(type("Bare", (Reactor,), {})), PARALLEL_ATTRIBUTE) == 8
    assert getattr(parallel(max_branches=2)(Sub), PARALLEL_ATTRIBUTE) == 2  # redeclared
    assert getattr(Base, PARALLEL_ATTRIBUTE) == 3
    for bad in (0, -1, "8", 2.5, True):
        with pytest.raises(DefinitionError, match=r"max_branches must be an integer >= 1"):
            parallel(max_branches=bad)
    with pytest.raises(DefinitionError, match=r"@parallel on \S*Sub: max_branches"):
        parallel(Sub, max_branches=0)
    with pytest.raises(DefinitionError, match="decorates a Reactor subclass"):
        parallel(int)
    with pytest.raises(DefinitionError, match="decorates a Reactor subclass"):
        parallel(max_branches=2)(lambda: None)
    with pytest.raises(DefinitionError, match=r"@parallel on \S*Base: it is already declared"):
        parallel(Base)
