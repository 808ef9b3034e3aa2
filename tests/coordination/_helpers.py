"""Helpers shared by the lock and semaphore contract tests (real Redis only)."""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pytest
import redis

from py_reactor.config import get_config
from py_reactor.coordination.owner import HeldBy
from py_reactor.coordination.store import (
    LockInfo,
    LockReply,
    OrderedLockInfo,
    PeriodReply,
    RateLimitReply,
    SemaphoreInfo,
    Store,
    TurnReply,
    WaitTicket,
)
from py_reactor.storage.redis import RedisStore, lua_source

__all__ = [
    "Recording",
    "StoreProxy",
    "WakeMissed",
    "client_commands",
    "in_one_window",
    "in_thread",
    "join_all",
    "leave_room",
    "server_now",
    "sha",
    "store_settings",
]

T = TypeVar("T")


def server_now(client: redis.Redis) -> float:
    """The server's clock, in seconds."""
    seconds, micros = client.time()
    return float(seconds) + float(micros) / 1e6


def leave_room(client: redis.Redis, window: int, seconds: float) -> None:
    """Sleep into the next window if fewer than ``seconds`` are left in the current one."""
    left = window - server_now(client) % window
    if left < seconds:
        time.sleep(left + 0.02)


def in_one_window(client: redis.Redis, window: int, body: Callable[[str], T]) -> T:
    """Run ``body(fresh key)`` until one run starts and ends in the same ``window``."""
    for _ in range(3):
        before = int(server_now(client) // window)
        result = body(f"test-{uuid.uuid4().hex[:12]}")
        if int(server_now(client) // window) == before:
            return result
    pytest.fail(f"three runs in a row crossed a {window}-second window boundary")


def store_settings() -> dict[str, Any]:
    """The current store settings, for a spawned child to configure itself the same way."""
    config = get_config()
    settings = {"redis_url": config.redis_url, "embedded_dir": config.embedded_dir}
    return {name: value for name, value in settings.items() if value is not None}


def in_thread(target: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``target`` in a started thread; the dict receives its ``result`` or ``error``, and
    ``at`` (monotonic) when it ended."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = target()
        except BaseException as exc:
            box["error"] = exc
        box["at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def join_all(threads: Sequence[threading.Thread], timeout: float = 60.0) -> None:
    """Join ``threads`` within ``timeout`` seconds in all, or fail."""
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
        assert not thread.is_alive(), "a thread did not finish"


class StoreProxy:
    """A ``Store`` that is not a ``RedisStore``: it passes every protocol call to ``inner``.

    Spelled out method by method, as any custom store would be; subclasses override the calls
    a test wants to change.
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.description = inner.description

    def lock_acquire(
        self,
        key: str,
        owner: str,
        ttl_ms: int,
        *,
        waiter: WaitTicket | None = None,
        by: HeldBy | None = None,
    ) -> LockReply:
        return self.inner.lock_acquire(key, owner, ttl_ms, waiter=waiter, by=by)

    def lock_release(self, key: str, owner: str, token: int, level: int) -> int:
        return self.inner.lock_release(key, owner, token, level)

    def lock_extend(self, key: str, owner: str, ttl_ms: int, token: int, level: int) -> bool:
        return self.inner.lock_extend(key, owner, ttl_ms, token, level)

    def lock_state(self, key: str) -> LockInfo:
        return self.inner.lock_state(key)

    def semaphore_acquire(
        self,
        key: str,
        owner: str,
        limit: int,
        lease_ms: int,
        *,
        waiter: WaitTicket | None = None,
        by: HeldBy | None = None,
    ) -> LockReply:
        return self.inner.semaphore_acquire(key, owner, limit, lease_ms, waiter=waiter, by=by)

    def semaphore_release(self, key: str, owner: str) -> int:
        return self.inner.semaphore_release(key, owner)

    def semaphore_extend(self, key: str, owner: str, lease_ms: int) -> bool:
        return self.inner.semaphore_extend(key, owner, lease_ms)

    def semaphore_state(self, key: str) -> SemaphoreInfo:
        return self.inner.semaphore_state(key)

    def wait_for_handoff(self, ticket: WaitTicket, timeout: float) -> int | None:
        return self.inner.wait_for_handoff(ticket, timeout)

    def wait_cancel(self, ticket: WaitTicket) -> int:
        return self.inner.wait_cancel(ticket)

    def period_check(self, key: str, every: str | int) -> bool:
        return self.inner.period_check(key, every)

    def period_claim(
        self,
        key: str,
        every: str | int,
        owner: str,
        lease_ms: int,
        *,
        waiter: WaitTicket | None = None,
    ) -> PeriodReply:
        return self.inner.period_claim(key, every, owner, lease_ms, waiter=waiter)

    def period_release(
        self, key: str, bucket: str, owner: str, *, mark: bool, expire_at: int
    ) -> int:
        return self.inner.period_release(key, bucket, owner, mark=mark, expire_at=expire_at)

    def period_extend(self, key: str, bucket: str, owner: str, lease_ms: int) -> bool:
        return self.inner.period_extend(key, bucket, owner, lease_ms)

    def rate_limit_acquire(self, key: str, windows: tuple[tuple[int, int], ...]) -> RateLimitReply:
        return self.inner.rate_limit_acquire(key, windows)

    def rate_limit_usage(self, key: str, windows: Sequence[int]) -> tuple[int, ...]:
        return self.inner.rate_limit_usage(key, windows)

    def ordered_lock_take(self, key: str, ttl_ms: int) -> tuple[int, int]:
        return self.inner.ordered_lock_take(key, ttl_ms)

    def ordered_lock_turn(
        self, key: str, epoch: int, number: int, poison_ms: int, ttl_ms: int
    ) -> TurnReply:
        return self.inner.ordered_lock_turn(key, epoch, number, poison_ms, ttl_ms)

    def ordered_lock_release(
        self, key: str, epoch: int, number: int, *, failed: bool, poison_ms: int, ttl_ms: int
    ) -> int:
        return self.inner.ordered_lock_release(
            key, epoch, number, failed=failed, poison_ms=poison_ms, ttl_ms=ttl_ms
        )

    def ordered_lock_heartbeat(self, key: str, epoch: int, number: int, ttl_ms: int) -> bool:
        return self.inner.ordered_lock_heartbeat(key, epoch, number, ttl_ms)

    def ordered_lock_state(self, key: str) -> OrderedLockInfo:
        return self.inner.ordered_lock_state(key)

    def ordered_lock_wait(self, key: str, epoch: int, number: int, timeout: float) -> bool:
        return self.inner.ordered_lock_wait(key, epoch, number, timeout)


class WakeMissed(StoreProxy):
    """A real store whose first wait returns as a BLPOP that just timed out would.

    Before returning, it runs ``meanwhile`` (the holder's release), so the release lands in the
    gap between the waiter's sleep timing out and its next acquire attempt: a window every
    waiter opens each time its capped sleep (at most 2 s, or the holder's lease) runs out.
    Everything else goes to the real Redis.
    """

    def __init__(self, inner: Store, meanwhile: Callable[[], None]) -> None:
        super().__init__(inner)
        self.meanwhile = meanwhile
        self.missed = False

    def wait_for_handoff(self, ticket: WaitTicket, timeout: float) -> int | None:
        if not self.missed:
            self.missed = True
            self.meanwhile()
            return None
        return self.inner.wait_for_handoff(ticket, timeout)


class Recording(StoreProxy):
    """A real store that records every protocol call: ``(thread name, method, result)``, in
    order, so a test can tell a waiter handed a key (``wait_for_handoff`` gave a token) from
    one that found it by trying again after a timed-out sleep."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.log: list[tuple[str, str, Any]] = []
        self._guard = threading.Lock()

    def __getattribute__(self, name: str) -> Any:
        found = object.__getattribute__(self, name)
        if (
            name.startswith("_")
            or name in ("inner", "description", "log", "of")
            or not callable(found)
        ):
            return found

        def recorded(*args: Any, **kwargs: Any) -> Any:
            result = found(*args, **kwargs)
            with object.__getattribute__(self, "_guard"):
                entry = (threading.current_thread().name, name, result)
                object.__getattribute__(self, "log").append(entry)
            return result

        return recorded

    def of(self, thread: threading.Thread) -> list[tuple[str, Any]]:
        """The calls ``thread`` made: ``(method, result)``, in order."""
        return [(method, result) for name, method, result in self.log if name == thread.name]


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
