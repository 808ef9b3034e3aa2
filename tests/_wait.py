"""Waiting in tests: one polling helper, and the status read the worker tests wait on.

A test waits for state it cannot be told about (a run another process drives, a key only
visible in Redis) by polling it here, never by a fixed sleep: a fixed sleep passes on a fast
machine without having seen anything, and fails on a slow one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from py_reactor import find

__all__ = ["status", "until"]

T = TypeVar("T")


def until(
    condition: Callable[[], T], what: str, timeout: float = 30.0, interval: float = 0.005
) -> T:
    """Poll ``condition()`` until it gives a truthy value, and return that value; after
    ``timeout`` seconds fail naming ``what`` (and the last value seen)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting until {what} ({value!r})")
        time.sleep(interval)
    return value


def status(execution_id: str) -> Any:
    """The stored status of an execution (None: not stored)."""
    found = find(execution_id)
    return None if found is None else found.status
