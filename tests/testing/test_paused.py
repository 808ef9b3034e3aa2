"""``assert_paused_at``: checked on stored records (a run pauses only at an interrupt step,
whose pause writes status ``"paused"`` and a ``{"type": "paused", "step"}`` trace entry)."""

from __future__ import annotations

import time

import pytest

from py_reactor import Context, dumps_context, find
from py_reactor.storage import current_store
from py_reactor.storage.executions import ExecutionStore
from py_reactor.testing import IsolatedStore, assert_paused_at


def _stored(status: str, trace: list[dict[str, object]]) -> str:
    context = Context(reactor="tests.testing.test_paused:Refund", inputs={"order": 7})
    context.trace.extend(trace)
    ExecutionStore(current_store()).create(
        context.execution_id, context.reactor, dumps_context(context), status, namespace="tests"
    )
    return context.execution_id


def _pause(step: str) -> dict[str, object]:
    now = time.time()
    return {"type": "paused", "step": step, "started_at": now, "finished_at": now}


def test_a_paused_run_passes(reactor_store: IsolatedStore) -> None:
    execution_id = _stored("paused", [_pause("review")])
    assert assert_paused_at(execution_id, "review").status == "paused"
    found = find(execution_id)
    assert found is not None
    assert_paused_at(found, "review")


def test_another_step_or_status_fails_saying_what_it_is(reactor_store: IsolatedStore) -> None:
    paused = _stored("paused", [_pause("review")])
    with pytest.raises(
        AssertionError, match="paused at step 'approve', but it is paused at step 'review'"
    ):
        assert_paused_at(paused, "approve")
    running = _stored("running", [])
    with pytest.raises(AssertionError, match="to be paused at step 'review', but it is running"):
        assert_paused_at(running, "review")
    bare = _stored("paused", [])
    with pytest.raises(AssertionError, match="its trace has no pause"):
        assert_paused_at(bare, "review")
