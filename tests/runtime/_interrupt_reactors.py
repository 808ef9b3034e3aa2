"""Module-level reactors for the interrupt tests (a worker finds them by module:qualname).

Every reactor takes the test's ``key`` as input: its correlation id and its locks are keyed on
it, and its steps write what they do to ``LOG[key]`` (the thread worker runs in this process).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from py_reactor import (
    Element,
    Failure,
    Input,
    Reactor,
    Result,
    background,
    compose,
    interrupt,
    map_step,
    parallel,
    step,
    with_lock,
)

#: test key -> what the reactors' steps did, in order.
LOG: dict[str, list[str]] = {}
#: test key -> the reactor-level lock's key, as seen held by a step (proves it was re-taken).
HELD: dict[str, list[str]] = {}


def log(key: str, line: str) -> None:
    LOG.setdefault(key, []).append(line)


class Approval(BaseModel):
    """The payload a reviewer resumes a refund with."""

    approved: bool
    by: str = Field(min_length=1)


def _held(key: str) -> None:
    from py_reactor.engine.context import running_context

    context = running_context()
    HELD.setdefault(key, []).extend([] if context is None else context.held_keys)


@with_lock(lambda i: f"refund:{i['key']}", ttl=30, wait=2)
class Refund(Reactor):
    """prepare -> review (interrupt) -> pay; the reactor-level lock is on the key."""

    key: str
    fail_pay: bool = False

    @step()
    def prepare(key: str) -> str:
        log(key, "prepare")
        return f"prepared {key}"

    @prepare.undo
    def _undo_prepare(result: Any, key: str) -> None:
        log(key, "undo prepare")

    review = interrupt(
        payload=Approval, correlation_id=lambda i: f"refund:{i['key']}", wait_for="prepare"
    )

    @step(approval=Result("review"))
    def pay(key: str, approval: dict[str, Any], fail_pay: bool) -> Any:
        _held(key)
        log(key, f"pay approved={approval['approved']} by={approval['by']}")
        if fail_pay:
            return Failure("pay declined", retryable=False)
        return f"paid by {approval['by']}"

    returns = "pay"


class Timed(Reactor):
    """prepare -> review with a short timeout -> pay."""

    key: str
    timeout_key: str = ""

    @step()
    def prepare(key: str) -> str:
        log(key, "prepare")
        return "ok"

    @prepare.undo
    def _undo_prepare(result: Any, key: str) -> None:
        log(key, "undo prepare")

    review = interrupt(timeout=0.5, wait_for="prepare")

    @step(payload=Result("review"))
    def pay(key: str, payload: dict[str, Any]) -> str:
        log(key, "pay")
        return "paid"

    returns = "pay"


class Background(Reactor):
    """Resumed in a worker: ``review`` with ``resume="background"``."""

    key: str

    review = interrupt(correlation_id=lambda i: i["key"], resume="background")

    @step(payload=Result("review"))
    def after(key: str, payload: dict[str, Any]) -> str:
        log(key, f"after {payload.get('note')}")
        return f"after {payload.get('note')}"

    returns = "after"


@background
@with_lock(lambda i: f"bg:{i['key']}", ttl=30, wait=2)
class Worked(Reactor):
    """The whole run in a worker: it pauses there; resumed inline or in the worker again."""

    key: str

    @step()
    def first(key: str) -> str:
        log(key, "first")
        return "first"

    review = interrupt(correlation_id=lambda i: f"w:{i['key']}", wait_for="first",
                       resume="background")  # fmt: skip

    @step(payload=Result("review"))
    def last(key: str, payload: dict[str, Any]) -> str:
        _held(key)
        log(key, f"last {payload.get('note')}")
        return f"done {payload.get('note')}"

    returns = "last"


class Inner(Reactor):
    """A composed child that pauses."""

    key: str

    ask = interrupt()

    @step(answer=Result("ask"))
    def use(key: str, answer: dict[str, Any]) -> str:
        log(key, f"inner {answer.get('n')}")
        return f"inner {answer.get('n')}"

    returns = "use"


class Outer(Reactor):
    """A parent whose composed child pauses: the whole run pauses at ``child.ask``."""

    key: str

    @step()
    def before(key: str) -> str:
        log(key, "before")
        return "before"

    child = compose(Inner, key=Input("key"), wait_for="before")

    @step(value=Result("child"))
    def after(key: str, value: str) -> str:
        log(key, f"after {value}")
        return value

    returns = "after"


class BadCorrelation(Reactor):
    """A correlation id function that raises."""

    key: str
    review = interrupt(correlation_id=lambda i: i["missing"])


@background(before="last")
class HandedOffLater(Reactor):
    """Pauses in the caller, before the hand-off step; the resume runs the rest."""

    key: str

    @step()
    def first(key: str) -> str:
        log(key, "first")
        return "first"

    review = interrupt(wait_for="first")

    @step(payload=Result("review"))
    def last(key: str, payload: dict[str, Any]) -> str:
        log(key, "last")
        return "last"

    returns = "last"


@parallel
class ParallelReview(Reactor):
    """A @parallel reactor: ``fetch`` runs as a branch while the run reaches ``review``."""

    key: str

    @step()
    def fetch(key: str) -> str:
        log(key, "fetch")
        return "fetched"

    review = interrupt()

    @step(payload=Result("review"), fetched=Result("fetch"))
    def decide(key: str, payload: dict[str, Any], fetched: str) -> str:
        log(key, f"decide {payload.get('ok')} {fetched}")
        return f"decided {payload.get('ok')}"

    returns = "decide"


class Line(Reactor):
    """A map element that pauses: one answer per element."""

    key: str
    n: int

    ask = interrupt()

    @step(answer=Result("ask"))
    def use(key: str, n: int, answer: dict[str, Any]) -> int:
        log(key, f"use {n} {answer.get('x')}")
        return n * int(answer.get("x", 0))

    returns = "use"


class Lines(Reactor):
    """A map whose every element pauses once; the run pauses at ``lines[<i>].ask``."""

    key: str
    items: list[int]

    lines = map_step(Line, source=Input("items"), key=Input("key"), n=Element("lines"))
    returns = "lines"


class Interrupted(Reactor):
    """prepare -> review -> a step that raises KeyboardInterrupt (Ctrl-C in the resumed run)."""

    key: str

    @step()
    def prepare(key: str) -> str:
        log(key, "prepare")
        return "prepared"

    @prepare.undo
    def _unprepare(result: str, key: str) -> None:
        log(key, "undo prepare")

    review = interrupt(wait_for="prepare")

    @step(payload=Result("review"))
    def stop(key: str, payload: dict[str, Any]) -> str:
        raise KeyboardInterrupt
