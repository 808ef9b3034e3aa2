"""``py-reactor demo``: step-scoped coordination, live, on background workers.

Three scenes, each on executions dispatched to a worker (the in-process thread worker on the
embedded store by default; with ``--redis-url URL --workers N``, Celery worker processes the
demo starts itself):

A. **Serialized on one key, parallel everywhere else.** Four checkouts share one card. Only
   their ``charge`` step is locked on the card, so the charges run one at a time while the
   reservations and shipments of all four overlap. A checkout that finds the card busy
   *parks* (no thread waits) and the release wakes it.
B. **Parked, then resumed on release.** The demo itself holds a card's lock; a checkout on
   that card parks at ``charge`` (status ``waiting``, ``waiting_on`` names the key); the moment
   the demo lets go, the checkout is woken and completes.
C. **A compensation under the lock.** A declined card fails ``charge``: its ``compensate`` runs
   while the step still holds the card's lock, then the reservation is undone.

The scenes are lettered A-C so they never read as the numbered scenes of ``examples/demo.py``,
which ``scripts/demo.sh`` runs next. A checkout is shown "running charge" only while the card's
lock is held by it (asked of the lock itself); before that it is "waiting for the lock" or
"parked on the lock", so the table never shows two charges at once.

The reactors live here, at module level, so Celery workers import them by ``module:qualname``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from py_reactor.api import Reactor, Step, find
from py_reactor.config import configure
from py_reactor.coordination import Lock
from py_reactor.dsl import Failure, Result, Success, step, with_lock
from py_reactor.dsl.background import background
from py_reactor.runtime.execution import Execution
from py_reactor.states import Status, TraceKind

__all__ = ["STEPS", "Checkout", "main", "run_demo"]

#: Seconds each step of a checkout works (long enough to watch).
WORK = 0.4
#: Seconds a parked checkout waits before it tries again unwoken (the release wakes it sooner).
PARK_DELAY = 5.0
#: The checkout's steps, in order.
STEPS = ("reserve", "charge", "ship")
#: Why ``--workers`` is refused without a server, and what to do.
WORKERS_NEED_URL = (
    "--workers needs a Redis server: Celery workers share one; give --redis-url URL or set "
    "PY_REACTOR_REDIS_URL"
)


def card_key(args: Any) -> str:
    """The lock key of a card, e.g. ``card:4242``: the same for every checkout on that card."""
    return f"card:{args['card']}"


@with_lock(card_key, ttl=30)
class Charge(Step):
    """Charge the card: one charge per card at a time; a card ending in 0000 is declined."""

    card: str
    order: str

    def run(self) -> Any:
        entered = time.time()  # inside the lock: the critical section the demo measures
        time.sleep(WORK)
        if self.inputs.card.endswith("0000"):
            return Failure("card declined by issuer", retryable=False)
        return {"charged": self.inputs.order, "inside": [entered, time.time()]}

    def compensate(self, error: Any) -> Any:
        return Success(f"voided the authorization of {self.inputs.order}")


@background
class Checkout(Reactor):
    """Reserve stock, charge the card (locked on the card alone), ship."""

    order: str
    card: str

    @step
    def reserve(order: str) -> str:
        time.sleep(WORK)
        return f"reserved {order}"

    @reserve.undo
    def _unreserve(result: str, order: str) -> None:
        pass

    charge = step(Charge, wait_for=["reserve"])

    @step(paid=Result("charge"))
    def ship(order: str, paid: dict[str, Any]) -> str:
        time.sleep(WORK)
        return f"shipped {order}"

    returns = "ship"


# -- showing what happens -----------------------------------------------------------------


def describe(
    found: Execution | None, owners: Mapping[str, str | None], held: set[str]
) -> tuple[str, str]:
    """``(status, detail)`` of one execution, as the demo shows it.

    ``owners``: who holds each card's lock right now (asked of the lock); ``held``: the
    executions seen holding their card's lock so far (added to here). A checkout at ``charge``
    is "running" only while it holds the lock: before, it only tries to take it.
    """
    if found is None or found.status == Status.PENDING:
        return Status.PENDING, "queued for the worker"
    if found.status == Status.WAITING and found.waiting_on:
        on = found.waiting_on
        return "parked", (
            f"on the {on['primitive']} {on['key']} at {on['step']} (no thread waits; "
            "the release wakes it)"
        )
    if found.status == Status.RUNNING:
        step_now = next((s for s in STEPS if s not in found.results), "")
        if step_now != "charge":
            return Status.RUNNING, step_now
        key = card_key(found.inputs)
        if owners.get(key) == found.execution_id:
            held.add(found.execution_id)
            return Status.RUNNING, f"charge, holding the lock {key}"
        if found.execution_id in held:  # let go; its result is not stored yet
            return Status.RUNNING, f"charge done, the lock {key} released"
        return "waiting", f"for the lock {key} (to run charge)"
    if found.status == Status.FAILED and found.outcome is not None:
        return Status.FAILED, f"at {getattr(found.outcome, 'step_name', '')}: {found.outcome.error}"
    return found.status, "ran " + ", ".join(s for s in STEPS if s in found.results)


class Display:
    """A live table on a terminal (rich); a line per change otherwise (pipes, tests)."""

    def __init__(self, title: str, live: bool) -> None:
        self.title = title
        self.last: dict[str, tuple[str, str]] = {}
        self.held: set[str] = set()
        self._live: Any = None
        if live:
            try:
                from rich.live import Live
            except ImportError:  # the demo extra is not installed: plain lines
                return
            self._live = Live(refresh_per_second=10, transient=False)

    def __enter__(self) -> Display:
        print(f"\n== {self.title}")
        if self._live is not None:
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def show(self, rows: dict[str, Execution | None]) -> None:
        keys = {card_key(found.inputs) for found in rows.values() if found is not None}
        owners = {key: Lock(key).state().owner for key in keys}
        now = {label: describe(found, owners, self.held) for label, found in rows.items()}
        if self._live is not None:
            from rich.table import Table

            table = Table("checkout", "status", "where")
            for label, (status, detail) in now.items():
                table.add_row(label, status, detail)
            self._live.update(table)
        else:
            changed = [
                (label, state) for label, state in now.items() if self.last.get(label) != state
            ]
            # Who let go of a lock is printed before who took it: read top to bottom, no two
            # checkouts are ever shown holding one lock.
            changed.sort(key=lambda row: "holding the lock" in row[1][1])
            for label, (status, detail) in changed:
                print(f"   {label:<14} {status:<9} {detail}".rstrip())
        self.last = now


def watch(display: Display, ids: dict[str, str], until: Callable[[], bool]) -> None:
    """Refresh ``display`` with the stored state of ``ids`` until ``until()`` (or 60 s)."""
    deadline = time.monotonic() + 60
    while True:
        display.show({label: find(execution_id) for label, execution_id in ids.items()})
        if until() or time.monotonic() > deadline:
            display.show({label: find(execution_id) for label, execution_id in ids.items()})
            return
        time.sleep(0.05)


def ended(ids: Sequence[str]) -> Callable[[], bool]:
    def check() -> bool:
        return all((f := find(i)) is not None and f.outcome is not None for i in ids)

    return check


def _inside(execution_id: str) -> tuple[float, float]:
    """When a checkout's charge was inside its critical section (as its body measured)."""
    found = find(execution_id)
    assert found is not None
    start, end = found.results["charge"]["inside"]
    return float(start), float(end)


def _windows(execution_id: str, name: str) -> tuple[float, float]:
    found = find(execution_id)
    assert found is not None
    entry = next(e for e in found.trace if e["type"] == TraceKind.RUN and e["step"] == name)
    return float(entry["started_at"]), float(entry["finished_at"])


def overlaps(spans: list[tuple[float, float]]) -> int:
    """How many pairs of ``(start, end)`` spans overlap."""
    return sum(
        1 for i, (a0, a1) in enumerate(spans) for b0, b1 in spans[i + 1 :] if a0 < b1 and b0 < a1
    )


# -- the scenes -----------------------------------------------------------------------------


def scene_serialized(live: bool) -> dict[str, Any]:
    """Four checkouts on one card: charges one at a time, the rest in parallel."""
    card = "4242"
    started = time.monotonic()
    outs = {f"order-{n}": Checkout.run(order=f"order-{n}", card=card) for n in range(1, 5)}
    ids = {label: out.execution_id for label, out in outs.items()}
    title = f"A. Four checkouts pay with one card: only their charge step is locked, on card:{card}"
    with Display(title, live) as d:
        watch(d, ids, ended(list(ids.values())))
    took = time.monotonic() - started
    charges = [_inside(i) for i in ids.values()]
    others = [_windows(i, s) for i in ids.values() for s in ("reserve", "ship")]
    parked = sum(1 for i in ids.values() if _parked(i))
    print(
        f"   charges overlapping: {overlaps(charges)} (one at a time); pairs of reserve/ship "
        f"steps overlapping: {overlaps(others)}; checkouts that parked: {parked}; all done in "
        f"{took:.1f} s (with the whole checkout locked: about {4 * 3 * WORK:.1f} s)"
    )
    return {"charge_overlaps": overlaps(charges), "other_overlaps": overlaps(others),
            "parked": parked, "ids": list(ids.values())}  # fmt: skip


def scene_parked(live: bool) -> dict[str, Any]:
    """The demo holds a card's lock; a checkout parks at charge; the release wakes it."""
    card = "1881"
    key = card_key({"card": card})
    title = f"B. The demo itself holds {key}: a checkout parks at charge, the release wakes it"
    with Display(title, live) as d:
        with Lock(key, ttl=30, wait=5):
            out = Checkout.run(order="order-5", card=card)
            ids = {"order-5": out.execution_id}
            watch(d, ids, lambda: (f := find(out.execution_id)) is not None
                  and f.status == Status.WAITING)  # fmt: skip
            time.sleep(0.5)
            print(f"   (the demo releases {key})")
            released = time.monotonic()
        watch(d, ids, ended([out.execution_id]))
    resumed = _inside(out.execution_id)[0]
    found = find(out.execution_id)
    assert found is not None
    wall = time.time() - (time.monotonic() - released)
    print(
        f"   its charge started {max(0.0, resumed - wall) * 1000:.0f} ms after the release: "
        f"woken by the release, not by its {PARK_DELAY:g} s retry timer; status {found.status}"
    )
    return {"status": found.status, "parks": found.parks, "id": out.execution_id}


def scene_compensation(live: bool) -> dict[str, Any]:
    """A declined card: compensate runs under the card's lock, then the undo."""
    card = "0000"
    out = Checkout.run(order="order-6", card=card)
    ids = {"order-6": out.execution_id}
    title = (
        f"C. A card ending in 0000 is declined: charge compensates, still under the lock "
        f"card:{card}"
    )
    with Display(title, live) as d:
        watch(d, ids, ended([out.execution_id]))
    found = find(out.execution_id)
    assert found is not None
    for entry in found.trace:
        if entry["type"] == TraceKind.COMPENSATE:
            under = f", still holding the lock {entry['key']}" if entry.get("key") else ""
            print(f"   rollback: compensate {entry['step']} (voids the authorization){under}")
        elif entry["type"] == TraceKind.UNDO:
            print(f"   rollback: undo {entry['step']} (puts the stock back)")
    compensated = [e for e in found.trace if e["type"] == TraceKind.COMPENSATE]
    return {"status": found.status, "compensate_key": compensated[0].get("key") if compensated
            else None, "id": out.execution_id}  # fmt: skip


def _parked(execution_id: str) -> bool:
    found = find(execution_id)
    return found is not None and any(e["type"] == TraceKind.PARKED for e in found.trace)


# -- running it -----------------------------------------------------------------------------


@contextmanager
def celery_workers(redis_url: str, count: int) -> Iterator[None]:
    """``count`` ``py-reactor worker`` processes that import this module, until the block ends."""
    logs = tempfile.mkdtemp(prefix="py-reactor-demo-")
    processes = []
    for n in range(count):
        log = open(os.path.join(logs, f"worker-{n}.log"), "w")  # noqa: SIM115 - closed below
        command = [sys.executable, "-m", "py_reactor.cli", "worker", "--redis-url", redis_url,
                   "--import", __name__, "--concurrency", "2", "--loglevel", "WARNING"]  # fmt: skip
        processes.append((subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), log))
    try:
        _wait_for_workers(redis_url, count)
        yield
    finally:
        for process, _log in processes:
            process.terminate()
        for process, log in processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
            log.close()


def _wait_for_workers(redis_url: str, count: int) -> None:
    from py_reactor.transport.celery import current_sender

    app = current_sender()  # the app that sends to redis_url (configured by run_demo)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        replies = app.control.ping(timeout=0.5) or []
        if len(replies) >= count:
            return
    raise RuntimeError(f"{count} Celery worker(s) did not start within 60 s")


def run_demo(
    *, redis_url: str | None = None, workers: int = 0, live: bool = False
) -> dict[str, Any]:
    """Run the three scenes; what each showed (for tests and for ``main``)."""
    if redis_url is not None:
        configure(redis_url=redis_url)
    if workers:
        if redis_url is None:
            raise ValueError(WORKERS_NEED_URL)
        configure(worker="celery")
    configure(park_delay=PARK_DELAY, park_jitter=0.0)
    where = f"{workers} Celery worker process(es)" if workers else "the in-process thread worker"
    store = f"the Redis at {redis_url}" if redis_url else "the embedded Redis (no server)"
    print(
        f"py-reactor demo: scenes A-C of step-scoped coordination; the checkouts run on {where},"
        f" on {store}.\nA checkout reserves stock, charges the card (the only step locked on the"
        " card), then ships; a line shows a checkout each time what it does changes."
    )
    if workers:
        with celery_workers(str(redis_url), workers):
            return _scenes(live)
    return _scenes(live)


def _scenes(live: bool) -> dict[str, Any]:
    return {
        "serialized": scene_serialized(live),
        "parked": scene_parked(live),
        "compensation": scene_compensation(live),
    }


def main(args: argparse.Namespace) -> int:
    """``py-reactor demo``."""
    if args.workers and args.redis_url is None:
        raise ValueError(WORKERS_NEED_URL)
    live = sys.stdout.isatty() and not args.plain
    run_demo(redis_url=args.redis_url, workers=args.workers, live=live)
    return 0
