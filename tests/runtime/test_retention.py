"""Retention: a terminal execution (and what is stored for it) expires ``retention`` after it
ended; a live one never does; listings drop what expired. On the thread worker, a real store."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis

from py_reactor import Lock, Reactor, background, configure, find, get_config, step, workers
from py_reactor.errors import ExecutionNotFoundError
from py_reactor.storage import keys
from tests._wait import status, until
from tests.runtime import _operations_reactors as o

RETENTION = 1.0


@background
class Quick(Reactor):
    n: int

    @step
    def double(n: int) -> int:
        return n * 2

    returns = "double"


@background
class Fails(Reactor):
    @step
    def boom() -> None:
        raise RuntimeError("boom")


@pytest.fixture(autouse=True)
def _store(redis_url: str) -> Iterator[None]:
    configure(redis_url=redis_url, park_delay=30.0, park_jitter=0.0, retention=RETENTION)
    yield
    o.LOG.clear()


def _ttl(raw: redis.Redis, execution_id: str) -> int:
    return int(raw.pttl(keys.execution(execution_id)))


def test_a_terminal_execution_expires_and_leaves_the_index(raw: redis.Redis) -> None:
    done = Quick.run(n=2)
    failed = Fails.run()
    assert done.wait(timeout=30).value == 4
    assert failed.wait(timeout=30).status == "failed"
    for ended in (done, failed):
        assert 0 < _ttl(raw, ended.execution_id) <= RETENTION * 1000
        assert raw.zscore(keys.EXPIRING, ended.execution_id) is not None
    until(lambda: not raw.exists(keys.execution(done.execution_id)), "the record expired", 10)
    until(
        lambda: raw.zscore(keys.INDEX, done.execution_id) is None,
        "a recovery pass dropped it from the index",
        10,
    )
    assert raw.zscore(keys.EXPIRING, done.execution_id) is None
    assert find(done.execution_id) is None
    with pytest.raises(ExecutionNotFoundError):
        Quick.undo(done.execution_id)


def test_a_waiting_execution_of_the_same_age_never_expires(key: str, raw: redis.Redis) -> None:
    with Lock(f"{key}:step", ttl=30, wait=0):
        parked = o.ParksAtStep.run(key=key)
        until(lambda: status(parked.execution_id) == "waiting", "the run parked")
        ended = Quick.run(n=1)
        assert ended.wait(timeout=30).value == 2
        time.sleep(RETENTION + 0.5)
        assert not raw.exists(keys.execution(ended.execution_id))
        assert _ttl(raw, parked.execution_id) == -1  # no expiry at all
        assert raw.zscore(keys.INDEX, parked.execution_id) is not None
    assert parked.wait(timeout=30).status == "completed"  # released: it ran, then it expires
    assert 0 < _ttl(raw, parked.execution_id) <= RETENTION * 1000


def test_an_undo_keeps_a_completed_run_alive_until_it_ends_again(raw: redis.Redis) -> None:
    configure(retention=60)
    done = Quick.run(n=3)
    assert done.wait(timeout=30).value == 6
    assert _ttl(raw, done.execution_id) > 0
    undone = Quick.undo(done.execution_id)
    assert undone.status == "cancelled"  # rolled back: ended again, retention counts anew
    assert raw.hget(keys.execution(done.execution_id), "undone") == "1"
    assert _ttl(raw, done.execution_id) > 0


def test_without_retention_nothing_expires(raw: redis.Redis) -> None:
    configure(retention=None)
    done = Quick.run(n=5)
    assert done.wait(timeout=30).value == 10
    assert _ttl(raw, done.execution_id) == -1
    assert raw.zscore(keys.EXPIRING, done.execution_id) is None
    raw.delete(keys.execution(done.execution_id))
    raw.zrem(keys.INDEX, done.execution_id)


@pytest.mark.parametrize("bad", [0, -1, "7 days", float("inf"), float("nan"), True])
def test_retention_refuses_what_is_not_a_duration(bad: object) -> None:
    with pytest.raises(ValueError, match=r"configure\(retention=\.\.\.\)"):
        configure(retention=bad)  # type: ignore[arg-type]


def test_retention_takes_seconds_or_a_timedelta_and_none_keeps_for_ever() -> None:
    assert configure(retention=timedelta(days=7)).retention == 7 * 86400
    assert configure(retention=30).retention == 30
    assert configure(namespace="shop").retention == 30  # left out: unchanged
    assert configure(retention=None).retention is None
    assert get_config().namespace == "shop"
    workers.stop()
