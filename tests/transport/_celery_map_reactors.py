"""Reactors with fanned-out map steps that the Celery map tests send to real worker processes
(``py-reactor worker --import tests.transport._celery_map_reactors``).

They report as ``_celery_reactors`` does (importing it also applies the worker settings the
test passes through the environment): each step appends ``"<what>:<pid>"`` to the list
``celery-test:<key>``. An element's body enters the overlap recorder ``celery-map:<key>``
(``tests._overlap``, counted in Redis across processes), records who owns its lock, and, with
``hold``, blocks until the test pushes to ``celery-test:<key>:go`` (leaving the word there, so
every element held passes once told).
"""

from __future__ import annotations

import time
from typing import Any

from py_reactor import Element, Input, Lock, Reactor, Result, background, map_step, step, with_lock
from py_reactor.config import get_config
from tests._overlap import OverlapRecorder
from tests.transport._celery_reactors import client, record


def card(args: Any) -> str:
    """One lock per element: elements never contend with each other, only with the test."""
    return f"celery-map:{args['key']}:card:{args['amount']}"


def overlap(key: str) -> OverlapRecorder:
    return OverlapRecorder(str(get_config().redis_url), f"celery-map:{key}")


def hold_until_told(key: str, timeout: float = 30) -> None:
    """Block until the test pushes to ``celery-test:<key>:go``, then put the word back."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client().blpop([f"celery-test:{key}:go"], timeout=1):
            client().rpush(f"celery-test:{key}:go", "go")
            return
    raise AssertionError(f"the test never told the elements of {key} to go on")


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
                hold_until_told(key)
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


@background
class Ping(Reactor):
    """The workers' warm-up: one job through the module's queue before the first test."""

    @step
    def pong() -> str:
        return "pong"
