"""Property tests: random DAGs of inline steps run in dependency order and roll back exactly.

Each example builds a reactor with ``type(name, (Reactor,), namespace)``. Step ``s{i}`` may
depend (through ``Result(...)`` wiring or ``wait_for``) only on steps with a lower index, so the
graph is acyclic; the steps are declared in a random order so that the engine's topological sort
has real work to do. Every ``run``, ``undo`` and ``compensate`` appends to a log that is fresh for
each example, and the properties are checked against that observed log.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from py_reactor import Failure, Reactor, Result, Skipped, step
from py_reactor.dsl.declaration import StepDeclaration

Event = tuple[Any, ...]

MAX_STEPS = 25


class StepExplodedError(Exception):
    """What a failing step raises when its failure mode is ``"raise"``."""


@dataclass(frozen=True)
class Dag:
    """One generated reactor shape, described by step index."""

    size: int
    deps: tuple[dict[int, str], ...]  # per step: dependency index -> "result" | "wait_for"
    declaration_order: tuple[int, ...]
    skipped: frozenset[int]
    failing: int | None
    fail_mode: str  # "return" (Failure) | "raise"

    def name(self, i: int) -> str:
        return f"s{i}"

    def value(self, i: int) -> str:
        """What step ``i`` hands to its readers (a Skipped step's value flows on too)."""
        return f"skipped:s{i}" if i in self.skipped else f"value:s{i}"


@st.composite
def dags(draw: st.DrawFn, *, failure: bool | None = None) -> Dag:
    """A random DAG of 1..25 steps; ``failure`` forces (True), forbids (False) or mixes (None)."""
    size = draw(st.integers(min_value=1, max_value=MAX_STEPS))
    deps: list[dict[int, str]] = []
    for i in range(size):
        if i == 0:
            deps.append({})
            continue
        deps.append(
            draw(
                st.dictionaries(
                    st.integers(min_value=0, max_value=i - 1),
                    st.sampled_from(["result", "wait_for"]),
                    max_size=i,
                )
            )
        )
    order = tuple(draw(st.permutations(range(size))))
    skipped = draw(st.frozensets(st.integers(min_value=0, max_value=size - 1)))
    if failure is None:
        failing = draw(st.none() | st.integers(min_value=0, max_value=size - 1))
    elif failure:
        failing = draw(st.integers(min_value=0, max_value=size - 1))
    else:
        failing = None
    fail_mode = draw(st.sampled_from(["return", "raise"]))
    return Dag(
        size=size,
        deps=tuple(deps),
        declaration_order=order,
        skipped=skipped - {failing},
        failing=failing,
        fail_mode=fail_mode,
    )


def _keyword_signature(params: list[str]) -> inspect.Signature:
    return inspect.Signature([inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY) for p in params])


def _run_fn(dag: Dag, i: int, params: list[str], log: list[Event]) -> Callable[..., Any]:
    name = dag.name(i)

    def run(**kwargs: Any) -> Any:
        log.append(("run", name, kwargs))
        if i == dag.failing:
            if dag.fail_mode == "raise":
                raise StepExplodedError(name)
            return Failure(f"{name} failed")
        if i in dag.skipped:
            return Skipped(dag.value(i), reason="nothing to do")
        return dag.value(i)

    # The inline step's contract is read from the signature: exactly the wired arguments.
    run.__signature__ = _keyword_signature(params)  # type: ignore[attr-defined]
    run.__qualname__ = run.__name__ = name
    return run


def _undo_fn(name: str, log: list[Event]) -> Callable[..., Any]:
    def undo(result: Any, **kwargs: Any) -> None:
        log.append(("undo", name, result, kwargs))

    return undo


def _compensate_fn(name: str, log: list[Event]) -> Callable[..., Any]:
    def compensate(error: Any, **kwargs: Any) -> None:
        log.append(("compensate", name, error, kwargs))

    return compensate


def build_reactor(dag: Dag, log: list[Event]) -> type[Reactor]:
    """The reactor ``dag`` describes; every hook appends to ``log``."""
    namespace: dict[str, Any] = {}
    for i in dag.declaration_order:
        wiring = {f"r{d}": Result(dag.name(d)) for d, how in dag.deps[i].items() if how == "result"}
        wait_for = [dag.name(d) for d, how in dag.deps[i].items() if how == "wait_for"]
        decl: StepDeclaration = step(
            _run_fn(dag, i, list(wiring), log), wait_for=wait_for, **wiring
        )
        decl.undo(_undo_fn(dag.name(i), log))
        decl.compensate(_compensate_fn(dag.name(i), log))
        namespace[dag.name(i)] = decl
    return type("DagReactor", (Reactor,), namespace)


def _events(log: list[Event], kind: str) -> list[Event]:
    return [e for e in log if e[0] == kind]


def _ran(log: list[Event]) -> list[str]:
    return [e[1] for e in _events(log, "run")]


@settings(max_examples=200, deadline=None)
@given(dags())
def test_steps_run_once_after_their_dependencies(dag: Dag) -> None:
    """Every step that ran did so once, after all of its dependencies ran, with their values."""
    log: list[Event] = []
    reactor = build_reactor(dag, log)
    reactor.run()

    ran = _ran(log)
    assert len(ran) == len(set(ran)), f"a step ran twice: {ran}"
    position = {name: p for p, name in enumerate(ran)}
    for _, name, kwargs in _events(log, "run"):
        i = int(name[1:])
        for d in dag.deps[i]:
            dep = dag.name(d)
            assert dep in position, f"{name} ran but its dependency {dep} did not"
            assert position[dep] < position[name], f"{name} ran before its dependency {dep}"
        expected = {f"r{d}": dag.value(d) for d, how in dag.deps[i].items() if how == "result"}
        assert kwargs == expected


@settings(max_examples=200, deadline=None)
@given(dags(failure=True))
def test_failure_undoes_exactly_the_completed_steps_newest_first(dag: Dag) -> None:
    """A failing step stops the run; completed non-skipped steps are undone once, newest first."""
    log: list[Event] = []
    reactor = build_reactor(dag, log)
    outcome = reactor.run()
    failing = dag.name(dag.failing)  # type: ignore[arg-type]

    ran = _ran(log)
    order = reactor.__py_reactor_order__
    assert ran[-1] == failing
    assert ran == list(order[: order.index(failing) + 1]), "steps after the failure ran"

    completed = [name for name in ran[:-1] if int(name[1:]) not in dag.skipped]
    undone = [e[1] for e in _events(log, "undo")]
    assert undone == completed[::-1]
    assert failing not in undone
    for _, name, result, kwargs in _events(log, "undo"):
        assert result == dag.value(int(name[1:]))
        assert kwargs == next(e[2] for e in _events(log, "run") if e[1] == name)
    assert [e[1] for e in _events(log, "compensate")] == [failing]

    assert not outcome.is_success
    assert outcome.status == "failed"
    assert outcome.step_name == failing
    assert outcome.rollback_failures == []
    if dag.fail_mode == "raise":
        assert isinstance(outcome.error, StepExplodedError)
    else:
        assert outcome.error == f"{failing} failed"


@settings(max_examples=200, deadline=None)
@given(dags(failure=False))
def test_without_failure_everything_runs_and_nothing_is_undone(dag: Dag) -> None:
    """Without a failing step every step runs once, the run succeeds and nothing is undone."""
    log: list[Event] = []
    reactor = build_reactor(dag, log)
    outcome = reactor.run()

    ran = _ran(log)
    assert sorted(ran) == sorted(dag.name(i) for i in range(dag.size))
    assert len(ran) == len(set(ran))
    assert _events(log, "undo") == []
    assert _events(log, "compensate") == []
    assert outcome.is_success
    assert outcome.status == "completed"
    assert dict(outcome.results) == {dag.name(i): dag.value(i) for i in range(dag.size)}
