"""Step.invoke(args): one step run alone, with the engine's semantics and no retries."""

from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from pydantic import Field

from py_reactor import (
    Failure,
    FailureResult,
    Halt,
    HaltedResult,
    Input,
    Middleware,
    Reactor,
    Status,
    Step,
    Success,
    SuccessResult,
    configure,
    retries,
    step,
)
from py_reactor.engine import Context, waiter
from py_reactor.errors import InputValidationError
from py_reactor.observability import events as ev

#: What the steps of this module did, in order (cleared around every test).
LOG: list[Any] = []


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    """Start every test with an empty log."""
    LOG.clear()
    yield
    LOG.clear()


class Charge(Step):
    account_id: int
    amount: Annotated[int, Field(ge=1)]

    def guard(self) -> Any:
        LOG.append(("guard", self.inputs.account_id))

    def run(self) -> Any:
        LOG.append(("run", self.inputs.account_id, self.inputs.amount))
        return Success({"charged": self.inputs.amount})

    def compensate(self, error: Any) -> Any:
        LOG.append(("compensate", error))

    def undo(self, result: Any) -> Any:
        LOG.append(("undo", result))


class RefusingGuard(Step):
    def guard(self) -> Any:
        LOG.append("guard")
        return Failure("not allowed", retryable=False)

    def run(self) -> Any:
        LOG.append("run")
        return "ran"


class BrokenCharge(Step):
    account_id: int

    def run(self) -> Any:
        LOG.append(("run", id(self)))
        raise RuntimeError("gateway down")

    def compensate(self, error: Any) -> Any:
        LOG.append(("compensate", id(self), error))


@retries(max_attempts=5, backoff="fixed", base_delay=1.0)
class Flaky(Step):
    def run(self) -> Any:
        LOG.append("attempt")
        raise ConnectionError("flaky")


class PlainValue(Step):
    n: int

    def run(self) -> Any:
        return self.inputs.n * 2


class Stopper(Step):
    def run(self) -> Any:
        return Halt("later")


class ContextPeek(Step):
    def run(self) -> Any:
        LOG.append(self.context)
        return "peeked"


class Mailer(Reactor):
    account_id: int

    @step(account_id=Input("account_id"))
    def email(account_id: int) -> Any:
        LOG.append(("email", account_id))
        return Success(f"mailed {account_id}")

    @email.compensate
    def _email_compensate(error: Any, account_id: int) -> None:
        LOG.append(("email compensate", account_id))

    @step(account_id=Input("account_id"))
    def broken(account_id: int) -> Any:
        raise ValueError(f"cannot mail {account_id}")

    @broken.compensate
    def _broken_compensate(error: Any, account_id: int) -> None:
        LOG.append(("broken compensate", type(error).__name__, account_id))


def test_invoke_valid_args_runs_guard_and_run_and_returns_success_value() -> None:
    """Valid args run the guard then run and come back as a SuccessResult carrying the value."""
    outcome = Charge.invoke({"account_id": 1, "amount": 5})

    assert isinstance(outcome, SuccessResult)
    assert outcome.is_success
    assert outcome.status == "completed"
    assert outcome.value == {"charged": 5}
    assert LOG == [("guard", 1), ("run", 1, 5)]


def test_invoke_plain_return_value_is_the_success_value() -> None:
    """A step returning a bare value succeeds with that value; args are validated (coerced)."""
    outcome = PlainValue.invoke({"n": "21"})

    assert outcome.is_success
    assert outcome.value == 42


def test_invoke_bad_args_returns_failure_listing_every_bad_field() -> None:
    """Invalid args are reported as a FailureResult with InputValidationError, never raised."""
    outcome = Charge.invoke({"account_id": "not a number", "amount": 0})

    assert isinstance(outcome, FailureResult)
    assert not outcome.is_success
    assert isinstance(outcome.error, InputValidationError)
    assert set(outcome.error.fields) == {"account_id", "amount"}
    assert {e["field"] for e in outcome.validation_errors} == {"account_id", "amount"}
    assert outcome.retryable is False
    assert LOG == []  # neither guard, run nor compensate


def test_invoke_missing_args_are_reported_as_validation_failure() -> None:
    """Missing required args come back as a validation failure naming the missing field."""
    outcome = Charge.invoke({"account_id": 1})

    assert not outcome.is_success
    assert isinstance(outcome.error, InputValidationError)
    assert outcome.error.fields == ["amount"]
    assert LOG == []


def test_invoke_refusing_guard_fails_without_running_or_compensating() -> None:
    """A guard returning Failure fails the invocation and run() is never called."""
    outcome = RefusingGuard.invoke({})

    assert not outcome.is_success
    assert outcome.error == "not allowed"
    assert LOG == ["guard"]


def test_invoke_never_retries_even_with_retries_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A direct invocation makes exactly one attempt even when the step declares @retries."""
    slept: list[float] = []
    monkeypatch.setattr(waiter, "_sleep", slept.append)

    outcome = Flaky.invoke({})

    assert not outcome.is_success
    assert isinstance(outcome.error, ConnectionError)
    assert LOG == ["attempt"]
    assert outcome.attempts == 1
    assert slept == []
    assert [e["type"] for e in outcome.trace] == ["failed"]


def test_invoke_compensates_the_same_instance_when_run_fails() -> None:
    """When run() raises, compensate(error) runs on the instance that ran and the outcome fails."""
    outcome = BrokenCharge.invoke({"account_id": 3})

    assert not outcome.is_success
    assert isinstance(outcome.error, RuntimeError)
    assert outcome.exception_class == "RuntimeError"
    assert len(LOG) == 2
    (ran, instance_ran), (compensated, instance_compensated, error) = LOG
    assert (ran, compensated) == ("run", "compensate")
    assert instance_ran == instance_compensated
    assert error is outcome.error


def test_invoke_halt_returns_halted_result() -> None:
    """A step returning Halt comes back as a HaltedResult with its reason."""
    outcome = Stopper.invoke({})

    assert isinstance(outcome, HaltedResult)
    assert outcome.is_success
    assert outcome.reason == "later"


@pytest.mark.parametrize("args", [[("account_id", 1)], "account_id=1", 42, ("a", "b")])
def test_invoke_non_mapping_args_raise_type_error(args: Any) -> None:
    """Arguments that are not a mapping are a programming error and raise TypeError."""
    with pytest.raises(TypeError, match="mapping"):
        Charge.invoke(args)
    assert LOG == []


def test_invoke_context_must_be_a_context() -> None:
    """context= with something that is not a Context raises TypeError."""
    with pytest.raises(TypeError, match="Context"):
        PlainValue.invoke({"n": 1}, context={"root_id": "x"})


def test_invoke_with_context_nests_in_that_execution_tree() -> None:
    """context= makes the invocation a child execution sharing the given context's root_id."""
    outer = Context(reactor="tests:Outer", inputs={})
    nested = Context(reactor="tests:Nested", inputs={}, root_id=outer.root_id)

    outcome = ContextPeek.invoke({}, context=nested)

    assert outcome.is_success
    (seen,) = LOG
    assert seen is outcome.context
    assert seen.root_id == outer.execution_id
    assert seen.parent_id == nested.execution_id
    assert seen.execution_id not in (outer.execution_id, nested.execution_id)


def test_invoke_without_context_is_its_own_root() -> None:
    """Without context= the invocation is a new execution tree rooted at itself."""
    outcome = ContextPeek.invoke({})

    assert outcome.context.root_id == outcome.context.execution_id
    assert outcome.context.parent_id is None


def test_inline_step_invoke_through_the_reactor_attribute() -> None:
    """Reactor.<inline>.invoke({...}) validates and runs the inline function alone."""
    outcome = Mailer.email.invoke({"account_id": "7"})

    assert outcome.is_success
    assert outcome.value == "mailed 7"
    assert LOG == [("email", 7)]


def test_inline_step_invoke_bad_args_is_a_validation_failure() -> None:
    """Inline invoke with invalid args fails with InputValidationError and does not run."""
    outcome = Mailer.email.invoke({"account_id": "x"})

    assert not outcome.is_success
    assert isinstance(outcome.error, InputValidationError)
    assert outcome.error.fields == ["account_id"]
    assert LOG == []


def test_inline_step_invoke_compensates_when_it_raises() -> None:
    """A raising inline step invoked directly runs its compensate hook with the error and args."""
    outcome = Mailer.broken.invoke({"account_id": 4})

    assert not outcome.is_success
    assert isinstance(outcome.error, ValueError)
    assert outcome.step_name == "broken"
    assert LOG == [("broken compensate", "ValueError", 4)]


def test_calling_inline_step_declaration_calls_the_plain_function() -> None:
    """Calling an inline step declaration directly is a plain call: no validation, no engine."""
    result = Mailer.email(account_id="not validated")

    assert result == Success("mailed not validated")
    assert LOG == [("email", "not validated")]


class _Events(Middleware):
    def __init__(self) -> None:
        self.names: list[str] = []

    def on_reactor_started(self, event: ev.ReactorStarted) -> None:
        self.names.append(event.name)

    def on_reactor_failed(self, event: ev.ReactorFailed) -> None:
        self.names.append(event.name)

    def on_reactor_completed(self, event: ev.ReactorCompleted) -> None:
        self.names.append(event.name)

    def on_step_failed(self, event: ev.StepFailed) -> None:
        self.names.append(event.name)

    def on_step_completed(self, event: ev.StepCompleted) -> None:
        self.names.append(event.name)


class _Raises(Step):
    def run(self) -> None:
        raise ValueError("boom")


class _Interrupted(Step):
    def run(self) -> None:
        LOG.append(self.context)
        raise KeyboardInterrupt


def test_invoke_emits_step_events_and_no_reactor_events() -> None:
    """A direct invocation reports step events only: no reactor ran, so none started or failed."""
    recorder = _Events()
    configure(middleware=[recorder])

    assert _Raises.invoke({}).is_success is False
    assert Charge.invoke({"account_id": 1, "amount": 2}).is_success is True
    assert recorder.names == ["step.failed", "step.completed"]


def test_interrupted_invoke_marks_the_context_aborted() -> None:
    """KeyboardInterrupt inside an invoked step propagates and leaves the context aborted."""
    with pytest.raises(KeyboardInterrupt):
        _Interrupted.invoke({})

    (context,) = LOG
    assert context.status is Status.ABORTED
