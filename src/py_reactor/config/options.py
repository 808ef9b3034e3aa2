"""Checks shared by the primitives' constructors and the ``with_*`` decorators.

Both refuse bad values the moment they are given, with a message naming the option.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from py_reactor.errors import DefinitionError

__all__ = [
    "WINDOWS",
    "check_bool",
    "check_key",
    "check_limits",
    "check_namespace",
    "check_non_negative",
    "check_positive",
    "check_positive_int",
    "check_retention",
    "window_seconds",
]


def _number(where: str, option: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise DefinitionError(f"{where}: {option} must be a number of seconds, got {value!r}")
    return float(value)


def check_positive(where: str, option: str, value: Any) -> float:
    """``value`` as a float > 0 (seconds), or a DefinitionError naming ``option``."""
    number = _number(where, option, value)
    if number <= 0 or math.isinf(number):
        raise DefinitionError(f"{where}: {option} must be a finite number > 0, got {value!r}")
    return number


def check_non_negative(where: str, option: str, value: Any) -> float:
    """``value`` as a float >= 0 (seconds), or a DefinitionError naming ``option``."""
    number = _number(where, option, value)
    if number < 0 or math.isinf(number):
        raise DefinitionError(f"{where}: {option} must be a finite number >= 0, got {value!r}")
    return number


def check_positive_int(where: str, option: str, value: Any) -> int:
    """``value`` as an int >= 1, or a DefinitionError naming ``option``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DefinitionError(f"{where}: {option} must be an integer >= 1, got {value!r}")
    return value


def check_bool(where: str, option: str, value: Any) -> bool:
    """``value`` if it is a bool, or a DefinitionError naming ``option``."""
    if not isinstance(value, bool):
        raise DefinitionError(f"{where}: {option} must be True or False, got {value!r}")
    return value


def check_key(where: str, key: Any) -> str:
    """A usable constant key: a non-empty str."""
    if not isinstance(key, str) or not key:
        raise DefinitionError(f"{where}: key must be a non-empty str, got {key!r}")
    return key


#: Window names accepted by rate limits, in seconds.
WINDOWS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}


def window_seconds(where: str, option: str, window: Any) -> int:
    """A rate-limit window as whole seconds: a name from ``WINDOWS`` or an int >= 1."""
    if isinstance(window, str):
        if window not in WINDOWS:
            raise DefinitionError(
                f"{where}: {option} {window!r} is not a window; use one of "
                f"{', '.join(WINDOWS)} or a number of seconds"
            )
        return WINDOWS[window]
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise DefinitionError(
            f"{where}: {option} must be one of {', '.join(WINDOWS)} or an integer number of "
            f"seconds >= 1, got {window!r}"
        )
    return window


def check_limits(where: str, limits: Any) -> tuple[tuple[int, int], ...]:
    """``{"second": 3, "minute": 100}`` as ``((1, 3), (60, 100))``, checked, sorted by window."""
    if not isinstance(limits, Mapping) or not limits:
        raise DefinitionError(
            f"{where}: limits must be a non-empty dict like {{'second': 3, 'minute': 100}}, "
            f"got {limits!r}"
        )
    windows: dict[int, int] = {}
    for window, limit in limits.items():
        seconds = window_seconds(where, "limits window", window)
        windows[seconds] = check_positive_int(where, f"limits[{window!r}]", limit)
    return tuple(sorted(windows.items()))


_NAMESPACE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")


def check_namespace(value: Any, where: str) -> str:
    """``value`` as a namespace: letters, digits, ``_``, ``.`` and ``-``, 1 to 100 of them (it
    names Redis keys and a Celery queue).

    Raises:
        ValueError: anything else, named with ``where``.
    """
    if not isinstance(value, str) or not _NAMESPACE.fullmatch(value):
        raise ValueError(
            f"{where} takes a namespace of letters, digits, '_', '.' and '-' (at most 100, "
            f"not starting with '.' or '-'), such as 'shop'; got {value!r}"
        )
    return value


def check_retention(value: Any) -> float | None:
    """``configure(retention=...)`` in seconds: a positive number or ``timedelta``, or None
    (keep for ever).

    Raises:
        ValueError: anything else.
    """
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or seconds <= 0
    ):
        raise ValueError(
            "configure(retention=...) takes seconds > 0 or a timedelta (how long a terminal "
            f"execution is kept), or None to keep executions for ever; got {value!r}"
        )
    return float(seconds)
