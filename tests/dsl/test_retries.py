"""``@retries`` and ``RetryPolicy``: option checks, delay math, where a policy is declared."""

import random
from typing import Any

import pytest

from py_reactor import Reactor, RetryPolicy, Step, retries, step
from py_reactor.engine import waiter
from py_reactor.errors import DefinitionError


class Flaky(Step):
    """A step that always raises."""

    def run(self) -> Any:
        raise ValueError("flaky")


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record retry pauses instead of sleeping."""
    recorded: list[float] = []
    monkeypatch.setattr(waiter, "_sleep", recorded.append)
    return recorded


# -- option checks -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("max_attempts", 0),
        ("max_attempts", -1),
        ("max_attempts", True),
        ("max_attempts", 1.5),
        ("max_attempts", "3"),
        ("backoff", "random"),
        ("backoff", None),
        ("base_delay", -1),
        ("base_delay", "1"),
        ("base_delay", True),
        ("jitter", "yes"),
        ("jitter", 1),
    ],
)
def test_bad_option_is_refused_naming_it(option: str, value: object) -> None:
    """retries(...) with an out-of-range or wrongly typed option is refused naming the option."""
    with pytest.raises(DefinitionError, match=rf"{option}=") as info:
        retries(**{option: value})
    assert repr(value) in str(info.value)


def test_max_delay_below_base_delay_is_refused() -> None:
    """A max_delay smaller than base_delay is refused naming max_delay."""
    with pytest.raises(DefinitionError, match=r"max_delay=.*0\.5"):
        retries(base_delay=1.0, max_delay=0.5)


def test_max_delay_that_is_not_a_number_is_refused() -> None:
    """A non-numeric max_delay is refused naming max_delay."""
    with pytest.raises(DefinitionError, match=r"max_delay="):
        retries(max_delay="10")


def test_retry_policy_checks_options_too() -> None:
    """Building a RetryPolicy directly applies the same checks as @retries."""
    with pytest.raises(DefinitionError, match=r"max_attempts="):
        RetryPolicy(max_attempts=0)
    with pytest.raises(DefinitionError, match=r"backoff="):
        RetryPolicy(backoff="random")  # type: ignore[arg-type]


def test_bad_options_are_refused_before_decorating() -> None:
    """A bad option is refused when retries(...) is called, before any target is seen."""
    with pytest.raises(DefinitionError, match=r"base_delay="):

        @retries(base_delay=-1)
        class Never(Step):
            def run(self) -> None:
                return None


def test_valid_edge_values_are_accepted() -> None:
    """One attempt, zero delay and max_delay equal to base_delay are valid options."""
    policy = RetryPolicy(max_attempts=1, backoff="fixed", base_delay=0, max_delay=0, jitter=True)
    assert policy.max_attempts == 1
    assert policy.delay(1) == 0.0


def test_defaults() -> None:
    """The default policy is 3 attempts, exponential backoff from 1 s, no cap, no jitter."""
    policy = RetryPolicy()
    assert (policy.max_attempts, policy.backoff, policy.base_delay) == (3, "exponential", 1.0)
    assert policy.max_delay is None
    assert policy.jitter is False


# -- delay math --------------------------------------------------------------------------------


def test_fixed_backoff_waits_base_delay_every_time() -> None:
    """Fixed backoff waits base_delay after every failed attempt."""
    policy = RetryPolicy(backoff="fixed", base_delay=2.5)
    assert [policy.delay(n) for n in range(1, 5)] == [2.5, 2.5, 2.5, 2.5]


def test_linear_backoff_grows_by_base_delay() -> None:
    """Linear backoff waits base_delay times the attempt number."""
    policy = RetryPolicy(backoff="linear", base_delay=0.5)
    assert [policy.delay(n) for n in range(1, 5)] == [0.5, 1.0, 1.5, 2.0]


def test_exponential_backoff_doubles() -> None:
    """Exponential backoff waits base_delay * 2 ** (attempt - 1)."""
    policy = RetryPolicy(backoff="exponential", base_delay=0.25)
    assert [policy.delay(n) for n in range(1, 6)] == [0.25, 0.5, 1.0, 2.0, 4.0]


@pytest.mark.parametrize(
    ("backoff", "expected"),
    [
        ("fixed", [3.0, 3.0, 3.0, 3.0]),
        ("linear", [3.0, 5.0, 5.0, 5.0]),
        ("exponential", [3.0, 5.0, 5.0, 5.0]),
    ],
)
def test_max_delay_caps_every_backoff(backoff: str, expected: list[float]) -> None:
    """max_delay caps the computed delay for every backoff kind."""
    policy = RetryPolicy(backoff=backoff, base_delay=3.0, max_delay=5.0)  # type: ignore[arg-type]
    assert [policy.delay(n) for n in range(1, 5)] == expected


def test_delays_are_floats() -> None:
    """Delays are returned as floats even when options are integers."""
    delay = RetryPolicy(backoff="linear", base_delay=2).delay(3)
    assert delay == 6.0
    assert isinstance(delay, float)


def test_jitter_stays_between_zero_and_the_capped_delay() -> None:
    """With jitter every delay lies in [0, computed delay], and the values vary."""
    policy = RetryPolicy(backoff="exponential", base_delay=1.0, max_delay=4.0, jitter=True)
    for attempt, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (6, 4.0)]:
        samples = [policy.delay(attempt) for _ in range(200)]
        assert all(0.0 <= s <= ceiling for s in samples)
        assert len(set(samples)) > 1


def test_jitter_draws_uniformly_from_zero_to_the_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    """Jitter draws uniformly between 0 and the capped delay (full jitter)."""
    calls: list[tuple[float, float]] = []

    def fake_uniform(low: float, high: float) -> float:
        calls.append((low, high))
        return high / 2

    monkeypatch.setattr(random, "uniform", fake_uniform)
    policy = RetryPolicy(backoff="linear", base_delay=2.0, max_delay=5.0, jitter=True)
    assert [policy.delay(n) for n in (1, 2, 3)] == [1.0, 2.0, 2.5]
    assert calls == [(0.0, 2.0), (0.0, 4.0), (0.0, 5.0)]


# -- where a policy may be declared ------------------------------------------------------------


def test_retries_above_step_on_inline_function_attaches() -> None:
    """@retries placed above @step attaches the policy to the inline step."""

    class Orders(Reactor):
        @retries(max_attempts=4, backoff="fixed", base_delay=0.0)
        @step()
        def pay() -> None:
            raise ValueError("down")

    policy = Orders.__py_reactor_plan__["pay"].declaration.retry_policy
    assert policy == RetryPolicy(max_attempts=4, backoff="fixed", base_delay=0.0)


def test_retries_below_step_on_inline_function_attaches() -> None:
    """@retries placed below @step attaches the policy to the inline step."""

    class Orders(Reactor):
        @step()
        @retries(max_attempts=4, backoff="fixed", base_delay=0.0)
        def pay() -> None:
            raise ValueError("down")

    policy = Orders.__py_reactor_plan__["pay"].declaration.retry_policy
    assert policy == RetryPolicy(max_attempts=4, backoff="fixed", base_delay=0.0)


@pytest.mark.parametrize("placement", ["above", "below"])
def test_inline_retry_policy_drives_the_attempts(placement: str, sleeps: list[float]) -> None:
    """An inline step's policy, above or below @step, sets how many attempts run and the pauses."""
    calls: list[int] = []

    def pay() -> None:
        calls.append(1)
        raise ValueError("down")

    policy = retries(max_attempts=3, backoff="linear", base_delay=0.5)
    declared = policy(step()(pay)) if placement == "above" else step()(policy(pay))
    orders = type("Orders", (Reactor,), {"pay": declared})

    outcome = orders.run()
    assert outcome.is_success is False
    assert len(calls) == 3
    assert outcome.attempts == 3
    assert sleeps == [0.5, 1.0]


def test_step_without_retries_makes_one_attempt(sleeps: list[float]) -> None:
    """A step with no policy is tried once and never sleeps."""

    class Orders(Reactor):
        flaky = step(Flaky)

    assert Orders.__py_reactor_plan__["flaky"].declaration.retry_policy is None
    outcome = Orders.run()
    assert outcome.attempts == 1
    assert sleeps == []


def test_retries_on_step_class_is_used_by_its_declarations() -> None:
    """@retries on a Step class is the policy of every step(...) of that class."""

    @retries(max_attempts=2, backoff="fixed", base_delay=0.0)
    class Charge(Step):
        def run(self) -> None:
            return None

    class Orders(Reactor):
        charge = step(Charge)

    assert Orders.__py_reactor_plan__["charge"].declaration.retry_policy == RetryPolicy(
        max_attempts=2, backoff="fixed", base_delay=0.0
    )


def test_retries_on_class_and_on_its_declaration_is_refused() -> None:
    """@retries on a Step class plus @retries on its step(...) declaration is refused."""

    @retries(max_attempts=2)
    class Charge(Step):
        def run(self) -> None:
            return None

    with pytest.raises(DefinitionError, match=r"Charge.*already declares @retries"):

        class Orders(Reactor):
            charge = retries(max_attempts=5)(step(Charge))


def test_retries_on_a_declaration_of_an_unretried_class_attaches() -> None:
    """@retries on step(SomeClass) attaches when the class itself declares no policy."""

    class Orders(Reactor):
        flaky = retries(max_attempts=5, base_delay=0.0)(step(Flaky))

    policy = Orders.__py_reactor_plan__["flaky"].declaration.retry_policy
    assert policy is not None
    assert policy.max_attempts == 5
    assert getattr(Flaky, "__py_reactor_retries__", None) is None


def test_retries_twice_on_the_same_function_is_refused() -> None:
    """Two @retries on one inline function (below @step) are refused."""

    def pay() -> None:
        return None

    with pytest.raises(DefinitionError, match=r"pay.*@retries twice"):
        retries(max_attempts=2)(retries(max_attempts=3)(pay))


def test_retries_twice_above_step_is_refused() -> None:
    """Two @retries above one @step are refused."""
    with pytest.raises(DefinitionError, match=r"already declares @retries"):

        @retries(max_attempts=2)
        @retries(max_attempts=3)
        @step()
        def pay() -> None:
            return None


def test_retries_above_and_below_step_is_refused() -> None:
    """@retries both above and below @step on one function is refused."""
    with pytest.raises(DefinitionError, match=r"pay.*already declares @retries"):

        @retries(max_attempts=2)
        @step()
        @retries(max_attempts=3)
        def pay() -> None:
            return None


def test_retries_twice_on_a_step_class_is_refused() -> None:
    """Two @retries on one Step class are refused."""
    with pytest.raises(DefinitionError, match=r"Twice.*@retries twice"):

        @retries(max_attempts=2)
        @retries(max_attempts=3)
        class Twice(Step):
            def run(self) -> None:
                return None


def test_subclass_of_retried_step_class_inherits_the_policy(sleeps: list[float]) -> None:
    """A subclass of a Step class with @retries uses the parent's policy."""

    @retries(max_attempts=3, backoff="fixed", base_delay=0.25)
    class Parent(Step):
        def run(self) -> None:
            raise ValueError("down")

    class Child(Parent):
        pass

    class Orders(Reactor):
        child = step(Child)

    assert Orders.__py_reactor_plan__["child"].declaration.retry_policy == RetryPolicy(
        max_attempts=3, backoff="fixed", base_delay=0.25
    )
    outcome = Orders.run()
    assert outcome.attempts == 3
    assert sleeps == [0.25, 0.25]


def test_subclass_may_redeclare_an_inherited_policy() -> None:
    """@retries on a subclass of a retried Step class replaces the inherited policy."""

    @retries(max_attempts=3)
    class Parent(Step):
        def run(self) -> None:
            return None

    @retries(max_attempts=7)
    class Child(Parent):
        pass

    assert step(Child).retry_policy == RetryPolicy(max_attempts=7)
    assert step(Parent).retry_policy == RetryPolicy(max_attempts=3)
