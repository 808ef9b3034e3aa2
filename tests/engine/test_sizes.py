"""Reactors of 1, 8 and 200 steps run every step once, in dependency order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from py_reactor import Failure, Reactor, Result, Step, Value, step

RUNS: list[str] = []
UNDOS: list[str] = []


@pytest.fixture(autouse=True)
def _clean_records() -> Iterator[None]:
    """Start every test with empty run and undo logs."""
    RUNS.clear()
    UNDOS.clear()
    yield
    RUNS.clear()
    UNDOS.clear()


class Increment(Step):
    """Returns ``prev + 1`` (or fails when told to); logs its label on run and undo."""

    label: str
    prev: int = 0
    fail: bool = False

    def run(self) -> Any:
        RUNS.append(self.inputs.label)
        if self.inputs.fail:
            return Failure(f"{self.inputs.label} failed")
        return self.inputs.prev + 1

    def undo(self, result: Any) -> Any:
        UNDOS.append(self.inputs.label)


class Sum(Step):
    """Adds six values."""

    a: int
    b: int
    c: int
    d: int
    e: int
    f: int

    def run(self) -> Any:
        RUNS.append("sum")
        values = self.inputs
        return values.a + values.b + values.c + values.d + values.e + values.f


class OneStepReactor(Reactor):
    """A single step."""

    only = step(Increment, label=Value("only"), prev=Value(41))
    returns = "only"


class EightStepReactor(Reactor):
    """A root, six branches reading it, and a sink reading all branches (declared sink first)."""

    sink = step(
        Sum,
        a=Result("b1"),
        b=Result("b2"),
        c=Result("b3"),
        d=Result("b4"),
        e=Result("b5"),
        f=Result("b6"),
    )
    b1 = step(Increment, label=Value("b1"), prev=Result("root"))
    b2 = step(Increment, label=Value("b2"), prev=Result("root"))
    b3 = step(Increment, label=Value("b3"), prev=Result("root"))
    b4 = step(Increment, label=Value("b4"), prev=Result("root"))
    b5 = step(Increment, label=Value("b5"), prev=Result("root"))
    b6 = step(Increment, label=Value("b6"), prev=Result("root"))
    root = step(Increment, label=Value("root"), prev=Value(9))
    returns = "sink"


def build_chain(size: int, *, fail_last: bool = False) -> type[Reactor]:
    """A chain s0 -> s1 -> ... of ``size`` steps, declared last-first so order must be derived."""
    namespace: dict[str, Any] = {"returns": f"s{size - 1}"}
    for i in reversed(range(size)):
        wiring: dict[str, Any] = {"label": Value(f"s{i}")}
        if i > 0:
            wiring["prev"] = Result(f"s{i - 1}")
        if fail_last and i == size - 1:
            wiring["fail"] = Value(True)
        namespace[f"s{i}"] = step(Increment, **wiring)
    return type(f"Chain{size}Reactor", (Reactor,), namespace)


def build_fan(size: int) -> type[Reactor]:
    """A reactor of one root and ``size - 1`` leaves that each read the root's result."""
    namespace: dict[str, Any] = {}
    for i in range(1, size):
        namespace[f"leaf{i}"] = step(Increment, label=Value(f"leaf{i}"), prev=Result("root"))
    namespace["root"] = step(Increment, label=Value("root"), prev=Value(100))
    return type(f"Fan{size}Reactor", (Reactor,), namespace)


Chain200Reactor = build_chain(200)
FailingChain200Reactor = build_chain(200, fail_last=True)
Fan200Reactor = build_fan(200)


def test_one_step_reactor() -> None:
    """A one-step reactor runs its step once and returns its value."""
    outcome = OneStepReactor.run()
    assert outcome.is_success is True
    assert outcome.value == 42
    assert RUNS == ["only"]


def test_eight_step_reactor_runs_in_dependency_order() -> None:
    """An eight-step fan-out/fan-in runs the root first, the sink last, each step once."""
    outcome = EightStepReactor.run()
    assert outcome.is_success is True
    assert outcome.value == 6 * 11
    assert len(RUNS) == 8
    assert len(set(RUNS)) == 8
    assert RUNS[0] == "root"
    assert RUNS[-1] == "sum"
    assert RUNS[1:7] == ["b1", "b2", "b3", "b4", "b5", "b6"]
    assert len(outcome.results) == 8


def test_two_hundred_step_chain_runs_every_step_once_in_order() -> None:
    """A 200-step chain built with type() runs s0..s199 once each and returns 200."""
    assert len(Chain200Reactor.__py_reactor_order__) == 200
    outcome = Chain200Reactor.run()
    assert outcome.is_success is True
    assert outcome.value == 200
    assert [f"s{i}" for i in range(200)] == RUNS
    assert outcome.results["s99"] == 100
    assert UNDOS == []


def test_two_hundred_step_fan_runs_root_first_and_every_leaf_once() -> None:
    """A 200-step fan runs the root first, then the 199 leaves once each in declaration order."""
    outcome = Fan200Reactor.run()
    assert outcome.is_success is True
    assert outcome.value is None
    assert RUNS[0] == "root"
    assert RUNS[1:] == [f"leaf{i}" for i in range(1, 200)]
    assert all(outcome.results[f"leaf{i}"] == 102 for i in range(1, 200))


def test_failure_at_end_of_200_step_chain_undoes_the_rest_newest_first() -> None:
    """When the last of 200 chained steps fails, the other 199 are undone newest first."""
    outcome = FailingChain200Reactor.run()
    assert outcome.is_success is False
    assert outcome.step_name == "s199"
    assert outcome.error == "s199 failed"
    assert [f"s{i}" for i in range(200)] == RUNS
    assert [f"s{i}" for i in reversed(range(199))] == UNDOS
    assert outcome.rollback_failures == []
