"""Declaration mistakes that would silently drop protection are refused at import, saying how.

Each case here once passed without an error and left a step unprotected (or removed it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from py_reactor import Reactor, Step, step, with_lock, with_semaphore
from py_reactor.errors import DefinitionError


def on_a_method() -> Any:
    class Charge(Step):
        account_id: int

        @with_lock("k")
        def run(self) -> Any:
            return 1

    return Charge


def without_step() -> Any:
    class Checkout(Reactor):
        account_id: int

        @with_lock("k")
        def charge(account_id: int) -> int:
            return 1

    return Checkout


def bare_above_step() -> Any:
    class Checkout(Reactor):
        account_id: int

        @with_lock  # type: ignore[arg-type]
        @step
        def charge(account_id: int) -> int:
            return 1

    return Checkout


def bare_below_step() -> Any:
    class Checkout(Reactor):
        account_id: int

        @step
        @with_lock  # type: ignore[arg-type]
        def charge(account_id: int) -> int:
            return 1

    return Checkout


def bare_on_a_class() -> Any:
    @with_lock  # type: ignore[arg-type]
    class Charge(Step):
        account_id: int

        def run(self) -> Any:
            return 1

    return Charge


def key_named_like_an_argument() -> Any:
    @with_lock(lambda account_id: f"acct:{account_id}")
    class Charge(Step):
        account_id: int

        def run(self) -> Any:
            return 1

    return Charge


def inline_key_named_like_an_argument() -> Any:
    class Checkout(Reactor):
        account_id: int

        @step
        @with_semaphore(lambda account_id: f"acct:{account_id}", limit=2)
        def charge(account_id: int) -> int:
            return 1

    return Checkout


def reactor_key_named_like_an_input() -> Any:
    @with_lock(lambda account_id: f"acct:{account_id}")
    class Checkout(Reactor):
        account_id: int

        @step
        def charge(account_id: int) -> int:
            return 1

    return Checkout


@pytest.mark.parametrize(
    ("declare", "says"),
    [
        pytest.param(on_a_method, "on its method run(); put it on the class", id="method"),
        pytest.param(without_step, "did you forget @step", id="no-step"),
        pytest.param(bare_above_step, "with_lock needs a key", id="bare-above-step"),
        pytest.param(bare_below_step, "@with_lock was applied without a key", id="bare-below"),
        pytest.param(bare_on_a_class, "with_lock needs a key", id="bare-on-class"),
        pytest.param(key_named_like_an_argument, "args['account_id']", id="key-param"),
        pytest.param(inline_key_named_like_an_argument, "args['account_id']", id="inline-key"),
        pytest.param(reactor_key_named_like_an_input, "args['account_id']", id="reactor-key"),
    ],
)
def test_a_mistake_is_refused_with_what_to_write(declare: Callable[[], Any], says: str) -> None:
    """The DefinitionError names the mistake and shows the form that works."""
    with pytest.raises(DefinitionError) as caught:
        declare()
    assert says in str(caught.value)


def test_a_mapping_parameter_name_is_fine_even_if_an_argument_has_it() -> None:
    """``lambda args: ...`` is the intended form, whatever the arguments are called."""

    @with_lock(lambda args: f"acct:{args['args']}")
    class Odd(Step):
        args: int

        def run(self) -> Any:
            return 1

    assert "lock" in Odd.coordination


def test_rollback_wait_on_a_reactor_is_kept_for_its_undo_as_a_composed_child() -> None:
    """A reactor keeps its holds through its own rollback; rollback_wait is how long its undo
    waits to re-take them when a parent that composed it rolls it back."""

    @with_lock("k", rollback_wait=5)
    class Checkout(Reactor):
        @step
        def charge() -> int:
            return 1

    assert Checkout.coordination["lock"].rollback_wait == 5
