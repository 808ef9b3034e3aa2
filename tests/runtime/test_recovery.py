"""Recovery of background executions, with real processes and the session's real Redis.

What an execution needs lives in the store, so another process finishes what a killed one
left; a stale runner cannot overwrite its successor's progress; a record a worker cannot read
or whose reactor it cannot import is failed (never retried forever) while the worker goes on
serving; ``find`` reports every status a test can reach deterministically.

Every test starts and ends with this process's thread worker stopped; tests that need one start
it. Marker keys written by the reactors start with the test's unique ``key``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import py_reactor
import py_reactor.transport.threads
import py_reactor.workers
from py_reactor import (
    Context,
    DispatchedResult,
    Execution,
    FailureResult,
    HaltedResult,
    Lock,
    Middleware,
    OrderedLock,
    Period,
    Reactor,
    SuccessResult,
    configure,
    dumps_context,
    find,
)
from py_reactor.dsl import registry
from py_reactor.dsl.registry import class_path
from py_reactor.engine.serializer import SCHEMA_VERSION
from py_reactor.errors import OrderedLockWaitError, PeriodBusyError, ReactorNotImportableError
from py_reactor.observability import events as ev
from py_reactor.runtime.drive import run_execution
from py_reactor.storage import current_store
from py_reactor.storage.executions import (
    INDEX_KEY,
    LEASES_KEY,
    ExecutionStore,
    record_key,
)
from py_reactor.storage.keys import due
from py_reactor.transport.threads import THREADS
from tests._processes import child as start_child
from tests._processes import stderr_of
from tests._wait import until
from tests.runtime import _recovery_reactors as rr

#: How long after a release a woken run may take to complete; far below the 30 s park timer
#: of the tests that assert it.
WOKEN_WITHIN = 10.0

#: The due set of the tests' namespace (every reactor here is in package ``tests``).
DUE_KEY = due("tests")


@pytest.fixture(autouse=True)
def _no_worker(_default_settings: None, redis_url: str) -> Iterator[None]:
    """Point py_reactor at the private server, with no thread worker in this process."""
    configure(redis_url=redis_url)
    py_reactor.workers.stop()  # one started by an earlier test would race this test's own
    yield
    py_reactor.workers.stop()


@pytest.fixture
def executions() -> ExecutionStore:
    """The execution records of the configured store."""
    return ExecutionStore(current_store())


def child(entry: str, *args: str) -> subprocess.Popen[bytes]:
    """Start ``_recovery_reactors.<entry>(*args)`` in a new interpreter."""
    return start_child("tests.runtime._recovery_reactors", entry, *args)


def store_pending(
    executions: ExecutionStore, reactor: str, inputs: dict[str, Any], *, context: str | None = None
) -> str:
    """Store a dispatched-but-not-run execution of ``reactor`` the way ``dispatch`` does."""
    ctx = Context(reactor=reactor, inputs=inputs)
    text = dumps_context(ctx) if context is None else context
    assert executions.create(ctx.execution_id, reactor, text, "pending", namespace="tests")
    return ctx.execution_id


def forget(client: redis.Redis, execution_id: str) -> None:
    """Remove an execution this test left unfinishable, so no later worker churns on it."""
    client.delete(record_key(execution_id))
    for index in (INDEX_KEY, LEASES_KEY, DUE_KEY):
        client.zrem(index, execution_id)


def server_ms(client: redis.Redis) -> int:
    """The server's clock in milliseconds (leases are on it)."""
    sec, usec = client.time()
    return int(sec) * 1000 + int(usec) // 1000


def dispatched(outcome: object) -> DispatchedResult:
    """``outcome``, checked to be the ``DispatchedResult`` of a background ``run()``."""
    assert isinstance(outcome, DispatchedResult), outcome
    return outcome


def assert_still_serving(executions: ExecutionStore, tag: str) -> None:
    """The worker already running in this process runs an execution stored after the bad one
    (stored directly: a ``run()`` would start a new worker if that one had died)."""
    execution_id = store_pending(executions, class_path(rr.Ok), {"tag": tag})
    outcome = py_reactor.workers.wait(execution_id, timeout=10)
    assert isinstance(outcome, SuccessResult), outcome
    assert outcome.value == f"ok {tag}"


class Recovered(Middleware):
    """Records the ids of ``ExecutionRecovered`` events."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def on_execution_recovered(self, event: ev.ExecutionRecovered) -> None:
        self.ids.append(event.execution_id)


# -- 1. kill -9 mid-step, recovery by another process ----------------------------------------


def test_a_killed_runner_is_recovered_rerunning_only_the_step_in_flight(
    redis_url: str, key: str, raw: redis.Redis
) -> None:
    """A dispatches and runs ``InterruptedTwice``; kill -9 of A inside ``slow``; this process
    (lease 1 s) recovers it: it completes, ``first`` ran once, ``slow`` twice."""
    a = child("dispatch_and_linger", redis_url, key)
    try:
        until(
            lambda: raw.get(f"{key}:started") or a.poll() is not None,
            "A entering the slow step",
        )
        assert a.poll() is None, f"A exited early:\n{stderr_of(a)}"
        execution_id = str(until(lambda: raw.get(f"{key}:id"), "A publishing the execution id"))

        running = find(execution_id)
        assert running is not None
        assert running.status == "running"
        assert running.results == {"first": 1}  # checkpointed after `first`, before `slow`
        assert running.outcome is None
        record = raw.hgetall(record_key(execution_id))
        assert record["epoch"] == "1"
        assert f":{a.pid}:" in record["worker"]

        # While A lives, its worker renews the 1 s lease: it is never given up for recovery.
        first_lease = raw.zscore(LEASES_KEY, execution_id)
        assert first_lease is not None
        until(lambda: server_ms(raw) > first_lease + 300, "the first lease running out")
        lease = raw.zscore(LEASES_KEY, execution_id)
        assert lease is not None, "A's lease lapsed while A was alive"
        assert lease > server_ms(raw), "A's lease was not renewed"
        assert raw.zscore(DUE_KEY, execution_id) is None
        assert raw.hget(record_key(execution_id), "epoch") == "1"
    finally:
        os.kill(a.pid, signal.SIGKILL)
        a.wait(10)
    assert a.returncode == -signal.SIGKILL
    a.communicate(timeout=10)

    recovered = Recovered()
    configure(redis_url=redis_url, execution_lease=1.0, middleware=[recovered])
    py_reactor.workers.start()
    outcome = py_reactor.workers.wait(execution_id, timeout=15)

    assert isinstance(outcome, SuccessResult), outcome
    assert outcome.value == "done"
    assert raw.get(f"{key}:first") == "1"  # the completed step was not run again
    assert raw.get(f"{key}:slow") == "2"  # the step in flight was re-run, once
    done = find(execution_id)
    assert done is not None
    assert done.status == "completed"
    assert done.results == {"first": 1, "slow": "done"}
    assert isinstance(done.outcome, SuccessResult)
    record = raw.hgetall(record_key(execution_id))
    assert record["epoch"] == "2"
    assert f":{os.getpid()}:" in record["worker"]
    assert raw.zscore(LEASES_KEY, execution_id) is None
    assert raw.zscore(DUE_KEY, execution_id) is None
    assert execution_id in recovered.ids


# -- 2. a stale runner cannot overwrite ------------------------------------------------------


def test_a_stale_epoch_writes_nothing(
    executions: ExecutionStore, raw: redis.Redis, key: str
) -> None:
    """Claimed (epoch 1), its lease lapses, claimed again (epoch 2): every write with epoch 1
    is refused and leaves the record, its lease and the due set as epoch 2 left them."""
    reactor = class_path(rr.Ok)
    execution_id = store_pending(executions, reactor, {"tag": key})
    assert executions.claim(execution_id, "runner-1", 0.3) == 1
    assert executions.claim(execution_id, "runner-2", 0.3, due=False) == 0  # the lease is live

    epoch = until(
        lambda: executions.claim(execution_id, "runner-2", 30.0, due=False),
        "the first runner's lease lapsing",
        timeout=5,
    )
    assert epoch == 2
    newer = dumps_context(Context(reactor=reactor, inputs={"tag": "epoch 2"}))
    assert executions.checkpoint(execution_id, 2, newer, "running", lease=30.0)
    before = raw.hgetall(record_key(execution_id))
    lease = raw.zscore(LEASES_KEY, execution_id)

    stale = dumps_context(Context(reactor=reactor, inputs={"tag": "epoch 1"}))
    parked_list = f"{key}:parked"
    writes = [
        executions.checkpoint(execution_id, 1, stale, "running", lease=100.0),
        executions.checkpoint(
            execution_id, 1, stale, "completed", outcome={"status": "completed", "value": 1}
        ),
        executions.checkpoint(
            execution_id,
            1,
            stale,
            "waiting",
            waiting_on={"step": "only", "primitive": "lock", "key": key},
            due_in=0,
            parked_on=parked_list,
            park=True,
        ),
        executions.renew(execution_id, 1, 100.0),
    ]
    assert writes == [False, False, False, False]
    assert raw.hgetall(record_key(execution_id)) == before
    assert raw.zscore(LEASES_KEY, execution_id) == lease
    assert raw.zscore(DUE_KEY, execution_id) is None
    assert raw.exists(parked_list) == 0
    stored = executions.load(execution_id)
    assert stored is not None
    assert (stored.epoch, stored.status, stored.worker) == (2, "running", "runner-2")
    assert stored.context == newer

    # The owner of epoch 2 ends it; nobody may claim it afterwards.
    done = {"status": "completed", "value": "ok"}
    assert executions.checkpoint(execution_id, 2, newer, "completed", outcome=done)
    assert executions.claim(execution_id, "runner-3", 30.0, due=False) == -2


def test_a_runner_made_stale_mid_step_stops_and_writes_nothing(
    executions: ExecutionStore, raw: redis.Redis, key: str
) -> None:
    """While ``take_over`` runs, its runner's lease lapses and someone else claims the
    execution: the runner's checkpoint is refused, it stops ("stale"), ``after`` never runs,
    and the record stays as the new claimant left it."""
    configure(execution_lease=0.3)  # run_execution is called directly: nobody renews it
    execution_id = store_pending(executions, class_path(rr.Usurped), {"tag": key})

    assert run_execution(execution_id, "runner-1", transport=THREADS) == "stale"

    assert raw.get(f"{key}:takeover") == "1"
    assert raw.get(f"{key}:usurped") == "2"
    assert raw.get(f"{key}:after") is None
    stored = executions.load(execution_id)
    assert stored is not None
    assert (stored.epoch, stored.status, stored.worker) == (2, "running", "usurper")
    snapshot = find(execution_id)
    assert snapshot is not None
    assert snapshot.results == {}  # the stale runner's `take_over` result was never written
    assert snapshot.outcome is None
    forget(raw, execution_id)  # the usurper is the test: it will not finish the run


def test_a_stale_runner_leaves_the_executions_ordered_turn_to_the_run_that_claimed_it(
    executions: ExecutionStore, raw: redis.Redis, key: str
) -> None:
    """A runner made stale inside its reactor-level ordered turn stops without passing the
    turn on (nor failing it, which under ``strict`` would skip every later position): the turn
    is the execution's, and the runner that claimed the execution is the one inside it now."""
    configure(execution_lease=0.3)  # run_execution is called directly: nobody renews it
    execution_id = store_pending(executions, class_path(rr.UsurpedInTurn), {"tag": key})

    assert run_execution(execution_id, "runner-1", transport=THREADS) == "stale"

    assert raw.get(f"{key}:usurped") == "2"
    assert raw.get(f"{key}:after") is None
    state = OrderedLock(f"{key}:seq").state()
    assert (state.last_completed, state.in_flight, state.failed) == (0, 1, False)
    with pytest.raises(OrderedLockWaitError, match="did not get its turn"):
        OrderedLock(f"{key}:seq", wait=0.2).wait_turn(OrderedLock(f"{key}:seq").take_position())
    forget(raw, execution_id)


def test_a_stale_runner_leaves_the_executions_period_claim_to_the_run_that_claimed_it(
    executions: ExecutionStore, raw: redis.Redis, key: str
) -> None:
    """A runner made stale inside its reactor-level period claim stops without giving the
    claim up: the run that claimed the execution carries it, and nobody else may claim the
    bucket meanwhile (the work would run twice in one period)."""
    configure(execution_lease=0.3)
    execution_id = store_pending(executions, class_path(rr.UsurpedInPeriod), {"tag": key})

    assert run_execution(execution_id, "runner-1", transport=THREADS) == "stale"

    assert raw.get(f"{key}:usurped") == "2"
    period = Period(f"{key}:daily", every="day")
    assert not period.is_done()
    with pytest.raises(PeriodBusyError):
        period.claim("somebody-else", wait=0.2)
    forget(raw, execution_id)


# -- 3. a corrupted stored context -----------------------------------------------------------

#: Stored contexts a worker cannot read, and what its error must say about each.
CORRUPT_CONTEXTS = [
    ("{this is not json", "must be JSON text"),
    ("[1, 2, 3]", "not a serialized py_reactor context"),
    (json.dumps({"schema_version": 99, "context": {}}), "schema_version 99"),
    (json.dumps({"schema_version": SCHEMA_VERSION, "context": {"reactor": 5}}), "not a valid"),
]


def test_a_corrupted_context_fails_its_execution_and_the_worker_goes_on(
    redis_url: str, key: str, raw: redis.Redis, executions: ExecutionStore
) -> None:
    """Executions dispatched by a process that exited before running them, their stored
    contexts then corrupted: a worker fails each (the error names the cause) and goes on."""
    dispatcher = child("dispatch_without_running", redis_url, key, str(len(CORRUPT_CONTEXTS)))
    assert dispatcher.wait(30) == 0, stderr_of(dispatcher)
    dispatcher.communicate(timeout=10)
    ids = [str(i) for i in raw.lrange(f"{key}:ids", 0, -1)]
    assert len(ids) == len(CORRUPT_CONTEXTS)
    for execution_id, (garbage, _) in zip(ids, CORRUPT_CONTEXTS, strict=True):
        pending = find(execution_id)
        assert pending is not None
        assert pending.status == "pending", pending
        raw.hset(record_key(execution_id), "context", garbage)

    py_reactor.workers.start()
    for i, (execution_id, (_, cause)) in enumerate(zip(ids, CORRUPT_CONTEXTS, strict=True)):
        outcome = py_reactor.workers.wait(execution_id, timeout=10)
        assert isinstance(outcome, FailureResult), outcome
        message = str(outcome.error)
        assert execution_id in message
        assert class_path(rr.Ok) in message
        assert cause in message, message
        assert outcome.exception_class == "py_reactor.errors.SerializationError"
        failed = find(execution_id)
        assert failed is not None
        assert failed.status == "failed"
        assert isinstance(failed.outcome, FailureResult)
        assert cause in str(failed.outcome.error)
        assert raw.hget(record_key(execution_id), "epoch") == "1"  # failed at once, not retried
        assert raw.get(f"{key}-{i}:ok") is None  # the step never ran
    assert_still_serving(executions, f"{key}-after")


@pytest.mark.parametrize(
    "corrupt",
    [
        pytest.param(lambda c, k: c.hdel(k, "context"), id="context-field-missing"),
        pytest.param(lambda c, k: c.hset(k, "waiting_on", "{oops"), id="waiting_on-not-json"),
    ],
)
def test_an_unreadable_record_is_failed_not_retried_forever(
    executions: ExecutionStore,
    raw: redis.Redis,
    key: str,
    corrupt: Callable[[redis.Redis, str], Any],
) -> None:
    """A record the worker cannot load ends failed on its first claim (epoch 1)."""
    configure(execution_lease=0.5)
    execution_id = store_pending(executions, class_path(rr.Ok), {"tag": key})
    corrupt(raw, record_key(execution_id))
    py_reactor.workers.start()
    try:
        until(
            lambda: (
                raw.hget(record_key(execution_id), "status") in py_reactor.workers.TERMINAL
                or int(raw.hget(record_key(execution_id), "epoch") or 0) >= 2
            ),
            "the execution failing, or being claimed a second time",
            timeout=10,
        )
        assert raw.hget(record_key(execution_id), "status") == "failed"
        assert raw.hget(record_key(execution_id), "epoch") == "1"
    finally:
        py_reactor.workers.stop()
        forget(raw, execution_id)


# -- 4. a reactor the worker cannot import ---------------------------------------------------


@pytest.mark.parametrize(
    ("reactor", "cause"),
    [
        ("tests.workers._no_such_module:Gone", "cannot import module 'tests.workers._no_such"),
        ("tests.runtime._recovery_reactors:Renamed", "is not defined"),
        ("tests.runtime._recovery_reactors:client", "is not defined"),  # not a Reactor
    ],
)
def test_an_unimportable_reactor_fails_naming_the_class_and_the_worker_goes_on(
    executions: ExecutionStore, raw: redis.Redis, key: str, reactor: str, cause: str
) -> None:
    """A stored execution of a ``module:qualname`` the worker cannot import (no grace left to
    wait for another worker): failed, the error names the class and the cause; the same worker
    then runs another execution."""
    configure(unimportable_grace=0)
    execution_id = store_pending(executions, reactor, {"tag": key})
    py_reactor.workers.start()
    outcome = py_reactor.workers.wait(execution_id, timeout=10)
    assert isinstance(outcome, FailureResult), outcome
    message = str(outcome.error)
    assert reactor in message, message
    assert cause in message, message
    assert isinstance(outcome.error, ReactorNotImportableError)
    assert outcome.exception_class == "py_reactor.errors.ReactorNotImportableError"
    assert outcome.rollback_failures == []  # no step had completed
    assert outcome.reactor_name == reactor.rpartition(":")[2]
    failed = find(execution_id)
    assert failed is not None
    assert failed.status == "failed"
    assert failed.reactor == reactor
    assert failed.inputs == {"tag": key}  # the readable context was kept
    assert raw.hget(record_key(execution_id), "epoch") == "1"
    assert raw.zscore(DUE_KEY, execution_id) is None
    assert raw.zscore(LEASES_KEY, execution_id) is None
    assert_still_serving(executions, f"{key}-after")


def test_a_reactor_not_importable_here_is_left_for_another_worker_then_failed_reporting_its_steps(
    raw: redis.Redis, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``reserve`` and ``book`` ran in the caller; no worker can import the class: it stays
    pending (never claimed) for ``unimportable_grace``, then fails with a typed error, every
    completed step reported as a rollback failure. A process that can import it undoes them."""
    grace = 2.0
    configure(unimportable_grace=grace)
    path = class_path(rr.BooksInTheCaller)
    monkeypatch.delitem(registry._classes, path)  # the class is gone from this "worker"
    out = dispatched(rr.BooksInTheCaller.run(tag=key))
    record = record_key(out.execution_id)

    until(
        lambda: raw.hget(record, "unimportable_since") or raw.hget(record, "status") == "failed",
        "a worker finding it unimportable",
    )
    assert raw.hget(record, "status") == "pending"  # left for another worker, not failed
    assert raw.hget(record, "epoch") == "0"  # never claimed
    outcome = py_reactor.workers.wait(out.execution_id, timeout=grace + 15)

    assert isinstance(outcome, FailureResult), outcome
    assert isinstance(outcome.error, ReactorNotImportableError)
    assert outcome.exception_class == "py_reactor.errors.ReactorNotImportableError"
    assert path in str(outcome.error)
    failed = find(out.execution_id)
    assert failed is not None
    assert failed.status == "failed"
    assert failed.updated_at - failed.created_at >= grace  # not before the grace ran out
    assert raw.hget(record, "epoch") == "1"  # claimed once, to fail it
    assert [(f["step"], f["kind"], f["key"], f["reason"]) for f in outcome.rollback_failures] == [
        ("book", "undo", None, "reactor not importable here"),
        ("reserve", "undo", None, "reactor not importable here"),
    ]
    assert all(path in f["message"] for f in outcome.rollback_failures)
    assert raw.lrange(f"{key}:log", 0, -1) == ["reserve", "book"]  # nothing ran, nothing undone
    assert failed.results == {"reserve": "reserved", "book": "booked"}

    monkeypatch.undo()  # a process that can import the class undoes what was left
    undone = py_reactor.workers.undo(out.execution_id)
    assert undone.status == "cancelled"
    assert raw.lrange(f"{key}:log", 0, -1) == ["reserve", "book", "undo book", "undo reserve"]


def test_a_worker_that_can_import_the_reactor_within_the_grace_runs_it(
    raw: redis.Redis, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Left by a worker that cannot import it; the class is importable again before the grace
    ends (another worker, a deploy): the run completes, and the mark is gone."""
    configure(unimportable_grace=60.0)
    path = class_path(rr.BooksInTheCaller)
    monkeypatch.delitem(registry._classes, path)
    out = dispatched(rr.BooksInTheCaller.run(tag=key))
    record = record_key(out.execution_id)
    until(
        lambda: raw.hget(record, "unimportable_since") or raw.hget(record, "status") == "failed",
        "a worker finding it unimportable",
    )
    assert raw.hget(record, "status") == "pending"

    monkeypatch.undo()  # importable here now
    outcome = py_reactor.workers.wait(out.execution_id, timeout=15)

    assert isinstance(outcome, SuccessResult), outcome
    assert outcome.value == "paid"
    assert raw.lrange(f"{key}:log", 0, -1) == ["reserve", "book", "pay"]
    assert not raw.hget(record, "unimportable_since")  # a later worker gets the whole grace


def test_unimportable_grace_is_a_finite_number_of_seconds() -> None:
    assert py_reactor.get_config().unimportable_grace == 60.0
    for bad in (-1, float("inf"), "60", True):
        with pytest.raises(ValueError, match=r"configure\(unimportable_grace=\.\.\.\)"):
            configure(unimportable_grace=bad)  # type: ignore[arg-type]
    assert configure(unimportable_grace=0).unimportable_grace == 0


# -- 5. find() -------------------------------------------------------------------------------


def test_find_pending_then_completed(
    executions: ExecutionStore, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dispatched with no worker running: pending; once a worker runs it: completed."""
    monkeypatch.setattr(py_reactor.transport.threads, "ensure_worker", lambda: None)
    out = dispatched(rr.Ok.run(tag=key))
    assert out.status == "dispatched"
    pending = find(out.execution_id)
    assert pending is not None
    assert pending.execution_id == out.execution_id
    assert pending.reactor == class_path(rr.Ok)
    assert pending.status == "pending"
    assert pending.inputs == {"tag": key}
    assert (pending.results, pending.outcome, pending.waiting_on) == ({}, None, None)
    assert rr.Ok.find(out.execution_id) == pending  # the reactor's own find reads the same

    monkeypatch.undo()
    py_reactor.workers.start()
    outcome = out.wait(timeout=10)
    assert isinstance(outcome, SuccessResult)
    assert outcome.value == f"ok {key}"
    done = find(out.execution_id)
    assert done is not None
    assert done.status == "completed"
    assert done.results == {"only": f"ok {key}"}
    assert isinstance(done.outcome, SuccessResult)
    assert done.outcome.value == f"ok {key}"
    assert done.waiting_on is None
    assert done.updated_at >= done.created_at


def test_find_failed(key: str) -> None:
    """A step that raises: failed, the outcome rebuilt with the original exception class."""
    out = dispatched(rr.Boom.run(tag=key))
    assert isinstance(out.wait(timeout=10), FailureResult)
    failed = find(out.execution_id)
    assert failed is not None
    assert failed.status == "failed"
    outcome = failed.outcome
    assert isinstance(outcome, FailureResult)
    assert isinstance(outcome.error, ValueError)
    assert str(outcome.error) == f"boom {key}"
    assert outcome.step_name == "explode"
    assert outcome.exception_class == "ValueError"  # as a run in place names it


def test_find_halted(key: str) -> None:
    """A step that returns Halt: halted, with the reason and the step."""
    out = dispatched(rr.Halts.run(tag=key))
    assert isinstance(out.wait(timeout=10), HaltedResult)
    halted = find(out.execution_id)
    assert halted is not None
    assert halted.status == "halted"
    assert isinstance(halted.outcome, HaltedResult)
    assert halted.outcome.reason == f"halted {key}"
    assert halted.outcome.step_name == "stop_here"


@pytest.mark.parametrize(
    ("reactor", "step_name"), [(rr.LockedStep, "guarded"), (rr.LockedReactor, None)]
)
def test_find_waiting_on_a_lock_held_by_the_test(
    key: str, reactor: type[Reactor], step_name: str | None
) -> None:
    """Parked on a lock the test holds: waiting, ``waiting_on`` names it; the release wakes it
    at once (long before the park's 30 s backstop timer)."""
    configure(park_delay=30.0, park_jitter=0.0)
    config = py_reactor.get_config()
    with Lock(key, ttl=30, wait=0):
        before = time.time()
        out = dispatched(reactor.run(lock=key))

        def is_waiting() -> Execution | None:
            found = find(out.execution_id)
            return found if found is not None and found.status == "waiting" else None

        waiting = until(is_waiting, "the execution parking", timeout=10)
        assert waiting.waiting_on is not None
        due = waiting.waiting_on.pop("until")
        assert waiting.waiting_on == {
            "step": step_name,
            "primitive": "lock",
            "key": key,
            "attempt": 1,
        }
        assert before + config.park_delay <= due
        assert due <= time.time() + config.park_delay + config.park_jitter
        assert waiting.parks == 1
        assert waiting.outcome is None
        parked = [entry for entry in waiting.trace if entry["type"] == "parked"]
        assert [(p["step"], p["primitive"], p["key"], p["attempt"]) for p in parked] == [
            (step_name, "lock", key, 1)
        ]
        released = time.monotonic()
    outcome = out.wait(timeout=WOKEN_WITHIN)
    assert time.monotonic() - released < WOKEN_WITHIN  # woken by the release, not the timer
    assert isinstance(outcome, SuccessResult), outcome
    assert outcome.value == key
    done = find(out.execution_id)
    assert done is not None
    assert (done.status, done.waiting_on) == ("completed", None)


def test_find_an_unknown_id_is_none() -> None:
    """An id the store never saw: None (and no worker is needed to say so)."""
    assert find("nonexistent") is None
    assert find("") is None


def test_find_tolerates_a_record_missing_its_context(
    executions: ExecutionStore, raw: redis.Redis, key: str
) -> None:
    """A record whose context field is gone is still found (empty inputs, no outcome)."""
    execution_id = store_pending(executions, class_path(rr.Ok), {"tag": key})
    raw.hdel(record_key(execution_id), "context")
    try:
        found = find(execution_id)
        assert found is not None
        assert (found.status, found.inputs, found.outcome) == ("pending", {}, None)
    finally:
        forget(raw, execution_id)
