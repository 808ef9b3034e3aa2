"""Operations on stored executions: cancel (no rollback, holds given back), undo (rollback of
a finished run), retry (a new run, linked) — on the thread worker and a real store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from py_reactor import CancelledResult, Lock, configure, find, workers
from py_reactor.errors import ExecutionNotFoundError, ExecutionStateError
from py_reactor.storage import current_store, keys
from py_reactor.transport import threads
from tests._wait import status, until
from tests.runtime import _operations_reactors as o

DUE_KEY, READY_KEY = keys.due("tests"), keys.ready("tests")

#: How soon a released run is back at work; far below the 30 s park timer set below.
WOKEN_WITHIN = 10.0


@pytest.fixture(autouse=True)
def _store(redis_url: str) -> Iterator[None]:
    configure(redis_url=redis_url, park_delay=30.0, park_jitter=0.0)
    yield
    o.LOG.clear()


def test_cancel_stops_a_parked_run_and_gives_back_what_it_kept(key: str, raw: redis.Redis) -> None:
    parked_on_step = f"py_reactor:lock:{{{key}:step}}:parked"
    with Lock(f"{key}:step", ttl=30, wait=0):
        out = o.ParksAtStep.run(key=key)
        until(lambda: status(out.execution_id) == "waiting", "the run parked")
        assert current_store().lock_state(f"{key}:reactor").owner == out.execution_id
        cancelled = o.ParksAtStep.cancel(out.execution_id, reason="operator said so")
        assert cancelled.status == "cancelled"
        assert cancelled.holds == []
        assert current_store().lock_state(f"{key}:reactor").owner is None  # given back
        assert raw.lrange(parked_on_step, 0, -1) == [out.execution_id]  # still to be woken
    # The release of the step's key handled its parked list (the wake was taken off it) and,
    # the run being no longer due, dispatched nothing: nothing can run it any more.
    assert raw.lrange(parked_on_step, 0, -1) == []
    assert raw.zscore(DUE_KEY, out.execution_id) is None
    assert out.execution_id not in raw.lrange(READY_KEY, 0, -1)
    due, recovered = workers.sweep()
    assert out.execution_id not in due + recovered
    found = find(out.execution_id)
    assert found is not None
    assert found.status == "cancelled"
    assert "blocked ran" not in o.LOG.get(key, [])
    outcome = out.wait(timeout=5)
    assert isinstance(outcome, CancelledResult)
    assert outcome.reason == "operator said so"
    assert "operator said so" in str(outcome.error)
    assert [e["type"] for e in found.trace][-1] == "cancelled"


def test_cancel_refuses_what_it_cannot_stop(key: str) -> None:
    done = o.Three.run(key=key)
    assert done.is_success
    stored = o.BgThree.run(key=key).wait(timeout=10)
    assert stored.is_success
    with pytest.raises(ExecutionStateError, match="is completed, so it cannot be cancelled"):
        workers.cancel(stored.execution_id)
    with pytest.raises(ExecutionNotFoundError, match="no execution 'no-such-id' is stored in"):
        workers.cancel("no-such-id")
    failed = o.BgThree.run(key=key, fail=True).wait(timeout=10)
    assert failed.status == "failed"
    assert workers.cancel(failed.execution_id).status == "cancelled"
    with pytest.raises(ExecutionStateError, match="stopped already") as refused:
        workers.cancel(failed.execution_id)
    assert refused.value.status == "cancelled"


def test_undo_rolls_a_finished_run_back_newest_first(key: str) -> None:
    done = o.BgThree.run(key=key).wait(timeout=10)
    assert done.is_success
    undone = o.BgThree.undo(done.execution_id)
    assert undone.status == "cancelled"
    assert o.LOG[key] == ["a", "b", "c", "undo b", "undo a"]
    assert isinstance(undone.outcome, CancelledResult)
    assert undone.outcome.reason == "undone"
    assert undone.outcome.rollback_failures == []
    assert undone.results == {}
    with pytest.raises(ExecutionStateError, match="undone already"):
        workers.undo(done.execution_id)
    assert o.LOG[key] == ["a", "b", "c", "undo b", "undo a"]  # not rolled back twice


def parked_on(execution_id: str) -> tuple[str, str] | None:
    """``(primitive, key)`` the execution is parked on, or None."""
    found = find(execution_id)
    if found is None or found.status != "waiting" or found.waiting_on is None:
        return None
    return found.waiting_on["primitive"], found.waiting_on["key"]


def test_undo_rolls_back_a_parked_run_and_wakes_who_waits_for_its_holds(key: str) -> None:
    """A run parked on a busy lock with two completed steps, holding its reactor-level lock
    across the park: undo runs both undos (newest first), gives the lock back, and the run
    parked behind it on that lock is woken at once (its timer is 30 s away)."""
    with Lock(f"{key}:step", ttl=30, wait=0):
        out = o.ParksAfterTwo.run(key=key)
        until(lambda: parked_on(out.execution_id) == ("lock", f"{key}:step"), "the run parked")
        behind = o.ParksAfterTwo.run(key=key)
        until(
            lambda: parked_on(behind.execution_id) == ("lock", f"{key}:reactor"),
            "the second run parked on the first one's reactor lock",
        )
        assert o.LOG[key] == ["a", "b"]

        undone = workers.undo(out.execution_id)

        assert undone.status == "cancelled"
        assert o.LOG[key][:4] == ["a", "b", "undo b", "undo a"]
        assert undone.results == {}
        assert undone.holds == []
        assert isinstance(undone.outcome, CancelledResult)
        assert undone.outcome.reason == "undone"
        assert undone.outcome.rollback_failures == []
        assert [e["type"] for e in undone.trace][-3:] == ["undo", "undo", "undone"]
        until(
            lambda: parked_on(behind.execution_id) == ("lock", f"{key}:step"),
            "the run parked behind it woken by the release of its reactor lock",
            timeout=WOKEN_WITHIN,  # its park timer is 30 s: only the wake meets this
        )
        assert o.LOG[key] == ["a", "b", "undo b", "undo a", "a", "b"]
    outcome = behind.wait(timeout=10)
    assert outcome.is_success, outcome
    assert o.LOG[key] == ["a", "b", "undo b", "undo a", "a", "b", "blocked ran"]
    assert status(out.execution_id) == "cancelled"  # the undone run never ran again


def test_a_cancelled_run_keeps_its_results_and_can_be_undone_once(key: str) -> None:
    with Lock(f"{key}:step", ttl=30, wait=0):
        out = o.ParksAfterTwo.run(key=key)
        until(lambda: parked_on(out.execution_id) == ("lock", f"{key}:step"), "the run parked")
        cancelled = workers.cancel(out.execution_id, reason="stop")
        assert cancelled.status == "cancelled"
        assert cancelled.results == {"a": "a", "b": "b"}
        assert cancelled.holds == []
        assert o.LOG[key] == ["a", "b"]

        undone = workers.undo(out.execution_id)

        assert undone.status == "cancelled"
        assert o.LOG[key] == ["a", "b", "undo b", "undo a"]
        assert undone.results == {}
        assert isinstance(undone.outcome, CancelledResult)
        assert undone.outcome.reason == "undone"
        assert [e["type"] for e in undone.trace][-4:] == ["cancelled", "undo", "undo", "undone"]
        with pytest.raises(ExecutionStateError, match="undone already") as refused:
            workers.undo(out.execution_id)
        assert refused.value.status == "cancelled"
        with pytest.raises(ExecutionStateError, match="stopped already"):
            workers.cancel(out.execution_id)
    assert o.LOG[key] == ["a", "b", "undo b", "undo a"]


def test_undo_rolls_back_a_pending_run(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``a`` ran in the caller, no worker has taken the rest: undo undoes ``a``, and the run is
    never taken by a worker afterwards."""
    workers.stop(wait=True)
    monkeypatch.setattr(threads, "ensure_worker", lambda: None)  # what dispatch calls
    out = o.PendsAfterOne.run(key=key)
    assert status(out.execution_id) == "pending"
    assert o.LOG[key] == ["a"]

    undone = workers.undo(out.execution_id)

    assert undone.status == "cancelled"
    assert o.LOG[key] == ["a", "undo a"]
    assert undone.results == {}
    monkeypatch.undo()
    due, _ = workers.sweep()  # starts a worker: it finds nothing of this run to take
    assert out.execution_id not in due
    assert status(out.execution_id) == "cancelled"
    assert o.LOG[key] == ["a", "undo a"]


def test_undo_of_a_failed_run_does_not_roll_back_twice(key: str) -> None:
    failed = o.BgThree.run(key=key, fail=True).wait(timeout=10)
    assert failed.status == "failed"
    assert o.LOG[key] == ["a", "b", "c", "undo b", "undo a"]  # its own rollback
    undone = workers.undo(failed.execution_id)
    assert undone.status == "cancelled"
    assert o.LOG[key] == ["a", "b", "c", "undo b", "undo a"]


def test_undo_rolls_back_an_aborted_run_and_frees_its_keys(key: str) -> None:
    out = o.ParksAfterTwo.run(key=key, abort=True)
    until(lambda: status(out.execution_id) == "aborted", "the abort")
    assert o.LOG[key] == ["a", "b", "blocked ran"]
    undone = workers.undo(out.execution_id)
    assert undone.status == "cancelled"
    assert o.LOG[key] == ["a", "b", "blocked ran", "undo b", "undo a"]
    assert undone.holds == []
    for lock in (f"{key}:reactor", f"{key}:step"):
        assert current_store().lock_state(lock).owner is None


def test_retry_starts_a_linked_run_with_the_same_inputs(key: str) -> None:
    failed = o.BgThree.run(key=key, fail=True).wait(timeout=10)
    assert failed.status == "failed"
    again = o.BgThree.retry(failed.execution_id)
    assert again.status == "dispatched"
    assert again.execution_id != failed.execution_id
    outcome = again.wait(timeout=10)
    assert outcome.status == "failed"  # same inputs: fail=True again
    new, old = find(again.execution_id), find(failed.execution_id)
    assert new is not None
    assert old is not None
    assert new.inputs == {"key": key, "fail": True}
    assert new.retry_of == failed.execution_id
    assert old.retried_by == again.execution_id


def test_retry_refuses_a_run_that_has_not_ended(key: str) -> None:
    with Lock(f"{key}:step", ttl=30, wait=0):
        out = o.ParksAtStep.run(key=key)
        until(lambda: status(out.execution_id) == "waiting", "the run parked")
        with pytest.raises(ExecutionStateError, match="is waiting, so it cannot be retried"):
            workers.retry(out.execution_id)
        workers.cancel(out.execution_id)
