"""Step coordination and ``@retries``: each attempt takes and releases; contention is final.

A refused attempt is not an attempt at the work: ``outcome.attempts`` counts the attempts
whose work ran, and the step is compensated only if one did.
"""

from __future__ import annotations

from typing import Any

from py_reactor import Lock, Reactor, Step, retries, step, with_lock, with_rate_limit
from py_reactor.errors import LockAcquisitionError, RateLimitExceededError
from py_reactor.observability import events as ev
from tests.engine.coordination._helpers import lock_is_free, recorder

CALLS: list[str] = []


@retries(max_attempts=3, backoff="fixed", base_delay=0)
@with_rate_limit(lambda a: a["key"], limit=2, period="day")
class Flaky(Step):
    """Fails every time; its rate limit admits two attempts a day per key."""

    key: str

    def run(self) -> Any:
        CALLS.append("run")
        raise TimeoutError("partner timed out")

    def compensate(self, error: Any) -> Any:
        CALLS.append(f"compensate:{type(error).__name__}")


class FlakyReactor(Reactor):
    key: str
    call = step(Flaky)


@retries(max_attempts=3, backoff="fixed", base_delay=0)
@with_lock(lambda a: a["key"], wait=0)
class Busy(Step):
    """Never gets its lock in these tests."""

    key: str

    def run(self) -> Any:
        CALLS.append("run")

    def compensate(self, error: Any) -> Any:
        CALLS.append("compensate")


class BusyReactor(Reactor):
    key: str
    busy = step(Busy)


def test_contention_on_a_later_attempt_compensates_the_work_that_ran(key: str) -> None:
    """Two attempts ran and failed; the third is refused by the rate limit: compensate runs.

    It receives the work's own last error; the outcome reports why the retries stopped.
    """
    CALLS.clear()
    rec = recorder()
    outcome = FlakyReactor.run(key=key)
    assert outcome.status == "failed"
    assert isinstance(outcome.error, RateLimitExceededError)
    assert outcome.attempts == 2
    assert CALLS == ["run", "run", "compensate:TimeoutError"]
    assert [e.attempt for e in rec.of(ev.StepStarted)] == [1, 2]
    (failed,) = rec.of(ev.StepFailed)
    assert failed.attempt == 2
    (entry,) = [e for e in outcome.context.trace if e["type"] == "failed"]
    assert entry["refused_by"] == "coordination"
    assert entry["primitive"] == "rate_limit"
    assert entry["key"] == key
    assert entry["coordination"] == {"rate_limit": key}


def test_contention_on_the_first_attempt_is_no_attempt_and_not_compensated(key: str) -> None:
    """Refused before any work: attempts 0, no StepStarted, no compensate, never retried."""
    CALLS.clear()
    rec = recorder()
    with Lock(key, owner="someone-else"):
        outcome = BusyReactor.run(key=key)
    assert outcome.status == "failed"
    assert isinstance(outcome.error, LockAcquisitionError)
    assert outcome.attempts == 0
    assert CALLS == []
    assert rec.of(ev.StepStarted) == []
    assert [e.key for e in rec.of(ev.LockAcquisitionFailed)] == [key]
    assert lock_is_free(key)
