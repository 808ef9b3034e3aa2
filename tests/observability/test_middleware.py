"""Middleware: lifecycle events delivered in order, and a raising hook never breaks a run."""

import logging
from typing import Any

import pytest

from py_reactor import (
    Failure,
    Halt,
    Middleware,
    Reactor,
    Result,
    Skipped,
    Step,
    configure,
    get_config,
    retries,
    step,
)
from py_reactor.engine import waiter
from py_reactor.observability import events as ev
from py_reactor.observability.middleware import HOOKS
from py_reactor.testing import reset


class Recorder(Middleware):
    """Records every event it receives, through every hook."""

    def __init__(self) -> None:
        self.events: list[ev.Event] = []

    def _record(self, event: Any) -> None:
        self.events.append(event)

    on_reactor_started = _record
    on_reactor_completed = _record
    on_reactor_failed = _record
    on_reactor_halted = _record
    on_step_started = _record
    on_step_completed = _record
    on_step_skipped = _record
    on_step_failed = _record
    on_step_retried = _record
    on_rollback_started = _record
    on_rollback_finished = _record
    on_compensation_started = _record
    on_compensation_completed = _record
    on_compensation_failed = _record
    on_undo_started = _record
    on_undo_completed = _record
    on_undo_failed = _record

    def names(self) -> list[tuple[str, str | None]]:
        """(event name, step) for every event received, in order."""
        return [(e.name, e.step) for e in self.events]


class Exploding(Middleware):
    """Raises from the hooks it overrides."""

    def on_reactor_started(self, event: ev.ReactorStarted) -> None:
        raise RuntimeError("middleware broke on start")

    def on_step_completed(self, event: ev.StepCompleted) -> None:
        raise RuntimeError("middleware broke on step")


# -- steps and reactors ------------------------------------------------------------------------


class One(Step):
    def run(self) -> Any:
        return 1


class Two(Step):
    x: int

    def run(self) -> Any:
        return self.inputs.x + 1

    def undo(self, result: Any) -> Any:
        return None


class Undoable(Step):
    def run(self) -> Any:
        return "done"

    def undo(self, result: Any) -> Any:
        return None


class BadUndo(Step):
    def run(self) -> Any:
        return "done"

    def undo(self, result: Any) -> Any:
        return Failure("cannot undo")


class Broken(Step):
    def run(self) -> Any:
        raise ValueError("broken")

    def compensate(self, error: Any) -> Any:
        return None


class BrokenWithBadCompensate(Step):
    def run(self) -> Any:
        raise ValueError("broken")

    def compensate(self, error: Any) -> Any:
        raise RuntimeError("compensate broke")


ATTEMPTS: list[int] = []


@retries(max_attempts=3, backoff="fixed", base_delay=2.0)
class FlakyTwice(Step):
    def run(self) -> Any:
        ATTEMPTS.append(1)
        if len(ATTEMPTS) < 3:
            raise ConnectionError("flaky")
        return "finally"


class Skipper(Step):
    def guard(self) -> Any:
        return Skipped("fallback", reason="not needed")

    def run(self) -> Any:
        return "ran"


class Stopper(Step):
    def run(self) -> Any:
        return Halt("wait for approval")


class Simple(Reactor):
    one = step(One)
    two = step(Two, x=Result("one"))
    returns = "two"


class RollsBack(Reactor):
    undoable = step(Undoable)
    broken = step(Broken, wait_for=["undoable"])


class RollbackFailures(Reactor):
    bad_undo = step(BadUndo)
    broken = step(BrokenWithBadCompensate, wait_for=["bad_undo"])


class Retrying(Reactor):
    flaky = step(FlakyTwice)


class Skipping(Reactor):
    skipper = step(Skipper)
    one = step(One, wait_for=["skipper"])
    returns = "one"


class Halting(Reactor):
    one = step(One)
    stopper = step(Stopper, wait_for=["one"])
    two = step(Two, x=Result("one"), wait_for=["stopper"])


@pytest.fixture
def recorder() -> Recorder:
    """A Recorder installed as the only middleware."""
    middleware = Recorder()
    configure(middleware=[middleware])
    return middleware


# -- event order -------------------------------------------------------------------------------


def test_success_run_delivers_events_in_order(recorder: Recorder) -> None:
    """A successful run emits reactor.started, step.started/completed per step, then completed."""
    outcome = Simple.run()

    assert outcome.is_success, outcome
    assert recorder.names() == [
        ("reactor.started", None),
        ("step.started", "one"),
        ("step.completed", "one"),
        ("step.started", "two"),
        ("step.completed", "two"),
        ("reactor.completed", None),
    ]
    completed = recorder.events[-1]
    assert isinstance(completed, ev.ReactorCompleted)
    assert completed.value == 2
    step_completed = recorder.events[2]
    assert isinstance(step_completed, ev.StepCompleted)
    assert step_completed.value == 1
    assert step_completed.attempt == 1


def test_failure_with_rollback_delivers_rollback_events_in_order(recorder: Recorder) -> None:
    """A failing run emits step.failed, then the rollback's events, then reactor.failed last."""
    outcome = RollsBack.run()

    assert not outcome.is_success
    assert recorder.names() == [
        ("reactor.started", None),
        ("step.started", "undoable"),
        ("step.completed", "undoable"),
        ("step.started", "broken"),
        ("step.failed", "broken"),
        ("rollback.started", "broken"),
        ("compensation.started", "broken"),
        ("compensation.completed", "broken"),
        ("undo.started", "undoable"),
        ("undo.completed", "undoable"),
        ("rollback.finished", "broken"),
        ("reactor.failed", "broken"),
    ]
    failed = recorder.events[-1]
    assert isinstance(failed, ev.ReactorFailed)
    assert failed.error is outcome.error
    finished = recorder.events[-2]
    assert isinstance(finished, ev.RollbackFinished)
    assert finished.failures == 0


def test_failing_compensate_and_undo_deliver_failed_events(recorder: Recorder) -> None:
    """A compensate that raises and an undo returning Failure emit compensation/undo.failed."""
    outcome = RollbackFailures.run()

    assert not outcome.is_success
    assert recorder.names()[5:] == [
        ("rollback.started", "broken"),
        ("compensation.started", "broken"),
        ("compensation.failed", "broken"),
        ("undo.started", "bad_undo"),
        ("undo.failed", "bad_undo"),
        ("rollback.finished", "broken"),
        ("reactor.failed", "broken"),
    ]
    compensation_failed, undo_failed, finished = (
        recorder.events[7],
        recorder.events[9],
        recorder.events[10],
    )
    assert isinstance(compensation_failed, ev.CompensationFailed)
    assert isinstance(compensation_failed.error, RuntimeError)
    assert isinstance(undo_failed, ev.UndoFailed)
    assert undo_failed.error == "cannot undo"
    assert isinstance(finished, ev.RollbackFinished)
    assert finished.failures == 2


def test_retries_deliver_step_retried_between_attempts(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each failed attempt that will be retried emits step.retried with its attempt and delay."""
    ATTEMPTS.clear()
    monkeypatch.setattr(waiter, "_sleep", lambda _delay: None)

    outcome = Retrying.run()

    assert outcome.is_success, outcome
    assert recorder.names() == [
        ("reactor.started", None),
        ("step.started", "flaky"),
        ("step.retried", "flaky"),
        ("step.started", "flaky"),
        ("step.retried", "flaky"),
        ("step.started", "flaky"),
        ("step.completed", "flaky"),
        ("reactor.completed", None),
    ]
    retried = [e for e in recorder.events if isinstance(e, ev.StepRetried)]
    assert [(e.attempt, e.delay) for e in retried] == [(1, 2.0), (2, 2.0)]
    assert all(isinstance(e.error, ConnectionError) for e in retried)
    started = [e for e in recorder.events if isinstance(e, ev.StepStarted)]
    assert [e.attempt for e in started] == [1, 2, 3]


def test_skip_delivers_step_skipped(recorder: Recorder) -> None:
    """A step skipped by its guard emits step.skipped with the reason and no step.started."""
    outcome = Skipping.run()

    assert outcome.is_success, outcome
    assert recorder.names() == [
        ("reactor.started", None),
        ("step.skipped", "skipper"),
        ("step.started", "one"),
        ("step.completed", "one"),
        ("reactor.completed", None),
    ]
    skipped = recorder.events[1]
    assert isinstance(skipped, ev.StepSkipped)
    assert skipped.reason == "not needed"


def test_halt_delivers_reactor_halted(recorder: Recorder) -> None:
    """A Halt emits reactor.halted naming the step, with no completion or rollback events."""
    outcome = Halting.run()

    assert outcome.status == "halted"
    assert recorder.names() == [
        ("reactor.started", None),
        ("step.started", "one"),
        ("step.completed", "one"),
        ("step.started", "stopper"),
        ("reactor.halted", "stopper"),
    ]
    halted = recorder.events[-1]
    assert isinstance(halted, ev.ReactorHalted)
    assert halted.reason == "wait for approval"


def test_every_event_carries_execution_id_and_reactor(recorder: Recorder) -> None:
    """Every event names the execution and the reactor; step events name their step."""
    outcome = RollbackFailures.run()

    assert recorder.events
    for event in recorder.events:
        assert event.execution_id == outcome.execution_id
        assert event.reactor == "RollbackFailures"
        assert hasattr(event, "step")
        if event.name.startswith(("step.", "compensation.", "undo.")):
            assert event.step in {"bad_undo", "broken"}


# -- the hook table ----------------------------------------------------------------------------


def test_every_event_class_has_a_hook_and_a_middleware_method() -> None:
    """Each event in ALL_EVENTS maps to one hook in HOOKS that Middleware defines."""
    assert set(HOOKS) == set(ev.ALL_EVENTS)
    assert len(set(HOOKS.values())) == len(HOOKS)
    for event_class in ev.ALL_EVENTS:
        hook = HOOKS[event_class]
        assert callable(getattr(Middleware, hook, None)), hook
        subject_verb = event_class.name.replace(".", "_")
        assert hook == f"on_{subject_verb}"


def test_default_middleware_hooks_accept_every_event() -> None:
    """The base Middleware's hooks are no-ops that accept any event."""
    base = Middleware()
    for event_class in ev.ALL_EVENTS:
        event = event_class(execution_id="e", reactor="R", step=None)
        assert getattr(base, HOOKS[event_class])(event) is None


# -- failures in middleware --------------------------------------------------------------------


def test_raising_middleware_is_logged_and_run_and_later_middleware_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A raising hook is logged on 'py_reactor'; the run succeeds; later middleware still hear."""
    later = Recorder()
    configure(middleware=[Exploding(), later])

    with caplog.at_level(logging.ERROR, logger="py_reactor"):
        outcome = Simple.run()

    assert outcome.is_success, outcome
    assert outcome.value == 2
    assert later.names() == [
        ("reactor.started", None),
        ("step.started", "one"),
        ("step.completed", "one"),
        ("step.started", "two"),
        ("step.completed", "two"),
        ("reactor.completed", None),
    ]
    records = [r for r in caplog.records if r.name == "py_reactor"]
    assert len(records) == 3  # reactor.started once, step.completed twice
    assert all(r.levelno >= logging.ERROR for r in records)
    assert all(r.exc_info is not None for r in records)
    assert "Exploding" in records[0].getMessage()
    assert "reactor.started" in records[0].getMessage()


# -- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [object(), Recorder, "logger", None])
def test_configure_refuses_non_middleware_naming_the_option(bad: Any) -> None:
    """configure(middleware=[...]) with something not a Middleware instance raises TypeError."""
    with pytest.raises(TypeError, match="middleware"):
        configure(middleware=[bad])
    assert get_config().middleware == ()


def test_get_config_returns_the_configured_tuple() -> None:
    """get_config().middleware is the configured middleware, in order, as a tuple."""
    first, second = Recorder(), Recorder()

    returned = configure(middleware=[first, second])

    assert get_config().middleware == (first, second)
    assert isinstance(get_config().middleware, tuple)
    assert returned == get_config()


def test_configure_without_options_keeps_middleware() -> None:
    """configure() with the option left out keeps the middleware already configured."""
    middleware = Recorder()
    configure(middleware=[middleware])

    configure()

    assert get_config().middleware == (middleware,)


def test_testing_reset_clears_middleware() -> None:
    """py_reactor.testing.reset() restores the default, empty middleware."""
    middleware = Recorder()
    configure(middleware=[middleware])

    reset()
    Simple.run()

    assert get_config().middleware == ()
    assert middleware.events == []
