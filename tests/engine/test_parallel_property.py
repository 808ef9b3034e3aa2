"""Property tests: a ``@parallel`` run of a random DAG ends as the sequential run of it does.

The DAGs and their reactors come from ``test_dag_property`` (inline steps ``s{i}`` that may
read, or wait for, lower-numbered steps; some skipped, at most one failing). Each example runs
the same shape sequentially and with ``@parallel``:

* with ``max_branches=1`` the parallel walk must *be* the sequential one: the same steps run,
  undone and compensated in the same order, and the same outcome;
* with ``max_branches=8`` which independent steps get to run before a failure is a matter of
  timing, so the undo set is compared where it is determined: the steps the failing one depends
  on (which must have run in both) are undone in both; in each run, exactly the steps it
  completed are undone, once, each after it ran and before every step it depends on.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from py_reactor import Reactor, parallel
from py_reactor.engine.results import Outcome
from tests.engine.test_dag_property import Dag, Event, build_reactor, dags

EXAMPLES = 50


def _run(dag: Dag, max_branches: int | None) -> tuple[Outcome, list[Event], type[Reactor]]:
    log: list[Event] = []
    reactor = build_reactor(dag, log)
    if max_branches is not None:
        reactor = parallel(max_branches=max_branches)(reactor)
    return reactor.run(), log, reactor


def _summary(outcome: Outcome) -> dict[str, Any]:
    error = getattr(outcome, "error", None)
    return {
        "status": outcome.status,
        "results": dict(outcome.results),
        "value": outcome.value,
        "step": getattr(outcome, "step_name", None),
        "error": None if error is None else (type(error), str(error)),
        "rollback_failures": getattr(outcome, "rollback_failures", []),
    }


def _comparable(log: list[Event]) -> list[Event]:
    """``log`` with exceptions as (class, text): two raises of one error compare equal."""
    return [
        tuple((type(v), str(v)) if isinstance(v, BaseException) else v for v in event)
        for event in log
    ]


def _names(log: list[Event], kind: str) -> list[str]:
    return [e[1] for e in log if e[0] == kind]


def _ancestors(dag: Dag, i: int) -> set[int]:
    """Every step ``i`` depends on, directly or not."""
    found: set[int] = set()
    stack = list(dag.deps[i])
    while stack:
        d = stack.pop()
        if d not in found:
            found.add(d)
            stack.extend(dag.deps[d])
    return found


@settings(max_examples=EXAMPLES, deadline=None)
@given(dags())
def test_one_branch_at_a_time_is_the_sequential_walk(dag: Dag) -> None:
    sequential, seq_log, _ = _run(dag, None)
    one, one_log, _ = _run(dag, 1)
    assert _comparable(one_log) == _comparable(seq_log)
    assert _summary(one) == _summary(sequential)


@settings(max_examples=EXAMPLES, deadline=None)
@given(dags(), st.integers(min_value=2, max_value=8))
def test_parallel_runs_end_like_the_sequential_run(dag: Dag, max_branches: int) -> None:
    sequential, seq_log, _ = _run(dag, None)
    outcome, log, _ = _run(dag, max_branches)
    assert outcome.status == sequential.status

    ran = _names(log, "run")
    assert len(ran) == len(set(ran)), f"a step ran twice: {ran}"
    position = {name: p for p, name in enumerate(ran)}
    for name in ran:  # every step ran after all of its dependencies
        for d in dag.deps[int(name[1:])]:
            assert position[dag.name(d)] < position[name], f"{name} ran before s{d}"

    if dag.failing is None:
        assert _summary(outcome) == _summary(sequential)
        assert sorted(ran) == sorted(dag.name(i) for i in range(dag.size))
        assert _names(log, "undo") == [] == _names(log, "compensate")
        return

    failing = dag.name(dag.failing)
    assert outcome.step_name == sequential.step_name == failing
    assert _summary(outcome)["error"] == _summary(sequential)["error"]
    assert outcome.rollback_failures == []
    # only skipped steps keep a result (they are never undone)
    assert set(outcome.results) == {n for n in ran if int(n[1:]) in dag.skipped}
    assert _names(log, "compensate") == [failing]
    for i in range(dag.size):  # nothing that needs the failing step's result ran
        if dag.failing in _ancestors(dag, i):
            assert dag.name(i) not in ran

    undone = _names(log, "undo")
    completed = {n for n in ran if n != failing and int(n[1:]) not in dag.skipped}
    assert len(undone) == len(set(undone))
    assert set(undone) == completed
    needed = {dag.name(d) for d in _ancestors(dag, dag.failing) if d not in dag.skipped}
    assert needed <= set(undone)
    assert needed <= set(_names(seq_log, "undo"))
    undo_at = {name: p for p, name in enumerate(undone)}
    index = {e: p for p, e in enumerate((e[0], e[1]) for e in log)}
    compensated = index[("compensate", failing)]
    for name in undone:
        assert index[("run", name)] < index[("undo", name)]
        assert compensated < index[("undo", name)]
        for d in dag.deps[int(name[1:])]:  # undone before what it depends on
            if dag.name(d) in undo_at:
                assert undo_at[name] < undo_at[dag.name(d)]
