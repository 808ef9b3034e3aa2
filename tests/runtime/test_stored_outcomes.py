"""A stored failure comes back as the error the run raised: its class and what it carries.

``find(id).outcome`` and ``wait()`` rebuild the outcome from JSON in any process. A py_reactor
error is rebuilt with its fields (``primitive``, ``key``, ``reactor``, ``step``,
``retry_after``, ``errors``, ...), so ``isinstance`` and the fields work on a worker's run as on
a run in place; an error that cannot be rebuilt comes back as its message text.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from py_reactor.engine.context import Context
from py_reactor.engine.results import FailureResult
from py_reactor.engine.run import describe_exception
from py_reactor.errors import InputValidationError, LockAcquisitionError, RateLimitExceededError
from py_reactor.runtime.execution import outcome_from_dict, outcome_to_dict


def _round_trip(error: BaseException) -> Any:
    context = Context(reactor="shop:Checkout", inputs={})
    failed = FailureResult(
        context,
        error=error,
        step_name="charge",
        reactor_name="Checkout",
        exception_class=describe_exception(error)[0],
    )
    stored = json.loads(json.dumps(outcome_to_dict(failed)))
    rebuilt = outcome_from_dict(stored, context)
    assert isinstance(rebuilt, FailureResult)
    return rebuilt.error


def test_a_rate_limit_refusal_comes_back_with_its_retry_after_and_key() -> None:
    error = _round_trip(
        RateLimitExceededError(
            "reactor Checkout, step 'charge': rate limit 'api' is full",
            retry_after=2.5,
            key="api",
            reactor="Checkout",
            step="charge",
        )
    )
    assert isinstance(error, RateLimitExceededError)
    assert (error.retry_after, error.key, error.primitive) == (2.5, "api", "rate_limit")
    assert (error.reactor, error.step) == ("Checkout", "charge")
    assert str(error) == "reactor Checkout, step 'charge': rate limit 'api' is full"


def test_an_input_refusal_comes_back_with_its_field_errors() -> None:
    errors = [{"field": "amount", "message": "must be > 0", "type": "greater_than", "input": -1}]
    error = _round_trip(InputValidationError("invalid inputs", errors=errors, reactor="Checkout"))
    assert isinstance(error, InputValidationError)
    assert error.errors == errors


def test_fields_set_after_the_constructor_come_back_too() -> None:
    busy = LockAcquisitionError("busy", primitive="lock", key="order:7")
    busy.parks = 3  # the park cap's count, set where the cap was reached
    error = _round_trip(busy)
    assert isinstance(error, LockAcquisitionError)
    assert (error.key, error.parks) == ("order:7", 3)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ValueError("plain"), ValueError),
        (KeyError("k"), KeyError),
    ],
)
def test_other_exceptions_come_back_from_their_message(
    error: BaseException, expected: type[BaseException]
) -> None:
    assert isinstance(_round_trip(error), expected)


def test_an_error_stored_before_its_fields_were_comes_back_as_text() -> None:
    """A record written by the previous release has no ``error_fields``: a class that needs
    them (retry_after) is given back as its message, as before."""
    context = Context(reactor="shop:Checkout", inputs={})
    stored = {
        "status": "failed",
        "error": "rate limit 'api' is full",
        "exception_class": "py_reactor.errors.RateLimitExceededError",
    }
    rebuilt = outcome_from_dict(stored, context)
    assert isinstance(rebuilt, FailureResult)
    assert rebuilt.error == "rate limit 'api' is full"
