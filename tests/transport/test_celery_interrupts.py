"""Interrupts on real Celery worker processes: a run pauses in a worker (its reactor lock given
back), is resumed by correlation id into a worker (the lock taken again there) or by id in this
process; bad payloads and a second resume are refused; a timeout is fired by a worker's
recovery loop; a resumed run parks on its busy reactor lock and is woken by the release.

Two ``py-reactor worker`` processes serve a queue of this module's own for the whole module, on
the session's private redis-server as store and broker; the reactors report through Redis.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest
import redis

from py_reactor import Lock, find
from py_reactor.errors import InputValidationError, InterruptTimeoutError, ResumeError
from py_reactor.testing import assert_paused_at
from tests._wait import until
from tests.transport import _celery_interrupt_reactors as c
from tests.transport._harness import Worker, finished, on_queue, records, serving, waiting, whats

QUEUE = "py_reactor_interrupts"
PARK_DELAY = 30.0  # the workers' park timer: a resume within seconds was woken, not timed
WOKEN_WITHIN = 15.0  # a run that ends this soon after the release was woken, not timed


@pytest.fixture(scope="module")
def interrupt_workers(redis_url: str) -> Iterator[list[Worker]]:
    reactors = "tests.transport._celery_interrupt_reactors"
    with serving(redis_url, QUEUE, reactors, c.Ping, None, PARK_DELAY) as started:
        yield started


@pytest.fixture(autouse=True)
def _on_celery(_default_settings: None, interrupt_workers: list[Worker], redis_url: str) -> None:
    on_queue(redis_url, QUEUE, PARK_DELAY)


def paused(execution_id: str) -> bool:
    found = find(execution_id)
    return found is not None and found.status == "paused"


def test_paused_in_a_worker_and_resumed_by_correlation_id_into_a_worker(
    key: str, raw: redis.Redis
) -> None:
    out = c.Review.run(key=key)
    until(lambda: paused(out.execution_id), "the pause in a worker")
    assert_paused_at(out.execution_id, "review")
    assert find(out.execution_id).holds == []  # type: ignore[union-attr]
    assert Lock(c.lock_key(key)).state().owner is None  # given back on pause

    with pytest.raises(InputValidationError, match=r"\(Approval\): by: Field required"):
        c.Review.resume(correlation_id=f"celery:{key}", payload={"approved": True})
    assert paused(out.execution_id)

    dispatched = c.Review.resume(
        correlation_id=f"celery:{key}", payload={"approved": True, "by": "ann"}
    )
    assert dispatched.status == "dispatched"
    done = dispatched.wait(timeout=60)
    assert done.status == "completed", done
    assert done.value == "paid by ann"
    steps = records(raw, key)
    assert [what for what, _ in steps] == ["prepare", "pay by=ann locked=True"]
    assert all(pid != os.getpid() for _, pid in steps)  # both ran in worker processes
    with pytest.raises(ResumeError, match="resumed already and has completed") as caught:
        c.Review.resume(out.execution_id, {"approved": True, "by": "bob"})
    assert (caught.value.status, caught.value.execution_id) == ("completed", out.execution_id)


def test_paused_in_a_worker_and_resumed_inline_in_this_process(key: str, raw: redis.Redis) -> None:
    out = c.ReviewHere.run(key=key)
    until(lambda: paused(out.execution_id), "the pause in a worker")
    done = c.ReviewHere.resume(out.execution_id, {"note": "here"})
    assert done.status == "completed"
    assert done.value == "finished here"
    (_, worker_pid), (_, resumer_pid) = records(raw, key)
    assert worker_pid != os.getpid()
    assert resumer_pid == os.getpid()
    assert find(out.execution_id).status == "completed"  # type: ignore[union-attr]


def test_a_timeout_is_fired_by_a_workers_recovery_loop(key: str, raw: redis.Redis) -> None:
    out = c.Expiring.run(key=key)
    ended = out.wait(timeout=60)
    assert ended.status == "failed"
    assert ended.step_name == "review"
    assert isinstance(ended.error, InterruptTimeoutError)
    assert [what for what, _ in records(raw, key)] == ["prepare", "undo prepare"]


def test_a_resumed_run_parks_on_its_busy_reactor_lock_and_is_woken(
    key: str, raw: redis.Redis
) -> None:
    out = c.Review.run(key=key)
    until(lambda: paused(out.execution_id), "the pause in a worker")
    """Resumed while this process holds its reactor lock: the run parks on the lock (in a
    worker), and the release here wakes it within seconds (park timer 30 s)."""
    held = Lock(c.lock_key(key), ttl=30, wait=0).acquire()
    try:
        dispatched = c.Review.resume(out.execution_id, {"approved": True, "by": "cy"})
        parked = waiting(out.execution_id, "lock")
        assert (parked.waiting_on["key"], parked.waiting_on["step"]) == (c.lock_key(key), None)
    finally:
        released = time.monotonic()
        held.release()
    done = finished(dispatched, raw, key)
    assert time.monotonic() - released < WOKEN_WITHIN, "the release did not wake the parked run"
    assert done.value == "paid by cy"
    assert whats(raw, key) == ["prepare", "pay by=cy locked=True"]
