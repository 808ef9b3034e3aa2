"""What ``with_lock`` & co. record: the key (constant or function) and the checked options.

A declaration is inert data (introspectable through ``.coordination``); ``make(key)`` builds the
primitive for one execution once its key is known. Options are checked when the declaration is
made, by building a primitive with a placeholder key, so a bad option fails at import with the
same message the primitive itself would give.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from py_reactor.config.options import check_non_negative
from py_reactor.coordination.lock import Lock
from py_reactor.coordination.ordered_lock import OrderedLock
from py_reactor.coordination.period import Period
from py_reactor.coordination.rate_limit import RateLimit
from py_reactor.coordination.semaphore import Semaphore

__all__ = [
    "ORDER",
    "Declaration",
    "KeySpec",
    "LockDeclaration",
    "OrderedLockDeclaration",
    "PeriodDeclaration",
    "RateLimitDeclaration",
    "SemaphoreDeclaration",
]

#: A key: a constant non-empty str, or a function of the validated values returning one.
KeySpec = str | Callable[[Mapping[str, Any]], Any]

#: The fixed order primitives are taken in (released in reverse).
ORDER = ("ordered_lock", "period", "lock", "semaphore", "rate_limit")

_PLACEHOLDER = "<key>"


def _probe_key(key: KeySpec) -> str:
    return key if isinstance(key, str) and key else _PLACEHOLDER


@dataclass(frozen=True, slots=True)
class Declaration:
    """Base of the five declarations: ``key`` plus the primitive's options."""

    primitive: ClassVar[str] = ""
    key: KeySpec

    def make(self, key: str) -> Any:
        """The primitive for ``key``."""
        raise NotImplementedError

    def for_rollback(self) -> Declaration | None:
        """What a step's compensate/undo re-take: None, unless this primitive excludes others.

        Quotas and orderings (rate limit, period, ordered lock) never gate cleanup.
        """
        return None


@dataclass(frozen=True, slots=True)
class LockDeclaration(Declaration):
    """``with_lock(key, ttl=60, wait=0, auto_extend=True, rollback_wait=None)``."""

    primitive: ClassVar[str] = "lock"
    ttl: float = 60
    wait: float = 0
    auto_extend: bool = True
    rollback_wait: float | None = None

    def __post_init__(self) -> None:
        self.make(_probe_key(self.key))
        if self.rollback_wait is not None:
            check_non_negative(
                f"Lock({_probe_key(self.key)!r})", "rollback_wait", self.rollback_wait
            )

    def for_rollback(self) -> LockDeclaration:
        """This lock, waiting ``rollback_wait`` (default: its ``ttl``) instead of ``wait``."""
        wait = self.ttl if self.rollback_wait is None else self.rollback_wait
        return dataclasses.replace(self, wait=wait)

    def make(self, key: str) -> Lock:
        """A ``Lock`` on ``key`` with these options."""
        return Lock(key, ttl=self.ttl, wait=self.wait, auto_extend=self.auto_extend)


@dataclass(frozen=True, slots=True)
class SemaphoreDeclaration(Declaration):
    """``with_semaphore(key, limit=..., wait=0, lease=60, rollback_wait=None)``."""

    primitive: ClassVar[str] = "semaphore"
    limit: int = 1
    wait: float = 0
    lease: float = 60
    rollback_wait: float | None = None

    def __post_init__(self) -> None:
        self.make(_probe_key(self.key))
        if self.rollback_wait is not None:
            check_non_negative(
                f"Semaphore({_probe_key(self.key)!r})", "rollback_wait", self.rollback_wait
            )

    def for_rollback(self) -> SemaphoreDeclaration:
        """This semaphore, waiting ``rollback_wait`` (default: its ``lease``) for a slot."""
        wait = self.lease if self.rollback_wait is None else self.rollback_wait
        return dataclasses.replace(self, wait=wait)

    def make(self, key: str) -> Semaphore:
        """A ``Semaphore`` on ``key`` with these options."""
        return Semaphore(key, limit=self.limit, wait=self.wait, lease=self.lease)


@dataclass(frozen=True, slots=True)
class RateLimitDeclaration(Declaration):
    """``with_rate_limit(key, limit=, period=)``, ``(key, limits={...})`` or ``("name")``."""

    primitive: ClassVar[str] = "rate_limit"
    limit: int | None = None
    period: str | int | None = None
    limits: Mapping[str | int, int] | None = None
    wait: float = 0

    def __post_init__(self) -> None:
        self.make(_probe_key(self.key))

    def make(self, key: str) -> RateLimit:
        """A ``RateLimit`` on ``key`` with these options."""
        return RateLimit(
            key, limit=self.limit, period=self.period, limits=self.limits, wait=self.wait
        )


@dataclass(frozen=True, slots=True)
class PeriodDeclaration(Declaration):
    """``with_period(key, every=...)``: at most one successful run per bucket."""

    primitive: ClassVar[str] = "period"
    every: str | int = "day"
    wait: float = 60

    def __post_init__(self) -> None:
        self.make(_probe_key(self.key))

    def make(self, key: str) -> Period:
        """A ``Period`` on ``key`` with these options."""
        return Period(key, every=self.every, wait=self.wait)


@dataclass(frozen=True, slots=True)
class OrderedLockDeclaration(Declaration):
    """``with_ordered_lock(key, ttl=86400, poison_pill_timeout=600, strict=True)``."""

    primitive: ClassVar[str] = "ordered_lock"
    ttl: float = 86400
    poison_pill_timeout: float = 600
    strict: bool = True
    wait: float | None = None

    def __post_init__(self) -> None:
        self.make(_probe_key(self.key))

    def make(self, key: str) -> OrderedLock:
        """An ``OrderedLock`` on ``key`` with these options."""
        return OrderedLock(
            key,
            ttl=self.ttl,
            poison_pill_timeout=self.poison_pill_timeout,
            strict=self.strict,
            wait=self.wait,
        )
