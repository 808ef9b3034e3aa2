"""A Redis-backed overlap recorder: who was inside a protected section, and with whom.

Every ``enter`` and ``leave`` is one Lua script on the recorder's server, so the count, the
highest concurrency seen and the event log are updated atomically together, whether the callers
are threads of this process or other processes. A recorder is rebuilt from its URL and name, so
it pickles cheaply into ``spawn`` children.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

__all__ = ["OverlapRecorder"]

#: Keys written expire after this many seconds (the test server is private anyway).
_TTL = 3600

# KEYS: inside, max, overlaps, entries, events   ARGV: label, ttl
# Reply: how many are inside once the caller is in.
_ENTER = """
local inside = redis.call('INCR', KEYS[1])
local best = tonumber(redis.call('GET', KEYS[2]) or '0')
if inside > best then
  redis.call('SET', KEYS[2], inside)
end
if inside > 1 then
  redis.call('INCR', KEYS[3])
end
redis.call('INCR', KEYS[4])
redis.call('RPUSH', KEYS[5], 'enter|' .. ARGV[1])
for i = 1, 5 do
  redis.call('EXPIRE', KEYS[i], tonumber(ARGV[2]))
end
return inside
"""

# KEYS: inside, events   ARGV: label, ttl
# Reply: how many are still inside.
_LEAVE = """
local inside = redis.call('DECR', KEYS[1])
redis.call('RPUSH', KEYS[2], 'leave|' .. ARGV[1])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[2]))
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[2]))
return inside
"""


class OverlapRecorder:
    """Counts concurrent occupants of a section under ``name`` on the Redis server at ``url``.

    Args:
        url: the Redis server (use a private test server).
        name: what is being recorded; recorders with the same URL and name share their counts.
    """

    def __init__(self, url: str, name: str) -> None:
        self.url = url
        self.name = name
        prefix = f"test-overlap:{name}"
        self._inside = f"{prefix}:inside"
        self._max = f"{prefix}:max"
        self._overlaps = f"{prefix}:overlaps"
        self._entries = f"{prefix}:entries"
        self._events = f"{prefix}:events"
        self._client: redis.Redis | None = None
        self._guard = threading.Lock()
        self._enter: Any = None
        self._leave: Any = None

    def __reduce__(self) -> tuple[type[OverlapRecorder], tuple[str, str]]:
        return OverlapRecorder, (self.url, self.name)

    @property
    def client(self) -> redis.Redis:
        """The client this recorder talks through (created on first use)."""
        return self._connect()[0]

    def _connect(self) -> tuple[redis.Redis, Any, Any]:
        """The client and its two registered scripts, created once per recorder object."""
        if self._client is None:
            with self._guard:
                if self._client is None:
                    client = redis.Redis.from_url(self.url, decode_responses=True)
                    self._enter = client.register_script(_ENTER)
                    self._leave = client.register_script(_LEAVE)
                    self._client = client
        return self._client, self._enter, self._leave

    def enter(self, label: str) -> int:
        """Record that ``label`` entered; returns how many are inside now (itself included)."""
        _, enter, _ = self._connect()
        keys = [self._inside, self._max, self._overlaps, self._entries, self._events]
        return int(enter(keys=keys, args=[label, _TTL]))

    def leave(self, label: str) -> int:
        """Record that ``label`` left; returns how many are still inside."""
        _, _, leave = self._connect()
        return int(leave(keys=[self._inside, self._events], args=[label, _TTL]))

    @contextmanager
    def inside(self, label: str) -> Iterator[int]:
        """``enter(label)`` on entry, ``leave(label)`` on exit (even when the body raises)."""
        count = self.enter(label)
        try:
            yield count
        finally:
            self.leave(label)

    @property
    def current(self) -> int:
        """How many are inside right now."""
        return int(self.client.get(self._inside) or 0)

    @property
    def max_concurrency(self) -> int:
        """The most occupants seen inside at once."""
        return int(self.client.get(self._max) or 0)

    @property
    def overlaps(self) -> int:
        """How many enters found someone else already inside."""
        return int(self.client.get(self._overlaps) or 0)

    @property
    def entries(self) -> int:
        """How many enters were recorded in total."""
        return int(self.client.get(self._entries) or 0)

    @property
    def events(self) -> list[tuple[str, str]]:
        """Every ``("enter" | "leave", label)``, in the order the server applied them."""
        raw = self.client.lrange(self._events, 0, -1)
        return [tuple(item.split("|", 1)) for item in raw]  # type: ignore[misc]

    def replayed_max(self) -> int:
        """The highest concurrency recomputed from the event log (a cross-check of the count)."""
        inside = best = 0
        for kind, _ in self.events:
            inside += 1 if kind == "enter" else -1
            best = max(best, inside)
        return best

    def __repr__(self) -> str:
        return f"OverlapRecorder({self.url!r}, {self.name!r})"
