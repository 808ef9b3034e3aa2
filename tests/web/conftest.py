"""Fixtures of the dashboard tests: a real store, Starlette's TestClient, waiting for a status."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Iterator

import pytest

from py_reactor import configure, find
from tests.web import _reactors as r

with warnings.catch_warnings():  # Starlette 1.x prefers httpx2 and says so when it imports httpx
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


@pytest.fixture(autouse=True)
def _store(redis_url: str) -> Iterator[None]:
    """Every test runs on the session's private Redis; parked runs stay parked (30 s timer)."""
    configure(redis_url=redis_url, park_delay=30.0, park_jitter=0.0)
    yield
    for gate in r.GATES.values():
        gate.set()  # never leave a worker thread blocked in a step


def until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Wait for ``condition`` (polling the store), failing with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def status_of(execution_id: str) -> str | None:
    """The stored status of ``execution_id``."""
    found = find(execution_id)
    return None if found is None else found.status


def client(dashboard: object) -> TestClient:
    """A TestClient for ``dashboard`` whose requests come from its own origin."""
    return TestClient(dashboard, base_url="http://dashboard.test")  # type: ignore[arg-type]
