"""Reactors with fanned-out map steps that the Celery map tests send to real worker processes
(``py-reactor worker --import tests.transport._celery_map_reactors``).

They report as ``_celery_reactors`` does, through ``_worker_side`` (and apply the worker
settings their test passes through the environment): each step appends ``"<what>:<pid>"`` to
the list ``celery-test:<key>``. An element's body enters the overlap recorder
``celery-map:<key>`` (``tests._overlap``, counted in Redis across processes), records who owns
its lock, and, with ``hold``, blocks until the test pushes to ``celery-test:<key>:go`` (leaving
the word there, so every element held passes once told).
"""

from __future__ import annotations

import time
from typing import Any

from py_reactor import Element, Input, Lock, Reactor, Result, background, map_step, step, with_lock
from py_reactor.config import get_config
from tests._overlap import OverlapRecorder
from tests.transport._worker_side import apply_settings, hold_until_told, record

apply_settings()  # the settings the test gave this worker process


def card(args: Any) -> str:
    """One lock per element: elements never contend with each other, only with the test."""
    return f"celery-map:{args['key']}:card:{args['amount']}"


def overlap(key: str) -> OverlapRecorder:
    return OverlapRecorder(str(get_config().redis_url), f"celery-map:{key}")


class ChargeOne(Reactor):
    """One element: charge ``amount`` under its card's lock (13 is declined)."""

    key: str
    amount: int
    hold: bool = False

    @step
    @with_lock(card, ttl=30, wait=5)
    def charge(key: str, amount: int, hold: bool) -> str:
        with overlap(key).inside(str(amount)):
            owner = Lock(card({"key": key, "amount": amount})).state().owner
            record(key, f"charge {amount} owner={owner}")
            if hold:
                hold_until_told(key, keep=True)
        if amount == 13:
            raise ValueError(f"declined {amount}")
        return f"{amount} eur"

    @charge.compensate
    def _void(error: Exception, key: str, amount: int, hold: bool) -> None:
        record(key, f"compensate {amount}")

    @charge.undo
    def _refund(result: str, key: str, amount: int, hold: bool) -> None:
        record(key, f"refund {amount}")

    returns = "charge"


class Charges(Reactor):
    """``open_batch``, the fanned-out map (three in flight), then ``settle``."""

    key: str
    items: list[int]
    hold: bool = False

    @step
    def open_batch(key: str) -> str:
        record(key, "open")
        return "batch"

    @open_batch.undo
    def _close(result: str, key: str) -> None:
        record(key, "close")

    charges = map_step(
        ChargeOne,
        source=Input("items"),
        fan_out=True,
        batch_size=3,
        amount=Element("charges"),
        wait_for=["open_batch"],
    )

    @step(paid=Result("charges"))
    def settle(key: str, paid: list[str]) -> list[str]:
        record(key, "settle")
        return paid

    returns = "settle"


class Collects(Reactor):
    key: str
    items: list[int]
    hold: bool = False

    charges = map_step(
        ChargeOne,
        source=Input("items"),
        mode="collect",
        fan_out=True,
        batch_size=3,
        amount=Element("charges"),
    )
    returns = "charges"


@background
class BgPairs(Reactor):
    """The whole run in a worker process; its map keeps at most two elements in flight."""

    key: str
    items: list[int]
    hold: bool = False

    charges = map_step(
        ChargeOne, source=Input("items"), fan_out=True, batch_size=2, amount=Element("charges")
    )
    returns = "charges"


def shared_card(args: Any) -> str:
    """One lock for every element of the run keyed ``key``: its elements contend on it."""
    return f"celery-map:{args['key']}:card"


class ChargeShared(Reactor):
    """One element on the run's shared card: inside the overlap recorder, records who owns
    the card, and stays ``SHARED_HOLD`` s (the window an overlap would show in)."""

    key: str
    amount: int

    @step
    @with_lock(shared_card, ttl=30)
    def charge(key: str, amount: int) -> str:
        with overlap(key).inside(str(amount)):
            owner = Lock(shared_card({"key": key})).state().owner
            record(key, f"charge {amount} owner={owner}")
            time.sleep(SHARED_HOLD)
        return f"{amount} eur"

    returns = "charge"


#: How long an element of ``BgShared`` stays inside, holding the shared card (seconds).
SHARED_HOLD = 0.2


@background
class BgShared(Reactor):
    """The whole run in a worker process; its four elements in flight at once, all on one
    card (each in a job of its own)."""

    key: str
    items: list[int]

    charges = map_step(
        ChargeShared, source=Input("items"), fan_out=True, batch_size=4, amount=Element("charges")
    )
    returns = "charges"


@background
class Ping(Reactor):
    """The workers' warm-up: one job through the module's queue before the first test."""

    @step
    def pong() -> str:
        return "pong"
