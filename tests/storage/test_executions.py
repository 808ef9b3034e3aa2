"""The execution records' scripts that Celery dispatchers rely on, against a private Redis.

No worker runs here (the records' reactor does not exist): these are the store's promises —
a job is taken for sending once, re-sent with a growing delay while nobody claims it, and
claimed only at the epoch it was sent at.
"""

from __future__ import annotations

import time

import pytest

from py_reactor.storage import keys
from py_reactor.storage.executions import ExecutionStore, record_key
from py_reactor.storage.redis import RedisStore


@pytest.fixture
def executions(redis_url: str) -> ExecutionStore:
    from py_reactor import workers

    workers.stop()  # no thread worker of this process may claim these records meanwhile
    return ExecutionStore(RedisStore.from_url(redis_url))


def _due_in_ms(executions: ExecutionStore, execution_id: str) -> float:
    client = executions.store.client  # type: ignore[attr-defined]
    server_s, micro = client.time()
    return float(client.zscore(keys.due("tests"), execution_id)) - (server_s * 1000 + micro / 1000)


def test_a_due_execution_is_taken_for_sending_once_with_its_epoch_and_queue(
    executions: ExecutionStore, key: str
) -> None:
    assert executions.create(key, "nowhere:Nothing", "{}", "pending", namespace="tests", queue="q1")
    assert executions.take_for_sending([key], resend_after=30) == [(key, 0, "q1", "tests")]
    assert executions.take_for_sending([key], resend_after=30) == []  # another dispatcher


def test_an_unclaimed_job_is_sent_again_later_and_later_until_a_claim(
    executions: ExecutionStore, key: str
) -> None:
    """Each send that no claim followed doubles the delay before the next one."""
    assert executions.create(
        key, "nowhere:Nothing", "{}", "pending", namespace="tests", sent_by_caller=0.001
    )
    time.sleep(0.01)
    delays = []
    for _ in range(3):
        until = time.monotonic() + 5
        while not executions.take_for_sending([key], resend_after=0.1):
            assert time.monotonic() < until, "never due again"
            time.sleep(0.01)
        delays.append(_due_in_ms(executions, key))
    assert delays[0] == pytest.approx(100, abs=40)
    assert delays[1] == pytest.approx(200, abs=40)
    assert delays[2] == pytest.approx(400, abs=40)
    epoch = executions.claim(key, "me", 30, due=False, sent_at_epoch=0)
    assert epoch == 1
    client = executions.store.client  # type: ignore[attr-defined]
    assert client.hget(record_key(key), "sends") == "0"


def test_a_job_sent_before_another_claim_claims_nothing(
    executions: ExecutionStore, key: str
) -> None:
    assert executions.create(
        key, "nowhere:Nothing", "{}", "pending", namespace="tests", sent_by_caller=30
    )
    assert executions.claim(key, "first", 0.05, due=False, sent_at_epoch=0) == 1
    time.sleep(0.1)  # its lease lapsed: only the epoch tells the late copy apart
    assert executions.claim(key, "copy", 30, due=False, sent_at_epoch=0) == 0
    assert executions.claim(key, "resent", 30, due=False, sent_at_epoch=1) == 2


def test_a_due_id_whose_record_is_gone_is_dropped_not_sent(
    executions: ExecutionStore, key: str
) -> None:
    client = executions.store.client  # type: ignore[attr-defined]
    namespace = f"gone-{key}"  # no worker serves it: only this test's pass sees it
    client.zadd(keys.due(namespace), {key: 0})
    assert executions.take_for_sending([key], resend_after=30) == []
    assert executions.due([namespace]) == ([], [])  # the recovery pass drops it
    assert client.zscore(keys.due(namespace), key) is None
    assert not client.exists(record_key(key))
