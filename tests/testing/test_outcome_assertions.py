"""The assertion helpers about a run: each passes on a real run that matches, and fails with a
message saying what was expected, what was found, and showing the trace."""

from __future__ import annotations

import re
import threading

import pytest

from py_reactor import Semaphore, find
from py_reactor.errors import InputValidationError
from py_reactor.testing import (
    IsolatedStore,
    LockHolder,
    ReactorWorker,
    assert_contended_at,
    assert_failed_at,
    assert_halted,
    assert_parked_at,
    assert_ran,
    assert_retried,
    assert_rollback_failure,
    assert_skipped_at,
    assert_succeeded,
    assert_validation_error,
    format_trace,
)
from tests._wait import status, until
from tests.testing import _reactors as r

pytestmark = pytest.mark.usefixtures("reactor_store")


# -- assert_succeeded --------------------------------------------------------------------------


def test_succeeded_passes_on_a_completed_run_and_returns_it() -> None:
    """A completed run with the expected value passes; the helper returns the outcome."""
    out = r.Pricing.run(n=3)
    assert assert_succeeded(out, value="got 6") is out
    assert_succeeded(out)


def test_succeeded_fails_on_a_failure_naming_step_error_and_trace() -> None:
    """A failed run: the message names the step and error and shows the trace."""
    out = r.Declined.run(n=3)
    with pytest.raises(AssertionError) as caught:
        assert_succeeded(out)
    message = str(caught.value)
    assert re.search(
        r"expected Declined \(execution \w+\) to succeed, but it failed at step 'charge': "
        r"ValueError: card declined for 3",
        message,
    )
    assert "1. run        reserve: attempt 1, returned 'reserved'" in message
    assert "2. failed     charge: attempt 1: ValueError: card declined for 3" in message


def test_succeeded_fails_on_another_value_showing_both() -> None:
    """A success with another value: expected and found are both shown."""
    with pytest.raises(AssertionError, match=r"returned another value\n  expected: 'got 7'\n"):
        assert_succeeded(r.Pricing.run(n=3), value="got 7")
    with pytest.raises(AssertionError, match=r"found:    'got 6'"):
        assert_succeeded(r.Pricing.run(n=3), value="got 7")


def test_succeeded_shows_a_diff_for_large_values() -> None:
    """Values too long for one line are compared as a line diff marking what differs."""
    expected = {"items": [f"item {i}" for i in range(30) if i != 17]}
    with pytest.raises(AssertionError) as caught:
        assert_succeeded(r.Catalog.run(n=30), value=expected)
    message = str(caught.value)
    assert "diff (- expected, + found):" in message
    assert re.search(r"\n    - .*'item 16', 'item 18'", message)
    assert re.search(r"\n    \+ .*'item 16', 'item 17', 'item 18'", message)


def test_succeeded_refuses_a_halted_run() -> None:
    """A halt is not a success here: the message says where and why it halted."""
    with pytest.raises(AssertionError, match=r"but it halted at step 'check': 'nothing to do'"):
        assert_succeeded(r.Nothing.run(count=0))


def test_succeeded_reads_a_dispatched_run_and_says_to_drain_when_not_ended(
    reactor_worker: ReactorWorker, key: str
) -> None:
    """A DispatchedResult still running fails with "has not ended ... drain"; once drained it
    passes, given as the result, as find()'s Execution or as its id."""
    r.GATES[key], r.ENTERED[key] = threading.Event(), threading.Event()
    try:
        out = r.SlowShipment.run(key=key)
        assert r.ENTERED[key].wait(10)
        with pytest.raises(AssertionError, match=r"has not ended: it is running; drain the"):
            assert_succeeded(out)
        r.GATES[key].set()
        reactor_worker.drain(timeout=10)
    finally:
        r.GATES.pop(key).set()
        r.ENTERED.pop(key)
    assert assert_succeeded(out, value="done").value == "done"
    assert_succeeded(find(out.execution_id), value="done")
    assert_succeeded(out.execution_id, value="done")


def test_helpers_refuse_what_is_not_a_run() -> None:
    """A value that is no outcome, execution or id is a TypeError; an unknown id fails."""
    with pytest.raises(TypeError, match=r"assert_succeeded\(\) takes an outcome"):
        assert_succeeded(42)
    with pytest.raises(AssertionError, match=r"no execution 'nope' is stored"):
        assert_succeeded("nope")


# -- assert_failed_at --------------------------------------------------------------------------


def test_failed_at_passes_with_every_way_of_naming_the_error() -> None:
    """The error may be given as a class, an exception, a substring or a pattern."""
    out = r.Declined.run(n=3)
    assert assert_failed_at(out, "charge") is out
    assert_failed_at(out, "charge", error=ValueError)
    assert_failed_at(out, "charge", error=ValueError("card declined for 3"))
    assert_failed_at(out, "charge", error="card declined")
    assert_failed_at(out, "charge", error=re.compile(r"declined for \d$"))


def test_failed_at_fails_at_another_step() -> None:
    """Failing elsewhere: the message names the step it failed at."""
    with pytest.raises(
        AssertionError,
        match=r"to fail at step 'reserve', but it failed at step 'charge': ValueError: card",
    ):
        assert_failed_at(r.Declined.run(n=3), "reserve")


def test_failed_at_fails_with_another_error() -> None:
    """Another error: expected and found errors are both shown."""
    out = r.Declined.run(n=3)
    with pytest.raises(
        AssertionError,
        match=r"with another error\n  expected: an error of class KeyError\n"
        r"  found:    ValueError: card declined for 3",
    ):
        assert_failed_at(out, "charge", error=KeyError)
    with pytest.raises(AssertionError, match=r"expected: an error containing 'expired'"):
        assert_failed_at(out, "charge", error="expired")
    with pytest.raises(AssertionError, match=r"expected: ValueError: other text"):
        assert_failed_at(out, "charge", error=ValueError("other text"))


def test_failed_at_fails_on_a_success() -> None:
    """A run that succeeded: the message says so, with its value."""
    with pytest.raises(AssertionError, match=r"but it ended 'completed' with value 'got 6'"):
        assert_failed_at(r.Pricing.run(n=3), "double")


def test_failed_at_follows_composed_children() -> None:
    """A composed child's step is named by its dotted path; the parent's step name passes
    too, and another child step fails naming the one that failed."""
    out = r.Order.run(amount=300)
    assert_failed_at(out, "payment", error="over the limit")
    assert_failed_at(out, "payment.capture", error=ValueError)
    with pytest.raises(AssertionError, match=r"but it failed at step 'payment.capture'"):
        assert_failed_at(out, "payment.authorize")


def test_failed_at_none_is_a_failure_outside_any_step() -> None:
    """Invalid reactor inputs fail outside any step (None)."""
    out = r.Signup.run(email="a@example.org", age=3)
    assert_failed_at(out, None, error=InputValidationError)
    with pytest.raises(AssertionError, match=r"but it failed outside any step"):
        assert_failed_at(out, "mail")


def test_failed_at_reads_the_failure_a_worker_stored(reactor_worker: ReactorWorker) -> None:
    """A background failure is rebuilt from the store, its error an instance again."""
    out = r.Rejected.run(n=4)
    reactor_worker.drain(timeout=10)
    failure = assert_failed_at(out, "charge", error=ValueError)
    assert isinstance(failure.error, ValueError)
    with pytest.raises(AssertionError, match=r"expected: an error of class TypeError"):
        assert_failed_at(out, "charge", error=TypeError)


# -- assert_ran --------------------------------------------------------------------------------


def test_ran_passes_for_a_step_that_ran_after_another() -> None:
    """The step ran, after the other, returning the value; the run entry is returned."""
    out = r.Pricing.run(n=2)
    entry = assert_ran(out, "describe", after="double", returning="got 4")
    assert entry["type"] == "run"
    assert_ran(out, "double", returning=4)
    assert_ran(out, "describe", after=["double"])


def test_ran_fails_when_the_order_is_the_other_way() -> None:
    """A step that ran first is not "after" the one that ran later."""
    with pytest.raises(
        AssertionError,
        match=r"expected step 'double' to run after 'describe', but it began before "
        r"'describe' had finished",
    ):
        assert_ran(r.Pricing.run(n=2), "double", after="describe")


def test_ran_fails_for_a_step_that_never_ran_or_failed() -> None:
    """No entry: the message lists the steps the trace has; a failed step says so."""
    with pytest.raises(
        AssertionError, match=r"no entry for it \(steps in the trace: 'double', 'describe'\)"
    ):
        assert_ran(r.Pricing.run(n=2), "ship")
    out = r.Declined.run(n=1)
    with pytest.raises(AssertionError, match=r"to have run, but its last entry is 'failed'"):
        assert_ran(out, "charge")
    with pytest.raises(AssertionError, match=r"to run after 'charge', but 'charge' never ran"):
        assert_ran(out, "reserve", after="charge")


def test_ran_fails_on_another_returned_value() -> None:
    """Another return value: expected and found are shown."""
    with pytest.raises(
        AssertionError, match=r"returned another value\n  expected: 5\n  found:    4"
    ):
        assert_ran(r.Pricing.run(n=2), "double", returning=5)


def test_ran_reads_composed_children_and_dispatched_runs(
    reactor_worker: ReactorWorker, key: str
) -> None:
    """A composed child's steps are read from its own trace; a dispatched run from the store."""
    assert_ran(r.Order.run(amount=5), "payment.capture", after="payment.authorize")
    out = r.Shipment.run(key=key)
    reactor_worker.drain(timeout=10)
    assert_ran(out, "dispatch", after="prepare", returning="dispatched")


# -- assert_retried ----------------------------------------------------------------------------


def test_retried_counts_retries(key: str) -> None:
    """Two failed attempts then a success is two retries; a first-time success is none."""
    assert len(assert_retried(r.Flaky.run(key=key, fails=2), "call", 2)) == 2
    assert_retried(r.Flaky.run(key=f"{key}-0", fails=0), "call", 0)


def test_retried_fails_on_another_count_listing_the_attempts(key: str) -> None:
    """Another count: the message gives the count found and each retried attempt's error."""
    with pytest.raises(
        AssertionError,
        match=r"to be retried 1 time\(s\), but it was retried 2 time\(s\) "
        r"\(attempt 1: attempt 1 failed; attempt 2: attempt 2 failed\)",
    ):
        assert_retried(r.Flaky.run(key=key, fails=2), "call", 1)


def test_retried_fails_for_an_unknown_step_and_refuses_a_bad_count(key: str) -> None:
    """A step absent from the trace is named as such; a negative count is a TypeError."""
    out = r.Flaky.run(key=key, fails=0)
    with pytest.raises(AssertionError, match=r"no entry for it; steps in the trace: 'call'"):
        assert_retried(out, "cal", 1)
    with pytest.raises(TypeError, match=r"whole number >= 0"):
        assert_retried(out, "call", -1)


def test_retried_reads_retries_made_in_a_worker(reactor_worker: ReactorWorker, key: str) -> None:
    """A retry that waited out its backoff in the parked set counts as a retry."""
    out = r.Retrying.run(key=key)
    reactor_worker.drain(timeout=10)
    assert_retried(out, "call", 1)
    r.CALLS.pop(key)


# -- assert_validation_error -------------------------------------------------------------------


def test_validation_error_passes_for_reactor_and_step_inputs() -> None:
    """The reactor's own input (step None) and a step's input (step "mail") both pass."""
    error = assert_validation_error(
        r.Signup.run(email="a@example.org", age=3), "age", message="greater than or equal to 18"
    )
    assert error["input"] == 3
    assert_validation_error(r.Signup.run(email="a@example.org", age=3), "age", step=None)
    assert_validation_error(r.Signup.run(email="ab", age=30), "address", step="mail")


def test_validation_error_fails_on_another_field_listing_the_invalid_ones() -> None:
    """Another field: the message lists the fields that were invalid, with their messages."""
    with pytest.raises(
        AssertionError,
        match=r"the invalid field\(s\) are: age: Input should be greater than or equal to 18",
    ):
        assert_validation_error(r.Signup.run(email="a@example.org", age=3), "email")


def test_validation_error_fails_on_another_message_step_or_failure() -> None:
    """Another message, another contract, or no validation failure at all: each is said."""
    out = r.Signup.run(email="a@example.org", age=3)
    with pytest.raises(AssertionError, match=r"not with a message containing 'too young'"):
        assert_validation_error(out, "age", message="too young")
    with pytest.raises(
        AssertionError,
        match=r"refused by step 'mail', but the reactor's inputs refused its input",
    ):
        assert_validation_error(out, "age", step="mail")
    with pytest.raises(AssertionError, match=r"it failed for another reason: ValueError: card"):
        assert_validation_error(r.Declined.run(n=1), "n")


# -- assert_halted -----------------------------------------------------------------------------


def test_halted_passes_with_reason_and_step() -> None:
    """A step's Halt passes with its reason (substring or pattern) and step."""
    out = r.Nothing.run(count=0)
    assert assert_halted(out, "nothing", step="check").reason == "nothing to do"
    assert_halted(out, re.compile(r"^nothing to do$"))


def test_halted_passes_for_a_done_reactor_level_period(key: str) -> None:
    """A reactor whose period is done halts with reason "period", outside any step."""
    assert_succeeded(r.Nightly.run(key=key))
    assert_halted(r.Nightly.run(key=key), "period", step=None)


def test_halted_fails_on_a_completed_run_another_reason_or_step() -> None:
    """Each mismatch is said, with what was found."""
    with pytest.raises(AssertionError, match=r"to halt, but it ended 'completed' with value 3"):
        assert_halted(r.Nothing.run(count=3))
    out = r.Nothing.run(count=0)
    with pytest.raises(
        AssertionError, match=r"halted, but not for a reason containing 'later': 'nothing to do'"
    ):
        assert_halted(out, "later")
    with pytest.raises(AssertionError, match=r"to halt at step 'work', it halted at 'check'"):
        assert_halted(out, step="work")


# -- assert_skipped_at -------------------------------------------------------------------------


def test_skipped_at_passes_for_a_skipped_step_and_a_done_period(key: str) -> None:
    """A step returning Skipped, and a step whose period is done, both pass with their reason."""
    assert assert_skipped_at(r.Cached.run(), "lookup", "cached")["result"] == "from cache"
    assert_ran(r.Report.run(key=key), "send")
    assert_skipped_at(r.Report.run(key=key), "send", reason="period")


def test_skipped_at_fails_for_a_step_that_ran_or_another_reason() -> None:
    """A step that ran, another reason, or a reason where none was expected: each is said."""
    out = r.Cached.run()
    with pytest.raises(AssertionError, match=r"to be skipped, but its last entry is 'run'"):
        assert_skipped_at(out, "show")
    with pytest.raises(AssertionError, match=r"not for a reason containing 'stale': 'cached'"):
        assert_skipped_at(out, "lookup", "stale")
    with pytest.raises(AssertionError, match=r"skipped without a reason, it says 'cached'"):
        assert_skipped_at(out, "lookup", None)
    with pytest.raises(AssertionError, match=r"no entry for it \(steps in the trace: 'lookup'"):
        assert_skipped_at(out, "fetch")


# -- assert_rollback_failure -------------------------------------------------------------------


def test_rollback_failure_passes_for_each_recorded_failure(key: str) -> None:
    """The compensate that raised (under the step's lock key) and the undo that returned a
    failure (no key) are both found."""
    out = r.BrokenRollback.run(key=key)
    found = assert_rollback_failure(
        out, step="charge", key=key, reason="raised", kind="compensate", message="refund API"
    )
    assert found["message"] == "ConnectionError: refund API unreachable"
    assert_rollback_failure(out, step="reserve", key=None, reason="returned_failure")
    assert_rollback_failure(out)


def test_rollback_failure_fails_listing_what_was_recorded(key: str) -> None:
    """No match: the message lists every rollback failure recorded."""
    with pytest.raises(
        AssertionError,
        match=rf"with key='other', reason='raised', but none matches; it recorded:\n"
        rf"    compensate of 'charge': key '{key}', reason 'raised': ConnectionError: refund",
    ):
        assert_rollback_failure(r.BrokenRollback.run(key=key), key="other", reason="raised")


def test_rollback_failure_fails_when_none_was_recorded_and_refuses_a_bad_reason() -> None:
    """A clean rollback, a success, and an unknown reason code are each reported."""
    with pytest.raises(AssertionError, match=r"\(key='k'\), but it recorded none"):
        assert_rollback_failure(r.Declined.run(n=1), key="k")
    with pytest.raises(AssertionError, match=r"\(any\), but it ended 'completed'"):
        assert_rollback_failure(r.Pricing.run(n=1))
    with pytest.raises(ValueError, match=r"to match the failure's text use message="):
        assert_rollback_failure(r.Declined.run(n=1), reason="refund failed")


# -- assert_contended_at -----------------------------------------------------------------------


def test_contended_at_passes_for_a_step_that_failed_on_a_held_lock(
    hold_lock: LockHolder, key: str
) -> None:
    """In the caller, a step that met the held lock passes, with key and primitive."""
    with hold_lock(key):
        out = r.Charge.run(key=key)
    found = assert_contended_at(out, "charge", key=key, primitive="lock")
    assert found["how"] == "failed"


def test_contended_at_passes_for_reactor_level_and_semaphore_contention(
    hold_lock: LockHolder, key: str
) -> None:
    """The reactor's own lock (step None) and a full semaphore both count."""
    with hold_lock(f"account:{key}"):
        assert_contended_at(r.AccountWide.run(key=key), None, key=f"account:{key}")
    mailer = Semaphore(key, limit=2)
    with mailer, mailer:  # two owners: both slots taken
        out = r.Mailer.run(key=key)
    assert_contended_at(out, "mail", key=key, primitive="semaphore")


def test_contended_at_passes_for_a_park_in_a_worker(
    reactor_worker: ReactorWorker, hold_lock: LockHolder, key: str
) -> None:
    """In a worker the contention is a park, found in the stored trace."""
    with hold_lock(key):
        out = r.Shipment.run(key=key)
        reactor_worker.drain(timeout=10)
        assert assert_contended_at(out, "dispatch", key=key)["how"] == "parked"


def test_contended_at_fails_without_contention_or_on_another_key(
    hold_lock: LockHolder, key: str
) -> None:
    """No busy key, or another one: the message says what was met."""
    with pytest.raises(AssertionError, match=r"to be contended, but it met no busy key"):
        assert_contended_at(r.Pricing.run(n=1), "double")
    with hold_lock(key):
        out = r.Charge.run(key=key)
    with pytest.raises(
        AssertionError,
        match=rf"contended on 'other', but it met: failed on lock '{key}'",
    ):
        assert_contended_at(out, "charge", key="other")
    with pytest.raises(AssertionError, match=r"of primitive 'semaphore'"):
        assert_contended_at(out, "charge", primitive="semaphore")


# -- assert_parked_at --------------------------------------------------------------------------


def test_parked_at_passes_for_a_run_parked_on_a_held_lock(
    reactor_worker: ReactorWorker, hold_lock: LockHolder, key: str
) -> None:
    """Given as the result, its id or a snapshot, the parked run passes; released, it runs."""
    with hold_lock(key) as hold:
        out = r.Shipment.run(key=key)
        reactor_worker.drain(timeout=10)
        parked = assert_parked_at(out, "dispatch", key=key, primitive="lock")
        assert parked.waiting_on is not None
        assert parked.waiting_on["attempt"] == 1
        assert_parked_at(out.execution_id, "dispatch")
        snapshot = find(out.execution_id)
        hold.release()
        reactor_worker.drain(timeout=10)
    assert_parked_at(snapshot, "dispatch", key=key)  # the snapshot as it was taken
    with pytest.raises(
        AssertionError, match=r"to be parked at step 'dispatch', but it is completed"
    ):
        assert_parked_at(out, "dispatch")
    assert_succeeded(out)


def test_parked_at_fails_at_another_step_or_key(
    reactor_worker: ReactorWorker, hold_lock: LockHolder, key: str
) -> None:
    """Parked elsewhere, or on another key: the message says where and on what."""
    with hold_lock(key):
        out = r.Shipment.run(key=key)
        reactor_worker.drain(timeout=10)
        with pytest.raises(
            AssertionError,
            match=r"to be parked at step 'prepare', but it is parked at step 'dispatch'",
        ):
            assert_parked_at(out, "prepare")
        with pytest.raises(
            AssertionError,
            match=rf"on another key\n  expected: 'other'\n"
            rf"  found:    '{key}' \(lock '{key}', park 1\)",
        ):
            assert_parked_at(out, "dispatch", key="other")


def test_parked_at_fails_for_a_run_in_the_caller_and_a_retry_backoff(
    reactor_worker: ReactorWorker, key: str
) -> None:
    """A run in the caller never parks; a retry waiting out its backoff is not a park."""
    with pytest.raises(AssertionError, match=r"ran in the caller, which never parks"):
        assert_parked_at(r.Pricing.run(n=1), "double")
    out = r.SlowRetry.run(key=key)
    until(lambda: status(out.execution_id) == "waiting", "the retry started waiting")
    with pytest.raises(AssertionError, match=r"but it is waiting out a retry's backoff"):
        assert_parked_at(out, "call")
    r.CALLS.pop(key)


# -- the trace in messages ---------------------------------------------------------------------


def test_long_traces_show_their_last_entries() -> None:
    """A long trace is cut to its last entries, saying how many were left out."""
    trace = [{"type": "run", "step": f"s{i}", "attempt": 1, "result": i} for i in range(30)]
    lines = format_trace(trace, limit=5)
    assert lines[0] == "    ... 25 earlier entries"
    assert lines[-1] == "    30. run        s29: attempt 1, returned 29"
    assert format_trace([]) == ["    (empty: no step ran)"]


def test_the_store_fixture_is_what_the_helpers_read(reactor_store: IsolatedStore) -> None:
    """The helpers read executions from the configured store: the test's own."""
    assert reactor_store.executions() == []
