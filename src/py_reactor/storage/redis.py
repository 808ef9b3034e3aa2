"""The Redis store: every primitive operation is one Lua script, loaded once per client.

``RedisStore`` implements the typed ``coordination.store.Store`` protocol: each method names
its script, passes every key name it knows in ``KEYS`` (from ``storage.keys``) and turns the raw
reply into the protocol's reply type, so the primitives see neither.

Scripts live in ``storage/lua/<operation>.lua``; each opens with a header listing its KEYS, ARGV
and reply. They are read with ``importlib.resources`` (so they ship inside the wheel) and run
with EVALSHA, falling back to loading the script the first time a server has not seen it.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import weakref
from collections.abc import Callable, Sequence
from functools import cache, lru_cache
from importlib import resources
from typing import Any, Literal

import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.commands.core import Script
from redis.retry import Retry

from py_reactor.aio import at_loop_end, await_, in_bridge
from py_reactor.config.urls import EXAMPLE, redact, scrub, secrets_of
from py_reactor.coordination.owner import HeldBy
from py_reactor.coordination.store import (
    LockInfo,
    LockReply,
    OrderedLockInfo,
    PeriodReply,
    RateLimitReply,
    SemaphoreInfo,
    TurnReply,
    WaitTicket,
)
from py_reactor.errors import CoordinationError, StoreUnavailableError
from py_reactor.storage import keys
from py_reactor.storage.inspect import held_by  # reads back what _by writes

__all__ = ["CONNECT_TIMEOUT", "RedisStore", "held_by", "lua_source"]

#: Seconds to wait for a connection before reporting the store unreachable.
CONNECT_TIMEOUT = 5.0

#: The most connections one event loop's asyncio client opens (redis-py's default, 100, is
#: below the runs a loop has in flight, each waiting for a key on a connection of its own).
ASYNC_MAX_CONNECTIONS = 10_000


@cache
def lua_source(name: str) -> str:
    """The text of ``storage/lua/<name>.lua``, with its ``-- #include _<lib>`` lines inlined.

    Redis runs each script alone, so code two scripts share (``_*.lua``) is pasted in here;
    ``_layout`` is made from ``storage.keys`` (the names of an execution's record and queues).
    """
    if name == "_layout":
        return keys.lua_layout()
    try:
        text = (resources.files("py_reactor.storage") / "lua" / f"{name}.lua").read_text("utf-8")
    except FileNotFoundError:
        raise CoordinationError(f"py_reactor has no Lua script named {name!r}") from None
    return _INCLUDE.sub(lambda match: lua_source(match.group(1)), text)


_INCLUDE = re.compile(r"^-- #include (_\w+)$", re.MULTILINE)


class RedisStore:
    """A ``Store`` over one redis-py client (and its connection pool): one script per method.

    ``description`` names the server in messages and never holds a password: ``from_url``
    masks it, and every redis-py message quoted in an error has the client's password removed.
    """

    def __init__(self, client: redis.Redis, description: str) -> None:
        self.client = client
        self.description = description
        password = client.get_connection_kwargs().get("password")
        self._secrets: tuple[str, ...] = (str(password),) if password else ()
        self._scripts: dict[str, Script] = {}
        self._lock = threading.Lock()
        # One asyncio client per event loop (redis.asyncio connections belong to one loop).
        self._aclients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, redis.asyncio.Redis
        ] = weakref.WeakKeyDictionary()

    @classmethod
    def from_url(cls, url: str) -> RedisStore:
        """A store for the server at ``url`` (``redis://``, ``rediss://`` or ``unix://``).

        Opens no connection: an unreachable server is reported by the first operation.

        Raises:
            StoreUnavailableError: redis-py cannot build a client from ``url`` (the message
                shows the URL with its password masked).
        """
        try:
            # No client-side retries: an unreachable server is reported at once, and a script
            # is never sent twice.
            client = redis.Redis.from_url(
                url,
                decode_responses=True,
                retry=Retry(NoBackoff(), 0),
                socket_connect_timeout=CONNECT_TIMEOUT,
            )
        except (ValueError, TypeError, redis.RedisError, OSError) as exc:
            secrets = secrets_of(url)
            text = scrub(str(exc), secrets)
            error = StoreUnavailableError(
                f"the coordination store URL {redact(url)} cannot be used "
                f"({type(exc).__name__}: {text}); nothing was taken and the protected work did "
                f"not run. Fix configure(redis_url=...): give a URL like {EXAMPLE}"
            )
            raise error from (exc if text == str(exc) else None)
        store = cls(client, redact(url))
        store._secrets = tuple(sorted({*store._secrets, *secrets_of(url)}, key=len, reverse=True))
        return store

    def _script(self, name: str) -> Script:
        script = self._scripts.get(name)
        if script is None:
            with self._lock:
                script = self._scripts.get(name)
                if script is None:
                    script = self.client.register_script(lua_source(name))
                    self._scripts[name] = script
        return script

    # -- the Store protocol: one script, one round trip each (see coordination.store) ------

    def lock_acquire(
        self,
        key: str,
        owner: str,
        ttl_ms: int,
        *,
        waiter: WaitTicket | None = None,
        by: HeldBy | None = None,
    ) -> LockReply:
        k = keys.lock(key)
        more_keys, member = _waiting(waiter, k.wake)
        held, count, token, level = self.run_script(
            "lock_acquire", (k.hold, k.queue, *more_keys), (owner, ttl_ms, member, _by(by))
        )
        # {1, count, token, level} when held, {0, the holder's ms left, 0, 0} when busy
        return LockReply(True, count, token, level=level) if held else LockReply(False, 0, 0, count)

    def lock_release(self, key: str, owner: str, token: int, level: int) -> int:
        k = keys.lock(key)
        # Waking a parked execution writes its namespace's queues: cross-slot (lock_release.lua).
        return int(
            self.run_script("lock_release", (k.hold, k.queue, k.parked), (owner, token, level))
        )

    def lock_extend(self, key: str, owner: str, ttl_ms: int, token: int, level: int) -> bool:
        return bool(
            self.run_script("lock_extend", (keys.lock(key).hold,), (owner, ttl_ms, token, level))
        )

    def lock_state(self, key: str) -> LockInfo:
        k = keys.lock(key)
        owner, count, token, pttl, waiters, by = self.run_script(
            "lock_state", (k.hold, k.queue), ()
        )
        return LockInfo(owner or None, int(count), int(token), int(pttl), int(waiters), held_by(by))

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
        k = keys.semaphore(key)
        more_keys, member = _waiting(waiter, k.wake)
        held, count, _ = self.run_script(
            "semaphore_acquire",
            (k.holders, k.counts, k.queue, k.by, *more_keys),
            (owner, limit, lease_ms, member, _by(by)),
        )
        # {1, count, 0} when held, {0, ms until the soonest lease lapses, 0} when all are taken
        return LockReply(True, count, 0) if held else LockReply(False, 0, 0, count)

    def semaphore_release(self, key: str, owner: str) -> int:
        k = keys.semaphore(key)
        # Waking a parked execution writes its namespace's queues: cross-slot.
        return int(
            self.run_script(
                "semaphore_release", (k.holders, k.counts, k.queue, k.by, k.parked), (owner,)
            )
        )

    def semaphore_extend(self, key: str, owner: str, lease_ms: int) -> bool:
        k = keys.semaphore(key)
        return bool(
            self.run_script("semaphore_extend", (k.holders, k.counts, k.by), (owner, lease_ms))
        )

    def semaphore_state(self, key: str) -> SemaphoreInfo:
        k = keys.semaphore(key)
        held, waiters = self.run_script("semaphore_state", (k.holders, k.queue), ())
        return SemaphoreInfo(int(held), int(waiters))

    def wait_for_handoff(self, ticket: WaitTicket, timeout: float) -> int | None:
        signal = self.wait_signal(keys.wake(ticket.primitive, ticket.key, ticket.waiter), timeout)
        return None if signal is None else int(signal)

    def wait_cancel(self, ticket: WaitTicket) -> int:
        if ticket.primitive == "lock":
            k: keys.LockKeys | keys.SemaphoreKeys = keys.lock(ticket.key)
        elif ticket.primitive == "semaphore":
            k = keys.semaphore(ticket.key)
        else:
            raise CoordinationError(
                f"wait_cancel: a {ticket.primitive} has no waiter queue (only a lock or a "
                f"semaphore does); ticket {ticket!r}"
            )
        return int(
            self.run_script("wait_cancel", (k.queue, k.wake + ticket.waiter), (_member(ticket),))
        )

    def period_check(self, key: str, every: str | int) -> bool:
        k = keys.period(key)
        reply = self.run_script("period_claim", (k.done, k.claim, k.waiters), ("check", every))
        return int(reply[0]) == 1

    def period_claim(
        self,
        key: str,
        every: str | int,
        owner: str,
        lease_ms: int,
        *,
        waiter: WaitTicket | None = None,
    ) -> PeriodReply:
        k = keys.period(key)
        queued = ("", 0) if waiter is None else (waiter.waiter, waiter.wait_ms)
        status, bucket, expire_at, extra = self.run_script(
            "period_claim", (k.done, k.claim, k.waiters), ("claim", every, owner, lease_ms, *queued)
        )
        outcome = _PERIOD[int(status)]
        if outcome == "busy":
            return PeriodReply(outcome, str(bucket), int(expire_at), busy_ms=int(extra))
        return PeriodReply(outcome, str(bucket), int(expire_at), count=int(extra))

    def period_release(
        self, key: str, bucket: str, owner: str, *, mark: bool, expire_at: int
    ) -> int:
        k = keys.period(key)
        # Waking a parked execution writes its namespace's queues: cross-slot.
        return int(
            self.run_script(
                "period_release",
                (
                    keys.period_marker(key, bucket),
                    keys.period_claim(key, bucket),
                    k.waiters,
                    keys.parked("period", key),
                ),
                (owner, 1 if mark else 0, expire_at, k.wake),
            )
        )

    def period_extend(self, key: str, bucket: str, owner: str, lease_ms: int) -> bool:
        claim = keys.period_claim(key, bucket)
        return bool(self.run_script("period_extend", (claim,), (owner, lease_ms)))

    def rate_limit_acquire(self, key: str, windows: tuple[tuple[int, int], ...]) -> RateLimitReply:
        prefixes, args = _rate_limit_call(key, windows)
        reply = self.run_script("rate_limit_acquire", prefixes, args)
        if not reply:
            return _ADMITTED
        return RateLimitReply(False, int(reply[0]), tuple(int(window) for window in reply[1:]))

    def rate_limit_usage(self, key: str, windows: Sequence[int]) -> tuple[int, ...]:
        windows = tuple(windows)
        counts = self.run_script("rate_limit_usage", keys.rate_limit(key, windows), windows)
        return tuple(int(count) for count in counts)

    def ordered_lock_take(self, key: str, ttl_ms: int) -> tuple[int, int]:
        k = keys.ordered_lock(key)
        epoch, number = self.run_script("ordered_lock_take", (k.state, k.beats), (ttl_ms,))
        return int(epoch), int(number)

    def ordered_lock_turn(
        self, key: str, epoch: int, number: int, poison_ms: int, ttl_ms: int
    ) -> TurnReply:
        k = keys.ordered_lock(key)
        status, detail, stale_in = self.run_script(
            "ordered_lock_turn",
            (k.state, k.beats, keys.ordered_wake(key, epoch, number)),
            (epoch, number, poison_ms, ttl_ms, k.wake),
        )
        status = int(status)
        if status == 1:
            return TurnReply("turn", failed=int(detail) == 1)
        if status == 0:
            return TurnReply("wait", blocker=int(detail), stale_in_ms=int(stale_in))
        return TurnReply("never", blocker=int(detail))

    def ordered_lock_release(
        self, key: str, epoch: int, number: int, *, failed: bool, poison_ms: int, ttl_ms: int
    ) -> int:
        k = keys.ordered_lock(key)
        # Waking a parked execution writes its namespace's queues: cross-slot.
        outcome, _ = self.run_script(
            "ordered_lock_release",
            (k.state, k.beats, k.parked),
            (epoch, number, 1 if failed else 0, poison_ms, ttl_ms, k.wake),
        )
        return int(outcome)

    def ordered_lock_heartbeat(self, key: str, epoch: int, number: int, ttl_ms: int) -> bool:
        k = keys.ordered_lock(key)
        args = (epoch, number, ttl_ms)
        return int(self.run_script("ordered_lock_heartbeat", (k.state, k.beats), args)) == 1

    def ordered_lock_state(self, key: str) -> OrderedLockInfo:
        state = keys.ordered_lock(key).state
        epoch, issued, done, failed = self.run_script("ordered_lock_state", (state,), ())
        return OrderedLockInfo(int(epoch), int(issued), int(done), int(failed) == 1)

    def ordered_lock_wait(self, key: str, epoch: int, number: int, timeout: float) -> bool:
        return self.wait_signal(keys.ordered_wake(key, epoch, number), timeout) is not None

    # -- raw access (storage's own modules and tests) --------------------------------------

    def run_script(self, name: str, keys: Sequence[str], args: Sequence[str | int | float]) -> Any:
        """Run script ``name`` in one round trip (EVALSHA; loaded first if the server lacks it)
        and return its raw reply. In a bridge (``py_reactor.aio``) the round trip is awaited
        on the loop, through the loop's asyncio client.

        Calls EVALSHA directly rather than through redis-py's ``Script.__call__``, which costs
        a few microseconds per call that every acquire and release would pay.
        """
        script = self._scripts.get(name) or self._script(name)
        if in_bridge():
            return await_(self._arun_script(script, name, keys, args))
        try:
            try:
                return self.client.evalsha(script.sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                script.sha = self.client.script_load(script.script)
                return self.client.evalsha(script.sha, len(keys), *keys, *args)
        except (redis.RedisError, OSError) as exc:
            raise self._failed(name, exc) from self._cause(exc)

    async def _arun_script(
        self, script: Script, name: str, keys: Sequence[str], args: Sequence[str | int | float]
    ) -> Any:
        client = self.async_client()
        try:
            try:
                return await client.evalsha(script.sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                script.sha = await client.script_load(script.script)
                return await client.evalsha(script.sha, len(keys), *keys, *args)
        except (redis.RedisError, OSError) as exc:
            raise self._failed(name, exc) from self._cause(exc)

    def wait_signal(self, key: str | Sequence[str], timeout: float) -> str | None:
        """BLPOP ``key`` (or the first of several lists to have an element) for up to
        ``timeout`` seconds (at least 10 ms: Redis 6.2 reads a timeout under about 1 ms as 0,
        "block forever"). In a bridge the BLPOP is awaited on the loop: no thread waits."""
        names = [key] if isinstance(key, str) else list(key)
        try:
            if in_bridge():
                reply = await_(self.async_client().blpop(names, timeout=max(timeout, 0.01)))
            else:
                reply = self.client.blpop(names, timeout=max(timeout, 0.01))
        except (redis.RedisError, OSError) as exc:
            raise self._failed("BLPOP", exc) from self._cause(exc)
        if reply is None:
            return None
        return str(reply[1])

    def commands(self) -> Any:
        """The client plain reads and writes go through: redis-py's, or in a bridge one whose
        every command is awaited on the loop (same method names). Either way a command the
        store cannot answer raises ``StoreUnavailableError``, as the scripts do, not
        redis-py's own error."""
        if in_bridge():
            return _Commands(self.async_client(), self, await_)
        return _Commands(self.client, self, _as_is)

    def async_client(self) -> redis.asyncio.Redis:
        """The ``redis.asyncio`` client of the running loop, made on first use from this
        store's connection settings; closed by ``py_reactor.aio.close_loop_resources``."""
        loop = asyncio.get_running_loop()
        client = self._aclients.get(loop)
        if client is None:
            client = self._aclients[loop] = _async_twin(self.client)
            of_loop = weakref.ref(loop)  # not the loop itself: both tables are keyed weakly on it

            async def close() -> None:
                ended = of_loop()
                if ended is not None and self._aclients.get(ended) is client:
                    del self._aclients[ended]  # the next use on this loop opens a new one
                await client.aclose()

            at_loop_end(close)
        return client

    def _failed(self, what: str, exc: BaseException) -> StoreUnavailableError:
        """The error for ``exc``, raised by redis-py while running ``what``."""
        if isinstance(exc, (redis.AuthenticationError, redis.exceptions.AuthorizationError)):
            return self.rejected(exc)
        if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, OSError)):
            return self.unavailable(exc)
        return self.refused(what, exc)  # reachable, but refused: OOM, READONLY, SELECT, ...

    def _cause(self, exc: BaseException) -> BaseException | None:
        """``exc`` to chain to the error, or None if its message holds the password."""
        return exc if self._text(exc) == str(exc) else None

    def _text(self, exc: BaseException) -> str:
        """``exc``'s message without the client's password."""
        return scrub(str(exc), self._secrets)

    def read_error(self, exc: BaseException, what: str) -> StoreUnavailableError | None:
        """``exc``, a redis-py error raised by a plain read (``what``) of this store, reported
        as the scripts report theirs; None for any other exception. Callers that read through
        ``inspect`` or ``executions`` need not know redis-py's exception types."""
        if not isinstance(exc, redis.RedisError):
            return None
        return self._failed(what, exc)

    def unavailable(self, exc: BaseException) -> StoreUnavailableError:
        """The error that reports this store unreachable because of ``exc``."""
        return StoreUnavailableError(
            f"the coordination store at {self.description} is unreachable "
            f"({type(exc).__name__}: {self._text(exc)}); nothing was taken and the protected "
            "work did not run. Check that Redis is running there, or fix configure(redis_url=...)"
        )

    def rejected(self, exc: BaseException) -> StoreUnavailableError:
        """The error that reports the store refusing the client's user name or password."""
        return StoreUnavailableError(
            f"the coordination store at {self.description} did not accept the credentials "
            f"({type(exc).__name__}: {self._text(exc)}); nothing was taken and the protected "
            "work did not run. Fix the user name and password in configure(redis_url=...) "
            "(redis://user:password@host:6379/0)"
        )

    def refused(self, what: str, exc: BaseException) -> StoreUnavailableError:
        """The error that reports the store answering ``what`` with an error (``exc``)."""
        return StoreUnavailableError(
            f"the coordination store at {self.description} refused {what} "
            f"({type(exc).__name__}: {self._text(exc)}); nothing was taken and the protected "
            "work did not run. Check the server: its memory, read-only replica mode, its log, "
            "and that the database number in configure(redis_url=...) exists there"
        )

    def __repr__(self) -> str:
        return f"<RedisStore {self.description}>"


class _Commands:
    """A client's commands, each reporting a store it cannot reach as the scripts do
    (``StoreUnavailableError``); the asyncio client's also awaited (``settle``: ``await_``)."""

    __slots__ = ("_client", "_settle", "_store")

    def __init__(self, client: Any, store: RedisStore, settle: Callable[[Any], Any]) -> None:
        self._client = client
        self._store = store
        self._settle = settle

    def __getattr__(self, name: str) -> Any:
        command, store, settle = getattr(self._client, name), self._store, self._settle

        def reported(*args: Any, **options: Any) -> Any:
            try:
                return settle(command(*args, **options))
            except (redis.RedisError, OSError) as exc:
                raise store._failed(name.upper(), exc) from store._cause(exc)

        return reported


def _as_is(reply: Any) -> Any:
    return reply


#: redis-py's connection classes and their asyncio twins.
_ASYNC_CONNECTIONS: dict[type, type] = {
    redis.Connection: redis.asyncio.Connection,
    redis.SSLConnection: redis.asyncio.SSLConnection,
    redis.UnixDomainSocketConnection: redis.asyncio.UnixDomainSocketConnection,
}


def _async_twin(client: redis.Redis) -> redis.asyncio.Redis:
    """A ``redis.asyncio`` client for the server ``client`` talks to, with its address, its
    credentials and timeouts, and no client-side retries either."""
    pool = client.connection_pool
    options = {
        name: value
        for name, value in pool.connection_kwargs.items()
        if name in _ADDRESS_OPTIONS or name.startswith("ssl_")
    }
    connection_class = _ASYNC_CONNECTIONS.get(pool.connection_class, redis.asyncio.Connection)
    # No socket timeout: with one, redis-py wraps every write in a task (asyncio.wait_for) and
    # every read in a timer; on a loop the caller bounds a wait (cancelling the task), and a
    # BLPOP outlasting a socket timeout would be misread as a dead server.
    options["socket_timeout"] = None
    options.update(_NO_SETINFO)  # no CLIENT SETINFO: round trips and a metadata read per connection
    # Every run waiting on a loop for a hand-off blocks one connection in BLPOP (the sync
    # path blocks one per thread), so the pool is as large as the runs in flight.
    apool = redis.asyncio.ConnectionPool(
        max_connections=ASYNC_MAX_CONNECTIONS,
        connection_class=connection_class,
        retry=redis.asyncio.retry.Retry(NoBackoff(), 0),
        **options,
    )
    return redis.asyncio.Redis.from_pool(apool)  # closing the client closes its pool


#: What an asyncio connection takes over from the sync one's settings (the rest are redis-py's
#: own per-client objects).
_ADDRESS_OPTIONS = frozenset(
    {
        "host",
        "port",
        "path",
        "db",
        "username",
        "password",
        "credential_provider",
        "client_name",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "socket_keepalive_options",
        "decode_responses",
        "encoding",
        "encoding_errors",
        "protocol",
    }
)


try:  # redis-py 7.1+ names the client with driver_info; earlier, with lib_name/lib_version
    import redis.driver_info

    _NO_SETINFO: dict[str, None] = {"driver_info": None}
except ImportError:  # pragma: no cover - older redis-py
    _NO_SETINFO = {"lib_name": None, "lib_version": None}


_Extra = tuple[tuple[str, ...], str]  # (more KEYS, the queue member ARGV)
_NOT_WAITING: _Extra = ((), "")


def _waiting(waiter: WaitTicket | None, wake_prefix: str) -> _Extra:
    """What an acquire that may wait adds to its script call: its queue member (ARGV), and,
    once it has been queued, its wake list (KEYS), which a release may have handed it the key
    on. A caller that will not wait adds no key and an empty member."""
    if waiter is None:
        return _NOT_WAITING
    more_keys = (wake_prefix + waiter.waiter,) if waiter.queued else ()
    return more_keys, _member(waiter)


def _member(ticket: WaitTicket) -> str:
    """The ticket's member of its key's queue: ``<waiter>|<by>|<owner>|<ttl_ms>|<wait_ms>``
    (``by`` holds no ``|``, see ``_by``; the owner may)."""
    wait_ms = max(1, ticket.wait_ms)
    return f"{ticket.waiter}|{_by(ticket.by)}|{ticket.owner}|{ticket.ttl_ms}|{wait_ms}"


def _by(by: HeldBy | None) -> str:
    """``by`` as a hold record stores it: JSON ``[execution id, step]`` with no ``|`` (a queue
    member's separator; JSON reads the escape back), or ``""`` when no one is named. Read back
    by ``inspect.held_by``."""
    if by is None:
        return ""
    return json.dumps([by.execution_id, by.step], separators=(",", ":")).replace("|", "\\u007c")


_PERIOD: tuple[Literal["done", "due", "busy"], ...] = ("done", "due", "busy")
_ADMITTED = RateLimitReply(True)


@lru_cache(maxsize=1024)
def _rate_limit_call(
    key: str, windows: tuple[tuple[int, int], ...]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A rate limit's counter prefixes and script args (window, limit, ...), built once."""
    prefixes = keys.rate_limit(key, tuple(window for window, _ in windows))
    return prefixes, tuple(str(number) for pair in windows for number in pair)
