"""Where coordination state lives: Redis, reached by URL or through the embedded server.

``current_store()`` returns one store per process and configuration: the server named by
``configure(redis_url=...)``, else the embedded default (see ``storage.embedded``).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from py_reactor.config import get_config
from py_reactor.errors import StoreUnavailableError
from py_reactor.storage.executions import ExecutionStore

if TYPE_CHECKING:
    from py_reactor.storage.redis import RedisStore

__all__ = ["RedisStore", "current_store", "executions", "forget_store"]

_lock = threading.Lock()
_cached: tuple[tuple[object, ...], int, RedisStore] | None = None


def current_store() -> RedisStore:
    """The store the current configuration names, created (and connected) on first use.

    A ``RedisStore`` (the embedded one too), which implements ``coordination.store.Store``.

    Raises:
        StoreUnavailableError: the configured server, or the embedded one, cannot be reached,
            or its client cannot be built (a URL redis-py refuses, a folder that cannot be
            made); never a raw redis-py or OS error.
    """
    global _cached
    from py_reactor.storage.redis import RedisStore  # the lazy redis client

    config = get_config()
    identity = (config.redis_url, config.embedded_dir)
    cached = _cached
    if cached is not None and cached[0] == identity and cached[1] == os.getpid():
        return cached[2]
    with _lock:
        cached = _cached
        if cached is not None and cached[0] == identity and cached[1] == os.getpid():
            return cached[2]
        if config.redis_url is not None:
            store = RedisStore.from_url(config.redis_url)  # masks the URL's password
        else:
            store = _embedded(config.embedded_dir)
        _cached = (identity, os.getpid(), store)
        return store


def _embedded(configured_dir: str | None) -> RedisStore:
    """The embedded store, reporting any failure to set it up as StoreUnavailableError."""
    from redis.exceptions import RedisError  # the lazy redis client

    from py_reactor.storage.embedded import embedded_dir, embedded_store

    try:
        return embedded_store(configured_dir)
    except (RedisError, OSError) as exc:
        raise StoreUnavailableError(
            f"the embedded Redis in {embedded_dir(configured_dir)} could not be set up "
            f"({type(exc).__name__}: {exc}); nothing was taken and the protected work did not "
            "run. Set configure(embedded_dir=...) or PY_REACTOR_EMBEDDED_DIR to a folder this "
            "user can write, or configure(redis_url=...) to use a Redis server"
        ) from exc


def forget_store() -> None:
    """Drop the cached store so the next use connects again (tests, after ``configure``)."""
    global _cached
    with _lock:
        _cached = None


def executions() -> ExecutionStore:
    """The executions of the configured store (connected on first use)."""
    return ExecutionStore(current_store())


def __getattr__(name: str) -> Any:
    """``RedisStore`` on first access: importing the package never imports redis."""
    if name == "RedisStore":
        from py_reactor.storage.redis import RedisStore  # the lazy redis client

        return RedisStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
