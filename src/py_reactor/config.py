"""Process-wide settings: ``configure()`` to change, ``get_config()`` to read, ``reset_config()``.

Settings are an immutable snapshot; a run reads the snapshot once when it starts, so changing
the configuration never affects a run already in progress.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace

from py_reactor.observability.middleware import Middleware

__all__ = ["Config", "configure", "get_config", "reset_config"]


@dataclass(frozen=True, slots=True)
class Config:
    """The current settings.

    Attributes:
        middleware: receives lifecycle events, in this order (after-hooks too: events are
            delivered in the order they happen).
    """

    middleware: tuple[Middleware, ...] = ()


_lock = threading.Lock()
_config = Config()


def configure(*, middleware: Iterable[Middleware] | None = None) -> Config:
    """Change settings; options left out keep their value. Returns the new settings.

    Raises:
        TypeError: an option has the wrong type (the message names the option).
    """
    global _config
    changes: dict[str, object] = {}
    if middleware is not None:
        items = tuple(middleware)
        for item in items:
            if not isinstance(item, Middleware):
                raise TypeError(
                    f"configure(middleware=...) takes py_reactor.Middleware instances, got {item!r}"
                )
        changes["middleware"] = items
    with _lock:
        _config = replace(_config, **changes)  # type: ignore[arg-type]
        return _config


def get_config() -> Config:
    """The current settings (an immutable snapshot)."""
    return _config


def reset_config() -> None:
    """Go back to the defaults (used by tests)."""
    global _config
    with _lock:
        _config = Config()
