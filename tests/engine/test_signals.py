"""Signals and outcomes: Success, Failure, exceptions, Halt, Skipped, interrupts, inputs, trace."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from py_reactor import (
    Context,
    Failure,
    FailureResult,
    Halt,
    HaltedResult,
    Input,
    Reactor,
    Result,
    Skipped,
    Status,
    Step,
    Success,
    SuccessResult,
    Value,
    step,
)
from py_reactor.errors import ArgumentResolutionError, InputValidationError

LOG: list[str] = []
CONTEXTS: list[Context] = []
SEEN: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _clean_records() -> Iterator[None]:
    """Start every test with empty module-level records."""
    LOG.clear()
    CONTEXTS.clear()
    SEEN.clear()
    yield
    LOG.clear()
    CONTEXTS.clear()
    SEEN.clear()


class PaymentDeclinedError(Exception):
    """A user-defined exception raised by a step."""


# -- building blocks ------------------------------------------------------------------------


class Produce(Step):
    """Returns a mapping built from its input, and records its run and undo."""

    amount: int

    def run(self) -> Any:
        LOG.append("produce")
        CONTEXTS.append(self.context)
        return Success({"id": 7, "amount": self.inputs.amount})

    def undo(self, result: Any) -> Any:
        LOG.append("undo produce")


class Consume(Step):
    """Reads the value another step produced."""

    received: Any

    def run(self) -> Any:
        LOG.append("consume")
        SEEN["consume"] = self.inputs.received
        return Success(("consumed", self.inputs.received))

    def undo(self, result: Any) -> Any:
        LOG.append("undo consume")

    def compensate(self, error: Any) -> Any:
        LOG.append("compensate consume")


class Explode(Step):
    """Always fails the way the ``mode`` input says."""

    mode: str

    def run(self) -> Any:
        LOG.append("explode")
        if self.inputs.mode == "string":
            return Failure("card declined")
        if self.inputs.mode == "value":
            raise ValueError("bad amount")
        if self.inputs.mode == "custom":
            raise_declined()
        if self.inputs.mode == "keyboard":
            raise KeyboardInterrupt
        if self.inputs.mode == "exit":
            raise SystemExit(3)
        return Success("not exploded")

    def compensate(self, error: Any) -> Any:
        LOG.append("compensate explode")


def raise_declined() -> None:
    """Raise the user-defined exception from a named function."""
    raise PaymentDeclinedError("declined by issuer")


class Stop(Step):
    """Halts the whole run."""

    def run(self) -> Any:
        LOG.append("stop")
        return Halt("maintenance window")

    def undo(self, result: Any) -> Any:
        LOG.append("undo stop")


class Pass(Step):
    """Has nothing to do: skips with a value and a reason."""

    def run(self) -> Any:
        LOG.append("pass")
        return Skipped(41, reason="already charged")

    def undo(self, result: Any) -> Any:
        LOG.append("undo pass")


class Record(Step):
    """Records that it ran."""

    def run(self) -> Any:
        LOG.append("record")
        return "recorded"

    def undo(self, result: Any) -> Any:
        LOG.append("undo record")


# -- reactors ---------------------------------------------------------------------------------


class ReturnsReactor(Reactor):
    """Two steps; the second's value is the run's value."""

    amount: int
    produce = step(Produce)
    consume = step(Consume, received=Result("produce"))
    returns = "consume"


class NoReturnsReactor(Reactor):
    """One step, no ``returns``."""

    amount: int
    produce = step(Produce)


class PlainReturnReactor(Reactor):
    """An inline step that returns a bare value, read by a second inline step."""

    @step(n=Value(5))
    def bare(n: int) -> int:
        return n * 10

    @step(x=Result("bare"))
    def wrapped(x: int) -> Success:
        return Success(x * 10)

    returns = "wrapped"


class FailingReactor(Reactor):
    """A produce step followed by a step that fails as ``mode`` says."""

    amount: int
    mode: str
    produce = step(Produce)
    explode = step(Explode, wait_for="produce")


class HaltReactor(Reactor):
    """Halts in the middle."""

    amount: int
    produce = step(Produce)
    stop = step(Stop, wait_for="produce")
    record = step(Record, wait_for="stop")


class SkipReactor(Reactor):
    """A skipped step whose value is read by a later step."""

    pass_ = step(Pass)
    consume = step(Consume, received=Result("pass_"))
    returns = "consume"


class SkipThenFailReactor(Reactor):
    """A skipped step and a completed one, then a failure."""

    amount: int
    produce = step(Produce)
    pass_ = step(Pass, wait_for="produce")
    explode = step(Explode, mode=Value("string"), wait_for="pass_")


class InterruptReactor(Reactor):
    """A completed step with undo, then a step raising an interrupt."""

    amount: int
    mode: str
    produce = step(Produce)
    explode = step(Explode, wait_for="produce")
    record = step(Record, wait_for="explode")


class TwoInputsReactor(Reactor):
    """Two typed inputs."""

    count: int
    price: float
    record = step(Record)


class FieldReactor(Reactor):
    """Reads a mapping key and an attribute of earlier results."""

    amount: int
    produce = step(Produce)

    @step()
    def obj() -> SimpleNamespace:
        return SimpleNamespace(token="tok-1", size=3)

    @step(id_=Result("produce", "id"), token=Result("obj", "token"))
    def combine(id_: int, token: str) -> str:
        return f"{id_}:{token}"

    returns = "combine"


class MissingFieldReactor(Reactor):
    """The third step reads a field the second step's result does not have."""

    amount: int
    record = step(Record)
    produce = step(Produce, wait_for="record")
    consume = step(Consume, received=Result("produce", "missing"))


class TransformReactor(Reactor):
    """An input passed through a transform."""

    name: str

    @step(shout=Input("name", transform=str.upper))
    def greet(shout: str) -> str:
        return f"HELLO {shout}"

    returns = "greet"


# -- Success ----------------------------------------------------------------------------------


def test_success_value_flows_through_result_and_returns() -> None:
    """A step's Success value reaches a Result reader, and ``returns`` picks the run's value."""
    outcome = ReturnsReactor.run(amount=3)
    assert isinstance(outcome, SuccessResult)
    assert outcome.is_success is True
    assert outcome.status == "completed"
    assert SEEN["consume"] == {"id": 7, "amount": 3}
    assert outcome.value == ("consumed", {"id": 7, "amount": 3})
    assert outcome.error is None
    assert dict(outcome.results) == {
        "produce": {"id": 7, "amount": 3},
        "consume": ("consumed", {"id": 7, "amount": 3}),
    }


def test_no_returns_gives_value_none() -> None:
    """A reactor without ``returns`` succeeds with value None."""
    outcome = NoReturnsReactor.run(amount=1)
    assert outcome.is_success is True
    assert outcome.value is None
    assert outcome.results["produce"] == {"id": 7, "amount": 1}


def test_plain_return_value_is_a_success() -> None:
    """A bare return value is taken as Success(value) and flows on like one."""
    outcome = PlainReturnReactor.run()
    assert outcome.is_success is True
    assert outcome.results["bare"] == 50
    assert outcome.value == 500


# -- Failure ----------------------------------------------------------------------------------


def test_failure_with_string_error_describes_the_failure() -> None:
    """A Failure("...") becomes a FailureResult carrying that error and where it happened."""
    outcome = FailingReactor.run(amount=2, mode="string")
    assert isinstance(outcome, FailureResult)
    assert outcome.is_success is False
    assert outcome.status == "failed"
    assert outcome.error == "card declined"
    assert outcome.step_name == "explode"
    assert outcome.reactor_name == "FailingReactor"
    assert outcome.step_arguments == {"mode": "string"}
    assert outcome.inputs == {"amount": 2, "mode": "string"}
    assert outcome.exception_class is None
    assert outcome.value is None
    assert LOG == ["produce", "explode", "compensate explode", "undo produce"]


def test_builtin_exception_becomes_failure_with_instance_and_class() -> None:
    """A raised ValueError is the outcome's error, with exception_class "ValueError"."""
    outcome = FailingReactor.run(amount=2, mode="value")
    assert outcome.is_success is False
    assert isinstance(outcome.error, ValueError)
    assert str(outcome.error) == "bad amount"
    assert outcome.exception_class == "ValueError"
    assert outcome.step_name == "explode"
    assert outcome.retryable is True
    assert outcome.backtrace is not None
    assert "def run" in outcome.backtrace or "in run" in outcome.backtrace
    assert "ValueError: bad amount" in outcome.backtrace


def test_custom_exception_class_is_module_qualified_and_backtrace_names_raiser() -> None:
    """A user exception is reported as "module.Class"; the backtrace names the raising function."""
    outcome = FailingReactor.run(amount=2, mode="custom")
    assert isinstance(outcome.error, PaymentDeclinedError)
    assert outcome.exception_class == f"{__name__}.PaymentDeclinedError"
    assert outcome.exception_class.endswith("test_signals.PaymentDeclinedError")
    assert outcome.backtrace is not None
    assert "raise_declined" in outcome.backtrace
    assert "declined by issuer" in outcome.backtrace


# -- Halt -------------------------------------------------------------------------------------


def test_halt_stops_the_run_keeps_progress_and_undoes_nothing() -> None:
    """Halt ends the run as a success: later steps do not run and nothing is undone."""
    outcome = HaltReactor.run(amount=4)
    assert isinstance(outcome, HaltedResult)
    assert outcome.is_success is True
    assert outcome.status == "halted"
    assert outcome.reason == "maintenance window"
    assert outcome.step_name == "stop"
    assert outcome.error is None
    assert LOG == ["produce", "stop"]
    assert "produce" in outcome.results
    assert "record" not in outcome.results
    assert outcome.context.status is Status.HALTED
    assert [e["type"] for e in outcome.trace] == ["run", "halted"]


# -- Skipped ----------------------------------------------------------------------------------


def test_skipped_value_flows_to_reader_and_is_traced() -> None:
    """A Skipped step's value reaches its reader, and the trace records the skip and reason."""
    outcome = SkipReactor.run()
    assert outcome.is_success is True
    assert outcome.status == "completed"
    assert SEEN["consume"] == 41
    assert outcome.value == ("consumed", 41)
    skipped = [e for e in outcome.trace if e["type"] == "skipped"]
    assert len(skipped) == 1
    assert skipped[0]["step"] == "pass_"
    assert skipped[0]["reason"] == "already charged"
    assert skipped[0]["result"] == 41


def test_skipped_step_is_never_undone() -> None:
    """When a later step fails, a skipped step is passed over while completed ones are undone."""
    outcome = SkipThenFailReactor.run(amount=1)
    assert outcome.is_success is False
    assert outcome.step_name == "explode"
    assert "undo pass" not in LOG
    assert LOG == ["produce", "pass", "explode", "compensate explode", "undo produce"]


# -- interrupts -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "exc_type"), [("keyboard", KeyboardInterrupt), ("exit", SystemExit)]
)
def test_interrupt_propagates_without_rollback_and_aborts(
    mode: str, exc_type: type[BaseException]
) -> None:
    """KeyboardInterrupt/SystemExit propagate from a step, run no rollback and mark it aborted."""
    with pytest.raises(exc_type):
        InterruptReactor.run(amount=1, mode=mode)
    assert LOG == ["produce", "explode"]
    assert len(CONTEXTS) == 1
    context = CONTEXTS[0]
    assert context.status is Status.ABORTED
    assert not [e for e in context.trace if e["type"] in ("undo", "compensate")]


# -- reactor inputs ---------------------------------------------------------------------------


def test_reactor_input_validation_lists_every_bad_field_and_runs_nothing() -> None:
    """Two invalid reactor inputs are both reported, and no step runs."""
    outcome = TwoInputsReactor.run(count="many", price="cheap")
    assert isinstance(outcome, FailureResult)
    assert outcome.is_success is False
    assert outcome.step_name is None
    assert isinstance(outcome.error, InputValidationError)
    assert set(outcome.error.fields) == {"count", "price"}
    assert {e["field"] for e in outcome.validation_errors} == {"count", "price"}
    for entry in outcome.validation_errors:
        assert set(entry) >= {"field", "message", "type", "input"}
    assert "count" in str(outcome.error)
    assert "price" in str(outcome.error)
    assert LOG == []
    assert dict(outcome.results) == {}


def test_missing_reactor_input_is_reported() -> None:
    """A missing required reactor input is a validation failure naming it."""
    outcome = TwoInputsReactor.run(count=1)
    assert outcome.is_success is False
    assert isinstance(outcome.error, InputValidationError)
    assert outcome.error.fields == ["price"]
    assert LOG == []


def test_unknown_extra_reactor_input_is_refused() -> None:
    """An input the reactor does not declare is refused before anything runs."""
    outcome = TwoInputsReactor.run(count=1, price=2.5, colour="red")
    assert outcome.is_success is False
    assert isinstance(outcome.error, InputValidationError)
    assert "colour" in outcome.error.fields
    assert LOG == []


# -- Result fields and transforms -------------------------------------------------------------


def test_result_field_reads_mapping_key_and_attribute() -> None:
    """Result("step", "field") reads a key of a mapping result and an attribute of an object."""
    outcome = FieldReactor.run(amount=9)
    assert outcome.is_success is True
    assert outcome.value == "7:tok-1"


def test_missing_result_field_fails_without_compensating_and_undoes_earlier() -> None:
    """A missing result field fails the reader, uncompensated; earlier steps are undone."""
    outcome = MissingFieldReactor.run(amount=1)
    assert outcome.is_success is False
    assert outcome.step_name == "consume"
    assert isinstance(outcome.error, ArgumentResolutionError)
    assert "missing" in str(outcome.error)
    assert outcome.exception_class == "py_reactor.errors.ArgumentResolutionError"
    assert "consume" not in LOG
    assert "compensate consume" not in LOG
    assert LOG == ["record", "produce", "undo produce", "undo record"]


def test_input_transform_is_applied() -> None:
    """Input(name, transform=...) passes the transformed value to the step."""
    outcome = TransformReactor.run(name="ada")
    assert outcome.is_success is True
    assert outcome.value == "HELLO ADA"


# -- reprs and trace --------------------------------------------------------------------------


def test_outcome_reprs_name_reactor_and_step() -> None:
    """Each outcome's repr is readable and names the reactor (and the step when relevant)."""
    success = NoReturnsReactor.run(amount=1)
    halted = HaltReactor.run(amount=1)
    failed = FailingReactor.run(amount=1, mode="string")
    assert "NoReturnsReactor" in repr(success)
    assert "SuccessResult" in repr(success)
    assert "HaltReactor" in repr(halted)
    assert "stop" in repr(halted)
    assert "maintenance window" in repr(halted)
    assert "FailingReactor" in repr(failed)
    assert "explode" in repr(failed)
    assert "card declined" in repr(failed)


def test_trace_entries_have_types_and_ordered_timestamps() -> None:
    """Trace entries carry a type, step and timestamps, listed in the order things happened."""
    outcome = FailingReactor.run(amount=5, mode="string")
    trace = outcome.trace
    assert [(e["type"], e["step"]) for e in trace] == [
        ("run", "produce"),
        ("failed", "explode"),
        ("compensate", "explode"),
        ("undo", "produce"),
    ]
    for entry in trace:
        assert isinstance(entry["started_at"], float)
        assert isinstance(entry["finished_at"], float)
        assert entry["started_at"] <= entry["finished_at"]
    for before, after in itertools.pairwise(trace):
        assert before["finished_at"] <= after["started_at"]
    assert trace[0]["result"] == {"id": 7, "amount": 5}
    assert trace[0]["arguments"] == {"amount": 5}
    assert trace[1]["error"] == "card declined"
