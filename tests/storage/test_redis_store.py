"""The Redis store: script lookup, unreachable servers, the redis_url setting and store caching."""

from __future__ import annotations

import threading
import time

import pytest

from py_reactor import Reactor, configure, step, with_lock
from py_reactor.config import get_config
from py_reactor.coordination import Lock, Semaphore
from py_reactor.errors import (
    CoordinationError,
    LockAcquisitionError,
    StoreUnavailableError,
)
from py_reactor.storage import current_store
from py_reactor.storage.redis import RedisStore
from tests._redis import PrivateRedis, free_port


def _closed_url() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"


def test_an_unknown_script_name_is_a_coordination_error(redis_url: str) -> None:
    """Running a script that does not exist raises CoordinationError naming the script."""
    store = RedisStore.from_url(redis_url)
    try:
        with pytest.raises(CoordinationError, match="no_such_script") as caught:
            store.run_script("no_such_script", ("k",), ())
        assert not isinstance(caught.value, StoreUnavailableError)
    finally:
        store.client.close()


def test_run_script_runs_a_packaged_script(redis_url: str, key: str) -> None:
    """``run_script`` runs a named script on the server and returns its reply."""
    store = RedisStore.from_url(redis_url)
    try:
        reply = store.run_script("lock_state", (f"py_reactor:lock:{key}", f"{key}:q"), ())
        assert reply[0] == ""
        assert [int(value) for value in reply[1:5]] == [0, 0, -2, 0]
        assert reply[5] == ""  # nobody named as the holder
    finally:
        store.client.close()


def test_a_closed_port_makes_lock_acquire_raise_store_unavailable(key: str) -> None:
    """Acquiring a Lock on an unreachable server raises StoreUnavailableError naming the URL."""
    url = _closed_url()
    configure(redis_url=url)
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as caught:
        Lock(key, wait=60).acquire()
    assert url in str(caught.value)
    assert time.monotonic() - started < 10.0  # fails fast, does not sit out the 60 s wait
    assert not isinstance(caught.value, LockAcquisitionError)


def test_a_closed_port_makes_semaphore_acquire_raise_store_unavailable(key: str) -> None:
    """Taking a Semaphore slot on an unreachable server raises StoreUnavailableError naming it."""
    url = _closed_url()
    configure(redis_url=url)
    with pytest.raises(StoreUnavailableError, match=url):
        Semaphore(key, limit=2).acquire()


def test_a_closed_port_makes_wait_signal_raise_store_unavailable(key: str) -> None:
    """The blocking wait on an unreachable server raises StoreUnavailableError naming the URL."""
    url = _closed_url()
    configure(redis_url=url)
    with pytest.raises(StoreUnavailableError) as caught:
        current_store().wait_signal(f"{key}:wake", 0.1)
    assert url in str(caught.value)


def test_a_server_that_goes_away_makes_release_raise_store_unavailable(key: str) -> None:
    """A hold whose server stopped raises StoreUnavailableError on release, naming the URL."""
    server = PrivateRedis()
    try:
        configure(redis_url=server.url)
        hold = Lock(key, auto_extend=False).acquire()
        server.stop()
        with pytest.raises(StoreUnavailableError, match=server.url):
            hold.release()
        with pytest.raises(StoreUnavailableError, match=server.url):
            Lock(f"{key}:other").acquire()
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("not a url", ValueError),
        ("", ValueError),
        ("localhost:6379", ValueError),
        (6379, TypeError),
    ],
)
def test_a_malformed_redis_url_is_refused(value: object, error: type[Exception]) -> None:
    """``configure(redis_url=...)`` refuses a value that is not a URL, naming the option
    (a ValueError for a bad str, a TypeError for a value that is not a str)."""
    with pytest.raises(error, match="redis_url"):
        configure(redis_url=value)  # type: ignore[arg-type]
    assert get_config().redis_url is None


def test_current_store_is_cached_per_configuration(redis_url: str, key: str) -> None:
    """``current_store()`` returns one store per configuration and a new one when it changes."""
    configure(redis_url=redis_url)
    first = current_store()
    assert current_store() is first
    assert redis_url in first.description
    other_db = redis_url.rsplit("/", 1)[0] + "/1"
    configure(redis_url=other_db)
    second = current_store()
    assert second is not first
    assert current_store() is second
    assert other_db in second.description


def test_changing_redis_url_moves_coordination_to_the_new_server(redis_url: str, key: str) -> None:
    """Locks taken before ``configure(redis_url=...)`` changes live on the old database only."""
    configure(redis_url=redis_url)
    with Lock(key, ttl=30):
        configure(redis_url=redis_url.rsplit("/", 1)[0] + "/1")
        Lock(key, wait=0).acquire().release()  # another database: the key is free there
        configure(redis_url=redis_url)
        with pytest.raises(LockAcquisitionError):
            Lock(key, wait=0).acquire()


def test_threads_share_one_store(redis_url: str) -> None:
    """Threads asking for the store at the same moment all get the same object."""
    configure(redis_url=redis_url)
    start = threading.Barrier(8, timeout=10)
    seen: list[object] = []
    guard = threading.Lock()

    def ask() -> None:
        start.wait()
        store = current_store()
        with guard:
            seen.append(store)

    threads = [threading.Thread(target=ask, daemon=True) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(seen) == 8
    assert len({id(store) for store in seen}) == 1


def test_a_store_that_refuses_commands_fails_the_run_with_store_unavailable(
    private_redis: PrivateRedis, key: str
) -> None:
    """A reachable server that answers with an error (out of memory) gives a failure outcome."""
    configure(redis_url=private_redis.url)
    admin = private_redis.client()
    ran: list[str] = []

    @with_lock(key)
    class Guarded(Reactor):
        @step()
        def work() -> str:
            ran.append("work")
            return "done"

    admin.config_set("maxmemory", 1)
    try:
        outcome = Guarded.run()
    finally:
        admin.config_set("maxmemory", 0)
    assert not outcome.is_success
    assert isinstance(outcome.error, StoreUnavailableError)
    assert "refused" in str(outcome.error)
    assert ran == []
