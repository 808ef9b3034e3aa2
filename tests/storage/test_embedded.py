"""The embedded default: one real redis-server per folder, started on first use, shared by
every process that uses the folder, stopped by ``stop_embedded``."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from py_reactor import configure, workers
from py_reactor.config import get_config
from py_reactor.coordination import Lock
from py_reactor.errors import LockAcquisitionError, StoreUnavailableError
from py_reactor.storage import current_store
from py_reactor.storage.embedded import embedded_store, stop_embedded
from py_reactor.storage.redis import RedisStore
from tests._redis import PrivateRedis
from tests._wait import until

SPAWN = multiprocessing.get_context("spawn")


@pytest.fixture
def folder() -> Iterator[str]:
    """A new, short folder under /tmp with no server yet; its server is stopped afterwards.

    No thread worker runs meanwhile: its dispatcher asks the configured store for work, which
    would start the folder's server again (as a next use does) the moment the test stops it.
    """
    workers.stop(wait=True)
    path = tempfile.mkdtemp(prefix="pyr-t-", dir="/tmp")
    try:
        yield path
    finally:
        workers.stop(wait=True)
        for pid in _servers_in(path):  # by signal: cleanup must not depend on the code under test
            os.kill(pid, signal.SIGTERM)
        until(lambda: not _servers_in(path), "the folder's server to exit")
        shutil.rmtree(path, ignore_errors=True)


def _servers_in(folder: str) -> list[int]:
    """Pids of running redis-server processes working in ``folder``."""
    target = os.path.realpath(folder)
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(entry / "cwd") != target:
                continue
            if Path(os.readlink(entry / "exe")).name != "redis-server":
                continue
        except OSError:
            continue
        pids.append(int(entry.name))
    return pids


def _server_pid(store: object) -> int:
    assert isinstance(store, RedisStore)
    return int(store.client.info("server")["process_id"])


def _share_child(folder: str, key: str, role: str, go: Any, held: Any, done: Any, out: Any) -> None:
    """Child process: start (or find) the folder's server at the same moment as its sibling,
    then either hold ``key`` until told to stop, or try to take it while the sibling holds it."""
    configure(embedded_dir=folder)
    if not go.wait(30):
        raise RuntimeError("never told to start")
    server = _server_pid(current_store())
    if role == "holder":
        with Lock(key, ttl=30):
            held.set()
            out.put((role, server, "held"))
            done.wait(30)
        return
    if not held.wait(30):
        raise RuntimeError("the sibling never took the lock")
    try:
        Lock(key, wait=0).acquire().release()
        outcome = "acquired"
    except LockAcquisitionError:
        outcome = "refused"
    out.put((role, server, outcome))


def test_a_lock_works_with_no_server_configured(folder: str, key: str) -> None:
    """With no redis_url, the first Lock starts the embedded server and a socket appears."""
    configure(embedded_dir=folder)
    assert get_config().redis_url is None
    socket = Path(folder) / "redis.sock"
    assert not socket.exists()
    with Lock(key, ttl=30) as hold:
        assert socket.exists()
        with pytest.raises(LockAcquisitionError):
            Lock(key).acquire()
        assert Lock(key).state().owner == hold.owner
    assert str(socket) in current_store().description
    assert len(_servers_in(folder)) == 1


def test_the_environment_variable_chooses_the_folder(
    folder: str, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``embedded_dir``, PY_REACTOR_EMBEDDED_DIR names the embedded server's folder."""
    monkeypatch.setenv("PY_REACTOR_EMBEDDED_DIR", folder)
    assert get_config().embedded_dir is None
    with Lock(key):
        assert (Path(folder) / "redis.sock").exists()
        assert len(_servers_in(folder)) == 1


def test_two_processes_share_one_server(folder: str, key: str) -> None:
    """Two OS processes starting the same folder's server at once end up on one server."""
    go, held, done = SPAWN.Event(), SPAWN.Event(), SPAWN.Event()
    out = SPAWN.Queue()
    children = [
        SPAWN.Process(target=_share_child, args=(folder, key, role, go, held, done, out))
        for role in ("holder", "contender")
    ]
    for child in children:
        child.start()
    try:
        go.set()
        results: dict[str, tuple[int, str]] = {}
        for _ in children:
            role, server, outcome = out.get(timeout=30)
            results[role] = (server, outcome)
        done.set()
        for child in children:
            child.join(30)
        assert [child.exitcode for child in children] == [0, 0]
    finally:
        done.set()
        for child in children:
            if child.is_alive():
                child.kill()
            child.join()
    assert results["holder"][1] == "held"
    assert results["contender"][1] == "refused"
    servers = _servers_in(folder)
    assert servers == [results["holder"][0]] == [results["contender"][0]]
    assert (Path(folder) / "redis.pid").read_text().strip() == str(servers[0])


def test_stop_embedded_stops_the_server_promptly_once(folder: str) -> None:
    """``stop_embedded`` stops a running server promptly (a few seconds at most on a loaded
    machine: it does not hang) and returns True, then returns False."""
    store = embedded_store(folder)
    pid = _server_pid(store)
    store.client.close()
    assert _servers_in(folder) == [pid]
    started = time.monotonic()
    assert stop_embedded(folder) is True
    took = time.monotonic() - started
    until(lambda: not _servers_in(folder), "the server to exit")
    assert not (Path(folder) / "redis.sock").exists()
    assert stop_embedded(folder) is False
    assert took < 5.0, f"stop_embedded took {took:.1f} s to stop a local server"


def test_a_killed_server_is_promptly_started_again_on_next_use(folder: str, key: str) -> None:
    """A server that died leaving its socket behind is replaced when a process next needs the
    store, within a few seconds (well inside the 10 s start timeout: it does not sit it out)."""
    first = embedded_store(folder)
    pid = _server_pid(first)
    first.client.close()
    os.kill(pid, signal.SIGKILL)
    until(lambda: not _servers_in(folder), "the server to die")
    assert (Path(folder) / "redis.sock").exists()  # left behind by the kill
    configure(embedded_dir=folder)
    started = time.monotonic()
    with Lock(key):
        took = time.monotonic() - started
        assert _server_pid(current_store()) != pid
        assert len(_servers_in(folder)) == 1
    assert took < 5.0, f"replacing a dead local server took {took:.1f} s"


def test_a_process_recovers_when_its_embedded_server_is_stopped(folder: str, key: str) -> None:
    """After the shared server stops, the next use in a running process starts it again."""
    # A long-running process (a web worker) that already used the embedded store must not fail
    # every coordination call until it restarts because the server was stopped from outside
    # (another process ran stop_embedded(), or the operator stopped it).
    configure(embedded_dir=folder)
    Lock(key).acquire().release()
    for pid in _servers_in(folder):  # stopped from outside this process
        os.kill(pid, signal.SIGTERM)
    until(lambda: not _servers_in(folder), "the server to exit")
    with Lock(key) as hold:
        assert Lock(key).state().owner == hold.owner
    assert len(_servers_in(folder)) == 1


def test_a_folder_too_long_for_a_unix_socket_is_refused(key: str) -> None:
    """An embedded folder whose socket path would be too long raises StoreUnavailableError."""
    folder = "/tmp/" + "pyr-too-long-" + "x" * 120
    configure(embedded_dir=folder)
    with pytest.raises(StoreUnavailableError, match="embedded_dir") as caught:
        Lock(key).acquire()
    assert folder in str(caught.value)
    assert not os.path.exists(folder)


def test_a_running_server_that_does_not_answer_is_never_doubled(folder: str, key: str) -> None:
    """If the folder's server runs but cannot be reached, no second server is started."""
    first = embedded_store(folder)
    pid = _server_pid(first)
    first.client.close()
    socket = Path(folder) / "redis.sock"
    hidden = Path(folder) / "hidden.sock"
    socket.rename(hidden)  # the server lives on; nobody can reach it through the usual path
    try:
        configure(embedded_dir=folder)
        with pytest.raises(StoreUnavailableError, match="runs but does not answer"):
            Lock(key).acquire()
        assert _servers_in(folder) == [pid]
    finally:
        hidden.rename(socket)
    with Lock(key):  # reachable again: the same server serves
        assert _server_pid(current_store()) == pid


def test_a_stale_pid_file_naming_another_redis_server_does_not_block_starting(
    folder: str, key: str, private_redis: PrivateRedis
) -> None:
    """A leftover pid file whose pid now belongs to some other redis-server is not trusted."""
    (Path(folder) / "redis.pid").write_text(f"{private_redis.process.pid}\n")
    configure(embedded_dir=folder)
    with Lock(key):
        assert _server_pid(current_store()) != private_redis.process.pid
    assert len(_servers_in(folder)) == 1


def test_what_the_server_holds_survives_its_own_kill(folder: str, key: str) -> None:
    """The embedded server keeps an append-only file (fsync every second): a value written
    more than a second before a kill -9 of the server is there after the restart."""
    first = embedded_store(folder)
    pid = _server_pid(first)
    first.client.set(f"durable:{key}", "kept")
    time.sleep(1.5)  # the everysec fsync has run
    first.client.close()
    os.kill(pid, signal.SIGKILL)
    until(lambda: not _servers_in(folder), "the server to die")
    configure(embedded_dir=folder)
    again = current_store()
    assert isinstance(again, RedisStore)
    assert _server_pid(again) != pid
    assert again.client.get(f"durable:{key}") == "kept"
