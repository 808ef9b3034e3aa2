"""Module-level reactors for the fan-out map tests on the thread worker
(``tests/runtime/test_map_fan_out.py``).

Each element is its own execution, found by a worker thread by ``module:qualname``, so the
child reactor lives here. The elements run on this process's worker threads, so they report
through module-level state: ``LOG[key]`` (what ran, in order), the overlap recorder
``fan-out:<key>`` (who was inside an element's body at once, counted in Redis), and
``GATES[key][amount]`` (an element whose amount has a gate waits for the test to set it),
``SPIES[key]`` (called inside the body, under the element's lock).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

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
from py_reactor.config import get_config
from tests._overlap import OverlapRecorder

#: What the steps did, by test key (appends from several threads: list.append is atomic).
LOG: dict[str, list[str]] = {}
#: Events the test sets to let an element go on, by test key and element amount.
GATES: dict[str, dict[int, threading.Event]] = {}
#: Called with the amount inside an element's body (under its lock), by test key.
SPIES: dict[str, Callable[[int], None]] = {}


def log(key: str, what: str) -> None:
    LOG.setdefault(key, []).append(what)


def overlap(key: str) -> OverlapRecorder:
    """The recorder of the element bodies of ``key``'s test (the session's private server)."""
    return OverlapRecorder(str(get_config().redis_url), f"fan-out:{key}")


def gate(key: str, amount: int) -> threading.Event:
    """The gate element ``amount`` of ``key``'s test waits on (created closed)."""
    return GATES.setdefault(key, {}).setdefault(amount, threading.Event())


def card(args: dict[str, object]) -> str:
    """One lock per element: elements never contend with each other, only with the test."""
    return f"{args['key']}:card:{args['amount']}"


class ChargeOne(Reactor):
    """One element: charge ``amount`` under its card's lock (13 is declined, after its
    compensate logs); it waits inside its body while the test holds its gate closed."""

    key: str
    amount: int

    @step
    @with_lock(card, ttl=30, wait=5)
    def charge(key: str, amount: int) -> str:
        with overlap(key).inside(str(amount)):
            log(key, f"charge {amount}")
            spy = SPIES.get(key)
            if spy is not None:
                spy(amount)
            waiting = GATES.get(key, {}).get(amount)
            if waiting is not None and not waiting.wait(30):
                raise AssertionError(f"the gate of element {amount} was never opened")
        if amount == 13:
            raise ValueError(f"declined {amount}")
        return f"{amount} eur"

    @charge.compensate
    def _void(error: Exception, key: str, amount: int) -> None:
        log(key, f"compensate {amount}")

    @charge.undo
    def _refund(result: str, key: str, amount: int) -> None:
        log(key, f"refund {amount}")

    returns = "charge"


class Charges(Reactor):
    """``open_batch``, the fanned-out map (windows of 2), then ``settle`` (fails on
    ``fail_after``)."""

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
        ChargeOne,
        source=Input("items"),
        fan_out=True,
        batch_size=2,
        amount=Element("charges"),
        wait_for=["open_batch"],
    )

    @step(paid=Result("charges"))
    def settle(key: str, paid: list[str], fail_after: bool) -> list[str]:
        if fail_after:
            raise RuntimeError("settlement failed")
        return paid

    returns = "settle"


class Threes(Charges):
    """The same, three elements in flight at most."""

    charges = map_step(
        ChargeOne,
        source=Input("items"),
        fan_out=True,
        batch_size=3,
        amount=Element("charges"),
        wait_for=["open_batch"],
    )


class Collects(Reactor):
    key: str
    items: list[int]

    charges = map_step(
        ChargeOne, source=Input("items"), mode="collect", fan_out=True, amount=Element("charges")
    )
    returns = "charges"


@background
class BgCharges(Charges):
    """The whole run in a worker: the map step fans out from there (windows of 2)."""


@background
class BgOneAtATime(Charges):
    """In a worker, one element in flight at a time: the run parks on each element."""

    charges = map_step(
        ChargeOne,
        source=Input("items"),
        fan_out=True,
        batch_size=1,
        amount=Element("charges"),
        wait_for=["open_batch"],
    )


@with_lock(lambda inputs: f"{inputs['key']}:card:2", ttl=30, wait=0)
class HoldsACard(Reactor):
    """Holds element 2's card (reactor-level) while its map fans out: element 2 would wait
    for this execution, which waits for it."""

    key: str
    items: list[int]

    @step
    def open_batch(key: str) -> str:
        log(key, "open")
        return "batch"

    @open_batch.undo
    def _close(result: str, key: str) -> None:
        log(key, "close")

    charges = map_step(
        ChargeOne,
        source=Input("items"),
        fan_out=True,
        amount=Element("charges"),
        wait_for=["open_batch"],
    )


class ReserveThenFail(Reactor):
    """One element whose ``reserve`` completes and whose undo breaks, then ``charge`` fails:
    its own rollback reports the broken undo."""

    key: str
    amount: int

    @step
    def reserve(key: str, amount: int) -> str:
        return f"hold {amount}"

    @reserve.undo
    def _unreserve(result: str, key: str, amount: int) -> None:
        raise RuntimeError(f"could not release {result}")

    @step(wait_for=["reserve"])
    def charge(key: str, amount: int) -> str:
        raise ValueError(f"declined {amount}")


class BrokenUndo(Reactor):
    key: str
    items: list[int]

    charges = map_step(
        ReserveThenFail, source=Input("items"), fan_out=True, amount=Element("charges")
    )
