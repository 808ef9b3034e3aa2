"""Fixed-window rate limits: at most ``limit`` admitted calls per window, across processes.

Why fixed windows on the store: every process that calls the same API must share one count,
and the count must not depend on whose clock is right. The window a call falls in is
``floor(now / window)`` on the *server's* clock, so skewed clients agree, and one Lua script
checks every window of the limit and counts the call in all of them or in none: two windows
(``{"second": 3, "minute": 100}``) never disagree about whether a call happened. A refused call
learns ``retry_after``: the seconds until every full window has rolled over.

There is one counter per key, window and window index, expiring when its window ends (the
Redis layout is in ``storage/keys.py``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import TracebackType

from py_reactor.aio import call, sleep
from py_reactor.config import get_config
from py_reactor.config.options import (
    WINDOWS,
    check_key,
    check_limits,
    check_non_negative,
    check_positive_int,
    window_seconds,
)
from py_reactor.coordination._base import UsesStore, refuse_on_loop
from py_reactor.coordination.store import Store
from py_reactor.errors import CoordinationError, DefinitionError, RateLimitExceededError

__all__ = ["RateLimit"]

_NAMES = {seconds: name for name, seconds in WINDOWS.items()}

#: ((window seconds, limit), ...), sorted by window.
Windows = tuple[tuple[int, int], ...]


def _describe(window: int) -> str:
    """``60`` as ``"minute"``, ``90`` as ``"90-second"``."""
    return _NAMES.get(window) or f"{window}-second"


class RateLimit(UsesStore):
    """At most ``limit`` calls per window for ``key``, counted on the coordination store.

    ``RateLimit("stripe", limit=100, period="minute")`` allows 100 calls per minute;
    ``RateLimit("stripe", limits={"second": 3, "minute": 100})`` enforces both windows at once;
    ``RateLimit("stripe")`` uses the limit registered with
    ``configure(rate_limits={"stripe": {...}})``, looked up at each acquire.

    Used as a context manager, a call is counted on entry and nothing is released on exit::

        with RateLimit("stripe", limit=100, period="minute"):
            charge()
    """

    primitive = "rate_limit"

    def __init__(
        self,
        key: str,
        *,
        limit: int | None = None,
        period: str | int | None = None,
        limits: Mapping[str | int, int] | None = None,
        wait: float = 0,
        store: Store | None = None,
    ) -> None:
        """Declare a rate limit; nothing is contacted until the first acquire.

        Args:
            key: the name the count is shared under (a non-empty str).
            limit: calls admitted per ``period``; needs ``period``.
            period: the window: ``"second"``, ``"minute"``, ``"hour"``, ``"day"``, ``"week"``
                or a whole number of seconds >= 1; needs ``limit``.
            limits: several windows at once, ``{"second": 3, "minute": 100}``; instead of
                ``limit`` and ``period``.
            wait: seconds ``acquire`` may sleep for a full window to roll over before it
                raises; 0 (the default) raises at once.
            store: where the counts live; None uses the configured store, found on first use.

        Raises:
            DefinitionError: an option is missing, contradictory or out of range (the message
                names it).
        """
        where = f"RateLimit({key!r})"
        self.key = check_key(where, key)
        self.wait = check_non_negative(where, "wait", wait)
        self._store = store
        windows: Windows | None = None
        if limits is not None:
            if limit is not None or period is not None:
                raise DefinitionError(
                    f"{where}: give either limits={{...}} or limit= with period=, not both"
                )
            given = dict(limits) if isinstance(limits, Mapping) else limits
            windows = check_limits(where, given)
        elif limit is not None or period is not None:
            if period is None:
                raise DefinitionError(
                    f"{where}: limit={limit!r} needs period= (a window such as 'minute', or "
                    "a number of seconds)"
                )
            if limit is None:
                raise DefinitionError(
                    f"{where}: period={period!r} needs limit= (the calls admitted per window)"
                )
            seconds = window_seconds(where, "period", period)
            windows = ((seconds, check_positive_int(where, "limit", limit)),)
        #: True when the limit is the one registered under ``key``, looked up at each acquire.
        self.registered = windows is None
        self._windows: Windows | None = windows

    def _resolved(self) -> Windows:
        """The windows enforced: declared, or registered by name."""
        windows = self._windows
        if not self.registered and windows is not None:
            return windows

        registered = get_config().rate_limits.get(self.key)
        if registered is None:
            raise CoordinationError(
                f"no rate limit named {self.key!r} is registered, and RateLimit({self.key!r}) "
                "declares no limit of its own. Register it with "
                f"configure(rate_limits={{{self.key!r}: {{'second': 3, 'minute': 100}}}}) "
                "before it is used, or pass limit= with period= (or limits=)",
                primitive="rate_limit",
                key=self.key,
            )
        return registered

    @property
    def windows(self) -> Windows:
        """The windows enforced, as ``((window seconds, limit), ...)`` sorted by window.

        Raises:
            CoordinationError: the limit is looked up by name and no such name is registered.
        """
        return self._resolved()

    def acquire(self, *, wait: float | None = None) -> None:
        """Count one call in every window, or raise if any window is full.

        If a window is full and ``wait`` (default: the limit's own; 0 raises at once, as a
        worker that parks instead does) leaves room for it to roll over, sleeps until then
        (``retry_after`` seconds) and tries again.

        Raises:
            RateLimitExceededError: a window is full and ``wait`` does not cover the time
                until it admits again; ``retry_after`` is that time in seconds.
            CoordinationError: the limit is looked up by name and no such name is registered.
            StoreUnavailableError: the store cannot be reached.
        """
        refuse_on_loop(f"{self!r}.acquire()", "`async with` or `await ....aacquire()`")
        windows = self._windows
        if windows is None or self.registered:
            windows = self._resolved()
        store = self._store or self.store
        reply = store.rate_limit_acquire(self.key, windows)
        if reply.admitted:
            return
        wait = self.wait if wait is None else check_non_negative(repr(self), "wait", wait)
        deadline = time.monotonic() + wait
        while True:
            retry_after = reply.retry_after_ms / 1000
            if retry_after > deadline - time.monotonic():
                raise self._exceeded(windows, retry_after, reply.full, wait)
            sleep(retry_after)
            reply = store.rate_limit_acquire(self.key, windows)
            if reply.admitted:
                return

    def _exceeded(
        self, windows: Windows, retry_after: float, full: tuple[int, ...], wait: float
    ) -> RateLimitExceededError:
        limits = dict(windows)
        which = ", ".join(f"{limits.get(w, '?')} per {_describe(w)}" for w in full)
        waited = f" (waited up to {wait:g} s)" if wait else ""
        return RateLimitExceededError(
            f"rate limit {self.key!r} is full ({which}); it admits again in "
            f"{retry_after:.3f} s{waited}. Retry after retry_after seconds, pass a larger "
            "wait= to sleep through it, or raise the limit",
            retry_after=retry_after,
            key=self.key,
        )

    def usage(self) -> dict[int, int]:
        """How many calls each current window has admitted so far (one read-only script).

        Returns:
            ``{window seconds: calls admitted in the current window}``.

        Raises:
            CoordinationError: the limit is looked up by name and no such name is registered.
            StoreUnavailableError: the store cannot be reached.
        """
        seconds = [window for window, _ in self._resolved()]
        store = self._store or self.store
        counts = store.rate_limit_usage(self.key, seconds)
        return dict(zip(seconds, counts, strict=True))

    async def aacquire(self, *, wait: float | None = None) -> None:
        """:meth:`acquire` from a coroutine: a full window's ``retry_after`` is awaited on the
        loop, never slept in a thread."""
        await call(self.acquire, wait=wait)

    def __enter__(self) -> RateLimit:
        self.acquire()
        return self

    async def __aenter__(self) -> RateLimit:
        await self.aacquire()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    def __repr__(self) -> str:
        windows = self._windows
        if self.registered or windows is None:
            return f"RateLimit({self.key!r}, registered)"
        shown = ", ".join(f"{limit}/{_describe(window)}" for window, limit in windows)
        return f"RateLimit({self.key!r}, {shown}, wait={self.wait:g})"
