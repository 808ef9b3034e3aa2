"""Key functions: what they receive, and a key that raises or is None or empty."""

from __future__ import annotations

from typing import Any

import pytest

from py_reactor import FailureResult, Lock, Reactor, step, with_lock, with_semaphore
from py_reactor.errors import CoordinationKeyError
from py_reactor.observability import events as ev
from tests.engine.coordination._helpers import BEHAVIOUR, Probe, by_key, lock_is_free, ran, recorder


@with_lock(lambda inputs: f"{inputs['key']}-n{inputs['n']}")
class Typed(Reactor):
    key: str
    n: int
    probe = step(Probe)


@with_lock(by_key)
@with_semaphore(lambda inputs: 1 / 0, limit=1)
class RaisingKey(Reactor):
    key: str
    probe = step(Probe)


@with_lock(lambda inputs: None)
class NoneKey(Reactor):
    key: str
    probe = step(Probe)


@with_lock(lambda inputs: "")
class EmptyKey(Reactor):
    key: str
    probe = step(Probe)


def test_key_functions_receive_the_validated_inputs_read_only(key: str) -> None:
    """The key function sees validated (coerced) inputs in a mapping it cannot change."""
    seen: list[Any] = []

    @with_lock(lambda inputs: seen.append(inputs) or inputs["key"])
    class Local(Reactor):
        key: str
        n: int
        probe = step(Probe)

    BEHAVIOUR[key] = lambda probe: Lock(key).state().owner
    outcome = Local.run(key=key, n="7")
    assert outcome.is_success, outcome
    assert len(seen) == 1
    assert seen[0]["n"] == 7
    assert isinstance(seen[0]["n"], int)
    with pytest.raises(TypeError, match="does not support item assignment"):
        seen[0]["n"] = 8
    assert outcome.results["probe"] == outcome.context.root_id


def test_a_key_function_can_build_the_key_from_several_inputs(key: str) -> None:
    """The lock taken is the one the key function names for these inputs."""
    BEHAVIOUR[key] = lambda probe: Lock(f"{key}-n3").state().owner
    outcome = Typed.run(key=key, n=3)
    assert outcome.is_success, outcome
    assert outcome.results["probe"] == outcome.context.root_id


@pytest.mark.parametrize(
    ("reactor", "cause"),
    [
        pytest.param(RaisingKey, "ZeroDivisionError", id="raises"),
        pytest.param(NoneKey, "None", id="returns-None"),
        pytest.param(EmptyKey, "''", id="returns-empty"),
    ],
)
def test_a_bad_key_fails_the_run_before_any_work(
    reactor: type[Reactor], cause: str, key: str
) -> None:
    """A key function raising or returning None/"" fails the run naming the cause; nothing held."""
    rec = recorder()
    outcome = reactor.run(key=key)
    assert isinstance(outcome, FailureResult)
    error = outcome.error
    assert isinstance(error, CoordinationKeyError)
    assert error.reactor == reactor.__name__
    assert reactor.__name__ in str(error)
    assert cause in str(error)
    assert outcome.step_name is None
    assert outcome.reactor_name == reactor.__name__
    assert ran == []
    assert rec.of(ev.LockAcquired) == []
    assert outcome.context.held_keys == []
    assert lock_is_free(key)


def test_a_raising_key_function_keeps_its_exception_as_the_cause(key: str) -> None:
    """The original exception of a raising key function is chained to the key error."""
    outcome = RaisingKey.run(key=key)
    assert isinstance(outcome.error, CoordinationKeyError)
    assert isinstance(outcome.error.__cause__, ZeroDivisionError)
    assert outcome.error.primitive == "semaphore"
