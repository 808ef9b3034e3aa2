"""Helpers shared by the lock and semaphore contract tests (real Redis only)."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import redis

from py_reactor.coordination.store import Store
from py_reactor.storage.redis import RedisStore, lua_source

__all__ = ["WakeMissed", "client_commands", "sha", "until"]


def until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Block until ``condition()`` holds (state only visible in Redis), or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


class WakeMissed:
    """A real store whose first ``wait_signal`` returns as a BLPOP that just timed out would.

    Before returning, it runs ``meanwhile`` (the holder's release), so the release lands in the
    gap between the waiter's sleep timing out and its next acquire attempt: a window every
    waiter opens each time its capped sleep (at most 2 s, or the holder's lease) runs out.
    Everything else goes to the real Redis.
    """

    def __init__(self, inner: Store, meanwhile: Callable[[], None]) -> None:
        self.inner = inner
        self.description = inner.description
        self.meanwhile = meanwhile
        self.missed = False

    def run_script(self, name: str, keys: Sequence[str], args: Sequence[str | int | float]) -> Any:
        return self.inner.run_script(name, keys, args)

    def wait_signal(self, key: str, timeout: float) -> str | None:
        if not self.missed:
            self.missed = True
            self.meanwhile()
            return None
        return self.inner.wait_signal(key, timeout)


def client_commands(
    url: str, store: Store, key: str, operation: Callable[[], None]
) -> tuple[list[str], dict[str, int]]:
    """The commands sent while ``operation`` ran by ``store``'s connection or naming ``key``
    (read with MONITOR: commands run inside a script are not sent), and INFO commandstats."""
    assert isinstance(store, RedisStore)
    marker = uuid.uuid4().hex
    store.client.client_setname(f"rt-{marker}")
    with (
        redis.Redis.from_url(url, decode_responses=True, socket_timeout=10) as admin,
        redis.Redis.from_url(url, decode_responses=True, socket_timeout=10) as watcher,
        watcher.monitor() as monitor,
    ):
        named = {entry["addr"] for entry in admin.client_list() if entry["name"] == f"rt-{marker}"}
        admin.echo(f"start:{marker}")
        admin.config_resetstat()
        operation()
        stats = admin.info("commandstats")
        admin.echo(f"end:{marker}")
        sent: list[str] = []
        started = False
        for entry in monitor.listen():
            command = entry["command"]
            origin = f"{entry['client_address']}:{entry['client_port']}"
            if command == f"ECHO start:{marker}":
                started = True
            elif command == f"ECHO end:{marker}":
                break
            elif started and entry["client_type"] != "lua" and (origin in named or key in command):
                sent.append(command)
    calls = {name.removeprefix("cmdstat_"): int(value["calls"]) for name, value in stats.items()}
    return sent, calls


def sha(script: str) -> str:
    return hashlib.sha1(lua_source(script).encode()).hexdigest()
