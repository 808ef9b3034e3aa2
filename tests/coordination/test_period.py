"""Period: at most one successful run per bucket, with an atomic claim while the work runs."""

from __future__ import annotations

import multiprocessing
import os
import random
import re
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from py_reactor import configure
from py_reactor.coordination.period import CALENDAR, Period, PeriodClaim
from py_reactor.coordination.store import Store
from py_reactor.errors import DefinitionError, PeriodBusyError
from py_reactor.storage import keys
from py_reactor.storage.redis import lua_source
from tests._redis import PrivateRedis
from tests._wait import until
from tests.coordination._helpers import Recording, leave_room, server_now


def expected_bucket(every: str, ts: int) -> tuple[str, int]:
    """The bucket id and end (unix seconds) of ``ts`` for a calendar ``every``, per Python."""
    moment = datetime.fromtimestamp(ts, UTC)
    day = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    if every == "minute":
        start = moment.replace(second=0, microsecond=0)
        return start.strftime("%Y-%m-%dT%H:%M"), int((start + timedelta(minutes=1)).timestamp())
    if every == "hour":
        start = moment.replace(minute=0, second=0, microsecond=0)
        return start.strftime("%Y-%m-%dT%H"), int((start + timedelta(hours=1)).timestamp())
    if every == "day":
        return day.strftime("%Y-%m-%d"), int((day + timedelta(days=1)).timestamp())
    if every == "week":
        iso = moment.isocalendar()
        monday = day - timedelta(days=moment.weekday())
        return f"{iso.year:04d}-W{iso.week:02d}", int((monday + timedelta(days=7)).timestamp())
    if every == "month":
        first = day.replace(day=1)
        following = (first + timedelta(days=32)).replace(day=1)
        return first.strftime("%Y-%m"), int(following.timestamp())
    start = day.replace(month=1, day=1)
    return f"{start.year:04d}", int(start.replace(year=start.year + 1).timestamp())


SHAPES = {
    "minute": r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}",
    "hour": r"\d{4}-\d{2}-\d{2}T\d{2}",
    "day": r"\d{4}-\d{2}-\d{2}",
    "week": r"\d{4}-W\d{2}",
    "month": r"\d{4}-\d{2}",
    "year": r"\d{4}",
}


def test_first_claim_due_then_done(store: Store, key: str) -> None:
    """The first claim in a bucket is due; once marked, the next claim is not due."""
    period = Period(key, every="day", store=store)
    assert not period.is_done()
    claim = period.claim()
    assert claim.due
    assert claim.key == key
    assert not claim.released
    claim.release(mark=True)
    assert claim.released
    assert period.is_done()
    again = period.claim()
    assert not again.due
    assert again.released
    assert again.bucket == claim.bucket


def test_failure_leaves_the_bucket_due(store: Store, key: str) -> None:
    """A claim released without a mark leaves the bucket due for the next caller."""
    period = Period(key, every="day", store=store)
    period.claim().release(mark=False)
    assert not period.is_done()
    again = period.claim()
    assert again.due
    again.release(mark=False)


def test_release_is_idempotent_and_free_when_not_due(
    store: Store, raw: redis.Redis, key: str
) -> None:
    """Releasing twice changes nothing, and a not-due claim's release writes nothing."""
    period = Period(key, every="day", store=store)
    claim = period.claim()
    claim.release(mark=False)
    claim.release(mark=True)
    assert not period.is_done()
    assert not raw.exists(keys.period_claim(key, claim.bucket))
    period.claim().release(mark=True)
    not_due = period.claim()
    not_due.release(mark=False)
    assert period.is_done()


def test_context_manager_marks_only_on_success(store: Store, key: str) -> None:
    """``with Period(...)`` marks the bucket on a clean exit and not when the body raises."""
    period = Period(key, every="day", store=store)
    entered: list[PeriodClaim] = []

    def fail() -> None:
        with period as claim:
            entered.append(claim)
            raise RuntimeError("the report failed")

    with pytest.raises(RuntimeError):
        fail()
    assert entered[0].due
    assert not period.is_done()
    with period as succeeding:
        assert succeeding.due
    assert period.is_done()
    with period as later:
        assert not later.due


def test_numeric_bucket_rolls_over(store: Store, raw: redis.Redis, key: str) -> None:
    """With ``every=2`` the bucket is done until the next two-second bucket starts."""
    leave_room(raw, 2, 1)
    period = Period(key, every=2, store=store)
    first = period.claim()
    assert first.due
    assert re.fullmatch(r"2s-\d+", first.bucket)
    first.release(mark=True)
    assert period.is_done()
    time.sleep(2 - server_now(raw) % 2 + 0.02)  # into the next bucket
    assert not period.is_done()
    second = period.claim()
    assert second.due
    assert int(second.bucket.split("-")[1]) > int(first.bucket.split("-")[1])
    second.release(mark=True)


def test_a_claim_still_held_on_the_last_bucket_does_not_hold_up_the_next(
    store: Store, raw: redis.Redis, key: str
) -> None:
    """A run still busy when its bucket ends leaves the next bucket free for another caller."""
    leave_room(raw, 2, 1)
    slow = Period(key, every=2, wait=0, store=store).claim(owner="slow-run")
    assert slow.due
    time.sleep(2 - server_now(raw) % 2 + 0.02)  # the slow run goes on into the next bucket
    nxt = Period(key, every=2, wait=0, store=store).claim(owner="next-run")
    assert nxt.due, "the next bucket waited on the last bucket's claim"
    assert nxt.bucket != slow.bucket
    nxt.release(mark=True)
    slow.release(mark=True)


@pytest.mark.parametrize("every", CALENDAR)
def test_calendar_marker(store: Store, raw: redis.Redis, key: str, every: str) -> None:
    """Each calendar bucket marks a key named by the UTC bucket id, expiring after the bucket."""
    period = Period(key, every=every, store=store)
    before = int(server_now(raw))
    claim = period.claim()
    after = int(server_now(raw))
    claim.release(mark=True)
    assert re.fullmatch(SHAPES[every], claim.bucket)
    assert claim.bucket in {expected_bucket(every, before)[0], expected_bucket(every, after)[0]}
    marker = keys.period_marker(key, claim.bucket)
    assert marker == f"py_reactor:period:{{{key}}}:done:{claim.bucket}"
    assert raw.exists(marker)
    ends = expected_bucket(every, after)[1]
    assert 0 < raw.ttl(marker) <= ends - before + 60


def test_calendar_arithmetic_matches_python(private_redis: PrivateRedis) -> None:
    """The script's integer calendar arithmetic agrees with Python's datetime on many dates."""
    source = lua_source("period_claim")
    assert source.count("redis.call('TIME')") == 1
    fixed = private_redis.client().register_script(
        source.replace("redis.call('TIME')", "{ARGV[3], '0'}")
    )
    moments = [int(datetime(year, 1, 1, tzinfo=UTC).timestamp()) for year in range(1970, 2401)]
    for year in (1999, 2000, 2004, 2015, 2020, 2021, 2026, 2100, 2400):
        for month, day in ((12, 28), (12, 29), (12, 31), (2, 28), (2, 29), (3, 1), (1, 3)):
            try:
                start = datetime(year, month, day, tzinfo=UTC)
            except ValueError:
                continue
            for offset in (0, 1, 86399):
                moments.append(int(start.timestamp()) + offset)
    rng = random.Random(20240501)
    moments += [rng.randrange(0, 13_000_000_000) for _ in range(500)]
    prefixes = list(keys.period("arithmetic")[:3])
    for every in CALENDAR:
        for moment in moments:
            _, bucket, expire_at, _ = fixed(keys=prefixes, args=["check", every, moment])
            assert (bucket, int(expire_at) - 60) == expected_bucket(every, moment), (every, moment)


def test_race_runs_the_work_once(store: Store, key: str) -> None:
    """Eight threads racing through ``with Period(...)`` with a slow body do the work once."""
    start = threading.Barrier(8)
    runs: list[str] = []
    finished: list[bool] = []
    errors: list[BaseException] = []

    def contend() -> None:
        try:
            start.wait(timeout=30)
            with Period(key, every="day", store=store) as claim:
                if claim.due:
                    runs.append(claim.bucket)
                    time.sleep(0.3)  # the slow work others race against
            finished.append(True)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=contend) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len(finished) == 8
    assert len(runs) == 1


def wait_until_queued(raw: redis.Redis, period: Period, count: int) -> None:
    """Block until ``count`` waiters are queued on ``period`` (bounded; fails after 10 s)."""
    waiters = keys.period(period.key).waiters
    until(lambda: raw.zcard(waiters) >= count, f"{count} waiter(s) queued", timeout=10)


def test_waiter_becomes_due_when_the_claimant_fails(
    store: Store, raw: redis.Redis, key: str
) -> None:
    """A caller waiting on a claim is woken by a failed release and becomes due itself (its
    sleep on the wake list ends with the release's signal, not by timing out)."""
    recording = Recording(store)
    held = Period(key, every="day", wait=30, store=store).claim()
    outcome: list[PeriodClaim] = []

    def wait_for_claim() -> None:
        outcome.append(Period(key, every="day", wait=30, store=recording).claim())

    waiter = threading.Thread(target=wait_for_claim)
    waiter.start()
    wait_until_queued(raw, Period(key, every="day", store=store), 1)
    held.release(mark=False)
    waiter.join(timeout=30)
    assert not waiter.is_alive()
    assert outcome[0].due
    calls = recording.of(waiter)
    assert [method for method, _ in calls[-2:]] == ["wait_for_handoff", "period_claim"]
    assert calls[-2][1] is not None, f"not woken by the release: {calls}"  # not a timed-out sleep
    outcome[0].release(mark=True)


def test_waiter_is_not_due_when_the_claimant_succeeds(
    store: Store, raw: redis.Redis, key: str
) -> None:
    """A caller waiting on a claim is woken by a marking release and finds the bucket done."""
    period = Period(key, every="day", wait=30, store=store)
    held = period.claim()
    outcome: list[PeriodClaim] = []
    waiter = threading.Thread(target=lambda: outcome.append(period.claim()))
    waiter.start()
    wait_until_queued(raw, period, 1)
    held.release(mark=True)
    waiter.join(timeout=30)
    assert not outcome[0].due


def test_wait_exhausted_raises(store: Store, key: str) -> None:
    """A claim held by another owner for the whole ``wait`` raises PeriodBusyError."""
    held = Period(key, every="day", store=store).claim()
    started = time.monotonic()
    with pytest.raises(PeriodBusyError) as caught:
        Period(key, every="day", wait=0.3, store=store).claim()
    assert 0.25 < time.monotonic() - started < 5
    assert caught.value.primitive == "period"
    assert caught.value.key == key
    with pytest.raises(PeriodBusyError):
        Period(key, every="day", wait=0, store=store).claim()
    held.release(mark=False)


def test_reentrant_claim_by_the_same_owner(store: Store, key: str) -> None:
    """The same owner claims again while holding (nesting) and frees on the outer release."""
    period = Period(key, every="day", wait=0, store=store)
    outer = period.claim(owner="run-1")
    inner = period.claim(owner="run-1")
    assert outer.due
    assert inner.due
    assert inner.bucket == outer.bucket
    with pytest.raises(PeriodBusyError):
        period.claim(owner="run-2")
    inner.release(mark=False)
    with pytest.raises(PeriodBusyError):
        period.claim(owner="run-2")
    outer.release(mark=True)
    assert not period.claim(owner="run-2").due


def test_claim_is_kept_alive_past_its_lease(store: Store, raw: redis.Redis, key: str) -> None:
    """A held claim is extended in the background, so it outlives its lease."""
    period = Period(key, every="day", wait=0, lease=0.6, store=store)
    claim = period.claim()
    time.sleep(1.5)  # hold the claim longer than its lease
    assert raw.pttl(keys.period_claim(key, claim.bucket)) > 0
    with pytest.raises(PeriodBusyError):
        period.claim()
    claim.release(mark=False)
    assert not raw.exists(keys.period_claim(key, claim.bucket))


def _claim_and_die(url: str, key: str, ready: Any) -> None:
    """Child process: take the claim, then exit without releasing it."""
    configure(redis_url=url)
    claim = Period(key, every="day", lease=1).claim()
    assert claim.due
    ready.set()
    os._exit(0)


def test_dead_claimant_frees_the_bucket(server_store: Store, redis_url: str, key: str) -> None:
    """A claimant that dies without releasing frees the bucket once its lease lapses."""
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    child = context.Process(target=_claim_and_die, args=(redis_url, key, ready))
    child.start()
    assert ready.wait(60)
    child.join(timeout=30)
    started = time.monotonic()
    claim = Period(key, every="day", wait=30, store=server_store).claim()
    assert claim.due
    assert time.monotonic() - started < 5
    claim.release(mark=True)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"every": "fortnight"}, "every"),
        ({"every": 0}, "every"),
        ({"every": 1.5}, "every"),
        ({"every": True}, "every"),
        ({"every": "day", "wait": -1}, "wait"),
        ({"every": "day", "lease": 0}, "lease"),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], named: str) -> None:
    """Bad options raise DefinitionError naming the option, before anything is contacted."""
    with pytest.raises(DefinitionError, match=named):
        Period("report", **options)


def test_empty_key_is_refused() -> None:
    """An empty key raises DefinitionError naming the key."""
    with pytest.raises(DefinitionError, match="key"):
        Period("", every="day")
