"""compose(Child, **wiring): a whole reactor run as one step of another."""

from collections.abc import Iterator
from typing import Any

import pytest

from py_reactor import (
    Failure,
    Halt,
    Input,
    Reactor,
    Result,
    Step,
    Success,
    Value,
    compose,
    step,
)
from py_reactor.engine import Context
from py_reactor.errors import DefinitionError

#: What the steps of this module did, in order (cleared around every test).
LOG: list[Any] = []

#: Contexts that steps of this module saw, by step name.
SEEN: dict[str, Any] = {}

#: The exception the failing child step raised in the last run.
RAISED: list[BaseException] = []


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    """Start every test with empty records."""
    LOG.clear()
    SEEN.clear()
    RAISED.clear()
    yield
    LOG.clear()
    SEEN.clear()
    RAISED.clear()


# -- steps -------------------------------------------------------------------------------------


class Reserve(Step):
    account_id: int
    amount: int

    def run(self) -> Any:
        LOG.append(("run", "reserve", self.inputs.account_id, self.inputs.amount))
        SEEN["reserve"] = self.context
        return Success({"reservation": f"r-{self.inputs.account_id}-{self.inputs.amount}"})

    def undo(self, result: Any) -> Any:
        LOG.append(("undo", "reserve", result["reservation"]))


class Capture(Step):
    reservation: str

    def run(self) -> Any:
        LOG.append(("run", "capture", self.inputs.reservation))
        return Success(f"captured {self.inputs.reservation}")

    def undo(self, result: Any) -> Any:
        LOG.append(("undo", "capture", result))


class Explode(Step):
    def run(self) -> Any:
        LOG.append(("run", "explode"))
        exc = ValueError("child boom")
        RAISED.append(exc)
        raise exc


class BadUndo(Step):
    def run(self) -> Any:
        LOG.append(("run", "bad_undo"))
        return "done"

    def undo(self, result: Any) -> Any:
        LOG.append(("undo", "bad_undo"))
        raise RuntimeError("cannot undo")


class Audit(Step):
    account_id: int

    def run(self) -> Any:
        LOG.append(("run", "audit", self.inputs.account_id))
        SEEN["audit"] = self.context
        return f"audited {self.inputs.account_id}"

    def undo(self, result: Any) -> Any:
        LOG.append(("undo", "audit", result))


class Ship(Step):
    receipt: str

    def run(self) -> Any:
        LOG.append(("run", "ship", self.inputs.receipt))
        return f"shipped after {self.inputs.receipt}"

    def undo(self, result: Any) -> Any:
        LOG.append(("undo", "ship", result))


class Fail(Step):
    def run(self) -> Any:
        LOG.append(("run", "fail"))
        return Failure("parent step failed", retryable=False)


class Stop(Step):
    def run(self) -> Any:
        LOG.append(("run", "stop"))
        return Halt("waiting for approval")


# -- child reactors ----------------------------------------------------------------------------


class PaymentChild(Reactor):
    account_id: int
    amount: int

    reserve = step(Reserve)
    capture = step(Capture, reservation=Result("reserve", "reservation"))
    returns = "capture"


class FailingChild(Reactor):
    account_id: int
    amount: int

    reserve = step(Reserve)
    explode = step(Explode, wait_for=["reserve"])


class ChildWithBadUndo(Reactor):
    bad_undo = step(BadUndo)
    explode = step(Explode, wait_for=["bad_undo"])


class ChildWithBadUndoThatSucceeds(Reactor):
    bad_undo = step(BadUndo)
    returns = "bad_undo"


class HaltingChild(Reactor):
    account_id: int
    amount: int

    reserve = step(Reserve)
    stop = step(Stop, wait_for=["reserve"])


# -- parent reactors ---------------------------------------------------------------------------


class ImplicitParent(Reactor):
    account_id: int
    amount: int

    pay = compose(PaymentChild)
    ship = step(Ship, receipt=Result("pay"))
    returns = "ship"


class WiredParent(Reactor):
    account_id: int

    pay = compose(PaymentChild, amount=Value(7))
    returns = "pay"


class RenamedInputParent(Reactor):
    customer: int
    amount: int

    pay = compose(PaymentChild, account_id=Input("customer"))
    returns = "pay"


class ParentOfFailingChild(Reactor):
    account_id: int
    amount: int

    audit = step(Audit)
    pay = compose(FailingChild, wait_for=["audit"])
    ship = step(Ship, receipt=Result("pay"))


class ParentFailingAfterChild(Reactor):
    account_id: int
    amount: int

    audit = step(Audit)
    pay = compose(PaymentChild, wait_for=["audit"])
    ship = step(Ship, receipt=Result("pay"))
    fail = step(Fail, wait_for=["ship"])


class ParentOfChildWithBadUndo(Reactor):
    inner = compose(ChildWithBadUndo)


class ParentUndoingBadChild(Reactor):
    inner = compose(ChildWithBadUndoThatSucceeds)
    fail = step(Fail, wait_for=["inner"])


class ParentOfHaltingChild(Reactor):
    account_id: int
    amount: int

    audit = step(Audit)
    pay = compose(HaltingChild, wait_for=["audit"])
    ship = step(Ship, receipt=Value("never"), wait_for=["pay"])


# -- tests -------------------------------------------------------------------------------------


def test_child_inputs_resolve_implicitly_from_same_named_parent_inputs() -> None:
    """An unwired child input takes the parent's input of the same name."""
    outcome = ImplicitParent.run(account_id=3, amount=40)

    assert outcome.is_success, outcome
    assert ("run", "reserve", 3, 40) in LOG


def test_child_inputs_resolve_from_explicit_wiring() -> None:
    """Explicit wiring on compose() supplies the child's inputs (Value and Input sources)."""
    wired = WiredParent.run(account_id=5)
    renamed = RenamedInputParent.run(customer=9, amount=2)

    assert wired.is_success, wired
    assert wired.value == "captured r-5-7"
    assert renamed.is_success, renamed
    assert renamed.value == "captured r-9-2"


def test_composed_step_value_is_child_returns_value_and_flows_to_later_parent_step() -> None:
    """The composed step's value is the child's returns value and a later step can read it."""
    outcome = ImplicitParent.run(account_id=1, amount=10)

    assert outcome.is_success, outcome
    assert outcome.results["pay"] == "captured r-1-10"
    assert ("run", "ship", "captured r-1-10") in LOG
    assert outcome.value == "shipped after captured r-1-10"


def test_child_failure_fails_parent_with_child_error_and_undoes_parent_steps() -> None:
    """A failing child fails the parent with the child's error; earlier parent steps are undone."""
    outcome = ParentOfFailingChild.run(account_id=2, amount=20)

    assert not outcome.is_success
    assert outcome.status == "failed"
    assert outcome.step_name == "pay"
    assert len(RAISED) == 1
    assert outcome.error is RAISED[0]
    assert outcome.exception_class == "ValueError"
    assert "ship" not in outcome.results
    assert ("run", "ship", "never") not in LOG
    # the child rolls itself back first, then the parent undoes its own completed steps
    assert LOG == [
        ("run", "audit", 2),
        ("run", "reserve", 2, 20),
        ("run", "explode"),
        ("undo", "reserve", "r-2-20"),
        ("undo", "audit", "audited 2"),
    ]


def test_later_parent_failure_undoes_child_steps_newest_first_and_parent_steps() -> None:
    """When a parent step fails after the child completed, everything is undone newest first."""
    outcome = ParentFailingAfterChild.run(account_id=4, amount=8)

    assert not outcome.is_success
    assert outcome.step_name == "fail"
    assert outcome.rollback_failures == []
    undos = [entry for entry in LOG if entry[0] == "undo"]
    assert undos == [
        ("undo", "ship", "shipped after captured r-4-8"),
        ("undo", "capture", "captured r-4-8"),
        ("undo", "reserve", "r-4-8"),
        ("undo", "audit", "audited 4"),
    ]


def test_child_rollback_failures_appear_on_parent_outcome_with_dotted_step() -> None:
    """A child's own rollback failure is reported on the parent as '<compose step>.<child step>'."""
    outcome = ParentOfChildWithBadUndo.run()

    assert not outcome.is_success
    assert outcome.step_name == "inner"
    assert outcome.rollback_failures == [
        {
            "step": "inner.bad_undo",
            "kind": "undo",
            "key": None,
            "reason": "raised",
            "message": "RuntimeError: cannot undo",
        }
    ]


def test_undoing_completed_child_reports_its_undo_failures_with_dotted_step() -> None:
    """An undo failure inside a completed child undone by the parent is named '<step>.<child>'."""
    outcome = ParentUndoingBadChild.run()

    assert not outcome.is_success
    assert outcome.step_name == "fail"
    assert ("undo", "bad_undo") in LOG
    assert [(f["step"], f["kind"], f["reason"]) for f in outcome.rollback_failures] == [
        ("inner.bad_undo", "undo", "raised")
    ]


def test_child_shares_root_id_and_has_parent_id_of_the_parent_execution() -> None:
    """The child's context belongs to the parent's tree: same root_id, parent_id = parent's id."""
    outcome = ParentFailingAfterChild.run(account_id=1, amount=1)

    parent_context: Context = SEEN["audit"]
    child_context: Context = SEEN["reserve"]
    assert parent_context is outcome.context
    assert child_context is not parent_context
    assert child_context.execution_id != parent_context.execution_id
    assert child_context.root_id == parent_context.root_id == parent_context.execution_id
    assert child_context.parent_id == parent_context.execution_id
    assert outcome.context.children["pay"] is child_context


def test_child_halt_halts_the_parent_without_rollback() -> None:
    """A Halt inside the child halts the parent: later steps do not run and nothing is undone."""
    outcome = ParentOfHaltingChild.run(account_id=6, amount=1)

    assert outcome.is_success
    assert outcome.status == "halted"
    assert outcome.step_name == "pay"
    assert outcome.reason == "waiting for approval"
    assert "ship" not in outcome.results
    assert [entry for entry in LOG if entry[0] == "undo"] == []
    assert ("run", "stop") in LOG


def test_compose_of_a_non_reactor_is_refused() -> None:
    """compose() refuses anything that is not a Reactor subclass with DefinitionError."""
    with pytest.raises(DefinitionError, match="Reactor"):
        compose(Reserve)  # type: ignore[arg-type]
    with pytest.raises(DefinitionError, match="Reactor"):
        compose(object())  # type: ignore[arg-type]


def test_compose_wiring_an_input_the_child_lacks_is_refused_at_parent_definition() -> None:
    """Wiring an argument the child reactor does not declare fails when the parent is defined."""
    declaration = compose(PaymentChild, discount=Value(1))

    with pytest.raises(DefinitionError) as info:
        type(
            "BadParent",
            (Reactor,),
            {"__annotations__": {"account_id": int, "amount": int}, "pay": declaration},
        )

    message = str(info.value)
    assert "BadParent" in message
    assert "'pay'" in message
    assert "'discount'" in message


def test_compose_child_input_neither_wired_nor_a_parent_input_is_refused() -> None:
    """A required child input with no wiring and no same-named parent input fails at definition."""
    namespace = {"__annotations__": {"amount": int}, "pay": compose(PaymentChild)}
    with pytest.raises(DefinitionError) as info:
        type("Orphan", (Reactor,), namespace)

    message = str(info.value)
    assert "Orphan" in message
    assert "'account_id'" in message
