"""RateLimit: fixed windows on the server's clock, all windows checked and counted atomically."""

from __future__ import annotations

import multiprocessing
import threading
import time
import types
from typing import Any

import pytest
import redis

from py_reactor import configure
from py_reactor.coordination import rate_limit as rate_limit_module
from py_reactor.coordination.rate_limit import RateLimit
from py_reactor.coordination.store import Store
from py_reactor.errors import CoordinationError, DefinitionError, RateLimitExceededError
from py_reactor.storage import keys
from tests._redis import PrivateRedis
from tests.coordination._helpers import Recording, in_one_window, leave_room, server_now


def test_admits_limit_then_refuses_with_retry_after(
    store: Store, raw: redis.Redis, key: str
) -> None:
    """A window admits exactly ``limit`` calls, then refuses with 0 < retry_after <= window."""
    leave_room(raw, 60, 2)
    limit = RateLimit(key, limit=3, period="minute", store=store)
    for _ in range(3):
        limit.acquire()
    with pytest.raises(RateLimitExceededError) as caught:
        limit.acquire()
    error = caught.value
    assert 0 < error.retry_after <= 60
    assert error.key == key
    assert error.primitive == "rate_limit"
    assert key in str(error)
    assert "minute" in str(error)
    assert "retry_after" in str(error)
    assert limit.usage() == {60: 3}


def test_counter_key_layout_and_expiry(store: Store, raw: redis.Redis, key: str) -> None:
    """The counter lives at py_reactor:rate_limit:{<key>}:<window>:<index> and expires with it."""
    leave_room(raw, 60, 2)
    RateLimit(key, limit=5, period=60, store=store).acquire()
    index = int(server_now(raw) // 60)
    counter = keys.rate_limit_counter(key, 60, index)
    assert counter == f"py_reactor:rate_limit:{{{key}}}:60:{index}"
    assert raw.get(counter) == "1"
    assert 0 < raw.ttl(counter) <= 60


def test_multi_window_minute_blocks_after_second_rolls(
    store: Store, raw: redis.Redis, key: str
) -> None:
    """With {"second": 2, "minute": 3} the minute window refuses even once the second rolls."""
    leave_room(raw, 60, 6)
    leave_room(raw, 1, 0.5)
    limit = RateLimit(key, limits={"second": 2, "minute": 3}, store=store)
    assert limit.windows == ((1, 2), (60, 3))
    limit.acquire()
    limit.acquire()
    with pytest.raises(RateLimitExceededError) as by_second:
        limit.acquire()
    assert 0 < by_second.value.retry_after <= 1
    assert "second" in str(by_second.value)
    assert limit.usage() == {1: 2, 60: 2}

    time.sleep(by_second.value.retry_after)  # the one-second window rolls over
    limit.acquire()
    leave_room(raw, 1, 2)  # and rolls again: the second window is now empty
    with pytest.raises(RateLimitExceededError) as by_minute:
        limit.acquire()
    assert 1 < by_minute.value.retry_after <= 60
    assert "minute" in str(by_minute.value)
    assert limit.usage() == {1: 0, 60: 3}


def test_refused_check_counts_nothing(store: Store, raw: redis.Redis, key: str) -> None:
    """A call refused by one window is counted in none of the others."""
    leave_room(raw, 60, 2)
    limit = RateLimit(key, limits={"minute": 10, "day": 1}, store=store)
    limit.acquire()
    for _ in range(3):
        with pytest.raises(RateLimitExceededError):
            limit.acquire()
    assert limit.usage() == {60: 1, 86400: 1}


def test_registered_name(store: Store, raw: redis.Redis, key: str) -> None:
    """A limit registered with configure(rate_limits=...) is found by name at acquire time."""
    leave_room(raw, 60, 2)
    configure(rate_limits={key: {"minute": 2}})
    limit = RateLimit(key, store=store)
    assert limit.windows == ((60, 2),)
    limit.acquire()
    limit.acquire()
    with pytest.raises(RateLimitExceededError):
        limit.acquire()
    configure(rate_limits={key: {"minute": 3}})
    limit.acquire()
    assert limit.usage() == {60: 3}


def test_unknown_name_is_a_permanent_error(store: Store, key: str) -> None:
    """An unregistered name raises a CoordinationError that says how to register it."""
    limit = RateLimit(key, store=store)
    with pytest.raises(CoordinationError) as caught:
        limit.acquire()
    assert not isinstance(caught.value, RateLimitExceededError)
    assert caught.value.primitive == "rate_limit"
    assert caught.value.key == key
    assert "configure(rate_limits=" in str(caught.value)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"limit": 0, "period": "minute"}, "limit"),
        ({"limit": 1.5, "period": "minute"}, "limit"),
        ({"limit": 5}, "period"),
        ({"period": "minute"}, "limit"),
        ({"limit": 5, "period": "minute", "limits": {"second": 1}}, "limits"),
        ({"limit": 5, "period": "fortnight"}, "period"),
        ({"limit": 5, "period": 0}, "period"),
        ({"limits": {"fortnight": 1}}, "limits"),
        ({"limits": {"second": 0}}, "limits"),
        ({"limits": {}}, "limits"),
        ({"limit": 5, "period": "minute", "wait": -1}, "wait"),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], named: str) -> None:
    """Bad options raise DefinitionError naming the option, before anything is contacted."""
    with pytest.raises(DefinitionError, match=named):
        RateLimit("api", **options)


def test_empty_key_is_refused() -> None:
    """An empty key raises DefinitionError naming the key."""
    with pytest.raises(DefinitionError, match="key"):
        RateLimit("", limit=1, period="second")


def test_construction_does_not_connect() -> None:
    """Constructing with no store neither connects nor looks up the store."""
    limit = RateLimit("api", limit=1, period="second")
    assert limit._store is None
    assert "1/second" in repr(limit)


def test_wait_sleeps_until_the_window_rolls(store: Store, raw: redis.Redis, key: str) -> None:
    """With ``wait`` the rest of a full window is slept through and the call is then admitted
    in the next window (the first call leaves at least 0.6 s of its window, on the server's
    clock, which the second must sleep out)."""
    leave_room(raw, 1, 0.6)
    limit = RateLimit(key, limit=1, period=1, wait=5, store=store)
    limit.acquire()
    first = server_now(raw)
    left = 1 - first % 1
    started = time.monotonic()
    limit.acquire()
    waited = time.monotonic() - started
    assert int(server_now(raw)) > int(first)  # admitted in a later window
    assert waited >= left - 0.05
    assert waited < 3


def test_wait_shorter_than_retry_after_raises_at_once(
    store: Store, raw: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``wait`` shorter than retry_after raises without sleeping: the refused call is one
    acquire, and the limit never sleeps."""
    slept: list[float] = []
    clock = types.SimpleNamespace(monotonic=time.monotonic, sleep=slept.append)
    monkeypatch.setattr(rate_limit_module, "time", clock)  # this module's sleeps only

    def body(key: str) -> list[str]:
        recording = Recording(store)
        limit = RateLimit(key, limit=1, period="hour", wait=0.5, store=recording)
        limit.acquire()
        with pytest.raises(RateLimitExceededError, match=r"waited up to 0\.5 s") as caught:
            limit.acquire()
        assert caught.value.retry_after > 0.5
        return [method for _, method, _ in recording.log]

    assert in_one_window(raw, 3600, body) == ["rate_limit_acquire", "rate_limit_acquire"]
    assert slept == []


def test_context_manager_counts_on_entry(store: Store, raw: redis.Redis, key: str) -> None:
    """``with RateLimit(...)`` counts a call on entry and refuses to enter when full."""
    leave_room(raw, 60, 2)
    limit = RateLimit(key, limit=1, period="minute", store=store)
    with limit as entered:
        assert entered is limit
    ran = False
    with pytest.raises(RateLimitExceededError), limit:
        ran = True
    assert not ran
    assert limit.usage() == {60: 1}


def test_threads_admit_exactly_limit(store: Store, raw: redis.Redis) -> None:
    """Eight threads hammering a limit of 20 per 60 s window get exactly 20 calls admitted."""

    def body(key: str) -> int:
        limit = RateLimit(key, limit=20, period=60, store=store)
        start = threading.Barrier(8)
        admitted: list[int] = []
        lock = threading.Lock()

        def hammer() -> None:
            start.wait(timeout=30)
            mine = 0
            for _ in range(10):
                try:
                    limit.acquire()
                    mine += 1
                except RateLimitExceededError:
                    pass
            with lock:
                admitted.append(mine)

        threads = [threading.Thread(target=hammer) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert len(admitted) == 8
        return sum(admitted)

    assert in_one_window(raw, 60, body) == 20


def _hammer_process(url: str, key: str, attempts: int, start: Any, results: Any) -> None:
    """Child process: count this process's admitted calls against the shared limit."""
    configure(redis_url=url)
    limit = RateLimit(key, limit=25, period=3600)
    start.wait(60)
    admitted = 0
    for _ in range(attempts):
        try:
            limit.acquire()
            admitted += 1
        except RateLimitExceededError:
            pass
    results.put(admitted)


def test_processes_admit_exactly_limit(redis_url: str, private_redis: PrivateRedis) -> None:
    """Four OS processes sharing a limit of 25 per hour get exactly 25 calls admitted."""
    context = multiprocessing.get_context("spawn")

    def body(key: str) -> int:
        start = context.Barrier(4)
        results = context.Queue()
        processes = [
            context.Process(target=_hammer_process, args=(redis_url, key, 20, start, results))
            for _ in range(4)
        ]
        for process in processes:
            process.start()
        admitted = [results.get(timeout=120) for _ in processes]
        for process in processes:
            process.join(timeout=30)
            assert process.exitcode == 0
        return sum(admitted)

    assert in_one_window(private_redis.client(), 3600, body) == 25


def test_acquire_is_one_round_trip(
    server_store: Store, private_redis: PrivateRedis, key: str
) -> None:
    """An acquire is one EVALSHA: the server sees no other command from the client."""
    limit = RateLimit(key, limit=100, period="day")
    limit.acquire()  # warm up: connects and loads the script
    admin = private_redis.client()
    admin.ping()
    admin.config_resetstat()
    limit.acquire()
    stats = admin.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(stat["calls"]) for name, stat in stats.items()}
    calls.pop("config", None)  # CONFIG RESETSTAT (redis-py reports subcommands by parent)
    calls.pop("config|resetstat", None)
    calls.pop("info", None)
    # Commands the script runs inside the server are counted too; they are not round trips.
    inside_script = {name: calls.pop(name) for name in ("time", "get", "incr") if name in calls}
    assert calls == {"evalsha": 1}
    assert inside_script == {"time": 1, "get": 1, "incr": 1}
