"""Stored records as readers see them: an unknown id is one error for every operation, and a
record that cannot be read (context, outcome, status, trace) is a typed error from ``wait()``
and a ``.problem`` from ``find()``, never a hang and never a silent empty record.

The garbage is generated (hypothesis) and written into a real record on the private Redis.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import py_reactor
from py_reactor import FailureResult, HaltedResult, Status, TraceKind, configure, find, workers
from py_reactor.errors import (
    CorruptRecordError,
    ExecutionNotFoundError,
    ReactorError,
    ResumeError,
)
from py_reactor.runtime.execution import TERMINAL
from py_reactor.storage.executions import record_key
from tests._wait import status, until
from tests.runtime import _interrupt_reactors as r
from tests.runtime import _operations_reactors as o

#: wait() must give up on a damaged record at once; this bounds "at once" generously.
PROMPTLY = 2.0
#: Few examples: each one writes and reads a real record.
SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


@pytest.fixture(autouse=True)
def _store(redis_url: str) -> Iterator[None]:
    configure(redis_url=redis_url, park_delay=30.0, park_jitter=0.0)
    yield
    o.LOG.clear()
    r.LOG.clear()


@pytest.fixture
def completed(key: str) -> str:
    """The id of a real execution that completed in the thread worker, record and all."""
    outcome = o.BgThree.run(key=key).wait(timeout=10)
    assert outcome.is_success
    return outcome.execution_id


# -- unknown ids ---------------------------------------------------------------------------------

OPERATIONS: dict[str, Callable[[Any], Any]] = {
    "cancel": workers.cancel,
    "undo": workers.undo,
    "retry": workers.retry,
    "resume": lambda i: workers.resume(i, {"approved": True, "by": "ops"}),
    "wait": lambda i: workers.wait(i, timeout=1),
    "Reactor.cancel": o.BgThree.cancel,
    "Reactor.undo": o.BgThree.undo,
    "Reactor.retry": o.BgThree.retry,
    "Reactor.resume": lambda i: r.Refund.resume(i, {"approved": True, "by": "ops"}),
}


@pytest.mark.parametrize("operation", OPERATIONS, ids=list(OPERATIONS))
def test_every_operation_on_an_unknown_id_raises_execution_not_found(
    operation: str, redis_url: str
) -> None:
    missing = "no-such-execution"
    with pytest.raises(ExecutionNotFoundError) as raised:
        OPERATIONS[operation](missing)
    error = raised.value
    assert isinstance(error, LookupError)
    assert isinstance(error, ReactorError)
    assert not isinstance(error, ResumeError)  # resume's unknown id is this error too, now
    assert error.execution_id == missing
    message = str(error)
    assert f"no execution {missing!r} is stored in the Redis at {redis_url}" in message
    assert "check the id" in message
    assert "configure(redis_url=...)" in message


def test_find_answers_none_for_an_unknown_id_and_the_error_is_exported() -> None:
    assert find("no-such-execution") is None
    assert py_reactor.ExecutionNotFoundError is ExecutionNotFoundError
    with pytest.raises(LookupError):  # what callers caught before keeps working
        workers.cancel("no-such-execution")


NOT_IDS = [42, None, b"bytes-id", ["an-id"]]
BY_ID: dict[str, Callable[[Any], Any]] = {**OPERATIONS, "find": find}


#: (resume() with no id at all takes a correlation id: its own TypeError, tested with resume)
NOT_ID_CASES = [
    (operation, value)
    for operation in BY_ID
    for value in NOT_IDS
    if not (value is None and operation.endswith("resume"))
]


@pytest.mark.parametrize(("operation", "value"), NOT_ID_CASES, ids=repr)
def test_an_id_that_is_not_a_str_is_a_type_error_naming_the_argument(
    operation: str, value: Any
) -> None:
    with pytest.raises(TypeError, match=r"\(\) takes the execution id \(argument execution_id\)"):
        BY_ID[operation](value)


def test_an_outcome_passed_for_its_id_is_refused_with_the_id_it_carries(completed: str) -> None:
    outcome = workers.wait(completed, timeout=5)
    with pytest.raises(TypeError, match=rf"pass its \.execution_id \('{completed}'\)"):
        workers.undo(outcome)  # type: ignore[arg-type]


def test_wait_refuses_a_timeout_that_is_not_seconds(completed: str) -> None:
    with pytest.raises(ValueError, match="timeout >= 0"):
        workers.wait(completed, timeout=-1)
    with pytest.raises(TypeError, match="timeout as seconds"):
        workers.wait(completed, timeout="5")  # type: ignore[arg-type]


# -- damaged records: what is generated ----------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_ENDS = sorted(status.value for status in TERMINAL)
_STATUSES = {status.value for status in Status}
_KINDS = {kind.value for kind in TraceKind}


def _not_an_object(text: str) -> bool:
    try:
        return not isinstance(json.loads(text), dict)
    except ValueError:
        return True


#: Wrong values for the typed fields of a stored outcome (None is allowed for each).
_WRONG_FIELD = st.one_of(
    st.tuples(st.sampled_from(["error", "exception_class", "step_name"]),
              st.integers() | st.lists(st.integers(), max_size=2)),
    st.tuples(st.sampled_from(["rollback_failures", "validation_errors"]),
              st.integers() | st.text(max_size=5)),
    st.tuples(st.just("attempts"), st.text(max_size=5) | st.booleans() | st.floats()),
    st.tuples(st.just("retryable"), st.integers() | st.text(max_size=5)),
)  # fmt: skip

GARBAGE_CONTEXT = st.text(max_size=60) | _JSON.map(json.dumps)
GARBAGE_OUTCOME = st.one_of(
    st.text(min_size=1, max_size=60).filter(_not_an_object),
    _JSON.filter(lambda value: not isinstance(value, dict)).map(json.dumps),
    st.text(max_size=12).filter(lambda s: s not in _ENDS).map(lambda s: json.dumps({"status": s})),
    st.tuples(st.sampled_from(_ENDS), _WRONG_FIELD).map(
        lambda pair: json.dumps({"status": pair[0], pair[1][0]: pair[1][1]})
    ),
)
GARBAGE_STATUS = st.text(max_size=20).filter(lambda s: s not in _STATUSES)
_BAD_ENTRY = st.one_of(
    _JSON.filter(lambda value: not isinstance(value, dict)),
    st.text(max_size=10)
    .filter(lambda kind: kind not in _KINDS)
    .map(lambda kind: {"type": kind, "step": "a", "started_at": 1.0}),
    st.dictionaries(st.text(max_size=6), _JSON, max_size=3).filter(
        lambda entry: entry.get("type") not in _KINDS
    ),
    st.builds(
        lambda kind, field, value: {"type": kind, field: value},
        st.sampled_from(sorted(_KINDS)),
        st.sampled_from(["step", "started_at", "finished_at"]),
        st.text(min_size=1, max_size=5).filter(lambda s: s.strip()) | st.lists(st.integers()),
    ).filter(lambda entry: not (isinstance(entry.get("step"), str))),
)
GARBAGE_TRACE = _JSON.filter(lambda value: not isinstance(value, list)) | st.builds(
    lambda before, bad: [*before, bad],
    st.lists(st.just({"type": "run", "step": "a", "started_at": 1.0}), max_size=2),
    _BAD_ENTRY,
)


def _damaged(raw: redis.Redis, execution_id: str, field: str, value: str) -> str:
    """Write ``value`` into ``field`` of the real record; ``find``'s problem, checked, and
    ``wait``'s error, checked to come at once."""
    raw.hset(record_key(execution_id), field, value)
    found = find(execution_id)
    assert found is not None
    assert found.problem is not None, f"{field}={value!r} read as a sound record"
    assert f"execution {execution_id} " in found.problem
    assert "cannot be read" in found.problem
    started = time.monotonic()
    with pytest.raises(CorruptRecordError) as raised:
        workers.wait(execution_id, timeout=PROMPTLY * 5)
    assert time.monotonic() - started < PROMPTLY
    assert raised.value.execution_id == execution_id
    assert raised.value.problem == found.problem
    assert isinstance(raised.value, ReactorError)
    assert found.problem in str(raised.value)
    return found.problem


# -- damaged records: each field a reader parses -------------------------------------------------


@SETTINGS
@given(garbage=GARBAGE_CONTEXT)
def test_a_context_that_cannot_be_read_is_a_problem_not_an_empty_run(
    completed: str, raw: redis.Redis, garbage: str
) -> None:
    problem = _damaged(raw, completed, "context", garbage)
    assert "context" in problem
    found = find(completed)
    assert found is not None
    assert found.trace == []  # nothing could be read, and .problem says so
    assert found.outcome is None


@SETTINGS
@given(garbage=GARBAGE_OUTCOME)
def test_an_outcome_that_cannot_be_read_is_raised_by_wait_not_waited_on(
    completed: str, raw: redis.Redis, garbage: str
) -> None:
    problem = _damaged(raw, completed, "outcome", garbage)
    assert "outcome" in problem


@SETTINGS
@given(garbage=GARBAGE_STATUS)
def test_a_status_py_reactor_does_not_write_is_a_problem(
    completed: str, raw: redis.Redis, garbage: str
) -> None:
    problem = _damaged(raw, completed, "status", garbage)
    assert "status" in problem
    with pytest.raises(CorruptRecordError):  # no operation takes it for a status it knows
        workers.cancel(completed)


@SETTINGS
@given(garbage=GARBAGE_TRACE)
def test_a_trace_that_cannot_be_read_is_a_problem(
    completed: str, raw: redis.Redis, garbage: Any
) -> None:
    document = json.loads(raw.hget(record_key(completed), "context") or "")
    document["context"]["trace"] = garbage
    problem = _damaged(raw, completed, "context", json.dumps(document))
    assert "trace" in problem


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ({"type": "banana", "step": "a"}, "has type 'banana', not a trace kind"),
        ({"type": "run", "step": 5}, "names step 5, not text"),
        ({"type": "run", "step": "a", "started_at": "noon"}, "has started_at 'noon'"),
    ],
    ids=["unknown-kind", "step-not-text", "time-not-a-number"],
)
def test_a_trace_entry_py_reactor_does_not_write_is_named(
    completed: str, raw: redis.Redis, entry: dict[str, Any], said: str
) -> None:
    document = json.loads(raw.hget(record_key(completed), "context") or "")
    document["context"]["trace"].append(entry)
    number = len(document["context"]["trace"])
    problem = _damaged(raw, completed, "context", json.dumps(document))
    assert f"its trace entry {number} {said}" in problem


def test_a_sound_record_has_no_problem(completed: str) -> None:
    found = find(completed)
    assert found is not None
    assert found.problem is None
    assert found.status == "completed"
    assert found.trace
    assert found.outcome is not None


def test_a_halt_reason_is_read_as_the_user_gave_it_not_as_damage(
    completed: str, raw: redis.Redis
) -> None:
    """``Halt(reason)`` stores what the user passed; a reason that is not text is no damage."""
    outcome = {"status": "halted", "reason": {"code": 42}, "step_name": "b"}
    raw.hset(record_key(completed), mapping={"status": "halted", "outcome": json.dumps(outcome)})
    found = find(completed)
    assert found is not None
    assert found.problem is None
    halted = workers.wait(completed, timeout=5)
    assert isinstance(halted, HaltedResult)
    assert halted.reason == str({"code": 42})


def test_a_completed_record_without_an_outcome_is_a_problem(
    completed: str, raw: redis.Redis
) -> None:
    problem = _damaged(raw, completed, "outcome", "")
    assert "it is completed but no outcome is stored" in problem


# -- damaged records that have not ended -------------------------------------------------------


def test_a_paused_run_with_a_damaged_context_is_no_empty_run_and_no_operation_guesses(
    key: str, raw: redis.Redis
) -> None:
    """A paused record (the dashboard once showed it as "Nothing has run yet" with buttons):
    wait raises, find says why, resume, undo and retry refuse it as damaged; cancel stops it."""
    paused = r.Refund.run(key=key)
    until(lambda: status(paused.execution_id) == "paused", "the run paused")
    execution_id = paused.execution_id
    _damaged(raw, execution_id, "context", "{not json")
    with pytest.raises(CorruptRecordError, match="cannot be resumed"):
        r.Refund.resume(execution_id, {"approved": True, "by": "ops"})
    with pytest.raises(CorruptRecordError, match="cannot be undone"):
        workers.undo(execution_id)
    cancelled = workers.cancel(execution_id)  # the way to take it out of the workers' hands
    assert cancelled.status == "cancelled"
    assert cancelled.problem is not None  # the damage is kept for people to see, not blanked
    assert "context" in cancelled.problem
    with pytest.raises(CorruptRecordError, match="cannot be retried"):
        workers.retry(execution_id)  # (its inputs cannot be read: no run with empty ones)


def test_a_parked_run_with_a_damaged_context_ends_failed_by_its_worker_not_hung(
    key: str, raw: redis.Redis
) -> None:
    """A record a worker will claim again (parked here) is waited on: the worker that claims
    it fails it, naming the cause, and wait() returns that failure; find() tells the damage
    while it waits, and a wait that times out meanwhile says it too."""
    with py_reactor.Lock(f"{key}:step", ttl=30, wait=0):
        out = o.ParksAtStep.run(key=key)
        until(lambda: status(out.execution_id) == "waiting", "the run parked")
        raw.hset(record_key(out.execution_id), "context", "{not json")
        found = find(out.execution_id)
        assert found is not None
        assert found.problem is not None
        with pytest.raises(TimeoutError, match=r"cannot be read.*a worker fails it"):
            out.wait(timeout=0.2)
    outcome = out.wait(timeout=10)  # the release woke it; the worker failed it
    assert isinstance(outcome, FailureResult)
    assert "cannot be run here" in str(outcome.error)
    assert "context" in str(outcome.error)
    assert "blocked ran" not in o.LOG.get(key, [])
