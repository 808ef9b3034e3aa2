"""Interrupts on the caller and the thread worker: pause, resume by id and by correlation id,
bad payloads, a second resume, timeouts, holds given back on pause and taken again on resume,
a composed child's interrupt, cancel, and the refusal of step-level coordination.

Real store (the session's private redis-server), real threads; waits are on stored statuses.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from py_reactor import (
    Lock,
    PausedResult,
    Reactor,
    configure,
    find,
    interrupt,
    step,
    with_lock,
    workers,
)
from py_reactor.errors import (
    DefinitionError,
    ExecutionNotFoundError,
    InputValidationError,
    InterruptError,
    InterruptTimeoutError,
    LockAcquisitionError,
    ResumeError,
)
from py_reactor.testing import assert_paused_at
from tests._wait import status, until
from tests.runtime import _interrupt_reactors as r


@pytest.fixture(autouse=True)
def _store(redis_url: str) -> Iterator[None]:
    configure(redis_url=redis_url, park_delay=30.0, park_jitter=0.0)
    yield
    r.LOG.clear()
    r.HELD.clear()


def approval(by: str = "ann", approved: bool = True) -> dict[str, Any]:
    return {"approved": approved, "by": by}


# -- pause and resume in the caller --------------------------------------------------------------


def test_a_run_pauses_at_the_interrupt_stored_paused_with_its_correlation_id(key: str) -> None:
    out = r.Refund.run(key=key)
    assert isinstance(out, PausedResult)
    assert out.status == "paused"
    assert not out.is_success
    assert out.step_name == "review"
    assert out.correlation_id == f"refund:{key}"
    assert out.results == {"prepare": f"prepared {key}"}
    stored = assert_paused_at(out.execution_id, "review")
    assert stored.waiting_on is not None
    assert stored.waiting_on["primitive"] == "interrupt"
    assert r.LOG[key] == ["prepare"]


def test_resume_by_id_runs_the_rest_with_the_payload_as_the_interrupts_result(key: str) -> None:
    out = r.Refund.run(key=key)
    done = r.Refund.resume(out.execution_id, approval("bob"))
    assert done.status == "completed", done
    assert done.value == "paid by bob"
    assert done.results["review"] == {"approved": True, "by": "bob"}
    assert r.LOG[key] == ["prepare", "pay approved=True by=bob"]
    stored = find(out.execution_id)
    assert stored is not None
    assert stored.status == "completed"
    assert stored.outcome is not None
    assert stored.outcome.value == "paid by bob"
    assert [e["type"] for e in stored.trace if e["step"] == "review"] == ["paused", "resumed"]


def test_resume_by_correlation_id(key: str) -> None:
    out = r.Refund.run(key=key)
    done = r.Refund.resume(correlation_id=f"refund:{key}", payload=approval("cy"))
    assert done.value == "paid by cy"
    assert done.execution_id == out.execution_id


def test_holds_are_given_back_on_pause_and_taken_again_on_resume(key: str) -> None:
    out = r.Refund.run(key=key)
    assert find(out.execution_id).holds == []  # type: ignore[union-attr]
    with Lock(f"refund:{key}", ttl=5, wait=0):  # free while the run is paused
        pass
    r.Refund.resume(out.execution_id, approval())
    assert f"lock:refund:{key}" in r.HELD[key]  # the resumed step ran under it again
    with Lock(f"refund:{key}", ttl=5, wait=0):  # and it was released at the end
        pass


def test_a_resume_waits_for_the_reactor_lock_and_fails_if_it_stays_busy(key: str) -> None:
    out = r.Refund.run(key=key)
    with Lock(f"refund:{key}", ttl=30, wait=0):
        failed = r.Refund.resume(out.execution_id, approval())
    assert failed.status == "failed"
    assert isinstance(failed.error, LockAcquisitionError), failed.error  # busy, not another cause
    assert f"refund:{key}" in str(failed.error)
    assert r.LOG[key] == ["prepare"]  # pay never ran


def test_a_bad_payload_raises_and_the_run_stays_paused(key: str) -> None:
    out = r.Refund.run(key=key)
    with pytest.raises(InputValidationError) as caught:
        r.Refund.resume(out.execution_id, {"approved": "perhaps", "by": ""})
    assert {e["field"] for e in caught.value.errors} == {"approved", "by"}
    assert "Refund, interrupt 'review'" in str(caught.value)
    with pytest.raises(InputValidationError, match="should be a valid dictionary"):
        r.Refund.resume(out.execution_id, ["not", "a", "mapping"])
    assert_paused_at(out.execution_id, "review")
    assert r.Refund.resume(out.execution_id, approval()).status == "completed"


def test_a_second_resume_is_refused(key: str) -> None:
    out = r.Refund.run(key=key)
    r.Refund.resume(out.execution_id, approval())
    with pytest.raises(ResumeError) as caught:
        r.Refund.resume(out.execution_id, approval())
    assert caught.value.status == "completed"
    assert "resumed already" in str(caught.value)
    with pytest.raises(ResumeError, match="no run of Refund is paused"):
        r.Refund.resume(correlation_id=f"refund:{key}", payload=approval())


def test_two_resumes_at_once_exactly_one_wins(key: str) -> None:
    out = r.Refund.run(key=key)
    start = threading.Barrier(2)
    results: list[str] = []

    def resume(by: str) -> None:
        start.wait()
        try:
            results.append(r.Refund.resume(out.execution_id, approval(by)).status)
        except ResumeError:
            results.append("refused")

    threads = [threading.Thread(target=resume, args=(n,)) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert sorted(results) == ["completed", "refused"]
    assert len([line for line in r.LOG[key] if line.startswith("pay")]) == 1


def test_resume_refuses_unknown_ids_other_reactors_and_bad_calls(key: str) -> None:
    with pytest.raises(ExecutionNotFoundError, match="no execution 'nope' is stored in"):
        r.Refund.resume("nope", approval())  # one error for an unknown id, as cancel raises
    out = r.Refund.run(key=key)
    with pytest.raises(ResumeError, match=r"is a run of .*Refund, not of .*Timed"):
        r.Timed.resume(out.execution_id, {})
    with pytest.raises(TypeError, match="one of the two"):
        r.Refund.resume(out.execution_id, approval(), correlation_id="x")
    with pytest.raises(TypeError, match="needs the reactor"):
        workers.resume(correlation_id="x", payload={})
    assert workers.resume(out.execution_id, approval()).status == "completed"


def test_a_resume_interrupted_by_ctrl_c_is_stored_aborted(key: str) -> None:
    out = r.Interrupted.run(key=key)
    with pytest.raises(KeyboardInterrupt):
        r.Interrupted.resume(out.execution_id, {})
    assert status(out.execution_id) == "aborted"
    assert r.Interrupted.undo(out.execution_id).status == "cancelled"
    assert r.LOG[key] == ["prepare", "undo prepare"]


def test_a_failure_after_the_resume_rolls_back_the_steps_before_the_pause(key: str) -> None:
    out = r.Refund.run(key=key, fail_pay=True)
    failed = r.Refund.resume(out.execution_id, approval())
    assert failed.status == "failed"
    assert failed.step_name == "pay"
    assert r.LOG[key][-1] == "undo prepare"
    assert status(out.execution_id) == "failed"


# -- correlation ids ------------------------------------------------------------------------------


def test_a_correlation_id_is_unique_while_its_run_is_paused(key: str) -> None:
    first = r.Refund.run(key=key)
    second = r.Refund.run(key=key)
    assert second.status == "failed"
    assert isinstance(second.error, InterruptError)
    assert first.execution_id in str(second.error)
    assert r.LOG[key] == ["prepare", "prepare", "undo prepare"]
    r.Refund.resume(first.execution_id, approval())
    third = r.Refund.run(key=key)  # free again once the first one was resumed
    assert third.status == "paused"
    workers.cancel(third.execution_id)
    assert r.Refund.run(key=key).status == "paused"  # and once cancelled


def test_a_correlation_id_function_that_raises_fails_the_step(key: str) -> None:
    out = r.BadCorrelation.run(key=key)
    assert out.status == "failed"
    assert "correlation_id function raised KeyError" in str(out.error)


# -- timeouts -------------------------------------------------------------------------------------


def test_a_timeout_fails_the_interrupt_step_and_rolls_back(key: str) -> None:
    out = r.Timed.run(key=key)
    assert out.status == "paused"
    ended = out.wait(timeout=20)  # the thread worker's recovery loop fails it at its deadline
    assert ended.status == "failed"
    assert ended.step_name == "review"
    assert isinstance(ended.error, InterruptTimeoutError)
    assert r.LOG[key] == ["prepare", "undo prepare"]
    with pytest.raises(ResumeError, match="cannot be resumed: it has failed") as refused:
        r.Timed.resume(out.execution_id, {})
    assert refused.value.status == "failed"


# -- a worker ---------------------------------------------------------------------------------


def test_a_background_run_pauses_in_the_worker_and_resumes_there(key: str) -> None:
    out = r.Worked.run(key=key)
    until(lambda: status(out.execution_id) == "paused", "the worker's pause")
    assert_paused_at(out.execution_id, "review")
    assert find(out.execution_id).holds == []  # type: ignore[union-attr]
    with Lock(f"bg:{key}", ttl=5, wait=0):
        pass
    dispatched = r.Worked.resume(correlation_id=f"w:{key}", payload={"note": "hi"})
    assert dispatched.status == "dispatched"
    done = dispatched.wait(timeout=20)
    assert done.status == "completed"
    assert done.value == "done hi"
    assert r.LOG[key] == ["first", "last hi"]
    assert f"lock:bg:{key}" in r.HELD[key]


def test_a_resume_in_a_worker_parks_on_the_busy_reactor_lock_and_completes(key: str) -> None:
    out = r.Worked.run(key=key)
    until(lambda: status(out.execution_id) == "paused", "the worker's pause")
    with Lock(f"bg:{key}", ttl=30, wait=0):
        dispatched = r.Worked.resume(out.execution_id, {"note": "later"})
        until(lambda: status(out.execution_id) == "waiting", "a park on the reactor lock")
    assert dispatched.wait(timeout=20).value == "done later"


def test_resume_background_of_a_run_paused_in_the_caller(key: str) -> None:
    out = r.Background.run(key=key)
    assert out.status == "paused"
    dispatched = r.Background.resume(correlation_id=key, payload={"note": "n"})
    assert dispatched.status == "dispatched"
    assert dispatched.wait(timeout=20).value == "after n"


def test_a_pause_before_the_hand_off_is_stored_and_a_retry_pauses_too(key: str) -> None:
    out = r.HandedOffLater.run(key=key)
    assert out.status == "paused"
    assert_paused_at(out.execution_id, "review")
    assert r.HandedOffLater.resume(out.execution_id, {}).value == "last"
    first = r.Refund.run(key=key, fail_pay=True)
    assert r.Refund.resume(first.execution_id, approval()).status == "failed"
    again = r.Refund.retry(first.execution_id)
    assert again.status == "paused"
    assert_paused_at(again.execution_id, "review")


# -- composed children, cancel --------------------------------------------------------------------


def test_an_interrupt_inside_a_composed_child_pauses_the_whole_run(key: str) -> None:
    out = r.Outer.run(key=key)
    assert out.status == "paused"
    assert out.step_name == "child.ask"
    assert_paused_at(out.execution_id, "child.ask")
    done = r.Outer.resume(out.execution_id, {"n": 3})
    assert done.value == "inner 3"
    assert r.LOG[key] == ["before", "inner 3", "after inner 3"]


def test_a_parallel_reactor_pauses_once_its_running_branches_finish(key: str) -> None:
    out = r.ParallelReview.run(key=key)
    assert out.status == "paused"
    assert_paused_at(out.execution_id, "review")
    assert out.results["fetch"] == "fetched"  # the branch that ran meanwhile was merged
    done = r.ParallelReview.resume(out.execution_id, {"ok": True})
    assert done.value == "decided True"
    assert r.LOG[key] == ["fetch", "decide True fetched"]


def test_each_map_element_that_pauses_is_resumed_in_turn(key: str) -> None:
    out = r.Lines.run(key=key, items=[2, 3])
    assert out.status == "paused"
    assert out.step_name == "lines[0].ask"
    second = r.Lines.resume(out.execution_id, {"x": 10})
    assert second.status == "paused"
    assert second.step_name == "lines[1].ask"
    assert_paused_at(out.execution_id, "lines[1].ask")
    done = r.Lines.resume(out.execution_id, {"x": 100})
    assert done.value == [20, 300]
    assert r.LOG[key] == ["use 2 10", "use 3 100"]


def test_cancel_stops_a_paused_run_and_frees_its_correlation_id(key: str) -> None:
    out = r.Refund.run(key=key)
    cancelled = r.Refund.cancel(out.execution_id, reason="nobody reviews")
    assert cancelled.status == "cancelled"
    with pytest.raises(ResumeError, match="cannot be resumed: it was cancelled") as refused:
        r.Refund.resume(out.execution_id, approval())
    assert refused.value.status == "cancelled"
    assert r.Refund.run(key=key).status == "paused"


def test_undo_rolls_back_the_steps_before_the_pause_and_frees_the_correlation_id(
    key: str,
) -> None:
    out = r.Refund.run(key=key)
    undone = r.Refund.undo(out.execution_id)
    assert undone.status == "cancelled"
    assert r.LOG[key] == ["prepare", "undo prepare"]
    assert r.Refund.run(key=key).status == "paused"


# -- declaring -------------------------------------------------------------------------------


def test_step_level_coordination_on_an_interrupt_is_refused_at_definition() -> None:
    with pytest.raises(DefinitionError, match="Declare it on the reactor"):

        class Locked(Reactor):
            key: str
            review = with_lock("k", ttl=5)(interrupt())


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"payload": dict}, "payload="),
        ({"timeout": 0}, "timeout="),
        ({"timeout": True}, "timeout="),
        ({"resume": "later"}, "resume="),
        ({"correlation_id": 5}, "correlation_id="),
    ],
)
def test_bad_interrupt_options_are_refused(options: dict[str, Any], named: str) -> None:
    with pytest.raises(DefinitionError, match=named):
        interrupt(**options)


def test_a_run_nested_in_a_step_that_pauses_fails_that_step(key: str) -> None:
    class Nesting(Reactor):
        key: str

        @step()
        def nest(key: str) -> Any:
            return r.Refund.run(key=key)

    out = Nesting.run(key=key)
    assert out.status == "failed"
    assert "declare the child with compose" in str(out.error)
