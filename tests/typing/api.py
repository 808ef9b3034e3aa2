"""Type-checker test of the public surface: mypy --strict must accept this file as users write it.

It is checked by ``mypy`` (see ``[tool.mypy] files``) and imported by no test.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from py_reactor import (
    Failure,
    FailureResult,
    Input,
    Middleware,
    Outcome,
    Reactor,
    Result,
    Step,
    Success,
    Value,
    compose,
    configure,
    dumps_context,
    loads_context,
    retries,
    step,
)
from py_reactor.errors import InputValidationError
from py_reactor.observability.events import StepCompleted


@retries(max_attempts=3, backoff="exponential", base_delay=0.5)
class ChargeStep(Step):
    account_id: int
    amount: Annotated[int, Field(ge=1)]

    def guard(self) -> Failure | None:
        return None if self.inputs.amount < 1000 else Failure("too much", retryable=False)

    def run(self) -> Success:
        return Success(f"ch_{self.inputs.account_id}_{self.inputs.amount}")

    def compensate(self, error: Any) -> Success:
        return Success()

    def undo(self, result: Any) -> Success:
        return Success()


class Child(Reactor):
    account_id: int

    @step
    def hello(account_id: int) -> str:
        return f"hi {account_id}"

    returns = "hello"


class PaymentReactor(Reactor):
    account_id: int
    amount: int

    charge = step(ChargeStep)
    child = compose(Child, wait_for=["charge"])

    @step(receipt=Result("charge"), note=Value("thanks"), who=Input("account_id", transform=str))
    def notify(receipt: str, note: str, who: str) -> Success:
        return Success(f"{who}: {receipt} ({note})")

    @notify.undo
    def _unnotify(result: Any, receipt: str, note: str, who: str) -> None:
        return None

    returns = "notify"


class Printer(Middleware):
    def on_step_completed(self, event: StepCompleted) -> None:
        print(event.name, event.step, event.value)


def use() -> None:
    configure(middleware=[Printer()])
    outcome: Outcome = PaymentReactor.run(account_id=1, amount=10)
    if outcome.is_success:
        print(outcome.value)
    if isinstance(outcome, FailureResult):
        print(outcome.step_name, outcome.error, outcome.rollback_failures)
        if isinstance(outcome.error, InputValidationError):
            print(outcome.error.fields)
    again = loads_context(dumps_context(outcome.context))
    print(again.execution_id)
    direct: Outcome = ChargeStep.invoke({"account_id": 1, "amount": 5})
    inline: Outcome = PaymentReactor.notify.invoke({"receipt": "r", "note": "n", "who": "w"})
    print(direct.value, inline.value)
