"""Rate limits and periods declared on a reactor."""

from __future__ import annotations

import uuid

import pytest
import redis

from py_reactor import (
    FailureResult,
    HaltedResult,
    Reactor,
    SuccessResult,
    configure,
    step,
    with_rate_limit,
)
from py_reactor.errors import CoordinationError, RateLimitExceededError
from py_reactor.observability import events as ev
from tests.engine.coordination._helpers import (
    _REGISTERED,
    Daily,
    MinuteTighter,
    Probe,
    RateLimited,
    Registered,
    by_key,
    fresh_window,
    ran,
    recorder,
)

_UNREGISTERED = f"nobody-{uuid.uuid4().hex[:8]}"


@with_rate_limit(by_key, limits={"minute": 3, "hour": 2})
class HourTighter(Reactor):
    key: str
    probe = step(Probe)


@with_rate_limit(_UNREGISTERED)
class Unregistered(Reactor):
    key: str
    probe = step(Probe)


# -- rate limits -------------------------------------------------------------------------------


def test_a_rate_limit_admits_limit_runs_per_window(key: str, raw: redis.Redis) -> None:
    """limit=2 per minute: two runs pass, the third fails with retry_after within the minute."""
    fresh_window(raw)
    first, second, third = (RateLimited.run(key=key) for _ in range(3))
    assert first.is_success
    assert second.is_success
    assert isinstance(third, FailureResult)
    error = third.error
    assert isinstance(error, RateLimitExceededError)
    assert 0 < error.retry_after <= 60
    assert error.key == key
    assert error.reactor == "RateLimited"
    assert "RateLimited" in str(error)
    assert key in str(error)
    assert third.retryable is False
    assert ran == [key, key]


def test_every_window_of_a_multi_window_limit_is_enforced(key: str, raw: redis.Redis) -> None:
    """With minute and hour windows, whichever is tighter refuses; refused runs count nowhere."""
    from py_reactor.coordination.rate_limit import RateLimit

    fresh_window(raw)
    minute_key, hour_key = f"{key}-m", f"{key}-h"
    minute_runs = [MinuteTighter.run(key=minute_key) for _ in range(3)]
    assert [o.is_success for o in minute_runs] == [True, True, False]
    assert isinstance(minute_runs[2].error, RateLimitExceededError)
    assert 0 < minute_runs[2].error.retry_after <= 60
    usage = RateLimit(minute_key, limits={"minute": 2, "hour": 3}).usage()
    assert usage == {60: 2, 3600: 2}

    hour_runs = [HourTighter.run(key=hour_key) for _ in range(3)]
    assert [o.is_success for o in hour_runs] == [True, True, False]
    assert isinstance(hour_runs[2].error, RateLimitExceededError)
    assert 0 < hour_runs[2].error.retry_after <= 3600
    assert RateLimit(hour_key, limits={"minute": 3, "hour": 2}).usage() == {60: 2, 3600: 2}
    assert ran == [minute_key, minute_key, hour_key, hour_key]


def test_a_registered_rate_limit_is_used_by_name(key: str, raw: redis.Redis) -> None:
    """``with_rate_limit("name")`` enforces the limit registered with configure(rate_limits=...)."""
    fresh_window(raw)
    configure(rate_limits={_REGISTERED: {"minute": 1}})
    first = Registered.run(key=key)
    second = Registered.run(key=key)
    assert first.is_success, first
    assert isinstance(second.error, RateLimitExceededError)
    assert second.error.key == _REGISTERED
    assert 0 < second.error.retry_after <= 60
    assert ran == [key]


def test_an_unregistered_rate_limit_name_fails_the_run(key: str) -> None:
    """A rate limit named but never registered fails the run, naming it, before any work."""
    outcome = Unregistered.run(key=key)
    assert isinstance(outcome, FailureResult)
    assert isinstance(outcome.error, CoordinationError)
    assert _UNREGISTERED in str(outcome.error)
    assert outcome.error.reactor == "Unregistered"
    assert ran == []


# -- periods -----------------------------------------------------------------------------------


def test_a_period_runs_once_then_halts_without_running_a_step(key: str) -> None:
    """The first run in a day bucket succeeds; the second halts with reason "period"."""
    rec = recorder()
    first = Daily.run(key=key)
    second = Daily.run(key=key)
    assert isinstance(first, SuccessResult), first
    assert isinstance(second, HaltedResult), second
    assert second.reason == "period"
    assert second.is_success is True
    assert ran == [key]
    halted = rec.of(ev.ReactorHalted)
    assert [e.reason for e in halted] == ["period"]
    assert second.context.status == "halted"


@pytest.mark.parametrize("mode", ["fail", "raise", "halt"])
def test_a_run_that_does_not_plainly_succeed_leaves_the_period_due(mode: str, key: str) -> None:
    """Only a plain success marks the period: after Failure, exception or Halt the next is due."""
    not_plain = Daily.run(key=key, mode=mode)
    assert not isinstance(not_plain, SuccessResult)
    due = Daily.run(key=key)
    assert isinstance(due, SuccessResult), due
    done = Daily.run(key=key)
    assert isinstance(done, HaltedResult)
    assert done.reason == "period"
    assert ran == [key, key]


def test_periods_with_different_keys_are_independent(key: str) -> None:
    """Marking one key's bucket done does not stop another key."""
    assert Daily.run(key=key).is_success
    other = Daily.run(key=f"{key}-other")
    assert isinstance(other, SuccessResult)
    assert ran == [key, f"{key}-other"]
