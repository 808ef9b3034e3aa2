"""A store outage in a worker suspends the run; it never rolls it back (DESIGN §3, issue 19).

A store outage (``StoreUnavailableError``) at any point of a worker run (a step's coordination,
a checkpoint, a store call of the step's own) is not the step's failure: the run is suspended
and completes once the store is back, and nothing is undone. In the caller the step fails as it
always did, naming the store, and the run is rolled back; it was never stored, so nothing
completes it later.

Each test starts its own redis-server, with an append-only file, stops it while a run is between
its two steps, and starts it again on the same port. The steps record what they do in this
process (the thread worker runs them here), never in the Redis that goes away.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import py_reactor.workers
from py_reactor import (
    FailureResult,
    Lock,
    Middleware,
    Outcome,
    Reactor,
    Step,
    Success,
    SuccessResult,
    background,
    configure,
    find,
    step,
    with_lock,
)
from py_reactor.errors import StoreUnavailableError
from py_reactor.observability import events as ev
from tests._redis import PrivateRedis
from tests._wait import until

#: What the steps of each run did, by the run's tag: "a done", "a undone", "b done".
DONE: dict[str, list[str]] = {}


class Pause:
    """Where the runs of one tag stop, the first time they pass there, until ``go``."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.reached = threading.Event()
        self.go = threading.Event()


PAUSES: dict[str, Pause] = {}


def stop_at(tag: str, where: str) -> None:
    """Stop here, the first time a run of ``tag`` passes, if its test asked for ``where``."""
    pause = PAUSES.get(tag)
    if pause is not None and pause.where == where and not pause.reached.is_set():
        pause.reached.set()
        if not pause.go.wait(30):
            raise TimeoutError(f"the test never let the run of {tag} go on from {where}")


class Book(Step):
    """Step a: done, and undone by a rollback."""

    tag: str

    def run(self) -> Any:
        DONE[self.inputs.tag].append("a done")
        stop_at(self.inputs.tag, "end of a")  # done, before its checkpoint
        return Success("booked")

    def undo(self, result: Any) -> Any:
        DONE[self.inputs.tag].append("a undone")
        return Success()


@with_lock(lambda args: f"{args['tag']}:b", ttl=30, wait=0)
class Charge(Step):
    """Step b, under a lock; its own work takes another lock (a store call of its own)."""

    tag: str

    def guard(self) -> Any:
        stop_at(self.inputs.tag, "start of b")  # a is checkpointed, b's lock not yet taken
        return None

    def run(self) -> Any:
        stop_at(self.inputs.tag, "inside b")  # b's lock taken, its work about to start
        with Lock(f"{self.inputs.tag}:inner", ttl=30, wait=0):
            DONE[self.inputs.tag].append("b done")
        return Success("charged")


@background
class InWorker(Reactor):
    """a then b, in a worker."""

    tag: str

    a = step(Book)
    b = step(Charge)

    returns = "b"


class InCaller(Reactor):
    """a then b, in the caller."""

    tag: str

    a = step(Book)
    b = step(Charge)

    returns = "b"


class Seen(Middleware):
    """The events that tell a suspension from a failure and its rollback, in order.

    ``hold``: once set, a suspension (a park) waits in its worker for it before the run goes
    on to write it (the test starts the store again meanwhile).
    """

    def __init__(self) -> None:
        self.events: list[ev.Event] = []
        self.hold: threading.Event | None = None

    def on_step_parked(self, event: ev.StepParked) -> None:
        self.events.append(event)
        if self.hold is not None:
            self.hold.wait(30)

    def on_step_failed(self, event: ev.StepFailed) -> None:
        self.events.append(event)

    def on_reactor_failed(self, event: ev.ReactorFailed) -> None:
        self.events.append(event)

    def on_rollback_started(self, event: ev.RollbackStarted) -> None:
        self.events.append(event)

    def on_undo_started(self, event: ev.UndoStarted) -> None:
        self.events.append(event)

    def on_execution_recovered(self, event: ev.ExecutionRecovered) -> None:
        self.events.append(event)

    def of(self, execution_id: str, *kinds: type[ev.Event]) -> list[ev.Event]:
        return [e for e in self.events if e.execution_id == execution_id and isinstance(e, kinds)]


@pytest.fixture
def server() -> Iterator[PrivateRedis]:
    """A redis-server of this test alone, that keeps its data across a restart."""
    redis_server = PrivateRedis(persistent=True)
    py_reactor.workers.stop(wait=True)  # one of an earlier test served another server
    yield redis_server
    py_reactor.workers.stop(wait=True)  # its dispatcher asks this server for work
    redis_server.stop()


def use(server: PrivateRedis, *, lease: float) -> Seen:
    """py_reactor on the test's server, with that execution lease; events recorded."""
    seen = Seen()
    configure(
        redis_url=server.url,
        execution_lease=lease,
        park_delay=0.2,
        park_jitter=0.1,
        middleware=[seen],
    )
    return seen


def paused(where: str) -> str:
    """A new run tag whose runs stop at ``where`` once."""
    tag = f"outage-{uuid.uuid4().hex[:10]}"
    DONE[tag] = []
    PAUSES[tag] = Pause(where)
    return tag


def through_outage(server: PrivateRedis, tag: str) -> None:
    """Once the run of ``tag`` has stopped at its pause, stop the store and let the run go on."""
    pause = PAUSES[tag]
    assert pause.reached.wait(30), f"the run never reached {pause.where}"
    server.halt()
    pause.go.set()


def parks_on_store(execution_id: str) -> list[tuple[Any, Any, Any]]:
    """The stored trace's parks on the store: ``(step, primitive, key)`` each."""
    execution = find(execution_id)
    assert execution is not None
    return [
        (entry["step"], entry["primitive"], entry["key"])
        for entry in execution.trace
        if entry["type"] == "parked" and entry["primitive"] == "store"
    ]


@pytest.mark.parametrize("where", ["end of a", "start of b", "inside b"])
def test_a_store_outage_in_a_worker_suspends_the_run_and_undoes_nothing(
    server: PrivateRedis, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    # The case is "start of b": the outage met at b's lock used to fail b, undo a, fail
    # to store the failure, and then lease recovery completed the run anyway.
    seen = use(server, lease=1.0)
    tag = paused(where)
    out = InWorker.run(tag=tag)
    through_outage(server, tag)
    until(
        lambda: bool(seen.of(out.execution_id, ev.StepParked, ev.ReactorFailed)),
        f"the run met the outage {where} and did not suspend",
    )
    until(  # the run's end cannot be written either: the worker gives the run up
        lambda: any(out.execution_id in record.getMessage() for record in caplog.records),
        "the worker did not give the run up",
    )
    server.restart()
    final = out.wait(timeout=60)

    assert isinstance(final, SuccessResult), final
    assert final.value == "charged"
    assert "a undone" not in DONE[tag]
    assert seen.of(out.execution_id, ev.RollbackStarted, ev.UndoStarted, ev.StepFailed) == []
    suspended = seen.of(out.execution_id, ev.StepParked)[0]
    assert isinstance(suspended, ev.StepParked)
    step_at = "a" if where == "end of a" else "b"
    assert (suspended.step, suspended.primitive, suspended.key) == (step_at, "store", "")
    assert any(
        f"execution {out.execution_id} is left to lease recovery" in record.getMessage()
        for record in caplog.records
    )
    # Nothing was written: lease recovery ran it again from its last checkpoint (before a, if
    # the outage met a's own checkpoint).
    assert len(seen.of(out.execution_id, ev.ExecutionRecovered)) == 1
    again = ["a done"] if where == "end of a" else []
    assert DONE[tag] == ["a done", *again, "b done"]
    assert parks_on_store(out.execution_id) == []
    execution = find(out.execution_id)
    assert execution is not None
    assert execution.status == "completed"


@pytest.mark.parametrize("where", ["end of a", "start of b", "inside b"])
def test_a_suspension_written_once_the_store_is_back_goes_on_from_it(
    server: PrivateRedis, where: str
) -> None:
    # A lease far longer than the test: lease recovery plays no part.
    seen = use(server, lease=60.0)
    seen.hold = threading.Event()
    tag = paused(where)
    out = InWorker.run(tag=tag)
    through_outage(server, tag)
    until(
        lambda: bool(seen.of(out.execution_id, ev.StepParked, ev.ReactorFailed)),
        f"the run met the outage {where} and did not suspend",
    )
    server.restart()
    seen.hold.set()
    final = out.wait(timeout=30)

    assert isinstance(final, SuccessResult), final
    assert final.value == "charged"
    assert DONE[tag] == ["a done", "b done"]  # each once: the suspension kept a's result
    assert seen.of(out.execution_id, ev.RollbackStarted, ev.UndoStarted, ev.StepFailed) == []
    assert seen.of(out.execution_id, ev.ExecutionRecovered) == []
    step_at = "a" if where == "end of a" else "b"
    assert parks_on_store(out.execution_id) == [(step_at, "store", None)]
    execution = find(out.execution_id)
    assert execution is not None
    assert execution.status == "completed"


def test_a_store_outage_in_the_caller_fails_the_step_naming_the_store(
    server: PrivateRedis,
) -> None:
    use(server, lease=1.0)
    tag = paused("start of b")
    ended: list[Outcome] = []
    runner = threading.Thread(target=lambda: ended.append(InCaller.run(tag=tag)))
    runner.start()
    through_outage(server, tag)
    runner.join(30)

    assert len(ended) == 1
    outcome = ended[0]
    assert isinstance(outcome, FailureResult), outcome
    assert outcome.step_name == "b"
    assert isinstance(outcome.error, StoreUnavailableError)
    assert f"the coordination store at redis://127.0.0.1:{server.port}/0 is unreachable" in str(
        outcome.error
    )
    assert DONE[tag] == ["a done", "a undone"]  # rolled back, as any failure in the caller
    assert outcome.rollback_failures == []
    server.restart()
    # Never stored: no worker can resume it and complete what was undone.
    assert find(outcome.context.execution_id) is None
