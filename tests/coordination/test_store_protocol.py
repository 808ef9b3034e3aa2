"""The typed ``Store`` protocol: any object implementing it serves all five primitives."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
import redis

from py_reactor.coordination import Lock, OrderedLock, Period, RateLimit, Semaphore
from py_reactor.coordination.store import Store
from py_reactor.errors import DefinitionError
from py_reactor.storage.redis import RedisStore
from tests.coordination._helpers import StoreProxy, leave_room

#: The protocol's members: its methods and the ``description`` attribute.
MEMBERS = sorted(
    {name for name in vars(Store) if not name.startswith("_")} | set(Store.__annotations__)
)


class _Counting(StoreProxy):
    """A proxy that counts which protocol methods the primitives call."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.calls: Counter[str] = Counter()
        self._guard = threading.Lock()

    def __getattribute__(self, name: str) -> Any:
        if name in MEMBERS and name != "description":
            with object.__getattribute__(self, "_guard"):
                object.__getattribute__(self, "calls")[name] += 1
        return object.__getattribute__(self, name)


def test_the_redis_store_and_a_plain_proxy_both_implement_the_protocol(store: Store) -> None:
    """``RedisStore`` is a ``Store``, and so is an object that only has the protocol's methods."""
    assert isinstance(store, RedisStore)
    assert isinstance(store, Store)
    proxy = StoreProxy(store)
    assert isinstance(proxy, Store)
    assert not isinstance(proxy, RedisStore)
    missing = [name for name in MEMBERS if not hasattr(proxy, name)]
    assert missing == []
    assert "lock_acquire" in MEMBERS
    assert "wait_for_handoff" in MEMBERS
    assert "run_script" not in MEMBERS  # raw scripts are storage's business


def test_every_primitive_runs_on_a_store_that_is_not_a_redis_store(
    store: Store, raw: redis.Redis, key: str
) -> None:
    """Lock, Semaphore, Period, RateLimit and OrderedLock work through the typed calls alone."""
    proxy = _Counting(store)
    with Lock(key, store=proxy) as hold:
        assert hold.fencing_token > 0
        assert Lock(key, store=proxy).state().owner == hold.owner
    with Semaphore(key, limit=2, store=proxy):
        assert Semaphore(key, limit=2, store=proxy).state().held == 1
    period = Period(key, every="day", store=proxy)
    with period as claim:
        assert claim.due
    assert period.is_done()
    limit = RateLimit(key, limit=5, period="minute", store=proxy)
    leave_room(raw, 60, 2)  # the call and its count in one minute window
    limit.acquire()
    assert limit.usage() == {60: 1}
    with OrderedLock(key, store=proxy) as turn:
        assert not turn.short_circuit
    assert OrderedLock(key, store=proxy).state().drained
    for name in ("lock_acquire", "lock_release", "lock_state", "semaphore_acquire",
                 "semaphore_release", "semaphore_state", "period_claim", "period_release",
                 "period_check", "rate_limit_acquire", "rate_limit_usage", "ordered_lock_take",
                 "ordered_lock_turn", "ordered_lock_release", "ordered_lock_state"):  # fmt: skip
        assert proxy.calls[name] >= 1, name


class _OldShape:
    """A store of the old, untyped shape: raw scripts and raw waits only."""

    description = "old"

    def run_script(self, name: str, keys: Any, args: Any) -> Any:
        raise AssertionError("never called")

    def wait_signal(self, key: str, timeout: float) -> str | None:
        raise AssertionError("never called")


def test_an_object_without_the_typed_methods_is_refused_with_a_clear_error() -> None:
    """A store lacking the protocol's methods is not a ``Store``; OrderedLock says so at once."""
    assert not isinstance(_OldShape(), Store)
    with pytest.raises(DefinitionError, match="Store"):
        OrderedLock("k", store=_OldShape())  # type: ignore[arg-type]
