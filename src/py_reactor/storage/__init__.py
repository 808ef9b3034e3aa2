"""Where coordination state lives: Redis, reached by URL or through the embedded server.

``current_store()`` returns one store per process and configuration: the server named by
``configure(redis_url=...)``, else the embedded default (see ``storage.embedded``).
"""

from __future__ import annotations

import os
import threading

from py_reactor.coordination.store import Store
from py_reactor.storage.redis import RedisStore

__all__ = ["RedisStore", "current_store", "forget_store"]

_lock = threading.Lock()
_cached: tuple[tuple[object, ...], int, Store] | None = None


def current_store() -> Store:
    """The store the current configuration names, created (and connected) on first use.

    Raises:
        StoreUnavailableError: the configured server, or the embedded one, cannot be reached.
    """
    global _cached
    from py_reactor.config import get_config

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
            store: Store = RedisStore.from_url(config.redis_url)
        else:
            from py_reactor.storage.embedded import embedded_store

            store = embedded_store(config.embedded_dir)
        _cached = (identity, os.getpid(), store)
        return store


def forget_store() -> None:
    """Drop the cached store so the next use connects again (tests, after ``configure``)."""
    global _cached
    with _lock:
        _cached = None
