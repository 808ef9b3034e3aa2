"""Regressions found by review: each test failed on the code before its fix."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from py_reactor import Reactor, Step, step, with_lock, with_ordered_lock, with_period
from tests.engine.coordination._helpers import lock_is_free

SENT: list[str] = []


@with_lock(lambda a: f"{a['key']}-lock", wait=10)
@with_period(lambda a: f"{a['key']}-period", every="day")
class SendDigest(Step):
    """Once a day per key, under a lock; the body waits until every racer has arrived."""

    key: str

    def run(self) -> Any:
        SENT.append(self.inputs.key)
        return "sent"


class Digest(Reactor):
    key: str
    send = step(SendDigest)


def test_losing_the_period_race_under_the_lock_releases_the_lock(key: str) -> None:
    """Racers that find the bucket claimed after taking the lock skip and release it."""
    SENT.clear()
    racers = 6
    start = threading.Barrier(racers, timeout=10)

    def race() -> Any:
        start.wait()
        return Digest.run(key=key)

    with ThreadPoolExecutor(racers) as pool:
        outcomes = list(pool.map(lambda _: race(), range(racers)))
    assert [o.status for o in outcomes] == ["completed"] * racers
    assert [key] == SENT
    assert lock_is_free(f"{key}-lock")


ORDER: list[str] = []


@with_ordered_lock(lambda a: a["key"], wait=5)
class Sequenced(Step):
    key: str
    nested: bool = False

    def run(self) -> Any:
        ORDER.append("outer" if self.inputs.nested else "inner")
        if self.inputs.nested:
            inner = Sequenced.invoke({"key": self.inputs.key})
            return inner.status
        return "done"


@with_ordered_lock(lambda inputs: inputs["key"], wait=5)
class SequencedReactor(Reactor):
    key: str

    @step()
    def inner(key: str) -> str:
        ORDER.append("inner")
        return "done"


def test_a_nested_invoke_re_enters_the_ordered_turn_its_execution_holds(key: str) -> None:
    """An ordered step whose body invokes itself on the same key does not wait on itself."""
    ORDER.clear()
    outcome = Sequenced.invoke({"key": key, "nested": True})
    assert outcome.status == "completed", outcome
    assert outcome.value == "completed"
    assert ORDER == ["outer", "inner"]


@with_ordered_lock(lambda inputs: inputs["key"], wait=5)
class OrderedOuter(Reactor):
    key: str

    @step()
    def outer(key: str) -> Any:
        ORDER.append("outer")
        return SequencedReactor.run(key=key).status

    returns = "outer"


def test_a_nested_run_re_enters_the_ordered_turn_its_execution_holds(key: str) -> None:
    """A reactor holding ordered turn K whose step runs another reactor on K completes."""
    ORDER.clear()
    outcome = OrderedOuter.run(key=key)
    assert outcome.status == "completed", outcome
    assert outcome.value == "completed"
    assert ORDER == ["outer", "inner"]
    assert SequencedReactor.run(key=key).status == "completed"  # the sequence moved on
