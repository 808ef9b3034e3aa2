"""Running a test's coroutine the way an app would end its loop: py_reactor's connections on
that loop closed before it ends (pytest turns an unclosed connection into a failure)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from py_reactor.aio import close_loop_resources

__all__ = ["run"]

T = TypeVar("T")


def run(main: Callable[[], Awaitable[T]]) -> T:
    """``asyncio.run(main())``, closing py_reactor's connections on that loop at the end."""

    async def wrapped() -> T:
        try:
            return await main()
        finally:
            await close_loop_resources()

    return asyncio.run(wrapped())
