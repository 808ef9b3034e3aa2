"""Fixtures of the coordination tests: the private server, and empty records per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from py_reactor import configure
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
