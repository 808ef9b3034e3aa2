"""Module-level ``@background @parallel`` reactors (a worker finds reactors by module:qualname).

Every step calls ``act(key, name)``: it records the call in ``CALLS[key]`` and does what
``HOOKS[key]`` says for it (wait at a barrier, wait for an event, fail).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from py_reactor import (
    Failure,
    Reactor,
    Result,
    background,
    compose,
    parallel,
    step,
    with_lock,
    with_ordered_lock,
)

#: test key -> the steps that ran, in order (one entry per run of a step body).
CALLS: dict[str, list[str]] = {}
#: test key -> what a step body does, called with the step's name; non-None: its return.
HOOKS: dict[str, Callable[[str], Any]] = {}
#: test key -> the steps undone, in order.
UNDONE: dict[str, list[str]] = {}

_guard = threading.Lock()


def act(key: str, name: str) -> Any:
    with _guard:
        CALLS.setdefault(key, []).append(name)
    hook = HOOKS.get(key)
    out = None if hook is None else hook(name)
    return f"{name}-value" if out is None else out


def undone(key: str, name: str) -> None:
    with _guard:
        UNDONE.setdefault(key, []).append(name)


def _locked(values: Mapping[str, Any]) -> str:
    return f"{values['key']}:locked"


def _sequence(values: Mapping[str, Any]) -> str:
    return f"{values['key']}:seq"


@background
@parallel
class Fanout(Reactor):
    """Three free steps and one that locks ``<key>:locked``, joined at the end."""

    key: str

    @step
    def a(key: str) -> Any:
        return act(key, "a")

    @step
    def b(key: str) -> Any:
        return act(key, "b")

    @step
    def c(key: str) -> Any:
        return act(key, "c")

    @step
    @with_lock(_locked, ttl=30)
    def locked(key: str) -> Any:
        return act(key, "locked")

    @step(a=Result("a"), b=Result("b"), c=Result("c"), locked=Result("locked"))
    def join(key: str, a: str, b: str, c: str, locked: str) -> str:
        act(key, "join")
        return "+".join((a, b, c, locked))

    returns = "join"


@background(after="second")
@parallel
class HandOff(Reactor):
    """``first`` and ``second`` run in the caller (at once), the rest in a worker."""

    key: str

    @step
    def first(key: str) -> Any:
        return act(key, "first")

    @step
    def second(key: str) -> Any:
        return act(key, "second")

    @step(x=Result("first"))
    def third(key: str, x: str) -> Any:
        return act(key, "third")

    @step(y=Result("second"))
    def fourth(key: str, y: str) -> Any:
        return act(key, "fourth")


@background
@parallel
class ParkThenFail(Reactor):
    """``ordered`` parks out of turn (keeping its position) while ``boom`` fails after ``done``
    completed: the run fails, and gives the position back. Both wait for ``done``, so they
    start together: were ``ordered`` to start beside ``done`` and park first, the walk would
    start nothing new, ``boom`` would never run, and the run would park instead of failing."""

    key: str

    @step
    def done(key: str) -> Any:
        return act(key, "done")

    @done.undo
    def _undo_done(result: Any, key: str) -> None:
        undone(key, "done")

    @step(wait_for="done")
    @with_ordered_lock(_sequence)
    def ordered(key: str) -> Any:
        return act(key, "ordered")

    @step(wait_for="done")
    def boom(key: str) -> Any:
        act(key, "boom")
        return Failure("boom")


class Charging(Reactor):
    """Composed in a branch: its second step locks ``<key>:locked``."""

    key: str

    @step
    def prepare(key: str) -> Any:
        return act(key, "prepare")

    @step(wait_for="prepare")
    @with_lock(_locked, ttl=30)
    def charge(key: str) -> Any:
        return act(key, "charge")

    returns = "charge"


@background
@parallel
class ComposedPark(Reactor):
    """A composed child parks inside its branch; ``side`` runs beside it."""

    key: str

    pay = compose(Charging)

    @step
    def side(key: str) -> Any:
        return act(key, "side")

    @step(paid=Result("pay"), other=Result("side"))
    def finish(key: str, paid: str, other: str) -> str:
        act(key, "finish")
        return f"{paid}+{other}"

    returns = "finish"
