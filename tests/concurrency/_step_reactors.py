"""Steps, reactors and process entry points for the step-level concurrency tests.

They live at module level in a module of their own so that ``spawn`` children can import them
by name. Every step body records its stay in an ``OverlapRecorder`` named ``<name>-<step>``
(rebuilt in each process from the URL and name the reactor receives as inputs), labelled with
the run's root id (a fresh id in inline steps, which have no context), so the test process
counts threads and processes together.

Cross-process barriers cannot travel as reactor inputs: ``run_many`` stores the ones it receives
in ``BARRIERS`` of its own process before any run starts, and the step bodies wait on them there.
"""

from __future__ import annotations

import functools
import time
import traceback
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from py_reactor import (
    Reactor,
    Step,
    configure,
    step,
    with_lock,
    with_period,
    with_rate_limit,
    with_semaphore,
)
from tests._overlap import OverlapRecorder

__all__ = [
    "BARRIERS",
    "RATE_LIMIT",
    "REACTORS",
    "SEMAPHORE_LIMIT",
    "Seen",
    "describe",
    "run_many",
]

#: Cross-process barriers of this process, by name ("meet", "pair"), set by ``run_many``.
BARRIERS: dict[str, Any] = {}

#: Seconds any step body waits at a barrier before giving up (and so failing its run).
BARRIER_TIMEOUT = 20.0

#: Seconds a coordinated step body works: long enough for a rival let in by mistake to be seen.
HOLD = 0.02

#: Seconds the daily step works: its rivals are all waiting at its lock or period meanwhile.
DAILY_HOLD = 0.2

#: Slots of the step semaphore.
SEMAPHORE_LIMIT = 2

#: Step bodies admitted per minute by the step rate limit.
RATE_LIMIT = 5


class Seen(NamedTuple):
    """An outcome as plain data, picklable back to the test process."""

    status: str
    error: str | None  # the error's class name, or the halt reason
    step: str | None  # the step that failed or halted the run
    skipped: tuple[str, ...]  # "<step>:<reason>" of every skipped step, in order


def describe(outcome: Any) -> Seen:
    """What the test process needs of an outcome."""
    skipped = tuple(
        f"{entry['step']}:{entry['reason']}"
        for entry in outcome.context.trace
        if entry["type"] == "skipped"
    )
    if outcome.status == "failed":
        return Seen(outcome.status, type(outcome.error).__name__, outcome.step_name, skipped)
    if outcome.status == "halted":
        return Seen(outcome.status, outcome.reason, outcome.step_name, skipped)
    return Seen(outcome.status, None, None, skipped)


@functools.cache
def recorder(url: str, name: str) -> OverlapRecorder:
    """One recorder per (url, name) in this process, so its connection is reused."""
    return OverlapRecorder(url, name)


def by_key(args: Mapping[str, Any]) -> str:
    """Every coordinated step here uses its resolved ``key`` argument as its key."""
    return str(args["key"])


def stay(step_name: str, label: str, url: str, name: str, *, hold: float = 0.0) -> str:
    """Record a stay of ``hold`` seconds inside ``<name>-<step_name>``; returns ``label``."""
    with recorder(url, f"{name}-{step_name}").inside(label):
        if hold:
            time.sleep(hold)  # the work itself: it takes this long
    return label


def meet_at(
    barrier: str, step_name: str, label: str, url: str, name: str, *, hold: float = 0.0
) -> str:
    """Stay inside ``<name>-<step_name>``: meet ``barrier``'s parties, then work ``hold``."""
    with recorder(url, f"{name}-{step_name}").inside(label):
        BARRIERS[barrier].wait(BARRIER_TIMEOUT)
        if hold:
            time.sleep(hold)  # still inside: a rival let in by mistake would be seen with us
    return label


# -- steps -------------------------------------------------------------------------------------


class Meet(Step):
    """Not coordinated: every runner of a round is inside at once, meeting at ``"meet"``."""

    key: str
    url: str
    name: str

    def run(self) -> Any:
        return meet_at("meet", "meet", self.context.root_id, self.inputs.url, self.inputs.name)


@with_lock(by_key, wait=60)
class Exclusive(Step):
    """Locked on its ``key``: works ``HOLD`` seconds, alone across every process and thread."""

    key: str
    url: str
    name: str

    def run(self) -> Any:
        return stay("exclusive", self.context.root_id, self.inputs.url, self.inputs.name, hold=HOLD)


@with_rate_limit(by_key, limit=RATE_LIMIT, period="minute")
class Send(Step):
    """Rate limited on its ``key``: ``RATE_LIMIT`` bodies a minute, whichever process calls."""

    key: str
    url: str
    name: str

    def run(self) -> Any:
        return stay("send", self.context.root_id, self.inputs.url, self.inputs.name)


class Prepare(Step):
    """Not coordinated: runs before the coordinated step, in every run."""

    url: str
    name: str

    def run(self) -> Any:
        return stay("prepare", self.context.root_id, self.inputs.url, self.inputs.name)


class After(Step):
    """Not coordinated: runs after the coordinated step, whatever that step did."""

    url: str
    name: str

    def run(self) -> Any:
        return stay("after", self.context.root_id, self.inputs.url, self.inputs.name)


# -- reactors ----------------------------------------------------------------------------------


class MeetThenLock(Reactor):
    """``meet`` (free, everyone at once), then ``exclusive`` (one at a time on ``key``)."""

    key: str
    url: str
    name: str
    meet = step(Meet)
    exclusive = step(Exclusive, wait_for="meet")
    returns = "exclusive"


class MeetThenPair(Reactor):
    """``meet`` (free), then ``pair``: an inline step with a 2-slot semaphore on ``key``.

    Inside ``pair`` the holders meet two by two at the ``"pair"`` barrier: two holders are
    certain to be inside together, and a third let in by mistake is inside with them.
    """

    key: str
    url: str
    name: str
    meet = step(Meet)

    @step(wait_for="meet")
    @with_semaphore(by_key, limit=SEMAPHORE_LIMIT, wait=60)
    def pair(key: str, url: str, name: str) -> str:
        return meet_at("pair", "pair", uuid.uuid4().hex, url, name, hold=HOLD)


class PrepareThenSend(Reactor):
    """``prepare`` (free), then ``send`` (rate limited on ``key``)."""

    key: str
    url: str
    name: str
    prepare = step(Prepare)
    send = step(Send, wait_for="prepare")
    returns = "send"


class MeetThenDaily(Reactor):
    """``meet`` (free, racers at once), ``daily`` (once a day, under a lock), then ``after``."""

    key: str
    url: str
    name: str
    meet = step(Meet)
    after = step(After, wait_for="daily")

    @with_lock(by_key, wait=60)
    @step(wait_for="meet")
    @with_period(by_key, every="day")
    def daily(key: str, url: str, name: str) -> str:
        return stay("daily", uuid.uuid4().hex, url, name, hold=DAILY_HOLD)


#: The reactors above by name, so process entry points receive a plain string.
REACTORS: dict[str, type[Reactor]] = {
    cls.__name__: cls for cls in (MeetThenLock, MeetThenPair, PrepareThenSend, MeetThenDaily)
}


def run_many(
    url: str,
    reactor: str,
    key: str,
    name: str,
    runs: int,
    start: Any,
    results: Any,
    barriers: Mapping[str, Any],
    threads: int = 1,
) -> None:
    """Process entry point: run ``reactor`` ``runs`` times in each of ``threads`` threads.

    Every thread waits at ``start`` (a cross-process Barrier) first. ``barriers`` are the
    cross-process barriers the step bodies meet at, by name. Puts ``("ok", [Seen, ...])`` on
    ``results`` (every thread's outcomes), or ``("error", traceback)``.
    """
    try:
        configure(redis_url=url)
        BARRIERS.update(barriers)
        cls = REACTORS[reactor]

        def work(_: int) -> list[Seen]:
            start.wait(60)
            return [describe(cls.run(key=key, url=url, name=name)) for _ in range(runs)]

        with ThreadPoolExecutor(threads) as pool:
            seen = [s for batch in pool.map(work, range(threads)) for s in batch]
        results.put(("ok", seen))
    except BaseException:
        results.put(("error", traceback.format_exc()))
