"""The store's read model (``storage.inspect``), against the session's private Redis: each read
answers with the real holds and executions the primitives and the execution store wrote.

The server is shared by the whole session and never flushed, so each test reads its own fresh
keys and ids, and checks what it wrote is among what a whole-store read (a SCAN, the index)
finds.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from py_reactor.coordination.owner import HeldBy
from py_reactor.states import Status
from py_reactor.storage.executions import ExecutionStore
from py_reactor.storage.inspect import Found, Head, Inspector, held_by
from py_reactor.storage.redis import RedisStore


@pytest.fixture
def store(redis_url: str) -> Iterator[RedisStore]:
    from py_reactor import workers

    workers.stop()  # no thread worker of this process may claim these records meanwhile
    store = RedisStore.from_url(redis_url)
    yield store
    store.client.close()


@pytest.fixture
def inspector(store: RedisStore) -> Inspector:
    return Inspector(store)


def _ids(n: int) -> list[str]:
    return [f"inspect-{uuid.uuid4().hex[:12]}" for _ in range(n)]


# -- the clock and the store kinds it reads ------------------------------------------------------


def test_the_server_clock_is_in_milliseconds(inspector: Inspector, store: RedisStore) -> None:
    seconds, micros = store.client.time()
    assert abs(inspector.server_ms() - (seconds * 1000 + micros // 1000)) < 1000


def test_a_store_without_a_redis_client_cannot_be_inspected() -> None:
    with pytest.raises(TypeError, match="no Redis client"):
        Inspector(object())


# -- executions ----------------------------------------------------------------------------------


def test_new_executions_are_the_newest_ids_with_their_heads(
    inspector: Inspector, store: RedisStore
) -> None:
    """The index lists executions newest first; ``heads`` reads status and reactor of each,
    None for an id with no record."""
    executions = ExecutionStore(store)
    before = inspector.execution_count()
    first, second = _ids(2)
    assert executions.create(first, "app:First", "{}", Status.PENDING, namespace="app")
    assert executions.create(second, "app:Second", "{}", Status.PENDING, namespace="app")
    assert inspector.execution_count() == before + 2
    assert set(inspector.newest_ids(0, 2)) == {first, second}
    assert inspector.newest_ids(1, 0) == []
    assert inspector.heads([first, second, "inspect-never-stored"]) == [
        Head(Status.PENDING, "app:First", "app"),
        Head(Status.PENDING, "app:Second", "app"),
        Head(None, None),
    ]


def test_in_flight_tells_running_from_due_and_running_count_counts_leases(
    inspector: Inspector, store: RedisStore
) -> None:
    executions = ExecutionStore(store)
    running, due = _ids(2)
    assert executions.create(running, "app:R", "{}", Status.PENDING, namespace="app")
    assert executions.create(due, "app:D", "{}", Status.PENDING, namespace="app")
    leased = inspector.running_count()
    assert executions.claim(running, "runner", 30) == 1
    assert inspector.running_count() == leased + 1

    seen = inspector.in_flight()
    assert running in seen.leased
    scores = dict(seen.due)
    assert running not in scores  # the claim moved it from the due set to the leases
    assert scores[due] <= seen.now_ms  # created due now
    assert abs(seen.now_ms - inspector.server_ms()) < 1000


def test_waiting_on_reads_a_parked_execution_and_none_for_others(
    inspector: Inspector, store: RedisStore, key: str
) -> None:
    executions = ExecutionStore(store)
    parked, other = _ids(2)
    assert executions.create(parked, "app:P", "{}", Status.PENDING, namespace="app")
    assert executions.create(other, "app:O", "{}", Status.PENDING, namespace="app")
    epoch = executions.claim(parked, "runner", 30)
    waiting = {"step": "charge", "primitive": "lock", "key": key, "attempt": 1}
    assert executions.park(
        parked, epoch, "{}", waiting_on=waiting, due_in=60, primitive="lock", key=key
    )
    assert inspector.waiting_on(parked) == waiting
    assert inspector.waiting_on(other) is None
    assert inspector.waiting_on("inspect-never-stored") is None
    store.client.hset(f"py_reactor:exec:{other}", "waiting_on", "not json")
    assert inspector.waiting_on(other) is None


def test_a_park_on_a_busy_key_is_woken_by_its_release(
    inspector: Inspector, store: RedisStore, key: str
) -> None:
    """``ExecutionStore.park`` puts the run in the key's parked list: due later while the key
    is held, due now once its holder releases it."""
    executions = ExecutionStore(store)
    (parked,) = _ids(1)
    reply = store.lock_acquire(key, "holder", 30_000)
    assert reply.held
    assert executions.create(parked, "app:P", "{}", Status.PENDING, namespace="app")
    epoch = executions.claim(parked, "runner", 30)
    waiting = {"step": "s", "primitive": "lock", "key": key}
    assert executions.park(
        parked, epoch, "{}", waiting_on=waiting, due_in=60, primitive="lock", key=key, count=True
    )
    seen = inspector.in_flight()
    assert dict(seen.due)[parked] > seen.now_ms + 30_000
    assert (stored := executions.load(parked)) is not None
    assert (stored.status, stored.parks) == (Status.WAITING, 1)

    store.lock_release(key, "holder", reply.token, reply.level)
    seen = inspector.in_flight()
    assert dict(seen.due)[parked] <= seen.now_ms


# -- holds of each primitive ---------------------------------------------------------------------


def test_a_lock_hold_with_every_level_and_who_took_it(
    inspector: Inspector, store: RedisStore, key: str
) -> None:
    assert inspector.lock_hold(key) is None
    by = HeldBy("exec-1", "charge")
    first = store.lock_acquire(key, "owner-1", 30_000, by=by)
    second = store.lock_acquire(key, "owner-1", 60_000)  # re-entered: a level of its own
    now = inspector.server_ms()
    hold = inspector.lock_hold(key)
    assert hold is not None
    assert (hold.owner, hold.token, hold.by) == ("owner-1", first.token, by)
    assert set(hold.levels) == {first.level, second.level} == {1, 2}
    assert now < hold.levels[1] <= now + 31_000 < hold.levels[2]
    store.lock_release(key, "owner-1", first.token, 2)
    store.lock_release(key, "owner-1", first.token, 1)
    assert inspector.lock_hold(key) is None


def test_the_parked_list_of_a_key_oldest_first(
    inspector: Inspector, store: RedisStore, key: str
) -> None:
    executions = ExecutionStore(store)
    parked = _ids(2)
    assert inspector.parked("lock", key) == []
    store.lock_acquire(key, "holder", 30_000)
    waiting = {"step": "s", "primitive": "lock", "key": key}
    for execution_id in parked:
        assert executions.create(execution_id, "app:P", "{}", Status.PENDING, namespace="app")
        epoch = executions.claim(execution_id, "runner", 30)
        assert executions.park(
            execution_id, epoch, "{}", waiting_on=waiting, due_in=60, primitive="lock", key=key
        )
    assert inspector.parked("lock", key) == parked
    assert inspector.parked("semaphore", key) == []


def test_semaphore_holders_leases_and_who_took_them(
    inspector: Inspector, store: RedisStore, key: str
) -> None:
    by = HeldBy("exec-1", "charge")
    assert store.semaphore_acquire(key, "one", 3, 30_000, by=by).held
    assert store.semaphore_acquire(key, "two", 3, 30_000).held
    assert store.semaphore_acquire(key, "two", 3, 30_000).held  # nested: count 2
    now = inspector.server_ms()

    holders = {holder.owner: holder for holder in inspector.semaphore_holders(key, now)}
    assert set(holders) == {"one", "two"}
    assert (holders["one"].count, holders["one"].by) == (1, by)
    assert (holders["two"].count, holders["two"].by) == (2, None)
    assert now < holders["one"].lease_end_ms <= now + 31_000

    lease = inspector.semaphore_lease(key, "one")
    assert lease == holders["one"].lease_end_ms
    assert inspector.semaphore_lease(key, "nobody") is None
    assert inspector.semaphore_by(key, "one") == by
    assert inspector.semaphore_by(key, "two") is None
    assert lease is not None
    # only leases ending later: none after the latest ("two" took its slot after "one", so its
    # lease may end a few ms later on a busy machine)
    latest = max(holder.lease_end_ms for holder in holders.values())
    assert inspector.semaphore_holders(key, int(latest) + 1) == []


def test_a_period_claim_then_its_marker(inspector: Inspector, store: RedisStore, key: str) -> None:
    reply = store.period_claim(key, "day", "worker-1", 30_000)
    assert reply.outcome == "due"
    bucket = reply.bucket
    claim = inspector.period_claim(key, bucket)
    assert claim is not None
    assert (claim.key, claim.bucket, claim.owner, claim.count) == (key, bucket, "worker-1", 1)
    assert claim.ttl_ms is not None
    assert 0 < claim.ttl_ms <= 30_000
    assert inspector.period_marker(key, bucket) is None
    assert not inspector.period_marked(key, bucket)
    assert inspector.period_buckets(key) == []

    store.period_release(key, bucket, "worker-1", mark=True, expire_at=reply.expire_at)
    assert inspector.period_claim(key, bucket) is None
    marker = inspector.period_marker(key, bucket)
    assert marker is not None
    assert (marker.key, marker.bucket) == (key, bucket)
    assert marker.ttl_ms is not None
    assert marker.ttl_ms > 0
    assert inspector.period_marked(key, bucket)
    assert inspector.period_buckets(key) == [bucket]
    assert inspector.period_claim(key, "1999-01-01") is None


def test_every_period_claim_of_a_key_one_per_bucket(
    inspector: Inspector, store: RedisStore, key: str
) -> None:
    assert inspector.period_claims(key) == []
    day = store.period_claim(key, "day", "worker-1", 30_000)
    hour = store.period_claim(key, "hour", "worker-2", 30_000)
    store.period_claim(key, "hour", "worker-2", 30_000)  # nested: count 2
    claims = inspector.period_claims(key)
    assert [(c.bucket, c.owner, c.count) for c in claims] == sorted(
        [(day.bucket, "worker-1", 1), (hour.bucket, "worker-2", 2)]
    )
    assert inspector.period_claims(f"{key}-other") == []


def test_ordered_lock_beats_per_position(inspector: Inspector, store: RedisStore, key: str) -> None:
    epoch, first = store.ordered_lock_take(key, 60_000)
    _, second = store.ordered_lock_take(key, 60_000)
    assert (first, second) == (1, 2)
    now = inspector.server_ms()
    beats = inspector.ordered_lock_beats(key)
    assert set(beats) == {1, 2}
    assert all(abs(beat - now) < 5_000 for beat in beats.values())
    assert inspector.ordered_lock_beat(key, 2) == beats[2]
    assert inspector.ordered_lock_beat(key, 3) is None
    assert store.ordered_lock_state(key).epoch == epoch
    ttl = inspector.ordered_lock_ttl(key)
    assert ttl is not None
    assert 50_000 < ttl <= 60_000
    assert inspector.ordered_lock_ttl(f"{key}-unused") is None


def test_rate_limit_counts_per_window(inspector: Inspector, store: RedisStore, key: str) -> None:
    for _ in range(2):
        assert store.rate_limit_acquire(key, ((3600, 10),)).admitted
    index = inspector.server_ms() // 1000 // 3600
    assert inspector.rate_limit_count(key, 3600, index) in (1, 2)  # 2 unless the hour turned
    assert inspector.rate_limit_count(key, 3600, index - 1) in (0, 1)
    assert inspector.rate_limit_count(key, 60, index) == 0


# -- discovery -----------------------------------------------------------------------------------


def test_one_scan_finds_the_keys_in_use_of_every_primitive(
    inspector: Inspector, store: RedisStore
) -> None:
    """Keys with braces and percent signs come back as the user wrote them."""
    suffix = f"{{a%b}}:{uuid.uuid4().hex[:8]}"
    lock, semaphore, period, limit, line = (
        f"{name}:{suffix}" for name in ("lock", "sem", "period", "limit", "line")
    )
    assert store.lock_acquire(lock, "o", 30_000).held
    assert store.semaphore_acquire(semaphore, "o", 1, 30_000).held
    claimed = store.period_claim(period, "day", "o", 30_000)
    assert store.rate_limit_acquire(limit, ((3600, 10),)).admitted
    store.ordered_lock_take(line, 60_000)
    marked = f"{period}:done"
    done = store.period_claim(marked, "day", "o", 30_000)
    store.period_release(marked, done.bucket, "o", mark=True, expire_at=done.expire_at)

    found = inspector.scan()
    assert lock in found.locks
    assert semaphore in found.semaphores
    assert line in found.ordered_locks
    assert (period, claimed.bucket) in found.claims
    assert (marked, done.bucket) in found.markers
    windows = {
        window: indexes for (name, window), indexes in found.counters.items() if name == limit
    }
    assert list(windows) == [3600]
    (index,) = windows[3600]  # the hour's counter
    assert inspector.rate_limit_count(limit, 3600, index) == 1


def test_a_scan_stops_at_its_limit(inspector: Inspector, store: RedisStore, key: str) -> None:
    assert store.lock_acquire(key, "o", 30_000).held
    found = inspector.scan(limit=0)
    assert found == Found()


# -- the hold record codec -----------------------------------------------------------------------


def test_held_by_reads_the_record_a_hold_names() -> None:
    assert held_by(json.dumps(["exec-1", "charge"])) == HeldBy("exec-1", "charge")
    assert held_by(json.dumps(["exec-1", None])) == HeldBy("exec-1", None)
    assert held_by("") is None
    assert held_by(None) is None
    assert held_by("not json") is None
    assert held_by(json.dumps([1, 2, 3])) is None
