"""The Redis key layout: one hash tag per coordination key, so each script works in one slot."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

import pytest
import redis
from redis.crc import key_slot

from py_reactor import configure
from py_reactor.coordination import Lock, OrderedLock, Period, RateLimit, Semaphore
from py_reactor.storage import current_store, keys

#: Keys with the characters that could break out of a hash tag, and ones that look escaped.
AWKWARD = ["plain", "a{b", "a}b", "}x", "{}", "{x}", "%7B", "a%7Db", "a}b{c", "x:{y}:z", "%"]


def _names(key: str) -> list[str]:
    """Every name the layout gives ``key``, over all five primitives."""
    return [
        *keys.lock(key),
        *keys.semaphore(key),
        *keys.period(key),
        keys.period_marker(key, "2024-05-01"),
        keys.period_claim(key, "2024-05-01"),
        *keys.rate_limit(key, (1, 60)),
        keys.rate_limit_counter(key, 60, 123),
        *keys.ordered_lock(key),
        keys.ordered_wake(key, 1715000000123456, 3),
        keys.wake("lock", key, "w1"),
        keys.wake("semaphore", key, "w1"),
        keys.wake("period", key, "w1"),
    ]


@pytest.mark.parametrize("key", AWKWARD)
def test_every_name_of_a_key_shares_one_hash_slot(key: str) -> None:
    """All names of one key hash to one Cluster slot, even when the key holds braces."""
    names = _names(key)
    assert len({key_slot(name.encode()) for name in names}) == 1, names
    assert all(keys.tag(key) in name for name in names)


def test_the_tag_is_never_empty_nor_cut_short_and_tells_keys_apart() -> None:
    """A brace in a key is encoded: the tag holds the whole key, and distinct keys stay apart."""
    for key in AWKWARD:
        inner = keys.tag(key)[1:-1]
        assert inner, key
        assert "{" not in inner, key
        assert "}" not in inner, key
    assert len({keys.tag(key) for key in AWKWARD}) == len(AWKWARD)
    assert keys.lock("a{b").hold == "py_reactor:lock:{a%7Bb}:hold"
    assert keys.lock("plain").hold == "py_reactor:lock:{plain}:hold"


def test_names_of_different_parts_never_collide() -> None:
    """No two keys (or parts) share a Redis name, whatever the user key holds."""
    names = [name for key in AWKWARD for name in _names(key)]
    assert len(set(names)) == len(names)
    assert keys.parked("lock", "a{b") == keys.lock("a{b").parked
    assert keys.wake("lock", "a{b", "w1") == keys.lock("a{b").wake + "w1"


@contextmanager
def _script_commands(url: str) -> Iterator[list[list[str]]]:
    """The commands scripts run on the server while the block runs (read with MONITOR)."""
    seen: list[list[str]] = []
    marker = f"end-{time.monotonic_ns()}"
    with (
        redis.Redis.from_url(url, decode_responses=True) as admin,
        redis.Redis.from_url(url, decode_responses=True, socket_timeout=20) as watcher,
        watcher.monitor() as monitor,
    ):
        admin.echo("start")
        done = threading.Event()

        def read() -> None:
            for entry in monitor.listen():
                command = entry["command"]
                if command == f"ECHO {marker}":
                    done.set()
                    return
                if entry["client_type"] == "lua":
                    seen.append(command.split(" "))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            yield seen
        finally:
            admin.echo(marker)
            assert done.wait(20), "MONITOR never saw the end marker"


def _handed_over(take: Callable[[], Callable[[], object]]) -> None:
    """A holder takes the key, a waiter queues for it, the holder releases, so the key is
    handed to the waiter, which releases too. ``take()`` returns the release."""
    release = take()
    done: list[Callable[[], object]] = []
    waiter = threading.Thread(target=lambda: done.append(take()))
    waiter.start()
    time.sleep(0.2)
    release()
    waiter.join(10)
    assert len(done) == 1, "the waiter was not handed the key"
    done[0]()


@pytest.mark.parametrize("key", ["cluster", "a}b{c"])
def test_scripts_touch_only_their_keys_slot_besides_the_due_set(redis_url: str, key: str) -> None:
    """Every key a primitive's scripts touch is in the slot of its key, except the global due
    set and ready list (a release wakes parked executions there)."""
    configure(redis_url=redis_url)
    current_store()
    key = f"{key}-{time.monotonic_ns()}"
    with _script_commands(redis_url) as seen:
        _handed_over(lambda: Lock(key, wait=5).acquire().release)
        _handed_over(lambda: Semaphore(key, limit=1, wait=5).acquire().release)
        _handed_over(lambda: partial(Period(key, every="day", wait=5).claim().release, mark=False))
        limit = RateLimit(key, limits={"second": 100, "minute": 100})
        limit.acquire()
        limit.usage()
        ordered = OrderedLock(key)
        _handed_over(
            lambda: partial(ordered.wait_turn(ordered.take_position()).release, failed=False)
        )
        ordered.state()
        Lock(key).state()
        Semaphore(key, limit=1).state()
        Period(key, every="day").is_done()
    slot = key_slot(keys.tag(key).encode())
    touched = {command[1].strip('"') for command in seen if command[0].strip('"').upper() != "TIME"}
    # MONITOR shows every client's scripts: this process's extender may be renewing a hold
    # another test left (keys "test-<hex>"), which is not this test's business.
    touched = {name for name in touched if ":{test-" not in name}
    for primitive in ("lock", "semaphore", "period", "rate_limit", "ordered_lock"):
        assert any(f"py_reactor:{primitive}:" in name for name in touched), primitive
    for name in sorted(touched):
        if name.startswith((keys.DUE_PREFIX, keys.READY_PREFIX, keys.EXECUTION_PREFIX)):
            continue
        assert key_slot(name.encode()) == slot, f"{name} is outside the slot of {key!r}"
