"""A process that holds a lock the way another service would: the entry point the asyncio
concurrency tests spawn (a module of its own, so ``spawn`` children import little)."""

from __future__ import annotations

from typing import Any

from py_reactor import Lock, configure
from tests._overlap import OverlapRecorder


def hold_then_release(url: str, key: str, recorder: OverlapRecorder, held: Any, go: Any) -> None:
    """Take ``key``, stay inside ``recorder`` until ``go`` is set (or 30 s), release."""
    configure(redis_url=url)
    with Lock(key, ttl=60, wait=30), recorder.inside("process"):
        held.set()
        go.wait(30)


def wait_for_the_key(url: str, key: str, acquired: Any) -> None:
    """Block (a plain sync waiter in another process) until ``key`` is handed over; put the
    moment it was (``time.time()``) on ``acquired``."""
    import time

    configure(redis_url=url)
    with Lock(key, ttl=60, wait=30):
        acquired.put(time.time())
