"""Declaration mistakes a new user makes, each of which once did nothing or said it badly.

A coordination decorator on a plain function protects the call; one on an inline
``compensate``/``undo`` is refused; shapes that can only fail at run time (``returns`` as a
list, a key function of the wrong arity or reading a name it never receives, a hook that
cannot take the step's arguments) are refused when the class is defined; and messages say
what to write without internal names or doubled locations.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any

import pytest

from py_reactor import (
    FailureResult,
    Lock,
    Reactor,
    Step,
    compose,
    retries,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
    with_rate_limit,
    with_semaphore,
)
from py_reactor.coordination.declarations import LockDeclaration
from py_reactor.errors import DefinitionError, LockAcquisitionError

#: Keys the module-level helpers below lock (set by the fixture for each test).
KEYS: dict[str, str] = {}

#: A name no step receives, read through a variable so only the run can find out.
MISSING = "x"

#: What the helpers' bodies saw.
seen: list[Any] = []


@pytest.fixture(autouse=True)
def _fresh(key: str) -> Iterator[None]:
    KEYS["helper"] = key
    seen.clear()
    yield
    KEYS.clear()
    seen.clear()


@with_lock(lambda args: f"{KEYS['helper']}:{args['account_id']}", wait=0.3)
def charge_helper(account_id: int, amount: int = 5) -> str:
    """A module-level helper that never becomes a step."""
    seen.append(Lock(f"{KEYS['helper']}:{account_id}").state().owner)
    return f"charged {amount} to {account_id}"


@contextlib.contextmanager
def _held_elsewhere(key: str) -> Iterator[None]:
    """Hold ``Lock(key)`` in another thread (another owner) until the generator resumes."""
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with Lock(key, ttl=30):
            taken.set()
            done.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    assert taken.wait(10)
    try:
        yield
    finally:
        done.set()
        thread.join(10)


# -- item 1: a decorator on a plain function protects its calls ---------------------------------


def test_a_plain_function_helper_waits_then_raises_while_another_owner_holds_the_key(
    key: str,
) -> None:
    """The call waits ``wait`` seconds, raises LockAcquisitionError, and the body never runs."""
    with _held_elsewhere(f"{key}:7"), pytest.raises(LockAcquisitionError) as caught:
        charge_helper(7)
    assert seen == []
    assert caught.value.key == f"{key}:7"
    assert "charge_helper" in str(caught.value)


def test_a_plain_function_helper_holds_the_key_during_its_body(key: str) -> None:
    """With the key free the helper runs, the key is held while it runs, and free after."""
    assert charge_helper(7, amount=3) == "charged 3 to 7"
    assert len(seen) == 1
    assert seen[0] is not None
    assert Lock(f"{key}:7").state().owner is None


def test_a_helper_called_inside_a_locked_step_re_enters(key: str) -> None:
    """Called from a step that locks the same key, the helper joins the execution's hold."""

    class Pay(Reactor):
        account_id: int

        @step
        @with_lock(lambda args: f"{KEYS['helper']}:{args['account_id']}", wait=0)
        def pay(account_id: int) -> str:
            return charge_helper(account_id)

        returns = "pay"

    outcome = Pay.run(account_id=4)
    assert outcome.is_success, outcome.error
    assert outcome.value == "charged 5 to 4"


def test_the_wrapper_keeps_signature_and_introspection() -> None:
    """The decorated helper has the original's signature, name and declarations."""

    def original(account_id: int, amount: int = 5) -> str:
        return "x"

    wrapped = with_lock("k")(original)
    assert inspect.signature(wrapped) == inspect.signature(original)
    assert wrapped.__name__ == "original"
    assert wrapped.__py_reactor_coordination__ == {"lock": LockDeclaration("k")}  # type: ignore[attr-defined]


def test_step_above_a_decorated_function_unwraps_to_the_original() -> None:
    """``@step`` over ``@with_lock`` runs the original function and takes its declarations."""

    def plain(account_id: int) -> int:
        return account_id

    class R(Reactor):
        account_id: int
        pay = step(with_semaphore("k", limit=2)(with_lock("k2")(plain)))

    assert R.pay.target is plain
    assert set(R.pay.coordination) == {"lock", "semaphore"}


def test_retries_between_step_and_a_decorated_function_is_kept() -> None:
    """``@step @retries @with_lock def f`` keeps the retry policy on the step."""

    class R(Reactor):
        @step
        @retries(max_attempts=2, base_delay=0)
        @with_lock("k")
        def pay() -> int:
            return 1

    assert R.pay.retry_policy is not None
    assert R.pay.retry_policy.max_attempts == 2
    assert set(R.pay.coordination) == {"lock"}


def test_a_period_done_helper_returns_none_without_running(key: str) -> None:
    """After one successful call in the bucket, the next call returns None and does not run."""
    calls: list[int] = []

    @with_period(f"{key}:period", every="day")
    def daily() -> str:
        calls.append(1)
        return "ran"

    assert daily() == "ran"
    assert daily() is None
    assert calls == [1]


def test_an_async_generator_function_is_refused() -> None:
    """``with_lock`` on an async generator (it returns before its body runs) raises
    DefinitionError naming the function; an ``async def`` is accepted (docs/asyncio.md)."""
    with pytest.raises(DefinitionError, match=r"fetch.*async generator"):

        @with_lock("k")
        async def fetch() -> AsyncIterator[int]:
            await asyncio.sleep(0)
            yield 1


# -- item 1: no coordination on an inline compensate / undo ------------------------------------


def _lock_below_undo() -> None:
    class Checkout(Reactor):
        @step
        def charge() -> int:
            return 1

        @charge.undo
        @with_lock("k")
        def _refund(result: int) -> None:
            return None


def _lock_above_undo() -> None:
    class Checkout(Reactor):
        @step
        def charge() -> int:
            return 1

        @with_lock("k")  # type: ignore[arg-type]
        @charge.undo
        def _refund(result: int) -> None:
            return None


def _lock_below_compensate() -> None:
    class Checkout(Reactor):
        @step
        def charge() -> int:
            return 1

        @charge.compensate
        @with_semaphore("k", limit=1)
        def _void(error: object) -> None:
            return None


def _lock_above_compensate() -> None:
    class Checkout(Reactor):
        @step
        def charge() -> int:
            return 1

        @with_lock("k")  # type: ignore[arg-type]
        @charge.compensate
        def _void(error: object) -> None:
            return None


@pytest.mark.parametrize(
    "define",
    [_lock_below_undo, _lock_above_undo, _lock_below_compensate, _lock_above_compensate],
    ids=["below-undo", "above-undo", "below-compensate", "above-compensate"],
)
def test_coordination_on_an_inline_hook_is_refused(define: Callable[[], None]) -> None:
    """Rollback re-takes the step's own declarations: a with_* on a hook is refused (without
    the refusal, ``@with_lock`` above ``@charge.undo`` once locked the charge step)."""
    with pytest.raises(DefinitionError) as caught:
        define()
    message = str(caught.value)
    assert "rollback re-takes the step's own" in message
    assert "charge" in message


def test_retries_on_an_inline_hook_is_refused_in_both_orders() -> None:
    """A compensate/undo is never retried: ``@retries`` above or below the hook is refused."""

    def above() -> None:
        class Checkout(Reactor):
            @step
            def charge() -> int:
                return 1

            @retries(max_attempts=2)
            @charge.undo
            def _refund(result: int) -> None:
                return None

    def below() -> None:
        class Checkout(Reactor):
            @step
            def charge() -> int:
                return 1

            @charge.undo
            @retries(max_attempts=2)
            def _refund(result: int) -> None:
                return None

    for define in (above, below):
        with pytest.raises(DefinitionError, match="an undo is never retried"):
            define()


def test_a_hook_named_like_its_step_is_refused() -> None:
    """``@pay.undo def pay`` would replace the step in the class body: refused, saying so."""
    with pytest.raises(DefinitionError, match=r"named like its step replaces the step"):

        class Checkout(Reactor):
            @step
            def pay() -> int:
                return 1

            @pay.undo  # type: ignore[no-redef]
            def pay(result: int) -> None:
                return None


def test_a_helper_receives_kwargs_by_name_and_nests_outside_an_execution(key: str) -> None:
    """Extra keywords reach the key by name; a nested call on the same key re-enters."""

    @with_lock(lambda args: f"{KEYS['helper']}:{args['account_id']}", wait=0)
    def inner(**arguments: Any) -> int:
        return Lock(f"{key}:{arguments['account_id']}").state().count

    @with_lock(lambda args: f"{KEYS['helper']}:{args['account_id']}", wait=0)
    def outer(account_id: int) -> int:
        return inner(account_id=account_id)

    assert outer(3) == 2
    assert Lock(f"{key}:3").state().owner is None


def test_a_helper_whose_key_function_fails_raises_naming_the_function() -> None:
    """A key function that raises gives CoordinationKeyError starting with ``<name>():``."""
    from py_reactor.errors import CoordinationKeyError

    @with_lock(lambda args: args[MISSING])
    def helper() -> int:
        return 1

    with pytest.raises(CoordinationKeyError) as caught:
        helper()
    message = str(caught.value)
    assert message.startswith(f"{helper.__qualname__}(): the lock key function raised")
    assert "an empty mapping: the function takes no arguments" in message


# -- item 4: mistakes refused at class definition ----------------------------------------------


def test_returns_as_a_list_is_refused() -> None:
    """``returns = ["pay"]`` is refused naming the reactor and the one-step-name form."""
    with pytest.raises(DefinitionError) as caught:

        class Orders(Reactor):
            @step
            def pay() -> int:
                return 1

            returns = ["pay"]  # type: ignore[assignment]

    message = str(caught.value)
    assert "Orders" in message
    assert "one step name (a str) or None" in message
    assert "returns = 'pay'" in message


@pytest.mark.parametrize(
    ("make", "decorator"),
    [
        (lambda: with_lock(lambda a, b: "k"), "with_lock"),
        (lambda: with_semaphore(lambda: "k", limit=1), "with_semaphore"),
        (lambda: with_rate_limit(lambda *, a: "k", limit=1, period="minute"), "with_rate_limit"),
        (lambda: with_period(lambda a, b: "k", every="day"), "with_period"),
        (lambda: with_ordered_lock(lambda: "k"), "with_ordered_lock"),
    ],
    ids=["two-required", "none", "keyword-only", "period", "ordered"],
)
def test_a_key_function_of_the_wrong_arity_is_refused_at_the_decorator(
    make: Callable[[], Any], decorator: str
) -> None:
    """A key function that cannot take one mapping is refused naming key and the decorator."""
    with pytest.raises(DefinitionError) as caught:
        make()
    message = str(caught.value)
    assert f"{decorator}(key=...)" in message
    assert "exactly one positional argument" in message


def test_a_key_function_taking_one_argument_or_star_args_is_fine(key: str) -> None:
    """``lambda args: ...``, ``lambda args, x=1: ...`` and ``lambda *a: ...`` are accepted, and
    each gives the key a call holds while its body runs."""
    for make_key in (lambda args: key, lambda args, extra=1: key, lambda *a: key):

        @with_lock(make_key, wait=0)
        def helper() -> str | None:
            return Lock(key).state().owner

        assert helper() is not None
        assert Lock(key).state().owner is None


def test_a_hook_that_cannot_take_the_steps_arguments_is_refused() -> None:
    """An undo without the step's argument names is refused naming reactor, step and hook."""
    with pytest.raises(DefinitionError) as caught:

        class Checkout(Reactor):
            sku: str

            @step
            def reserve(sku: str) -> str:
                return "res"

            @reserve.undo
            def _release(result: str) -> None:
                return None

    message = str(caught.value)
    assert "Checkout" in message
    assert "'reserve'" in message
    assert "_release" in message
    assert "sku" in message


def test_a_compensate_without_a_first_positional_is_refused() -> None:
    """A compensate that takes only the arguments (not the error first) is refused."""
    with pytest.raises(DefinitionError, match=r"compensate function .*_void"):

        class Checkout(Reactor):
            sku: str

            @step
            def charge(sku: str) -> str:
                return "x"

            @charge.compensate
            def _void(*, sku: str) -> None:
                return None


def test_hooks_taking_kwargs_or_every_argument_are_fine() -> None:
    """``(result, **arguments)`` and ``(result, sku)`` both fit the calling convention."""

    class Checkout(Reactor):
        sku: str

        @step
        def reserve(sku: str) -> str:
            return "res"

        @reserve.undo
        def _release(result: str, **arguments: Any) -> None:
            return None

        @reserve.compensate
        def _void(error: object, sku: str) -> None:
            return None

    assert Checkout.__py_reactor_order__ == ("reserve",)


def test_a_step_key_reading_a_name_the_step_does_not_receive_is_refused() -> None:
    """``args['acount_id']`` on a step receiving account_id and amount is refused, suggesting it."""
    with pytest.raises(DefinitionError) as caught:

        @with_lock(lambda args: f"acct:{args['acount_id']}")
        class Charge(Step):
            account_id: int
            amount: int

            def run(self) -> int:
                return 1

    message = str(caught.value)
    assert "'acount_id'" in message
    assert "account_id, amount" in message
    assert "did you mean 'account_id'" in message


def test_an_inline_step_key_reading_an_unknown_name_with_get_is_refused() -> None:
    """``args.get('acount')`` below ``@step`` is checked against the function's parameters."""
    with pytest.raises(DefinitionError, match=r"'acount'.*account_id"):

        class Checkout(Reactor):
            account_id: int

            @step
            @with_lock(lambda args: f"acct:{args.get('acount')}")
            def pay(account_id: int) -> int:
                return 1


def test_an_inline_step_key_above_step_is_checked_too() -> None:
    """Above ``@step`` the key is checked against the step's declared arguments."""
    with pytest.raises(DefinitionError, match=r"'acount_id'.*did you mean 'account_id'"):

        class Checkout(Reactor):
            account_id: int

            @with_lock(lambda args: f"acct:{args['acount_id']}")
            @step
            def pay(account_id: int) -> int:
                return 1


def test_a_reactor_key_reading_a_name_that_is_not_an_input_is_refused() -> None:
    """A reactor-level key is checked against the reactor's input names."""
    with pytest.raises(DefinitionError) as caught:

        @with_lock(lambda args: f"order:{args['order']}")
        class Orders(Reactor):
            order_id: int

            @step
            def pay() -> int:
                return 1

    message = str(caught.value)
    assert "Orders" in message
    assert "'order'" in message
    assert "order_id" in message


def test_a_key_reading_known_names_is_fine() -> None:
    """A key reading only names the step receives is accepted."""

    @with_lock(lambda args: f"acct:{args['account_id']}:{args.get('amount')}")
    class Charge(Step):
        account_id: int
        amount: int

        def run(self) -> int:
            return 1

    assert "lock" in Charge.coordination


def _key_from_def(args: Mapping[str, Any]) -> str:
    return f"acct:{args['acount_id']}"


def test_a_def_key_function_is_checked_too() -> None:
    """A key written as a ``def`` is read the same way."""
    with pytest.raises(DefinitionError, match=r"'acount_id'"):

        @with_lock(_key_from_def)
        class Charge(Step):
            account_id: int

            def run(self) -> int:
                return 1


# -- item 5: messages ----------------------------------------------------------------------------


def test_retries_without_parentheses_says_so() -> None:
    """``@retries`` without parentheses says to write ``@retries(...)``."""
    with pytest.raises(DefinitionError) as caught:

        @retries  # type: ignore[arg-type]
        def pay() -> int:
            return 1

    assert "use `@retries(...)`" in str(caught.value)
    assert "pay" in str(caught.value)


def test_retries_without_parentheses_above_step_says_so() -> None:
    """Above ``@step`` too."""
    with pytest.raises(DefinitionError, match=r"use `@retries\(\.\.\.\)`"):

        class R(Reactor):
            @retries  # type: ignore[arg-type]
            @step
            def pay() -> int:
                return 1


def _bare_on_helper() -> None:
    @with_lock  # type: ignore[arg-type]
    def helper(account_id: int) -> int:
        return 1

    helper(1)


def _bare_below_step() -> None:
    class R(Reactor):
        account_id: int

        @step
        @with_semaphore  # type: ignore[arg-type, call-arg]
        def pay(account_id: int) -> int:
            return 1


def _bare_above_step() -> None:
    class R(Reactor):
        account_id: int

        @with_period  # type: ignore[arg-type, call-arg]
        @step
        def pay(account_id: int) -> int:
            return 1


def _bare_in_a_reactor_without_step() -> None:
    class R(Reactor):
        account_id: int

        @with_ordered_lock  # type: ignore[arg-type]
        def pay(account_id: int) -> int:
            return 1


def _bare_in_a_step_class() -> None:
    class Charge(Step):
        @with_lock  # type: ignore[arg-type]
        def run(self) -> int:
            return 1


def _bare_with_two_parameters() -> None:
    @with_rate_limit  # type: ignore[arg-type, call-arg]
    def helper(account_id: int, amount: int) -> int:
        return 1


@pytest.mark.parametrize(
    ("define", "decorator"),
    [
        (_bare_on_helper, "with_lock"),
        (_bare_below_step, "with_semaphore"),
        (_bare_above_step, "with_period"),
        (_bare_in_a_reactor_without_step, "with_ordered_lock"),
        (_bare_with_two_parameters, "with_rate_limit"),
        (_bare_in_a_step_class, "with_lock"),
    ],
    ids=["helper", "below-step", "above-step", "no-step", "two-parameters", "step-method"],
)
def test_a_coordination_decorator_without_parentheses_says_so(
    define: Callable[[], None], decorator: str
) -> None:
    """The message says ``use @with_x(key, ...)`` and names no internal function."""
    with pytest.raises(DefinitionError) as caught:
        define()
    message = str(caught.value)
    assert f"use `@{decorator}(key, ...)`" in message
    assert "_declarer" not in message
    assert "<locals>.decorate" not in message


def test_a_decorator_on_compose_names_compose() -> None:
    """``with_lock(...)(compose(Kid))`` says compose(Kid), not step(Kid)."""

    class Kid(Reactor):
        @step
        def a() -> int:
            return 1

    with pytest.raises(DefinitionError) as caught:
        with_lock("k")(compose(Kid))
    message = str(caught.value)
    assert "compose(" in message
    assert "step(" not in message


def test_invalid_reactor_inputs_do_not_repeat_the_reactor() -> None:
    """``Order failed: invalid inputs for Order: ...`` names Order once."""

    class Order(Reactor):
        account_id: int

        @step
        def pay(account_id: int) -> int:
            return 1

    outcome = Order.run(account_id="x")
    assert isinstance(outcome, FailureResult)
    message = outcome.message
    assert message.count("Order") == 1, message
    assert message.startswith(f"{Order.__qualname__} failed: invalid inputs: account_id")
    assert "account_id" in message


def test_a_coordination_error_does_not_repeat_its_location(key: str) -> None:
    """``step 'pay' of R failed: reactor R, step 'pay': ...`` names the place once."""

    class R(Reactor):
        @step
        @with_lock(lambda args: args[MISSING])
        def pay() -> int:
            return 1

    outcome = R.run()
    assert isinstance(outcome, FailureResult)
    message = outcome.message
    assert message.startswith("step 'pay' of ")
    assert message.count("'pay'") == 1, message
    assert "failed: the lock key function raised KeyError" in message


def test_a_key_function_of_a_step_without_arguments_says_empty_mapping() -> None:
    """No "a mapping of nothing": the message says the step has no arguments."""

    class R(Reactor):
        @step
        @with_lock(lambda args: args[MISSING])
        def pay() -> int:
            return 1

    outcome = R.run()
    assert isinstance(outcome, FailureResult)
    text = str(outcome.error)
    assert "mapping of nothing" not in text
    assert "it receives an empty mapping: the step has no arguments" in text
