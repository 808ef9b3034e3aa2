"""Module-level reactors for the map_step tests (the background ones run on the thread worker)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from py_reactor import (
    Element,
    Input,
    Reactor,
    Result,
    background,
    map_step,
    step,
    with_lock,
)

#: What the steps did, by test key.
LOG: dict[str, list[str]] = {}

#: ``WITHIN[key](amount)``: a context the charge body of ``amount`` runs inside, under the card
#: lock (a test records who is inside, and who holds the lock).
WITHIN: dict[str, Callable[[int], AbstractContextManager[object]]] = {}


def log(key: str, what: str) -> None:
    LOG.setdefault(key, []).append(what)


class ChargeOne(Reactor):
    """One element: charge ``amount`` (an amount of 13 is declined)."""

    key: str
    amount: int
    currency: str = "eur"

    @step
    @with_lock(lambda a: f"{a['key']}:card", ttl=30)
    def charge(key: str, amount: int, currency: str) -> str:
        with WITHIN.get(key, nullcontext)(amount):
            log(key, f"charge {amount}")
        if amount == 13:
            raise ValueError(f"declined {amount}")
        return f"{amount} {currency}"

    @charge.undo
    def _refund(result: str, key: str, amount: int, currency: str) -> None:
        log(key, f"refund {amount}")

    returns = "charge"


class Charges(Reactor):
    key: str
    items: list[int]
    fail_after: bool = False

    @step
    def open_batch(key: str) -> str:
        log(key, "open")
        return "batch"

    @open_batch.undo
    def _close(result: str, key: str) -> None:
        log(key, "close")

    charges = map_step(
        ChargeOne, source=Input("items"), amount=Element("charges"), wait_for=["open_batch"]
    )

    @step(paid=Result("charges"))
    def settle(key: str, paid: list[str], fail_after: bool) -> list[str]:
        if fail_after:
            raise RuntimeError("settlement failed")
        return paid

    returns = "settle"


class Collects(Reactor):
    key: str
    items: list[int]

    charges = map_step(ChargeOne, source=Input("items"), mode="collect", amount=Element("charges"))
    returns = "charges"


class FromRecords(Reactor):
    """Elements from a function of the inputs; each element's field and a transform."""

    key: str
    count: int

    lines = map_step(
        ChargeOne,
        source=lambda inputs: [{"cents": 100 * n} for n in range(1, inputs["count"] + 1)],
        amount=Element("lines", "cents", transform=lambda c: c // 100),
        currency=Input("key", transform=lambda _: "usd"),
    )
    returns = "lines"


@background
class BgCharges(Charges):
    pass


@background
class BgCollects(Collects):
    pass


class FanCharges(Charges):
    """The same map fanned out (three elements in flight): every element takes the one card
    lock ``<key>:card`` in its own job, so they take turns, parking on it in their workers."""

    charges = map_step(
        ChargeOne,
        source=Input("items"),
        fan_out=True,
        batch_size=3,
        amount=Element("charges"),
        wait_for=["open_batch"],
    )
