"""What a step returns to say how it went.

Signals are plain values, never exceptions: ``run``, ``guard``, ``compensate`` and ``undo``
return one. A step may also return a bare value (taken as ``Success(value)``) or raise (taken
as a retryable ``Failure`` carrying the exception).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Failure", "Halt", "Signal", "Skipped", "Success"]


@dataclass(frozen=True, slots=True)
class Success:
    """The step did its work; ``value`` flows on to steps that read ``Result(<step>)``."""

    value: Any = None


@dataclass(frozen=True, slots=True)
class Failure:
    """The step did not do its work.

    Args:
        error: an exception or any readable value (usually a message string).
        retryable: ``False`` stops ``@retries`` from trying again.
    """

    error: Any
    retryable: bool = True


@dataclass(frozen=True, slots=True)
class Halt:
    """Stop the whole run cleanly: keep the progress made, run no rollback."""

    reason: str


@dataclass(frozen=True, slots=True)
class Skipped:
    """This step had nothing to do; ``value`` still flows on, and the step is never undone."""

    value: Any = None
    reason: str | None = None

    def __init__(self, value: Any = None, *, reason: str | None = None) -> None:
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "reason", reason)


Signal = Success | Failure | Halt | Skipped
