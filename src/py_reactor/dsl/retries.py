"""``@retries``: how many times a failing step is tried, and how long to wait in between."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from py_reactor.errors import DefinitionError

__all__ = ["Backoff", "RetryPolicy", "retries"]

Backoff = Literal["fixed", "linear", "exponential"]
_BACKOFFS = ("fixed", "linear", "exponential")

T = TypeVar("T")

#: Attribute under which a policy is attached to a function, a Step class or a step declaration.
RETRY_ATTRIBUTE = "__py_reactor_retries__"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A validated retry policy. Delays are in seconds.

    ``delay(n)`` is the pause after failed attempt ``n`` (1-based): ``fixed`` waits
    ``base_delay``; ``linear`` waits ``base_delay * n``; ``exponential`` waits
    ``base_delay * 2 ** (n - 1)``. ``max_delay`` caps it; ``jitter`` picks uniformly between 0 and
    the computed delay (full jitter, as Celery's ``retry_jitter``).
    """

    max_attempts: int = 3
    backoff: Backoff = "exponential"
    base_delay: float = 1.0
    max_delay: float | None = None
    jitter: bool = False

    def __post_init__(self) -> None:
        def bad(option: str, why: str, value: object) -> DefinitionError:
            return DefinitionError(f"retries({option}=...) {why}, got {value!r}")

        n = self.max_attempts
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise bad("max_attempts", "must be an integer >= 1", n)
        if self.backoff not in _BACKOFFS:
            raise bad("backoff", f"must be one of {', '.join(map(repr, _BACKOFFS))}", self.backoff)
        if not _is_number(self.base_delay) or self.base_delay < 0:
            raise bad("base_delay", "must be a number of seconds >= 0", self.base_delay)
        if self.max_delay is not None and (
            not _is_number(self.max_delay) or self.max_delay < self.base_delay
        ):
            raise bad(
                "max_delay", "must be None or a number of seconds >= base_delay", self.max_delay
            )
        if not isinstance(self.jitter, bool):
            raise bad("jitter", "must be True or False", self.jitter)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (1-based) before the next one."""
        if self.backoff == "fixed":
            seconds = float(self.base_delay)
        elif self.backoff == "linear":
            seconds = float(self.base_delay) * attempt
        else:
            seconds = float(self.base_delay) * 2 ** (attempt - 1)
        if self.max_delay is not None:
            seconds = min(seconds, float(self.max_delay))
        if self.jitter:
            seconds = random.uniform(0.0, seconds)
        return seconds


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def retries(
    max_attempts: int = 3,
    *,
    backoff: Backoff = "exponential",
    base_delay: float = 1.0,
    max_delay: float | None = None,
    jitter: bool = False,
) -> Any:
    """Retry a step's retryable failures.

    Works on a ``Step`` subclass and on an inline ``@step`` function, above or below ``@step``.
    Only retryable failures are retried (``Failure(retryable=True)`` and raised exceptions);
    input validation failures and guard refusals never are. Bad values are refused here, at
    import, naming the option.

    Raises:
        DefinitionError: an option is out of range, the step already declares a policy, or
            ``@retries`` was written without parentheses.
    """
    if callable(max_attempts):
        target = max_attempts
        label = getattr(target, "label", None) or getattr(target, "__qualname__", None)
        raise DefinitionError(
            f"@retries was used without parentheses on {label or repr(target)}; "
            "use `@retries(...)`, e.g. @retries(max_attempts=3) or @retries() for the defaults"
        )
    policy = RetryPolicy(
        max_attempts=max_attempts,
        backoff=backoff,
        base_delay=base_delay,
        max_delay=max_delay,
        jitter=jitter,
    )

    def decorate(target: T) -> T:
        attach_retry_policy(target, policy)
        return target

    return decorate


def attach_retry_policy(target: object, policy: RetryPolicy) -> None:
    """Record ``policy`` on ``target``, refusing a second policy on the same step."""
    attach = getattr(type(target), "attach_retries", None)
    if attach is not None:  # a step declaration: it knows where its policy may come from
        attach(target, policy)
        return
    own = getattr(target, "__dict__", {})
    if own.get(RETRY_ATTRIBUTE) is not None:
        name = getattr(target, "__qualname__", None) or getattr(target, "name", None) or target
        raise DefinitionError(
            f"step {name!s} declares @retries twice; keep one @retries per step "
            "(on the Step class or on the inline step, not both)"
        )
    setattr(target, RETRY_ATTRIBUTE, policy)
