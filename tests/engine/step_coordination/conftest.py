"""Fixtures of the step-level coordination tests: the private server, a recorder per test.

Every test runs against the session's private redis-server, with keys unique to the test
(the ``key`` fixture of ``tests/conftest.py``).
"""

from __future__ import annotations

import pytest

from py_reactor import configure


@pytest.fixture(autouse=True)
def _server(_default_settings: None, redis_url: str) -> None:
    """Point py_reactor at the private server (settings are restored after the test)."""
    configure(redis_url=redis_url)
