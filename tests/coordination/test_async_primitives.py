"""The coordination primitives entered from coroutines, against a real Redis.

Many tasks share one event loop (and, where stated, a thread or another OS process takes part
too). What is claimed: every primitive keeps its guarantee when entered with ``async with`` or
``await ....aacquire()`` (exclusion, ``limit``, once per bucket, the window's limit, the order
of positions); a wait is awaited on the loop, never blocking it (a ticker task keeps running);
a hand-off from or to a thread or another process arrives promptly (well under the ttl); a
timed-out or cancelled waiter leaves nothing behind; and the plain blocking entries refuse to
run on a loop, naming ``async with``.

Each ``asyncio.run`` ends with ``close_loop_resources()`` (see ``run``): pytest turns an
unclosed connection's ResourceWarning into a failure.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from types import TracebackType
from typing import Any, TypeVar

import pytest
import redis

from py_reactor import configure, with_lock
from py_reactor.aio import call
from py_reactor.coordination import (
    Lock,
    LockHold,
    OrderedLock,
    Period,
    PeriodClaim,
    Position,
    RateLimit,
    Semaphore,
    SemaphoreHold,
)
from py_reactor.errors import LockAcquisitionError, RateLimitExceededError
from py_reactor.storage import current_store, keys
from tests._aio import run
from tests._overlap import OverlapRecorder
from tests._redis import PrivateRedis
from tests.concurrency._spawn import SPAWN
from tests.coordination._helpers import Recording, in_one_window, in_thread, join_all, leave_room

T = TypeVar("T")

#: The longest a ticker task may go without running while tasks wait (seconds). A wait that
#: blocked the loop would stop it for the whole wait: a holder's release cannot even run then,
#: so the waiter would sleep until its capped BLPOP timed out (2 s).
MAX_GAP = 0.3

#: How soon a release must reach a waiter (seconds): the ttls here are 30 s, and a waiter the
#: release failed to wake would only notice on its next capped sleep (up to 2 s later).
PROMPT = 1.0


@pytest.fixture(autouse=True)
def _server(_default_settings: None, redis_url: str) -> None:
    """Every test uses the session's private redis-server as its store."""
    configure(redis_url=redis_url)


@pytest.fixture
def raw(private_redis: PrivateRedis) -> Iterator[redis.Redis]:
    """A plain client of the private server (overrides this folder's, which is parametrized
    over the embedded store too)."""
    client = private_redis.client()
    yield client
    client.close()


# ----------------------------------------------------------------------------- helpers


async def eventually(
    probe: Callable[[], Awaitable[T]], what: str, timeout: float = 10.0, every: float = 0.005
) -> T:
    """Await ``probe()`` until it gives a truthy value (polling state only Redis shows)."""
    deadline = time.monotonic() + timeout
    while not (value := await probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting until {what} ({value!r})")
        await asyncio.sleep(every)
    return value


async def lock_waiters(lock: Lock) -> int:
    """How many waiters the lock's queue holds (the read awaited on the loop)."""
    return (await call(lock.state)).waiters


class Ticker:
    """A task that wakes every ``every`` seconds while the block runs: ``max_gap`` is the
    longest it went without running (how long the loop was blocked, plus ``every``)."""

    def __init__(self, every: float = 0.01) -> None:
        self.every = every
        self.ticks = 0
        self.max_gap = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(self.every)
            now = time.monotonic()
            self.max_gap = max(self.max_gap, now - last)
            self.ticks += 1
            last = now

    async def __aenter__(self) -> Ticker:
        self._task = asyncio.create_task(self._run())
        await asyncio.sleep(0)  # let it start
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._task is not None
        self._task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self._task

    def check(self) -> None:
        """The loop kept running: the ticker ran, and never stalled for long."""
        assert self.ticks > 0, "the ticker never ran"
        assert self.max_gap < MAX_GAP, f"the loop was blocked for {self.max_gap:.3f} s"


class Inside:
    """Who is inside a section right now, and the most seen at once (tasks of one loop)."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.entries = 0

    def enter(self) -> None:
        self.now += 1
        self.entries += 1
        self.most = max(self.most, self.now)

    def leave(self) -> None:
        self.now -= 1


def blocked_in_blpop(client: redis.Redis) -> int:
    """How many connections of the server are blocked in a BLPOP right now."""
    return sum(1 for c in client.client_list() if c["cmd"] == "blpop" and "b" in c["flags"])


def wake_lists(client: redis.Redis, primitive: str, key: str) -> list[str]:
    """The wake lists of ``key``'s waiters that still hold a signal."""
    return [name for name in client.scan_iter(keys.pattern(primitive, key)) if ":wake:" in name]


# -- cross-process children (module level: a spawned child imports them by name) -------------


def _hold_in_child(url: str, key: str, recorder: OverlapRecorder, held: Any, let_go: Any) -> None:
    """Child process: take the lock, be inside until told to let go, then release."""
    configure(redis_url=url)
    with Lock(key, ttl=30), recorder.inside("process"):
        held.set()
        if not let_go.wait(30):
            raise RuntimeError("never told to let go")


def _cycle_in_child(url: str, key: str, recorder: OverlapRecorder, cycles: int, go: Any) -> None:
    """Child process: ``cycles`` times take the lock and record being inside it."""
    configure(redis_url=url)
    if not go.wait(60):
        raise RuntimeError("never told to start")
    for n in range(cycles):
        with Lock(key, ttl=30, wait=30), recorder.inside(f"process {n}"):
            time.sleep(0.001)


# ----------------------------------------------------------------------------- 1, 2: Lock


def test_tasks_on_one_loop_exclude_each_other_and_the_loop_keeps_ticking(key: str) -> None:
    """Eight tasks entering one ``Lock`` object with ``async with`` are inside one at a time,
    all get in, each releases its own hold (per-task stacks), and the loop runs throughout:
    the waits are awaited, not blocking."""
    lock = Lock(key, ttl=30, wait=30)
    inside = Inside()
    holds: list[LockHold] = []

    async def worker() -> None:
        async with lock as hold:
            inside.enter()
            await asyncio.sleep(0.02)
            assert not hold.released, "another task's exit released this task's hold"
            inside.leave()
        holds.append(hold)

    async def main() -> Ticker:
        async with Ticker() as ticker:
            await asyncio.gather(*(worker() for _ in range(8)))
        return ticker

    started = time.monotonic()
    ticker = run(main)
    assert inside.most == 1
    assert inside.entries == 8
    assert time.monotonic() - started >= 8 * 0.02  # one after the other
    assert all(hold.released for hold in holds)
    assert len({hold.owner for hold in holds}) == 8  # a fresh owner per acquisition
    ticker.check()
    state = lock.state()
    assert (state.owner, state.waiters) == (None, 0)


def test_fencing_tokens_strictly_increase_across_async_holders(key: str) -> None:
    """Whether a hold is taken free, handed over by a release or taken after a wait, each
    fresh holder's fencing token is larger than every earlier holder's."""
    lock = Lock(key, ttl=30, wait=30)
    tokens: list[int] = []

    async def worker() -> None:
        async with lock as hold:
            tokens.append(hold.fencing_token)  # in the order the holders got in
            await asyncio.sleep(0.005)

    async def main() -> None:
        await asyncio.gather(*(worker() for _ in range(6)))  # contended: hand-offs
        for _ in range(3):  # uncontended: taken free
            hold = await lock.aacquire()
            async with hold:  # a hold is its own async context manager: released on exit
                tokens.append(hold.fencing_token)
            assert hold.released

    run(main)
    assert len(tokens) == 9
    assert all(a < b for a, b in itertools.pairwise(tokens)), tokens


def test_the_same_owner_reenters_a_held_lock_from_a_coroutine(key: str) -> None:
    """``Lock(key, owner=o)`` entered again by ``o`` nests (count 2, the same token) instead of
    waiting; another owner is kept out until the outermost level is released. Nested entries
    of one lock object unwind innermost first."""
    lock = Lock(key, ttl=30, owner="owner-a")

    async def main() -> None:
        async with lock as outer:
            assert outer.count == 1
            async with Lock(key, ttl=30, owner="owner-a") as inner:
                assert inner.count == 2
                assert inner.fencing_token == outer.fencing_token
                state = await call(lock.state)
                assert (state.owner, state.count) == ("owner-a", 2)
            assert inner.released
            assert not outer.released
            async with lock as again:  # the same object, nested: its own level
                assert again.count == 2
            assert again.released
            assert not outer.released  # the innermost entry was the one released
            state = await call(lock.state)
            assert (state.owner, state.count) == ("owner-a", 1)
            with pytest.raises(LockAcquisitionError):
                await Lock(key, owner="owner-b").aacquire(wait=0)
        assert outer.released
        assert (await call(lock.state)).owner is None
        other = await Lock(key, owner="owner-b").aacquire(wait=0)  # free for others now
        await other.arelease()

    run(main)


# ----------------------------------------------------------------------------- 3: threads


def test_a_lock_held_by_a_thread_is_handed_to_an_async_waiter(key: str) -> None:
    """A thread holds the lock (plain ``acquire``): ``await aacquire(wait=5)`` waits for it,
    on the loop (the ticker runs), and the thread's release hands it over at once: the
    waiter's last store call is the ``wait_for_handoff`` that returned its token."""
    held, let_go = threading.Event(), threading.Event()
    released_at: list[float] = []

    def holder() -> None:
        hold = Lock(key, ttl=30).acquire()
        held.set()
        let_go.wait(30)
        released_at.append(time.monotonic())
        hold.release()

    thread, box = in_thread(holder)
    assert held.wait(10)
    recording = Recording(current_store())
    lock = Lock(key, ttl=30, store=recording)

    async def main() -> tuple[LockHold, float, Ticker]:
        async with Ticker() as ticker:
            waiter = asyncio.create_task(lock.aacquire(wait=5))
            await eventually(lambda: lock_waiters(Lock(key)), "the task to queue")
            await asyncio.sleep(0.3)  # the thread still holds it: the task must keep waiting
            assert not waiter.done()
            let_go.set()
            hold = await waiter
            got_at = time.monotonic()
        await hold.arelease()
        return hold, got_at, ticker

    hold, got_at, ticker = run(main)
    join_all([thread])
    assert "error" not in box, box.get("error")
    assert got_at - released_at[0] < PROMPT
    ticker.check()
    calls = recording.of(threading.current_thread())
    assert calls[0][0] == "lock_acquire"
    assert calls[-2:] == [("wait_for_handoff", hold.fencing_token), ("lock_release", 0)]


def test_an_async_holder_hands_the_lock_to_a_thread_waiting_with_plain_acquire(key: str) -> None:
    """The reverse: a task holds the lock, a thread waits in a plain ``acquire(wait=5)``, and
    ``await hold.arelease()`` hands it to the thread at once, with a larger token."""
    lock = Lock(key, ttl=30)

    async def main() -> tuple[LockHold, float, threading.Thread, dict[str, Any]]:
        hold = await lock.aacquire()
        thread, box = in_thread(lambda: Lock(key, ttl=30, wait=5).acquire())
        await eventually(lambda: lock_waiters(lock), "the thread to queue")
        await asyncio.sleep(0.2)
        assert thread.is_alive()  # still waiting: the key is held
        released_at = time.monotonic()
        await hold.arelease()
        await asyncio.to_thread(thread.join, 10)
        return hold, released_at, thread, box

    hold, released_at, thread, box = run(main)
    assert not thread.is_alive()
    assert "error" not in box, box.get("error")
    handed: LockHold = box["result"]
    try:
        assert box["at"] - released_at < PROMPT
        assert handed.fencing_token > hold.fencing_token
        assert lock.state().owner == handed.owner
    finally:
        handed.release()
    assert lock.state().owner is None


# ----------------------------------------------------------------------------- 4, 5: giving up


def test_a_timed_out_async_wait_raises_and_leaves_nothing_behind(
    key: str, raw: redis.Redis
) -> None:
    """``await aacquire(wait=0.2)`` on a held key raises LockAcquisitionError after about
    0.2 s (the loop ticking meanwhile) and leaves no trace: the holder is unchanged, the queue
    and the wake lists are empty, and the holder's release frees the key instead of handing it
    to the waiter that gave up."""
    lock = Lock(key, ttl=30)
    k = keys.lock(key)

    async def main() -> tuple[float, Ticker]:
        holder = await lock.aacquire()
        async with Ticker() as ticker:
            started = time.monotonic()
            with pytest.raises(LockAcquisitionError, match=r"after waiting 0\.2 s") as caught:
                await Lock(key, ttl=30, wait=30).aacquire(wait=0.2)
            waited = time.monotonic() - started
        assert caught.value.key == key
        state = await call(lock.state)
        assert (state.owner, state.count, state.waiters) == (holder.owner, 1, 0)
        assert raw.zcard(k.queue) == 0
        await holder.arelease()
        assert (await call(lock.state)).owner is None  # not handed to the one that gave up
        again = await Lock(key).aacquire(wait=0)
        await again.arelease()
        return waited, ticker

    waited, ticker = run(main)
    assert 0.15 <= waited < 1.5
    ticker.check()
    assert wake_lists(raw, "lock", key) == []


def test_a_cancelled_waiter_leaves_the_queue_and_is_never_handed_the_lock(
    key: str, raw: redis.Redis
) -> None:
    """Cancelling a task waiting in ``aacquire`` (directly, or by an ``asyncio.timeout``
    around it) takes it out of the queue at once; the holder's later release frees the key,
    which the next acquirer takes without waiting."""
    lock = Lock(key, ttl=30)

    async def main() -> None:
        holder = await lock.aacquire()
        waiter = asyncio.create_task(Lock(key, ttl=30).aacquire(wait=30))
        await eventually(lambda: lock_waiters(lock), "the task to queue")
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert (await call(lock.state)).waiters == 0  # gone before the task ended

        started = time.monotonic()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await Lock(key, ttl=30).aacquire(wait=30)
        assert time.monotonic() - started < PROMPT
        state = await call(lock.state)
        assert (state.owner, state.waiters) == (holder.owner, 0)
        assert raw.zcard(keys.lock(key).queue) == 0

        await holder.arelease()
        assert (await call(lock.state)).owner is None
        next_one = await Lock(key, ttl=30).aacquire(wait=0)  # at once: nobody was handed it
        await next_one.arelease()

    run(main)
    assert wake_lists(raw, "lock", key) == []


def test_cancelling_a_task_inside_async_with_releases_the_lock_at_once(key: str) -> None:
    """A task cancelled inside ``async with lock:`` releases on its way out: the key goes to
    the task waiting for it straight away, not after the 30 s ttl."""
    lock = Lock(key, ttl=30, wait=30)
    holds: list[LockHold] = []

    async def main() -> tuple[float, float]:
        entered = asyncio.Event()

        async def inside_forever() -> None:
            async with lock as hold:
                holds.append(hold)
                entered.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(inside_forever())
        await entered.wait()
        waiter = asyncio.create_task(Lock(key, ttl=30).aacquire(wait=30))
        await eventually(lambda: lock_waiters(lock), "the second task to queue")
        cancelled_at = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert holds[0].released
        handed = await waiter
        got_at = time.monotonic()
        assert handed.fencing_token > holds[0].fencing_token
        await handed.arelease()
        return cancelled_at, got_at

    cancelled_at, got_at = run(main)
    assert got_at - cancelled_at < PROMPT
    assert lock.state().owner is None


@pytest.mark.parametrize("primitive", ["lock", "semaphore"])
def test_a_waiter_cancelled_as_it_is_handed_the_key_gives_it_back(
    primitive: str, key: str, raw: redis.Redis
) -> None:
    """The release hands the key to a queued task that is blocked in its BLPOP, and the task
    is cancelled before it has read the reply: it must give the key back on its way out (as
    ``wait_to_take`` promises for a key handed to a waiter that is interrupted)."""

    def make() -> Lock | Semaphore:
        if primitive == "lock":
            return Lock(key, ttl=30)
        return Semaphore(key, limit=1, lease=30)

    def free() -> bool:
        if primitive == "lock":
            return Lock(key).state().owner is None
        return Semaphore(key, limit=1).state().held == 0

    async def main() -> None:
        before = blocked_in_blpop(raw)
        holder = await make().aacquire()
        waiter = asyncio.create_task(make().aacquire(wait=30))
        await eventually(
            lambda: asyncio.to_thread(lambda: blocked_in_blpop(raw) > before),
            "the task to block in its BLPOP",
        )
        # A plain (blocking) release on the loop's thread: by the time it returns, the server
        # has handed the key over and answered the waiter's BLPOP; the task has not read it.
        holder.release()
        waiter.cancel()
        try:
            hold = await waiter
        except asyncio.CancelledError:
            return
        await hold.arelease()  # it won the race: it got the key and gives it back itself

    run(main)
    assert free(), f"the {primitive} is still held by the cancelled waiter"


# ----------------------------------------------------------------------------- 6: Semaphore


def test_a_semaphore_lets_at_most_limit_tasks_in_and_all_complete(key: str) -> None:
    """Ten tasks through ``Semaphore(limit=3)``: never more than three inside, three at once
    at some point, every task gets in, and each releases its own slot."""
    semaphore = Semaphore(key, limit=3, wait=30, lease=30)
    inside = Inside()
    holds: list[SemaphoreHold] = []

    async def worker() -> None:
        async with semaphore as hold:
            inside.enter()
            await asyncio.sleep(0.03)
            assert not hold.released, "another task's exit released this task's slot"
            inside.leave()
        holds.append(hold)

    async def main() -> Ticker:
        async with Ticker() as ticker:
            await asyncio.gather(*(worker() for _ in range(10)))
        return ticker

    ticker = run(main)
    ticker.check()
    assert inside.most == 3
    assert inside.entries == 10
    assert len(holds) == 10
    assert all(hold.released for hold in holds)
    assert semaphore.state().held == 0
    assert semaphore.state().waiters == 0


# ----------------------------------------------------------------------------- 7: Period


def _period_race(key: str, raw: redis.Redis, *, first_fails: bool) -> tuple[list[bool], int]:
    """Five tasks enter one ``Period(every="day")``; whoever is due holds the claim until the
    other four are queued behind it (and raises there if ``first_fails``). Returns each
    entry's ``due`` in the order they entered, and how many times the work ran."""
    period = Period(key, every="day", wait=30)
    entries: list[bool] = []
    work_done = 0
    first_due = asyncio.Event()
    go = asyncio.Event()

    async def worker() -> None:
        nonlocal work_done
        async with period as claim:
            entries.append(claim.due)
            if not claim.due:
                return
            if not first_due.is_set():
                first_due.set()
                await go.wait()
                if first_fails:
                    raise RuntimeError("the work failed")
            await asyncio.sleep(0.01)
            work_done += 1

    async def main() -> Ticker:
        async with Ticker() as ticker:
            tasks = [asyncio.create_task(worker()) for _ in range(5)]
            await first_due.wait()
            waiters = keys.period(key).waiters
            await eventually(
                lambda: asyncio.to_thread(lambda: raw.zcard(waiters) == 4),
                "the other four to queue behind the claim",
            )
            released_at = time.monotonic()
            go.set()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            assert time.monotonic() - released_at < PROMPT  # woken, not a capped sleep later
        failures = [r for r in results if isinstance(r, BaseException)]
        assert len(failures) == (1 if first_fails else 0), failures
        # a task arriving now finds the bucket done at once
        started = time.monotonic()
        async with period as late:
            assert isinstance(late, PeriodClaim)
            assert not late.due
        assert time.monotonic() - started < PROMPT
        return ticker

    run(main).check()
    return entries, work_done


def test_one_task_per_period_bucket_does_the_work_and_the_rest_see_it_done(
    key: str, raw: redis.Redis
) -> None:
    """Several tasks race into ``async with Period(key, every="day")``: exactly one is due
    and does the work; the others wait for its claim (on the loop), then see it done."""
    entries, work_done = _period_race(key, raw, first_fails=False)
    assert entries.count(True) == 1
    assert entries.count(False) == 4
    assert work_done == 1
    assert Period(key, every="day").is_done()


def test_when_the_due_task_fails_exactly_one_waiting_task_becomes_due(
    key: str, raw: redis.Redis
) -> None:
    """The due task raises inside ``async with``: the bucket is not marked, so exactly one of
    the tasks waiting on the claim becomes due and does the work; the rest see it done."""
    entries, work_done = _period_race(key, raw, first_fails=True)
    assert entries.count(True) == 2  # the one that failed, and the one after it
    assert work_done == 1
    assert Period(key, every="day").is_done()


# ----------------------------------------------------------------------------- 8: RateLimit


def test_a_full_window_refuses_the_extra_async_calls_at_once(raw: redis.Redis) -> None:
    """Ten concurrent ``aacquire()`` on a limit of 3 per 2 s window: exactly three are
    admitted; the seven others are refused at once with a ``retry_after`` within the
    window."""

    def scenario(key: str) -> tuple[list[BaseException | None], dict[int, int], float]:
        limit = RateLimit(key, limit=3, period=2)

        async def main() -> tuple[list[BaseException | None], float]:
            started = time.monotonic()
            results = await asyncio.gather(
                *(limit.aacquire() for _ in range(10)), return_exceptions=True
            )
            return list(results), time.monotonic() - started

        results, took = run(main)
        return results, limit.usage(), took

    leave_room(raw, 2, 1.0)
    results, usage, took = in_one_window(raw, 2, scenario)
    refused = [r for r in results if isinstance(r, RateLimitExceededError)]
    assert results.count(None) == 3
    assert len(refused) == 7, results
    assert all(0 < r.retry_after <= 2 for r in refused)
    assert usage == {2: 3}
    assert took < PROMPT


def test_async_calls_wait_for_the_window_to_roll_over_without_blocking_the_loop(
    key: str,
) -> None:
    """Six tasks through ``async with RateLimit(limit=2, period=1, wait=5)``: all are
    admitted, the extra ones after the window rolled over (any five consecutive admissions
    span more than one window: no window admitted three), and they waited on the loop."""
    limit = RateLimit(key, limit=2, period=1, wait=5)
    admitted: list[float] = []

    async def worker() -> None:
        async with limit:
            admitted.append(time.monotonic())

    async def main() -> Ticker:
        async with Ticker() as ticker:
            await asyncio.gather(*(worker() for _ in range(6)))
        return ticker

    started = time.monotonic()
    ticker = run(main)
    assert len(admitted) == 6
    admitted.sort()
    # 2 per window: admissions i and i + 4 lie at least two windows apart, so more than one
    # window length apart in time (less a little for the replies' travel).
    assert all(later - first > 0.9 for first, later in zip(admitted, admitted[4:], strict=False))
    assert admitted[-1] - started > 0.9  # the last ones waited for a roll-over
    ticker.check()


# ----------------------------------------------------------------------------- 9: OrderedLock


def test_ordered_lock_bodies_run_in_the_order_positions_were_taken(key: str) -> None:
    """Six tasks enter one ``OrderedLock`` with ``async with``, each after the previous one
    has taken its position: their bodies run one at a time in that order, although later
    bodies are shorter (unordered, they would finish first)."""
    ordered = OrderedLock(key, poison_pill_timeout=30)
    count = 6
    log: list[tuple[str, int]] = []
    positions: dict[int, Position] = {}
    all_queued = asyncio.Event()

    async def worker(i: int) -> None:
        async with ordered as turn:
            positions[i] = turn.position
            log.append(("start", i))
            if i == 0:
                await all_queued.wait()  # the batch must not drain before all have queued
            await asyncio.sleep((count - i) * 0.01)
            log.append(("end", i))

    async def main() -> Ticker:
        async with Ticker() as ticker:
            tasks = []
            for i in range(count):
                tasks.append(asyncio.create_task(worker(i)))

                async def taken(n: int = i) -> bool:
                    return (await call(ordered.state)).next_position == n + 2

                await eventually(taken, f"task {i} to take its position")
            all_queued.set()
            await asyncio.gather(*tasks)
        return ticker

    ticker = run(main)
    assert log == [(kind, i) for i in range(count) for kind in ("start", "end")]
    assert [positions[i].number for i in range(count)] == list(range(1, count + 1))
    assert len({positions[i].epoch for i in range(count)}) == 1
    assert ordered.state().drained
    ticker.check()


def test_a_failing_ordered_body_short_circuits_the_later_turns(key: str) -> None:
    """Strict mode through ``async with``: the body at position 2 raises, so the turns of
    positions 3 and 4 come with ``short_circuit`` set, and still pass the line on."""
    ordered = OrderedLock(key, poison_pill_timeout=30)
    short: dict[int, bool] = {}
    all_queued = asyncio.Event()

    async def worker(i: int) -> None:
        async with ordered as turn:
            short[i] = turn.short_circuit
            if i == 0:
                await all_queued.wait()
            if i == 1:
                raise RuntimeError("position 2 failed")

    async def main() -> list[BaseException | None]:
        tasks = []
        for i in range(4):
            tasks.append(asyncio.create_task(worker(i)))

            async def taken(n: int = i) -> bool:
                return (await call(ordered.state)).next_position == n + 2

            await eventually(taken, f"task {i} to take its position")
        all_queued.set()
        return list(await asyncio.gather(*tasks, return_exceptions=True))

    results = run(main)
    assert isinstance(results[1], RuntimeError)
    assert [results[0], results[2], results[3]] == [None, None, None]
    assert short == {0: False, 1: False, 2: True, 3: True}
    assert ordered.state().drained


# ----------------------------------------------------------------------------- 10: with_lock


def test_with_lock_on_an_async_function_gives_a_coroutine_function_that_excludes(
    key: str,
) -> None:
    """``@with_lock`` on an ``async def`` gives a coroutine function; concurrent calls from
    tasks are inside one at a time (and the loop keeps ticking while they wait); a call that
    may not wait is refused while another holds the key."""
    inside = Inside()

    @with_lock(key, ttl=30, wait=30)
    async def critical(n: int) -> int:
        inside.enter()
        await asyncio.sleep(0.02)
        inside.leave()
        return 2 * n

    @with_lock(key, ttl=30, wait=0)
    async def impatient() -> str:
        return "ran"

    assert inspect.iscoroutinefunction(critical)
    assert inspect.iscoroutinefunction(impatient)

    async def main() -> tuple[list[int], Ticker]:
        async with Ticker() as ticker:
            calls = [asyncio.create_task(critical(n)) for n in range(6)]
            await eventually(lambda: lock_waiters(Lock(key)), "calls to queue")
            with pytest.raises(LockAcquisitionError):
                await impatient()
            results = await asyncio.gather(*calls)
        assert await impatient() == "ran"  # free again
        return list(results), ticker

    results, ticker = run(main)
    assert results == [0, 2, 4, 6, 8, 10]
    assert inside.most == 1
    assert inside.entries == 6
    ticker.check()
    assert Lock(key).state().owner is None


def test_tasks_spawned_inside_a_coordinated_call_still_exclude_each_other(key: str) -> None:
    """Calls of a ``@with_lock`` async function gathered from inside another coordinated call
    exclude each other, as calls gathered at the top level do (and as threads started inside
    a coordinated call do: ownership never crosses to other work running at the same time)."""
    inside = Inside()

    @with_lock(key, ttl=30, wait=30)
    async def critical() -> None:
        inside.enter()
        await asyncio.sleep(0.02)
        inside.leave()

    @with_lock(f"{key}-outer", ttl=30, wait=30)
    async def fan_out() -> None:
        await asyncio.gather(*(critical() for _ in range(4)))

    run(fan_out)
    assert inside.entries == 4
    assert inside.most == 1, f"{inside.most} sibling tasks were inside the lock together"


# ----------------------------------------------------------------------------- 11: refusals


def _with(manager: Any) -> None:
    with manager:
        pass


#: Each blocking entry point, called with the test's key inside a coroutine.
SYNC_ENTRIES: dict[str, Callable[[str], object]] = {
    "Lock.acquire": lambda k: Lock(k).acquire(),
    "with Lock": lambda k: _with(Lock(k)),
    "Semaphore.acquire": lambda k: Semaphore(k, limit=1).acquire(),
    "with Semaphore": lambda k: _with(Semaphore(k, limit=1)),
    "Period.claim": lambda k: Period(k, every="day").claim(),
    "with Period": lambda k: _with(Period(k, every="day")),
    "RateLimit.acquire": lambda k: RateLimit(k, limit=1, period=60).acquire(),
    "with RateLimit": lambda k: _with(RateLimit(k, limit=1, period=60)),
    "with OrderedLock": lambda k: _with(OrderedLock(k)),
}


@pytest.mark.parametrize("entry", list(SYNC_ENTRIES))
def test_blocking_entries_refuse_inside_a_coroutine_and_take_nothing(entry: str, key: str) -> None:
    """Each plain entry point raises RuntimeError inside a coroutine, saying it would block
    the loop and naming ``async with``; nothing stays taken, and ``async with`` works there."""

    async def main() -> None:
        with pytest.raises(RuntimeError, match=r"would block the running event loop.*async with"):
            SYNC_ENTRIES[entry](key)

    run(main)
    assert Lock(key).state().owner is None
    assert Semaphore(key, limit=1).state().held == 0
    assert RateLimit(key, limit=1, period=60).usage() == {60: 0}
    assert OrderedLock(key).state().in_flight == 0
    claim = Period(key, every="day").claim(wait=0)  # nothing claimed the bucket
    assert claim.due
    claim.release(mark=False)

    async def works() -> None:
        async with Lock(key, ttl=30), Semaphore(key, limit=1), OrderedLock(key):
            pass

    run(works)


def test_ordered_lock_wait_turn_refuses_inside_a_coroutine(key: str) -> None:
    """``OrderedLock.wait_turn`` (for a position taken earlier) refuses on the loop too; the
    position is still taken, and can be abandoned."""
    ordered = OrderedLock(key)
    position = ordered.take_position()

    async def main() -> None:
        with pytest.raises(RuntimeError, match=r"would block the running event loop.*async with"):
            ordered.wait_turn(position)

    run(main)
    assert ordered.state().in_flight == 1
    ordered.abandon(position)
    assert ordered.state().drained


def test_with_ordered_lock_refuses_before_taking_a_position(key: str) -> None:
    """The refusal comes before any store call: the ordered lock is left untouched."""

    async def main() -> None:
        with pytest.raises(RuntimeError, match="async with"):
            _with(OrderedLock(key))

    run(main)
    assert OrderedLock(key).state().epoch == 0  # never used


# ----------------------------------------------------------------------------- 12: processes


def test_a_lock_held_by_another_process_blocks_an_async_waiter_until_released(
    key: str, redis_url: str, overlap: OverlapRecorder
) -> None:
    """A spawned process holds the lock: a task's ``async with Lock(wait=30)`` waits (on the
    loop) until that process releases, gets it promptly after, and the two critical sections
    never overlap (recorded on Redis, across the processes)."""
    held, let_go = SPAWN.Event(), SPAWN.Event()
    child = SPAWN.Process(
        target=_hold_in_child, args=(redis_url, key, overlap, held, let_go), daemon=True
    )
    child.start()
    lock = Lock(key, ttl=30, wait=30)

    async def main() -> tuple[float, float, Ticker]:
        assert await asyncio.to_thread(held.wait, 60), "the child never took the lock"
        async with Ticker() as ticker:

            async def waiter() -> float:
                async with lock:
                    got_at = time.monotonic()
                    await asyncio.to_thread(overlap.enter, "task")
                    await asyncio.sleep(0.01)
                    await asyncio.to_thread(overlap.leave, "task")
                return got_at

            task = asyncio.create_task(waiter())
            await eventually(lambda: lock_waiters(lock), "the task to queue")
            await asyncio.sleep(0.3)
            assert not task.done()  # still kept out by the other process
            let_go_at = time.monotonic()
            let_go.set()
            got_at = await task
        return let_go_at, got_at, ticker

    try:
        let_go_at, got_at, ticker = run(main)
    finally:
        let_go.set()
        child.join(30)
        if child.is_alive():
            child.kill()
            child.join()
    assert child.exitcode == 0
    assert got_at - let_go_at < PROMPT
    ticker.check()
    assert overlap.events == [
        ("enter", "process"),
        ("leave", "process"),
        ("enter", "task"),
        ("leave", "task"),
    ]
    assert overlap.max_concurrency == 1


def test_tasks_and_other_processes_cycling_on_one_lock_never_overlap(
    key: str, redis_url: str, overlap: OverlapRecorder
) -> None:
    """Two spawned processes (plain ``with Lock``) and four tasks of this loop (``async
    with``) each take the lock 15 times, all at once: nobody is ever inside with anybody."""
    cycles, processes, tasks = 15, 2, 4
    go = SPAWN.Event()
    children = [
        SPAWN.Process(
            target=_cycle_in_child, args=(redis_url, key, overlap, cycles, go), daemon=True
        )
        for _ in range(processes)
    ]
    for child in children:
        child.start()

    async def worker(n: int) -> None:
        for c in range(cycles):
            async with Lock(key, ttl=30, wait=30):
                await asyncio.to_thread(overlap.enter, f"task {n}.{c}")
                await asyncio.sleep(0.001)
                await asyncio.to_thread(overlap.leave, f"task {n}.{c}")

    async def main() -> None:
        go.set()
        await asyncio.gather(*(worker(n) for n in range(tasks)))

    try:
        run(main)
    finally:
        go.set()
        for child in children:
            child.join(60)
            if child.is_alive():
                child.kill()
                child.join()
    assert [child.exitcode for child in children] == [0] * processes
    assert overlap.entries == cycles * (processes + tasks)
    assert overlap.max_concurrency == 1
    assert overlap.replayed_max() == 1
    assert Lock(key).state().owner is None
