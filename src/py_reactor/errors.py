"""The one error tree of py_reactor.

Every error the library raises or reports derives from :class:`ReactorError`::

    ReactorError
    ├── DefinitionError          a reactor, step or decorator is declared wrongly (raised at import)
    ├── InputValidationError     inputs do not satisfy a reactor's or step's contract
    ├── ArgumentResolutionError  a step argument could not be taken from its source at run time
    └── SerializationError       a context could not be written to / read from JSON

Errors carry where they happened as attributes (``reactor``, ``step``) so that handlers need not
parse messages; ``str(error)`` is always a full sentence that says what to do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ArgumentResolutionError",
    "DefinitionError",
    "InputValidationError",
    "ReactorError",
    "SerializationError",
]


class ReactorError(Exception):
    """Base class of every py_reactor error."""

    def __init__(self, message: str, *, reactor: str | None = None, step: str | None = None):
        super().__init__(message)
        self.message = message
        self.reactor = reactor
        self.step = step

    def __str__(self) -> str:
        return self.message


class DefinitionError(ReactorError):
    """A reactor, step or decorator is declared wrongly; raised when the class is defined."""


class InputValidationError(ReactorError):
    """Inputs do not satisfy a contract.

    ``errors`` holds one mapping per offending field: ``{"field", "message", "type", "input"}``.
    """

    def __init__(
        self,
        message: str,
        *,
        errors: Sequence[Mapping[str, Any]],
        reactor: str | None = None,
        step: str | None = None,
    ):
        super().__init__(message, reactor=reactor, step=step)
        self.errors: list[dict[str, Any]] = [dict(e) for e in errors]

    @property
    def fields(self) -> list[str]:
        """The names of the offending fields, in the order pydantic reported them."""
        return [str(e["field"]) for e in self.errors]


class ArgumentResolutionError(ReactorError):
    """A step argument could not be read from its source (for example a missing result field)."""


class SerializationError(ReactorError):
    """A context payload could not be encoded to or decoded from JSON."""
