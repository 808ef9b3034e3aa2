"""Structured log lines from real runs on the real store: park, wake, recovery, guard refusal
and contention give-up, each checked as the exact ``key=value`` line on the ``py_reactor``
logger (records from the worker's threads included).

Lines are picked out by execution id (other tests' executions may still be finishing on the
worker); every park is observed through the stored record, not assumed from timing.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import pytest

from py_reactor import (
    Context,
    Lock,
    Reactor,
    Step,
    async_step,
    background,
    configure,
    dumps_context,
    step,
    with_lock,
    workers,
)
from py_reactor.dsl.registry import class_path
from py_reactor.errors import HandoffRefusedError, LockAcquisitionError
from py_reactor.observability import LoggingMiddleware
from py_reactor.observability.logs import render
from py_reactor.storage import current_store
from py_reactor.storage.executions import ExecutionStore
from tests._wait import status, until

ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"

# -- reactors (module level: the worker imports them by module:qualname) ---------------------


@background
class Parks(Reactor):
    """``reserve``, then ``charge`` under the lock on ``key`` (parks while someone holds it)."""

    key: str

    @step
    def reserve(key: str) -> str:
        return "reserved"

    @step(wait_for=["reserve"])
    @with_lock(lambda a: a["key"], ttl=10)
    def charge(key: str) -> str:
        return "charged"

    returns = "charge"


class WaitsInCaller(Reactor):
    """``charge`` under the lock on ``key``, waiting 0.1 s for it in the caller."""

    key: str

    @step
    @with_lock(lambda a: a["key"], ttl=10, wait=0.1)
    def charge(key: str) -> str:
        return "charged"


@with_lock(lambda i: i["key"], ttl=10, wait=0.1)
class ReactorLocked(Reactor):
    """The lock on ``key`` around the whole run, waiting 0.1 s for it."""

    key: str

    @step
    def only(key: str) -> str:
        return "done"


@with_lock(lambda a: a["key"], ttl=10)
class LockedUnit(Step):
    """An async unit that wants the lock on ``key``."""

    key: str

    def run(self) -> Any:
        return "unit"


@with_lock(lambda i: i["key"], ttl=10)
class HoldsWhatItsUnitWants(Reactor):
    """Holds ``key`` at reactor level, then dispatches a unit that wants it: refused."""

    key: str

    unit = async_step(LockedUnit)


class Quick(Reactor):
    """One step: what the recovered execution runs."""

    tag: str

    @step
    def only(tag: str) -> str:
        return f"ok {tag}"

    returns = "only"


# -- fixtures and helpers ----------------------------------------------------------------------

#: The park timer of these runs: a run resumed within WOKEN_WITHIN of a release was woken by it.
PARK_DELAY = 30.0
WOKEN_WITHIN = 10.0


@pytest.fixture
def logs(redis_url: str, caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="py_reactor")
    configure(
        redis_url=redis_url,
        middleware=[LoggingMiddleware()],
        park_delay=PARK_DELAY,
        park_jitter=0.0,
    )
    return caplog


def lines(caplog: pytest.LogCaptureFixture, execution_id: str) -> list[tuple[int, str]]:
    """(level, message) of the structured lines about ``execution_id``, in order."""
    mark = f" execution_id={execution_id} "
    return [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if r.name == "py_reactor" and r.getMessage().startswith("event=") and mark in r.getMessage()
    ]


# -- the lines ---------------------------------------------------------------------------------


def test_a_park_and_its_wake_are_one_line_each_with_a_quoted_key(
    logs: pytest.LogCaptureFixture, key: str
) -> None:
    """A key with spaces, held by the test: ``event=park`` (INFO) names the step, primitive,
    quoted key, attempt and until; the release gives ``event=wake`` (INFO) with what it waited
    on and for how long; the record also carries the fields as a dict."""
    spaced = f"{key} order 7"
    held = Lock(spaced, owner="someone-else", ttl=30).acquire()
    began = time.monotonic()
    out = Parks.run(key=spaced)
    until(lambda: status(out.execution_id) == "waiting", "the park")
    released = time.monotonic()
    held.release()
    assert out.wait(timeout=WOKEN_WITHIN).is_success
    assert time.monotonic() - released < WOKEN_WITHIN  # the release woke it, not the 30 s timer
    elapsed_ms = (time.monotonic() - began) * 1000
    execution = out.execution_id
    (park_level, park), (wake_level, wake) = lines(logs, execution)
    assert park_level == wake_level == logging.INFO
    assert re.fullmatch(
        f"event=park execution_id={execution} reactor=Parks step=charge primitive=lock "
        f'key="{re.escape(spaced)}" attempt=1 until={ISO}',
        park,
    ), park
    found = re.fullmatch(
        f"event=wake execution_id={execution} reactor=Parks step=charge primitive=lock "
        f'key="{re.escape(spaced)}" attempt=1 waited_ms=(\\d+)',
        wake,
    )
    assert found, wake
    assert 0 < int(found.group(1)) <= elapsed_ms
    record = next(r for r in logs.records if r.getMessage() == park)
    assert record.py_reactor["key"] == spaced  # type: ignore[attr-defined]
    assert record.py_reactor["attempt"] == 1  # type: ignore[attr-defined]


def test_a_lapsed_lease_is_one_recovery_line(logs: pytest.LogCaptureFixture) -> None:
    """An execution claimed by a runner that never renews its 0.2 s lease: the recovery loop
    makes it due again with ``event=recovery`` (WARNING), and it then completes."""
    workers.stop()  # no worker of this process may claim it first: the dead runner does
    executions = ExecutionStore(current_store())
    context = Context(reactor=class_path(Quick), inputs={"tag": "back"})
    execution = context.execution_id
    assert executions.create(
        execution, class_path(Quick), dumps_context(context), "pending", namespace="tests"
    )
    assert executions.claim(execution, "a-runner-that-died", 0.2) > 0

    def recovered() -> bool:
        workers.sweep()
        return bool(lines(logs, execution))

    until(recovered, "the recovery of the lapsed lease")
    assert lines(logs, execution) == [
        (logging.WARNING, f"event=recovery execution_id={execution} reactor=Quick")
    ]
    done = workers.wait(execution, timeout=10)
    assert done.is_success, done


def test_a_refused_hand_off_is_one_guard_refusal_line(
    logs: pytest.LogCaptureFixture, key: str
) -> None:
    """A unit wanting the lock its own execution holds is refused at dispatch: one
    ``event=guard_refusal`` (ERROR) with the primitive, key, quoted holder and error; no
    give-up line."""
    out = HoldsWhatItsUnitWants.run(key=key)
    assert not out.is_success
    assert isinstance(out.error, HandoffRefusedError)
    execution = out.execution_id
    error = str(out.error).replace("\\", "\\\\").replace('"', '\\"')
    assert lines(logs, execution) == [
        (
            logging.ERROR,
            f"event=guard_refusal execution_id={execution} reactor=HoldsWhatItsUnitWants "
            f'step=unit primitive=lock key={key} holder="the reactor-level lock of this '
            f'execution" error="{error}"',
        )
    ]


def test_contention_after_the_wait_in_the_caller_is_one_give_up_line(
    logs: pytest.LogCaptureFixture, key: str
) -> None:
    """The step's lock stays held for its whole 0.1 s wait: one ``event=give_up`` (WARNING),
    ``cause=wait``, though both the step and the reactor report the failure."""
    held = Lock(key, owner="someone-else", ttl=30).acquire()
    try:
        out = WaitsInCaller.run(key=key)
    finally:
        held.release()
    assert isinstance(out.error, LockAcquisitionError)
    execution = out.execution_id
    assert lines(logs, execution) == [
        (
            logging.WARNING,
            f"event=give_up execution_id={execution} reactor=WaitsInCaller step=charge "
            f'primitive=lock key={key} cause=wait error="{out.error}"',
        )
    ]


def test_reactor_level_contention_gives_up_without_a_step(
    logs: pytest.LogCaptureFixture, key: str
) -> None:
    """The reactor's own lock stays held: the give-up line has no ``step`` field."""
    held = Lock(key, owner="someone-else", ttl=30).acquire()
    try:
        out = ReactorLocked.run(key=key)
    finally:
        held.release()
    assert isinstance(out.error, LockAcquisitionError)
    execution = out.execution_id
    assert lines(logs, execution) == [
        (
            logging.WARNING,
            f"event=give_up execution_id={execution} reactor=ReactorLocked primitive=lock "
            f'key={key} cause=wait error="{out.error}"',
        )
    ]


def test_the_park_cap_gives_up_with_cause_park_cap_and_the_parks(
    logs: pytest.LogCaptureFixture, key: str
) -> None:
    """``park_max_attempts=1`` and the key held throughout: park, wake (the backstop timer),
    then ``event=give_up cause=park_cap parks=1``."""
    configure(park_max_attempts=1, park_delay=0.05, park_jitter=0.0)
    held = Lock(key, owner="someone-else", ttl=30).acquire()
    try:
        out = Parks.run(key=key)
        done = out.wait(timeout=10)
    finally:
        held.release()
    assert isinstance(done.error, LockAcquisitionError)
    execution = out.execution_id
    events = [message.split(" ")[0] for _, message in lines(logs, execution)]
    assert events == ["event=park", "event=wake", "event=give_up"]
    level, give_up = lines(logs, execution)[-1]
    assert level == logging.WARNING
    assert give_up == (
        f"event=give_up execution_id={execution} reactor=Parks step=charge primitive=lock "
        f'key={key} cause=park_cap parks=1 error="{done.error}"'
    )
    assert "1 park(s)" in give_up


def test_render_quotes_what_would_break_a_key_value_line() -> None:
    """Plain values stay bare; spaces, quotes, ``=``, backslashes, newlines and empty values
    are double-quoted and escaped; booleans are lower case."""
    assert render({"a": "plain", "n": 3, "f": 1.5, "yes": True}) == "a=plain n=3 f=1.5 yes=true"
    assert render({"k": "two words"}) == 'k="two words"'
    assert render({"k": 'say "hi"'}) == r'k="say \"hi\""'
    assert render({"k": "a=b"}) == 'k="a=b"'
    assert render({"k": "back\\slash"}) == r'k="back\\slash"'
    assert render({"k": "two\nlines"}) == r'k="two\nlines"'
    assert render({"k": ""}) == 'k=""'


def test_lines_go_to_the_logger_given(redis_url: str, key: str) -> None:
    """``LoggingMiddleware(logger=...)`` writes there, not on ``py_reactor``."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    mine = logging.getLogger(f"tests.observability.{key}")
    mine.setLevel(logging.INFO)
    mine.propagate = False
    mine.addHandler(Keep())
    configure(redis_url=redis_url, middleware=[LoggingMiddleware(logger=mine)])
    held = Lock(key, owner="someone-else", ttl=30).acquire()
    try:
        out = WaitsInCaller.run(key=key)
    finally:
        held.release()
    assert [r.getMessage().split(" ")[0] for r in records] == ["event=give_up"]
    assert f"execution_id={out.execution_id}" in records[0].getMessage()
