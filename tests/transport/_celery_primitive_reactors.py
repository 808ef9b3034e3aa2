"""Reactors with step-level semaphore, ordered lock, rate limit and period, and locked steps
that roll back, that the Celery primitive tests send to real worker processes
(``py-reactor worker --import tests.transport._celery_primitive_reactors``).

They report as ``_celery_reactors`` does, through ``_worker_side`` (and apply the worker
settings their test passes through the environment): each step appends ``"<what>:<pid>"`` to
the list ``celery-test:<key>``, and a body that must wait for the test blocks on
``celery-test:<key>:go`` (and leaves the word there: the test may also say it in advance). A
body (or a rollback hook) working under a primitive enters the overlap recorder
``celery-primitives:<account>`` (``tests._overlap``) while it works.
"""

from __future__ import annotations

import time
from typing import Any

from py_reactor import (
    Lock,
    Reactor,
    background,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
    with_rate_limit,
    with_semaphore,
)
from py_reactor.config import get_config
from tests._overlap import OverlapRecorder
from tests.transport._worker_side import apply_settings, client, hold_until_told, record

apply_settings()  # the settings the test gave this worker process

#: The rate limits' window (seconds): long enough for two runs to reach their step in one.
WINDOW = 6
#: The patient rate limit's ``wait``: it covers any ``retry_after`` of its window.
PATIENCE = WINDOW + 4
#: The ttl of the account locks; a step's undo waits this long to re-take its lock.
LOCK_TTL = 20


def overlap(account: str) -> OverlapRecorder:
    return OverlapRecorder(str(get_config().redis_url), f"celery-primitives:{account}")


def slot_key(account: str) -> str:
    return f"celery-primitives:slots:{account}"


def sequence_key(account: str) -> str:
    return f"celery-primitives:sequence:{account}"


def api_key(api: str) -> str:
    return f"celery-primitives:api:{api}"


def digest_key(job: str) -> str:
    return f"celery-primitives:digest:{job}"


def lock_key(account: str) -> str:
    return f"celery-primitives:acct:{account}"


def owner_of(account: str) -> str | None:
    """Who holds ``account``'s lock now (read from the store, as any process could)."""
    return Lock(lock_key(account)).state().owner


def _work(key: str, account: str) -> str:
    """Inside the overlap recorder: record, then wait for the test."""
    with overlap(account).inside(key):
        record(key, "work")
        hold_until_told(key, keep=True)
    return key


@background
class Ping(Reactor):
    """The workers' warm-up: one job through the module's queue before the first test."""

    @step
    def pong() -> str:
        return "pong"


# ----------------------------------------------------------------------------- semaphore


@background
class OneSlot(Reactor):
    """``work`` under a step-level semaphore of one slot on ``account``."""

    key: str
    account: str

    @step
    @with_semaphore(lambda args: slot_key(args["account"]), limit=1)
    def work(key: str, account: str) -> str:
        return _work(key, account)

    returns = "work"


@background
class TwoSlots(Reactor):
    """``work`` under a step-level semaphore of two slots on ``account``."""

    key: str
    account: str

    @step
    @with_semaphore(lambda args: slot_key(args["account"]), limit=2)
    def work(key: str, account: str) -> str:
        return _work(key, account)

    returns = "work"


# ----------------------------------------------------------------------------- ordered lock


@background
class Booking(Reactor):
    """``arrive``, then ``book`` under a step-level ordered lock on ``account``: the position is
    taken on arrival at ``book``; inside, it appends ``position`` to
    ``celery-primitives:<account>:order`` and waits for the test."""

    key: str
    account: str
    position: int

    @step
    def arrive(key: str) -> str:
        record(key, "arrive")
        return "arrived"

    @step(wait_for=["arrive"])
    @with_ordered_lock(lambda args: sequence_key(args["account"]))
    def book(key: str, account: str, position: int) -> int:
        with overlap(account).inside(key):
            client().rpush(f"celery-primitives:{account}:order", position)
            hold_until_told(key, keep=True)
        return position

    returns = "book"


# ----------------------------------------------------------------------------- rate limit


@background
class Metered(Reactor):
    """``call``, rate limited to one a ``WINDOW`` on ``api`` (``wait=0``); its value is the
    time it ran (this machine's clock, which is the test redis-server's)."""

    key: str
    api: str

    @step
    @with_rate_limit(lambda args: api_key(args["api"]), limit=1, period=WINDOW)
    def call(key: str, api: str) -> float:
        record(key, "call")
        return time.time()

    returns = "call"


@background
class PatientMetered(Reactor):
    """``call`` as ``Metered``'s, declared with a ``wait`` longer than its window: in a
    caller it would sleep through a full window; in a worker it must park instead."""

    key: str
    api: str

    @step
    @with_rate_limit(lambda args: api_key(args["api"]), limit=1, period=WINDOW, wait=PATIENCE)
    def call(key: str, api: str) -> float:
        record(key, "call")
        return time.time()

    returns = "call"


# ----------------------------------------------------------------------------- period


@background
class Digest(Reactor):
    """``digest`` once a day per ``job`` (step-level period; it waits for the test inside),
    then ``after``, which runs either way."""

    key: str
    job: str

    @step
    @with_period(lambda args: digest_key(args["job"]), every="day")
    def digest(key: str, job: str) -> str:
        record(key, "digest")
        hold_until_told(key, keep=True)
        return "digested"

    @step(wait_for=["digest"])
    def after(key: str) -> str:
        record(key, "after")
        return "after"

    returns = "after"


# ----------------------------------------------------------------------------- rollback


@background
class HoldAccount(Reactor):
    """``hold`` takes ``account``'s lock and waits for the test inside (recording the owner)."""

    key: str
    account: str

    @step
    @with_lock(lambda args: lock_key(args["account"]), ttl=LOCK_TTL)
    def hold(key: str, account: str) -> str:
        with overlap(account).inside(f"{key} hold"):
            record(key, f"hold owner={owner_of(account)}")
            hold_until_told(key, keep=True)
        return "held"

    returns = "hold"


@background
class ChargeThenFail(Reactor):
    """``charge`` under a step-level lock on ``account`` completes; ``ship`` waits for the test
    and fails: the rollback undoes ``charge`` under its lock, re-taken (the undo records the
    lock's owner and waits for ``<key>:undo``)."""

    key: str
    account: str

    @step
    @with_lock(lambda args: lock_key(args["account"]), ttl=LOCK_TTL)
    def charge(key: str, account: str) -> str:
        with overlap(account).inside(f"{key} charge"):
            record(key, "charge")
        return "charged"

    @charge.undo
    def refund(result: str, key: str, account: str) -> None:
        with overlap(account).inside(f"{key} undo"):
            record(key, f"undo owner={owner_of(account)}")
            hold_until_told(f"{key}:undo", keep=True)

    @step(wait_for=["charge"])
    def ship(key: str) -> str:
        record(key, "ship")
        hold_until_told(key, keep=True)
        raise RuntimeError("shipping failed")

    returns = "ship"


@background
class ChargeFails(Reactor):
    """``charge`` under a step-level lock on ``account`` waits for the test, then fails: its
    compensate runs under the lock the work kept (it records the lock's owner and waits for
    ``<key>:compensate``)."""

    key: str
    account: str

    @step
    @with_lock(lambda args: lock_key(args["account"]), ttl=LOCK_TTL)
    def charge(key: str, account: str) -> str:
        with overlap(account).inside(f"{key} charge"):
            record(key, "charge")
            hold_until_told(key, keep=True)
        raise RuntimeError("card declined")

    @charge.compensate
    def refund(error: Any, key: str, account: str) -> None:
        with overlap(account).inside(f"{key} compensate"):
            record(key, f"compensate owner={owner_of(account)}")
            hold_until_told(f"{key}:compensate", keep=True)

    returns = "charge"
