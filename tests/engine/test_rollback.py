"""Rollback: when compensate runs, undo order, rollback failures, inline hooks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from pydantic import Field

from py_reactor import Failure, Input, Reactor, Result, Step, Success, Value, step
from py_reactor.errors import ArgumentResolutionError, InputValidationError

LOG: list[str] = []
HOOK_CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []


@pytest.fixture(autouse=True)
def _clean_records() -> Iterator[None]:
    """Start every test with empty module-level records."""
    LOG.clear()
    HOOK_CALLS.clear()
    yield
    LOG.clear()
    HOOK_CALLS.clear()


# -- building blocks ------------------------------------------------------------------------


class Tracked(Step):
    """Succeeds with its label, records run and undo."""

    label: str

    def run(self) -> Any:
        LOG.append(f"run {self.inputs.label}")
        return {"label": self.inputs.label}

    def undo(self, result: Any) -> Any:
        LOG.append(f"undo {self.inputs.label}")


class Untracked(Step):
    """Succeeds, has no undo."""

    label: str

    def run(self) -> Any:
        LOG.append(f"run {self.inputs.label}")
        return self.inputs.label


class Boom(Step):
    """Fails after its work started; records its compensate."""

    label: str

    def run(self) -> Any:
        LOG.append(f"run {self.inputs.label}")
        return Failure(f"{self.inputs.label} failed")

    def compensate(self, error: Any) -> Any:
        LOG.append(f"compensate {self.inputs.label}: {error}")


class Strict(Step):
    """Needs a positive amount; records run and compensate."""

    amount: Annotated[int, Field(ge=1)]

    def run(self) -> Any:
        LOG.append("run strict")
        return Failure("strict failed")

    def compensate(self, error: Any) -> Any:
        LOG.append("compensate strict")


class Refusing(Step):
    """Its guard refuses; records run and compensate."""

    def guard(self) -> Any:
        LOG.append("guard refusing")
        return Failure("not allowed")

    def run(self) -> Any:
        LOG.append("run refusing")
        return "ran"

    def compensate(self, error: Any) -> Any:
        LOG.append("compensate refusing")


class Reader(Step):
    """Reads a field of another result; records run and compensate."""

    value: Any

    def run(self) -> Any:
        LOG.append("run reader")
        return Failure("reader failed")

    def compensate(self, error: Any) -> Any:
        LOG.append("compensate reader")


class Stateful(Step):
    """Sets state on itself in run, then fails; compensate reports what it sees."""

    def run(self) -> Any:
        self.charge_id = "ch_123"
        HOOK_CALLS.append(("run", (id(self),), {}))
        raise RuntimeError("gateway timeout")

    def compensate(self, error: Any) -> Any:
        HOOK_CALLS.append(("compensate", (id(self), getattr(self, "charge_id", None), error), {}))


class UndoRaises(Step):
    """Succeeds; its undo raises."""

    def run(self) -> Any:
        LOG.append("run undo_raises")
        return "a"

    def undo(self, result: Any) -> Any:
        LOG.append("undo undo_raises")
        raise RuntimeError("refund API down")


class UndoReturnsFailure(Step):
    """Succeeds; its undo returns a Failure."""

    def run(self) -> Any:
        LOG.append("run undo_fails")
        return "b"

    def undo(self, result: Any) -> Any:
        LOG.append("undo undo_fails")
        return Failure("already settled")


class UndoOk(Step):
    """Succeeds; its undo succeeds."""

    def run(self) -> Any:
        LOG.append("run undo_ok")
        return "c"

    def undo(self, result: Any) -> Any:
        LOG.append("undo undo_ok")
        return Success()


class CompensateRaises(Step):
    """Fails; its compensate raises."""

    def run(self) -> Any:
        LOG.append("run comp_raises")
        raise ValueError("charge rejected")

    def compensate(self, error: Any) -> Any:
        LOG.append("compensate comp_raises")
        raise KeyError("no such charge")


class CompensateReturnsFailure(Step):
    """Fails; its compensate returns a Failure."""

    def run(self) -> Any:
        LOG.append("run comp_fails")
        return Failure("charge rejected")

    def compensate(self, error: Any) -> Any:
        LOG.append("compensate comp_fails")
        return Failure("cannot void")


# -- reactors ---------------------------------------------------------------------------------


class ValidationFailureReactor(Reactor):
    """A completed step, then a step whose inputs are invalid."""

    first = step(Tracked, label=Value("first"))
    strict = step(Strict, amount=Value(0), wait_for="first")


class GuardRefusalReactor(Reactor):
    """A completed step, then a step whose guard refuses."""

    first = step(Tracked, label=Value("first"))
    refusing = step(Refusing, wait_for="first")


class ResolutionFailureReactor(Reactor):
    """A completed step, then a step reading a field that does not exist."""

    first = step(Tracked, label=Value("first"))
    reader = step(Reader, value=Result("first", "nope"))


class WorkStartedReactor(Reactor):
    """A completed step, then a step whose run fails."""

    first = step(Tracked, label=Value("first"))
    boom = step(Boom, label=Value("boom"), wait_for="first")


class StatefulReactor(Reactor):
    """A step that sets state on itself and fails."""

    stateful = step(Stateful)


class OrderReactor(Reactor):
    """Three completed steps, a failing one, and one that never runs."""

    a = step(Tracked, label=Value("a"))
    b = step(Tracked, label=Value("b"), wait_for="a")
    c = step(Tracked, label=Value("c"), wait_for="b")
    d = step(Boom, label=Value("d"), wait_for="c")
    e = step(Tracked, label=Value("e"), wait_for="d")


class FailingRollbackReactor(Reactor):
    """Undos that raise, return a failure and succeed, then a step whose compensate raises."""

    a = step(UndoRaises)
    b = step(UndoReturnsFailure, wait_for="a")
    c = step(UndoOk, wait_for="b")
    d = step(CompensateRaises, wait_for="c")


class CompensateFailureReactor(Reactor):
    """A completed step with undo, then a step whose compensate returns a failure."""

    a = step(UndoOk)
    b = step(CompensateReturnsFailure, wait_for="a")


class InlineHooksReactor(Reactor):
    """Inline steps with inline undo and compensate hooks."""

    account_id: int
    amount: int

    @step(account_id=Input("account_id"))
    def charge(account_id: int, amount: int) -> dict[str, Any]:
        LOG.append("run charge")
        return {"receipt": f"r-{account_id}-{amount}"}

    @charge.undo
    def _undo_charge(result: Any, **kwargs: Any) -> None:
        HOOK_CALLS.append(("undo charge", (result,), kwargs))

    @step(receipt=Result("charge", "receipt"))
    def notify(receipt: str, amount: int) -> None:
        LOG.append("run notify")
        raise ConnectionError("mail server down")

    @notify.compensate
    def _compensate_notify(error: Any, **kwargs: Any) -> None:
        HOOK_CALLS.append(("compensate notify", (error,), kwargs))


class MixedUndoReactor(Reactor):
    """Steps with and without undo, then a failure."""

    a = step(Tracked, label=Value("a"))
    b = step(Untracked, label=Value("b"), wait_for="a")
    c = step(Tracked, label=Value("c"), wait_for="b")
    d = step(Untracked, label=Value("d"), wait_for="c")
    boom = step(Boom, label=Value("boom"), wait_for="d")


# -- when compensate runs ---------------------------------------------------------------------


def test_no_compensate_on_step_input_validation_failure() -> None:
    """A step whose inputs are invalid is not compensated, but earlier steps are undone."""
    outcome = ValidationFailureReactor.run()
    assert outcome.is_success is False
    assert outcome.step_name == "strict"
    assert isinstance(outcome.error, InputValidationError)
    assert outcome.error.fields == ["amount"]
    assert [e["field"] for e in outcome.validation_errors] == ["amount"]
    assert LOG == ["run first", "undo first"]
    assert outcome.rollback_failures == []


def test_no_compensate_on_guard_refusal() -> None:
    """A step refused by its guard is not compensated, but earlier steps are undone."""
    outcome = GuardRefusalReactor.run()
    assert outcome.is_success is False
    assert outcome.step_name == "refusing"
    assert outcome.error == "not allowed"
    assert LOG == ["run first", "guard refusing", "undo first"]


def test_no_compensate_on_argument_resolution_failure() -> None:
    """A step whose arguments cannot be resolved is not compensated; earlier steps are undone."""
    outcome = ResolutionFailureReactor.run()
    assert outcome.is_success is False
    assert outcome.step_name == "reader"
    assert isinstance(outcome.error, ArgumentResolutionError)
    assert LOG == ["run first", "undo first"]


def test_compensate_runs_when_work_started() -> None:
    """A step that fails in run() is compensated with its error, then earlier steps are undone."""
    outcome = WorkStartedReactor.run()
    assert outcome.is_success is False
    assert outcome.step_name == "boom"
    assert LOG == ["run first", "run boom", "compensate boom: boom failed", "undo first"]
    assert [e["type"] for e in outcome.trace] == ["run", "failed", "compensate", "undo"]


def test_compensate_runs_on_the_instance_that_ran() -> None:
    """Compensate is called on the same step instance as run, so state set in run is visible."""
    outcome = StatefulReactor.run()
    assert outcome.is_success is False
    assert [call[0] for call in HOOK_CALLS] == ["run", "compensate"]
    run_id = HOOK_CALLS[0][1][0]
    comp_id, charge_id, error = HOOK_CALLS[1][1]
    assert comp_id == run_id
    assert charge_id == "ch_123"
    assert isinstance(error, RuntimeError)
    assert error is outcome.error


# -- undo order -------------------------------------------------------------------------------


def test_undo_runs_newest_first_over_completed_steps_only() -> None:
    """Completed steps are undone newest first; the failing and never-run steps are not undone."""
    outcome = OrderReactor.run()
    assert outcome.is_success is False
    assert outcome.step_name == "d"
    assert LOG == [
        "run a",
        "run b",
        "run c",
        "run d",
        "compensate d: d failed",
        "undo c",
        "undo b",
        "undo a",
    ]
    assert [e["step"] for e in outcome.trace if e["type"] == "undo"] == ["c", "b", "a"]


def test_steps_without_undo_are_passed_over() -> None:
    """Steps that define no undo are skipped during rollback without any failure."""
    outcome = MixedUndoReactor.run()
    assert outcome.is_success is False
    undo_lines = [line for line in LOG if line.startswith("undo")]
    assert undo_lines == ["undo c", "undo a"]
    assert outcome.rollback_failures == []
    assert [e["step"] for e in outcome.trace if e["type"] == "undo"] == ["c", "a"]


# -- rollback failures ------------------------------------------------------------------------


def test_failing_undos_and_compensate_do_not_stop_the_others() -> None:
    """Raising compensate, raising undo and Failure-returning undo all run and are recorded."""
    outcome = FailingRollbackReactor.run()
    assert outcome.is_success is False
    assert outcome.step_name == "d"
    assert isinstance(outcome.error, ValueError)
    assert LOG == [
        "run undo_raises",
        "run undo_fails",
        "run undo_ok",
        "run comp_raises",
        "compensate comp_raises",
        "undo undo_ok",
        "undo undo_fails",
        "undo undo_raises",
    ]
    failures = outcome.rollback_failures
    assert [(f["step"], f["kind"], f["reason"]) for f in failures] == [
        ("d", "compensate", "raised"),
        ("b", "undo", "returned_failure"),
        ("a", "undo", "raised"),
    ]
    for failure in failures:
        assert set(failure) == {"step", "kind", "key", "reason", "message"}
        assert failure["key"] is None
        assert isinstance(failure["message"], str)
    assert "no such charge" in failures[0]["message"]
    assert "already settled" in failures[1]["message"]
    assert "refund API down" in failures[2]["message"]
    assert "rollback failure" in outcome.message


def test_compensate_returning_failure_is_recorded_and_undo_continues() -> None:
    """A compensate that returns Failure is a returned_failure rollback failure; undo still runs."""
    outcome = CompensateFailureReactor.run()
    assert outcome.is_success is False
    assert LOG == ["run undo_ok", "run comp_fails", "compensate comp_fails", "undo undo_ok"]
    assert outcome.rollback_failures == [
        {
            "step": "b",
            "kind": "compensate",
            "key": None,
            "reason": "returned_failure",
            "message": "cannot void",
        }
    ]
    compensate_entries = [e for e in outcome.trace if e["type"] == "compensate"]
    assert len(compensate_entries) == 1
    assert compensate_entries[0]["ok"] is False


# -- inline hooks -----------------------------------------------------------------------------


def test_inline_hooks_receive_error_or_result_then_arguments_as_keywords() -> None:
    """Inline compensate gets the error, inline undo the result, then the step's args as kwargs."""
    outcome = InlineHooksReactor.run(account_id=5, amount=20)
    assert outcome.is_success is False
    assert outcome.step_name == "notify"
    assert LOG == ["run charge", "run notify"]
    assert [call[0] for call in HOOK_CALLS] == ["compensate notify", "undo charge"]
    _, comp_args, comp_kwargs = HOOK_CALLS[0]
    assert isinstance(comp_args[0], ConnectionError)
    assert comp_args[0] is outcome.error
    assert comp_kwargs == {"receipt": "r-5-20", "amount": 20}
    _, undo_args, undo_kwargs = HOOK_CALLS[1]
    assert undo_args == ({"receipt": "r-5-20"},)
    assert undo_kwargs == {"account_id": 5, "amount": 20}
