"""Fixtures of the coordination tests: the private server, and empty records per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from py_reactor import configure
from tests._redis import PrivateRedis
from tests.engine.coordination._helpers import BEHAVIOUR, ran


@pytest.fixture(autouse=True)
def _server(_default_settings: None, redis_url: str) -> Iterator[None]:
    """Point py_reactor at the private server and start every test with empty records."""
    configure(redis_url=redis_url)
    ran.clear()
    BEHAVIOUR.clear()
    yield
    ran.clear()
    BEHAVIOUR.clear()


@pytest.fixture
def raw(private_redis: PrivateRedis) -> redis.Redis:
    """A plain client of the private server, for reading state and the server's clock."""
    return private_redis.client()
