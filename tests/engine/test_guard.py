"""Guards: checked after validation and before run; what each verdict does to the step."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from pydantic import Field

from py_reactor import (
    Failure,
    FailureResult,
    Halt,
    HaltedResult,
    Reactor,
    Result,
    Skipped,
    Step,
    Success,
    Value,
    retries,
    step,
)
from py_reactor.engine import waiter

LOG: list[str] = []
VERDICT: dict[str, Any] = {"value": None}
GUARD_ERROR = PermissionError("account frozen")


@pytest.fixture(autouse=True)
def _clean_records(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Start every test with empty records, a permissive guard and no real sleeping."""
    LOG.clear()
    VERDICT["value"] = None
    monkeypatch.setattr(waiter, "_sleep", lambda seconds: LOG.append(f"sleep {seconds}"))
    yield
    LOG.clear()


class Setup(Step):
    """Completes first; records its undo."""

    def run(self) -> Any:
        LOG.append("run setup")
        return "setup"

    def undo(self, result: Any) -> Any:
        LOG.append("undo setup")


@retries(max_attempts=3, base_delay=0)
class Guarded(Step):
    """Guarded by whatever VERDICT holds (or raises when it holds an exception)."""

    amount: Annotated[int, Field(ge=1)]

    def guard(self) -> Any:
        LOG.append(f"guard {self.inputs.amount!r}")
        verdict = VERDICT["value"]
        if isinstance(verdict, BaseException):
            raise verdict
        return verdict

    def run(self) -> Any:
        LOG.append("run guarded")
        return Success(self.inputs.amount * 2)

    def compensate(self, error: Any) -> Any:
        LOG.append("compensate guarded")

    def undo(self, result: Any) -> Any:
        LOG.append("undo guarded")


class Reader(Step):
    """Reads the guarded step's value."""

    value: Any

    def run(self) -> Any:
        LOG.append(f"run reader {self.inputs.value!r}")
        return ("read", self.inputs.value)


class GuardReactor(Reactor):
    """Setup, a guarded step, then a reader of its value."""

    amount: Any
    setup = step(Setup)
    guarded = step(Guarded, wait_for="setup")
    reader = step(Reader, value=Result("guarded"))
    returns = "reader"


class ConstantGuardReactor(Reactor):
    """The guarded step with a constant amount."""

    guarded = step(Guarded, amount=Value(3))
    returns = "guarded"


def test_guard_runs_after_validation_and_before_run() -> None:
    """The guard sees validated (coerced) inputs and runs before run()."""
    outcome = GuardReactor.run(amount="4")
    assert outcome.is_success is True
    assert LOG == ["run setup", "guard 4", "run guarded", "run reader 8"]
    assert outcome.value == ("read", 8)


def test_guard_not_called_when_step_inputs_are_invalid() -> None:
    """Input validation happens first: invalid inputs fail the step before the guard is called."""
    outcome = GuardReactor.run(amount=0)
    assert outcome.is_success is False
    assert outcome.step_name == "guarded"
    assert LOG == ["run setup", "undo setup"]


@pytest.mark.parametrize("verdict", [None, True, Success(), Success("ignored")])
def test_permissive_guard_lets_run_happen(verdict: Any) -> None:
    """A guard returning None, True or Success lets run() happen."""
    VERDICT["value"] = verdict
    outcome = ConstantGuardReactor.run()
    assert outcome.is_success is True
    assert outcome.value == 6
    assert LOG == ["guard 3", "run guarded"]


@pytest.mark.parametrize(
    ("verdict", "expected_error"),
    [
        (Failure("closed"), "closed"),
        (Failure("closed", retryable=True), "closed"),
        (False, None),
        (GUARD_ERROR, GUARD_ERROR),
    ],
    ids=["failure", "retryable-failure", "false", "raises"],
)
def test_refusing_guard_fails_step_without_run_retry_or_compensate(
    verdict: Any, expected_error: Any
) -> None:
    """A guard returning Failure/False or raising fails the step: no run, retry or compensate."""
    VERDICT["value"] = verdict
    outcome = GuardReactor.run(amount=2)
    assert isinstance(outcome, FailureResult)
    assert outcome.step_name == "guarded"
    assert LOG == ["run setup", "guard 2", "undo setup"]
    assert not [e for e in outcome.trace if e["type"] == "retry"]
    assert outcome.rollback_failures == []
    if expected_error is None:
        assert "guard" in str(outcome.error)
    else:
        assert outcome.error is expected_error or outcome.error == expected_error


def test_raising_guard_reports_the_exception() -> None:
    """A guard that raises makes the exception the outcome's error, with its class name."""
    VERDICT["value"] = GUARD_ERROR
    outcome = ConstantGuardReactor.run()
    assert outcome.is_success is False
    assert outcome.error is GUARD_ERROR
    assert outcome.exception_class == "PermissionError"
    assert outcome.retryable is False


def test_skipped_from_guard_skips_the_step_and_value_flows() -> None:
    """A guard returning Skipped skips the step without run(); its value reaches readers."""
    VERDICT["value"] = Skipped("cached", reason="seen before")
    outcome = GuardReactor.run(amount=2)
    assert outcome.is_success is True
    assert outcome.status == "completed"
    assert LOG == ["run setup", "guard 2", "run reader 'cached'"]
    assert outcome.value == ("read", "cached")
    skipped = [e for e in outcome.trace if e["type"] == "skipped"]
    assert [(e["step"], e["reason"], e["result"]) for e in skipped] == [
        ("guarded", "seen before", "cached")
    ]


def test_halt_from_guard_halts_the_run() -> None:
    """A guard returning Halt stops the run cleanly: no run(), no later steps, no rollback."""
    VERDICT["value"] = Halt("quota reached")
    outcome = GuardReactor.run(amount=2)
    assert isinstance(outcome, HaltedResult)
    assert outcome.is_success is True
    assert outcome.reason == "quota reached"
    assert outcome.step_name == "guarded"
    assert LOG == ["run setup", "guard 2"]
    assert "reader" not in outcome.results


def test_invalid_guard_return_fails_with_a_helpful_message() -> None:
    """A guard returning something else (42) fails the step with a message listing valid returns."""
    VERDICT["value"] = 42
    outcome = ConstantGuardReactor.run()
    assert outcome.is_success is False
    assert outcome.step_name == "guarded"
    assert LOG == ["guard 3"]
    message = str(outcome.error)
    assert "42" in message
    for allowed in ("None", "True", "False", "Success", "Failure", "Skipped", "Halt"):
        assert allowed in message
