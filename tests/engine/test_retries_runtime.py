"""Retries at run time: attempts, non-retryable failures, delays handed to the sleeper."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from pydantic import Field

from py_reactor import Failure, Reactor, Step, Success, Value, retries, step
from py_reactor.engine import waiter

CALLS: dict[str, int] = {}
SLEEPS: list[float] = []


@pytest.fixture(autouse=True)
def _fake_sleep(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Record retry delays instead of sleeping, and reset call counters."""
    CALLS.clear()
    SLEEPS.clear()
    monkeypatch.setattr(waiter, "_sleep", SLEEPS.append)
    yield
    CALLS.clear()
    SLEEPS.clear()


def _count(name: str) -> int:
    CALLS[name] = CALLS.get(name, 0) + 1
    return CALLS[name]


@retries(max_attempts=3, base_delay=0)
class Flaky(Step):
    """Fails on its first two attempts, then succeeds."""

    def run(self) -> Any:
        attempt = _count("flaky")
        if attempt < 3:
            raise ConnectionError(f"attempt {attempt} failed")
        return Success(f"ok after {attempt}")


@retries(max_attempts=5, base_delay=0)
class Permanent(Step):
    """Fails with a non-retryable failure."""

    def run(self) -> Any:
        _count("permanent")
        return Failure("card stolen", retryable=False)


@retries(max_attempts=4, base_delay=0)
class AlwaysFails(Step):
    """Always fails with a retryable failure."""

    def run(self) -> Any:
        _count("always")
        return Failure("still down")


@retries(max_attempts=3, base_delay=0)
class StrictRetried(Step):
    """Has retries but needs a positive amount."""

    amount: Annotated[int, Field(ge=1)]

    def run(self) -> Any:
        _count("strict")
        return "ran"


class NoRetries(Step):
    """No retry policy; always raises."""

    def run(self) -> Any:
        _count("no_retries")
        raise TimeoutError("slow")


@retries(max_attempts=3, backoff="exponential", base_delay=0.5)
class Exponential(Step):
    """Always fails; exponential backoff from 0.5 s."""

    def run(self) -> Any:
        _count("exponential")
        return Failure("nope")


@retries(max_attempts=4, backoff="linear", base_delay=0.5)
class Linear(Step):
    """Always fails; linear backoff from 0.5 s."""

    def run(self) -> Any:
        _count("linear")
        return Failure("nope")


@retries(max_attempts=3, backoff="fixed", base_delay=2)
class Fixed(Step):
    """Always fails; fixed 2 s backoff."""

    def run(self) -> Any:
        _count("fixed")
        return Failure("nope")


@retries(max_attempts=5, backoff="exponential", base_delay=1, max_delay=3)
class Capped(Step):
    """Always fails; exponential backoff capped at 3 s."""

    def run(self) -> Any:
        _count("capped")
        return Failure("nope")


class FlakyReactor(Reactor):
    """Runs the flaky step."""

    flaky = step(Flaky)
    returns = "flaky"


class PermanentReactor(Reactor):
    """Runs the permanently failing step."""

    permanent = step(Permanent)


class AlwaysFailsReactor(Reactor):
    """Runs the always failing step."""

    always = step(AlwaysFails)


class StrictRetriedReactor(Reactor):
    """Runs the retried step with an invalid amount."""

    strict = step(StrictRetried, amount=Value(0))


class NoRetriesReactor(Reactor):
    """Runs the step without a retry policy."""

    no_retries = step(NoRetries)


class ExponentialReactor(Reactor):
    """Runs the exponential-backoff step."""

    exponential = step(Exponential)


class LinearReactor(Reactor):
    """Runs the linear-backoff step."""

    linear = step(Linear)


class FixedReactor(Reactor):
    """Runs the fixed-backoff step."""

    fixed = step(Fixed)


class CappedReactor(Reactor):
    """Runs the capped-backoff step."""

    capped = step(Capped)


class InlineRetriesReactor(Reactor):
    """Inline steps with @retries above and below @step."""

    @retries(max_attempts=3, base_delay=0)
    @step()
    def above() -> str:
        attempt = _count("above")
        if attempt < 3:
            raise ConnectionError("flaky")
        return "above ok"

    @step(wait_for="above")
    @retries(max_attempts=2, base_delay=0.25)
    def below() -> str | Failure:
        attempt = _count("below")
        if attempt < 2:
            return Failure("flaky")
        return "below ok"

    returns = "below"


def test_flaky_step_succeeds_after_retries() -> None:
    """A step failing twice then succeeding under max_attempts=3 succeeds on the third attempt."""
    outcome = FlakyReactor.run()
    assert outcome.is_success is True
    assert outcome.value == "ok after 3"
    assert CALLS["flaky"] == 3
    retry_entries = [e for e in outcome.trace if e["type"] == "retry"]
    assert len(retry_entries) == 2
    assert [e["attempt"] for e in retry_entries] == [1, 2]
    assert all(e["step"] == "flaky" for e in retry_entries)
    assert "attempt 1 failed" in retry_entries[0]["error"]
    run_entries = [e for e in outcome.trace if e["type"] == "run"]
    assert [e["attempt"] for e in run_entries] == [3]
    assert SLEEPS == []


def test_non_retryable_failure_stops_after_one_attempt() -> None:
    """Failure(retryable=False) is not retried even when attempts remain."""
    outcome = PermanentReactor.run()
    assert outcome.is_success is False
    assert CALLS["permanent"] == 1
    assert outcome.attempts == 1
    assert outcome.retryable is False
    assert outcome.error == "card stolen"
    assert not [e for e in outcome.trace if e["type"] == "retry"]


def test_always_failing_step_uses_every_attempt() -> None:
    """A step that always fails makes max_attempts attempts, reported on the outcome."""
    outcome = AlwaysFailsReactor.run()
    assert outcome.is_success is False
    assert CALLS["always"] == 4
    assert outcome.attempts == 4
    assert outcome.retryable is True
    assert len([e for e in outcome.trace if e["type"] == "retry"]) == 3
    assert [e["attempt"] for e in outcome.trace if e["type"] == "failed"] == [4]


def test_step_input_validation_failure_is_never_retried() -> None:
    """Invalid step inputs fail at once: run() is never called and no retry is attempted."""
    outcome = StrictRetriedReactor.run()
    assert outcome.is_success is False
    assert outcome.step_name == "strict"
    assert "strict" not in CALLS
    assert outcome.retryable is False
    assert outcome.validation_errors
    assert not [e for e in outcome.trace if e["type"] == "retry"]
    assert SLEEPS == []


def test_step_without_retries_makes_exactly_one_attempt() -> None:
    """Without @retries a raising step is tried once."""
    outcome = NoRetriesReactor.run()
    assert outcome.is_success is False
    assert CALLS["no_retries"] == 1
    assert outcome.attempts == 1
    assert isinstance(outcome.error, TimeoutError)
    assert not [e for e in outcome.trace if e["type"] == "retry"]
    assert SLEEPS == []


@pytest.mark.parametrize(
    ("reactor", "expected"),
    [
        (ExponentialReactor, [0.5, 1.0]),
        (LinearReactor, [0.5, 1.0, 1.5]),
        (FixedReactor, [2.0, 2.0]),
        (CappedReactor, [1.0, 2.0, 3.0, 3.0]),
    ],
    ids=["exponential", "linear", "fixed", "capped"],
)
def test_delays_passed_to_sleeper_follow_the_policy(
    reactor: type[Reactor], expected: list[float]
) -> None:
    """The sleeper receives one delay per retry, computed by the step's backoff policy."""
    outcome = reactor.run()
    assert outcome.is_success is False
    assert pytest.approx(expected) == SLEEPS
    assert outcome.attempts == len(expected) + 1
    assert [e["delay"] for e in outcome.trace if e["type"] == "retry"] == pytest.approx(expected)


def test_retries_apply_to_inline_steps_above_and_below_step() -> None:
    """@retries works on inline steps whether placed above or below @step."""
    outcome = InlineRetriesReactor.run()
    assert outcome.is_success is True
    assert outcome.value == "below ok"
    assert CALLS == {"above": 3, "below": 2}
    retried = [e["step"] for e in outcome.trace if e["type"] == "retry"]
    assert retried == ["above", "above", "below"]
    assert SLEEPS == [0.25]
