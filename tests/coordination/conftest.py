"""Fixtures for coordination tests: a real store (private server or embedded), fresh keys."""

from __future__ import annotations

import pytest
import redis

from py_reactor import configure
from py_reactor.coordination.store import Store
from py_reactor.storage import current_store


@pytest.fixture(params=["server", "embedded"])
def store(request: pytest.FixtureRequest) -> Store:
    """The configured store, once on a private redis-server and once on the embedded default."""
    if request.param == "server":
        configure(redis_url=request.getfixturevalue("redis_url"))
    else:
        configure(embedded_dir=request.getfixturevalue("embedded_folder"))
    return current_store()


@pytest.fixture
def server_store(redis_url: str) -> Store:
    """The private redis-server as the configured store (for tests that need one backend)."""
    configure(redis_url=redis_url)
    return current_store()


@pytest.fixture
def raw(store: Store) -> redis.Redis:
    """A plain client of the same server as ``store``, for inspecting keys.

    Overrides the root ``raw`` because the store here is also the embedded server, which the
    root fixture (the private redis-server only) does not reach."""
    client: redis.Redis = store.client  # type: ignore[attr-defined]
    return client
