"""Operations on stored executions: cancel (no rollback, holds given back), undo (rollback of
a finished run), retry (a new run, linked) — on the thread worker and a real store."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from py_reactor import CancelledResult, Lock, configure, find, workers
from py_reactor.errors import ExecutionStateError
from py_reactor.storage import current_store
from tests.workers import _operations_reactors as o
from tests.workers.test_background import status, until


@pytest.fixture(autouse=True)
def _store(redis_url: str) -> Iterator[None]:
    configure(redis_url=redis_url, park_delay=30.0, park_jitter=0.0)
    yield
    o.LOG.clear()


def test_cancel_stops_a_parked_run_and_gives_back_what_it_kept(key: str) -> None:
    with Lock(f"{key}:step", ttl=30, wait=0):
        out = o.ParksAtStep.run(key=key)
        until(lambda: status(out.execution_id) == "waiting", "the run parked")
        assert current_store().lock_state(f"{key}:reactor").owner == out.execution_id
        cancelled = o.ParksAtStep.cancel(out.execution_id, reason="operator said so")
        assert cancelled.status == "cancelled"
        assert cancelled.holds == []
        assert current_store().lock_state(f"{key}:reactor").owner is None  # given back
    # the release of the step's key would have woken it: it stays cancelled and never runs
    time.sleep(0.3)
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
    with pytest.raises(LookupError, match="no execution"):
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
    with pytest.raises(ExecutionStateError, match="stopped already"):
        workers.undo(done.execution_id)


def test_undo_refuses_a_waiting_run(key: str) -> None:
    with Lock(f"{key}:step", ttl=30, wait=0):
        out = o.ParksAtStep.run(key=key)
        until(lambda: status(out.execution_id) == "waiting", "the run parked")
        with pytest.raises(ExecutionStateError, match="cancel it first"):
            workers.undo(out.execution_id)
        workers.cancel(out.execution_id)


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
