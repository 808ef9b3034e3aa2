"""Fixtures of the dashboard tests: a real store and Starlette's TestClient."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest

from py_reactor import configure
from tests.web import _reactors as r

with warnings.catch_warnings():  # Starlette 1.x prefers httpx2 and says so when it imports httpx
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


@pytest.fixture(autouse=True)
def _store(redis_url: str) -> Iterator[None]:
    """Every test runs on the session's private Redis; parked runs stay parked (a 30 s timer,
    far longer than the 10 s within which the tests expect a release to wake them)."""
    configure(redis_url=redis_url, park_delay=30.0, park_jitter=0.0)
    yield
    for gate in r.GATES.values():
        gate.set()  # never leave a worker thread blocked in a step


def client(dashboard: object) -> TestClient:
    """A TestClient for ``dashboard`` whose requests come from its own origin."""
    return TestClient(dashboard, base_url="http://dashboard.test")  # type: ignore[arg-type]
