"""The Redis store: every primitive operation is one Lua script, loaded once per client.

Scripts live in ``storage/lua/<operation>.lua``; each opens with a header listing its KEYS, ARGV
and reply. They are read with ``importlib.resources`` (so they ship inside the wheel) and run
with EVALSHA, falling back to loading the script the first time a server has not seen it.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.commands.core import Script
from redis.retry import Retry

from py_reactor.errors import CoordinationError, StoreUnavailableError
from py_reactor.storage.urls import EXAMPLE, redact, scrub, secrets_of

__all__ = ["CONNECT_TIMEOUT", "RedisStore", "lua_source"]

#: Seconds to wait for a connection before reporting the store unreachable.
CONNECT_TIMEOUT = 5.0


@cache
def lua_source(name: str) -> str:
    """The text of ``storage/lua/<name>.lua``, with its ``-- #include _<lib>`` lines inlined.

    Redis runs each script alone, so code two scripts share (``_*.lua``) is pasted in here.
    """
    try:
        text = (resources.files("py_reactor.storage") / "lua" / f"{name}.lua").read_text("utf-8")
    except FileNotFoundError:
        raise CoordinationError(f"py_reactor has no Lua script named {name!r}") from None
    return _INCLUDE.sub(lambda match: lua_source(match.group(1)), text)


_INCLUDE = re.compile(r"^-- #include (_\w+)$", re.MULTILINE)


class RedisStore:
    """A ``Store`` over one redis-py client (and its connection pool).

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

    def run_script(self, name: str, keys: Sequence[str], args: Sequence[str | int | float]) -> Any:
        """Run script ``name`` in one round trip (EVALSHA; loaded first if the server lacks it).

        Calls EVALSHA directly rather than through redis-py's ``Script.__call__``, which costs
        a few microseconds per call that every acquire and release would pay.
        """
        script = self._scripts.get(name) or self._script(name)
        try:
            try:
                return self.client.evalsha(script.sha, len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                script.sha = self.client.script_load(script.script)
                return self.client.evalsha(script.sha, len(keys), *keys, *args)
        except (redis.RedisError, OSError) as exc:
            raise self._failed(name, exc) from self._cause(exc)

    def wait_signal(self, key: str, timeout: float) -> str | None:
        """BLPOP ``key`` for up to ``timeout`` seconds (at least 10 ms: Redis 6.2 reads a
        timeout under about 1 ms as 0, "block forever")."""
        try:
            reply = self.client.blpop([key], timeout=max(timeout, 0.01))
        except (redis.RedisError, OSError) as exc:
            raise self._failed("BLPOP", exc) from self._cause(exc)
        if reply is None:
            return None
        return str(reply[1])

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
