"""Shared fixtures: every test starts from py_reactor's default settings."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from py_reactor.testing import reset


@pytest.fixture(autouse=True)
def _default_settings() -> Iterator[None]:
    """Restore default settings (middleware, ...) before and after each test."""
    reset()
    yield
    reset()
