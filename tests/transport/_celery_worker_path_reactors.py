"""Reactors for the worker-path tests on real Celery worker processes
(``py-reactor worker --import tests.transport._celery_worker_path_reactors``): the park-write
race, ``@parallel`` branch parks, and semaphore parks (step- and reactor-level).

They report as ``_celery_reactors`` does (importing it also applies the worker settings its
test passes through the environment): each step body appends ``"<what>:<pid>"`` to the list
``celery-test:<key>``.

In a worker process this module installs ``Parks``, a middleware that, when a run parks (the
engine tells middleware after the step's busy answer and *before* the park is written, see
``py_reactor.engine.waiter.park`` and ``runtime.journal.StoredJournal.commit``):

- appends the parked step's path to ``celery-paths:parks:<primitive key>`` (a count and a
  signal other branches of the same run can wait for);
- if the test armed the race on that key (``celery-paths:race:<key>`` exists; the first park
  consumes it), pushes to ``celery-paths:race:<key>:parked`` and blocks until the test pushes
  to ``celery-paths:race:<key>:done`` (the test releases the key in between, so the release
  lands between the busy answer and the park's write).

It also appends to ``celery-paths:period-claims:<key>`` whenever a run claims a period's
bucket, so a test can count the claims.
"""

from __future__ import annotations

import os
import time
from typing import Any

from py_reactor import (
    Failure,
    Middleware,
    Reactor,
    Result,
    background,
    compose,
    configure,
    parallel,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
    with_semaphore,
)
from py_reactor.observability import events as ev
from tests.transport._celery_reactors import client, record

#: How long a worker-side wait for the test (or for a sibling branch) may last.
PATIENCE = 30.0


def parks_list(key: str) -> str:
    return f"celery-paths:parks:{key}"


def race_arm(key: str) -> str:
    return f"celery-paths:race:{key}"


def race_parked(key: str) -> str:
    return f"celery-paths:race:{key}:parked"


def race_done(key: str) -> str:
    return f"celery-paths:race:{key}:done"


def period_claims(key: str) -> str:
    return f"celery-paths:period-claims:{key}"


def lock_key(key: str) -> str:
    return f"celery-paths:lock:{key}"


def slot_key(key: str) -> str:
    return f"celery-paths:slots:{key}"


def period_key(key: str) -> str:
    return f"celery-paths:daily:{key}"


def sequence_key(key: str) -> str:
    return f"celery-paths:seq:{key}"


class Parks(Middleware):
    """Counts parks and claims in Redis; holds the first park of an armed key until told."""

    def on_step_parked(self, event: ev.StepParked) -> None:
        self._parked(event.key, event.step)

    def on_reactor_parked(self, event: ev.ReactorParked) -> None:
        self._parked(event.key, event.step)

    def on_period_acquired(self, event: ev.PeriodAcquired) -> None:
        client().rpush(period_claims(event.key), f"{event.execution_id}:{os.getpid()}")

    def _parked(self, key: str, step: str | None) -> None:
        redis = client()
        redis.rpush(parks_list(key), f"{step}:{os.getpid()}")
        if not redis.delete(race_arm(key)):
            return
        redis.rpush(race_parked(key), str(os.getpid()))
        deadline = time.monotonic() + PATIENCE
        while time.monotonic() < deadline:  # short BLPOPs: the store client's 5 s read timeout
            if redis.blpop([race_done(key)], timeout=1):
                return


# Only in the worker processes (the harness passes them the park settings): the test process
# imports this module too, and its settings are reset around every test anyway.
if os.environ.get("PY_REACTOR_TEST_PARK_DELAY"):
    configure(middleware=[Parks()])


def wait_for(condition: Any, what: str) -> None:
    """Poll ``condition`` (a sibling branch's progress, in Redis) up to ``PATIENCE``."""
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.01)


def parked_on(key: str) -> bool:
    """Some step parked on ``key`` (its park event was told; its park is not written yet)."""
    return bool(client().llen(parks_list(key)))


def meet(key: str, count: int) -> None:
    """A barrier of ``count`` branches across threads (and processes) in Redis."""
    client().incr(f"celery-paths:barrier:{key}")
    wait_for(
        lambda: int(client().get(f"celery-paths:barrier:{key}") or 0) >= count,
        f"{count} branches at the barrier of {key}",
    )


@background
class Ping(Reactor):
    """The workers' warm-up: one job through the module's queue before the first test."""

    @step
    def pong() -> str:
        return "pong"


# ----------------------------------------------------------------------------- park-write race


@background
class LockedStep(Reactor):
    """``charge`` under the lock ``lock_key(key)``."""

    key: str

    @step
    @with_lock(lambda args: lock_key(args["key"]), ttl=30)
    def charge(key: str) -> str:
        record(key, "charge")
        return "charged"

    returns = "charge"


@background
class SlotStep(Reactor):
    """``send`` under a one-slot semaphore on ``slot_key(key)``."""

    key: str

    @step
    @with_semaphore(lambda args: slot_key(args["key"]), limit=1)
    def send(key: str) -> str:
        record(key, "send")
        return "sent"

    returns = "send"


@background
class Nightly(Reactor):
    """``report`` once a day on ``period_key(key)``."""

    key: str

    @step
    @with_period(lambda args: period_key(args["key"]), every="day")
    def report(key: str) -> str:
        record(key, "report")
        return "reported"

    returns = "report"


@background
class OrderedStep(Reactor):
    """``book`` under an ordered lock on ``sequence_key(key)``."""

    key: str

    @step
    @with_ordered_lock(lambda args: sequence_key(args["key"]))
    def book(key: str) -> str:
        record(key, "book")
        return "booked"

    returns = "book"


# ----------------------------------------------------------------------------- parallel


@background
@parallel
class Fanout(Reactor):
    """``a``, ``b``, ``c`` and ``locked`` (the lock ``lock_key(key)``) at once, joined at the
    end. ``a``, ``b`` and ``c`` meet at a barrier; ``a`` then waits until ``locked`` parked, so
    the siblings finish after the park."""

    key: str

    @step
    def a(key: str) -> str:
        record(key, "a")
        meet(key, 3)
        wait_for(lambda: parked_on(lock_key(key)), "the locked branch to park")
        return "a-value"

    @step
    def b(key: str) -> str:
        record(key, "b")
        meet(key, 3)
        return "b-value"

    @step
    def c(key: str) -> str:
        record(key, "c")
        meet(key, 3)
        return "c-value"

    @step
    @with_lock(lambda args: lock_key(args["key"]), ttl=30)
    def locked(key: str) -> str:
        record(key, "locked")
        return "locked-value"

    @step(a=Result("a"), b=Result("b"), c=Result("c"), locked=Result("locked"))
    def join(key: str, a: str, b: str, c: str, locked: str) -> str:
        record(key, "join")
        return "+".join((a, b, c, locked))

    returns = "join"


class Charging(Reactor):
    """Composed in a branch: ``prepare``, then ``charge`` under the lock ``lock_key(key)``."""

    key: str

    @step
    def prepare(key: str) -> str:
        record(key, "prepare")
        return "prepare-value"

    @step(wait_for="prepare")
    @with_lock(lambda args: lock_key(args["key"]), ttl=30)
    def charge(key: str) -> str:
        record(key, "charge")
        return "charge-value"

    returns = "charge"


@background
@parallel
class ComposedPark(Reactor):
    """A composed child (``pay``) parks inside its branch; ``side`` runs beside it."""

    key: str

    pay = compose(Charging)

    @step
    def side(key: str) -> str:
        record(key, "side")
        return "side-value"

    @step(paid=Result("pay"), other=Result("side"))
    def finish(key: str, paid: str, other: str) -> str:
        record(key, "finish")
        return f"{paid}+{other}"

    returns = "finish"


@background
@parallel
class ParkThenFail(Reactor):
    """Once ``done`` completed, ``ordered`` (an ordered lock on ``sequence_key(key)``) and
    ``boom`` start together: ``ordered`` parks out of turn, keeping its position, and ``boom``
    fails after that park (it waits for the park event): the run fails, undoes ``done``, and
    must give the position back.

    Both wait for ``done`` so that ``boom`` is surely running when ``ordered`` parks: once a
    branch parked, the walk starts no new step (``boom`` would never run, and the run would
    stay parked behind the test's position)."""

    key: str

    @step
    def done(key: str) -> str:
        record(key, "done")
        return "done-value"

    @done.undo
    def _undo_done(result: Any, key: str) -> None:
        record(key, "undo done")

    @step(wait_for="done")
    @with_ordered_lock(lambda args: sequence_key(args["key"]))
    def ordered(key: str) -> str:
        record(key, "ordered")
        return "ordered-value"

    @step(wait_for="done")
    def boom(key: str) -> Any:
        record(key, "boom")
        wait_for(lambda: parked_on(sequence_key(key)), "the ordered branch to park")
        return Failure("boom")


# ----------------------------------------------------------------------------- semaphore


@background
class Mailer(Reactor):
    """``digest`` once a day on ``period_key(key)``, then ``send`` under a one-slot semaphore
    on ``slot_key(key)``."""

    key: str

    @step
    @with_period(lambda args: period_key(args["key"]), every="day")
    def digest(key: str) -> str:
        record(key, "digest")
        return "digest"

    @step(wait_for=["digest"])
    @with_semaphore(lambda args: slot_key(args["key"]), limit=1)
    def send(key: str) -> str:
        record(key, "send")
        return "sent"

    returns = "send"


@background
@with_semaphore(lambda args: slot_key(args["key"]), limit=1)
class SlotReactor(Reactor):
    """The whole run under a one-slot semaphore on ``slot_key(key)`` (reactor-level)."""

    key: str

    @step
    def work(key: str) -> str:
        record(key, "work")
        return "worked"

    returns = "work"
