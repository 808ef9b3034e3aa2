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
    Lock,
    Middleware,
    OrderedLock,
    Outcome,
    Period,
    RateLimit,
    Reactor,
    Result,
    Semaphore,
    Step,
    Success,
    Value,
    compose,
    configure,
    dumps_context,
    loads_context,
    retries,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
    with_rate_limit,
    with_semaphore,
)
from py_reactor.errors import InputValidationError, RateLimitExceededError
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


@with_lock(lambda inputs: f"acct:{inputs['account_id']}", ttl=30, wait=5)
@with_semaphore("mailer", limit=5)
@with_rate_limit("stripe", limits={"second": 3, "minute": 100})
@with_period(lambda inputs: f"report:{inputs['account_id']}", every="day")
@with_ordered_lock("ledger", poison_pill_timeout=60, strict=False)
class CoordinatedReactor(Reactor):
    account_id: int

    @step()
    def work(account_id: int) -> int:
        return account_id


def use_primitives() -> None:
    configure(redis_url="redis://localhost:6379/0", rate_limits={"stripe": {"second": 3}})
    with Lock("invoice:42", ttl=30, wait=5) as hold:
        token: int = hold.fencing_token
        print(token)
    with Semaphore("mailer", limit=5) as slot:
        print(slot.count)
    with RateLimit("stripe", limit=100, period="minute"):
        pass
    with Period("daily", every="day") as claim:
        if claim.due:
            print("due")
    with OrderedLock("ledger") as turn:
        if not turn.short_circuit:
            print(turn.position.number)
    try:
        RateLimit("stripe").acquire()
    except RateLimitExceededError as exc:
        retry_after: float = exc.retry_after
        print(retry_after, exc.key)
    declared = CoordinatedReactor.coordination["lock"]
    print(declared)
