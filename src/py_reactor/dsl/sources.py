"""Where a step argument comes from: a reactor input, another step's result, or a constant."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Element", "Input", "Result", "Source", "Value"]

Transform = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class Input:
    """The reactor input ``name``, optionally passed through ``transform``."""

    name: str
    transform: Transform | None = None

    def __post_init__(self) -> None:
        _check_name("Input", self.name)
        _check_transform("Input", self.transform)


@dataclass(frozen=True, slots=True)
class Result:
    """The value step ``step`` produced, or its ``field`` (key of a mapping, else attribute)."""

    step: str
    field: str | None = None
    transform: Transform | None = None

    def __post_init__(self) -> None:
        _check_name("Result", self.step)
        if self.field is not None:
            _check_name("Result field", self.field)
        _check_transform("Result", self.transform)


@dataclass(frozen=True, slots=True)
class Value:
    """A constant argument."""

    value: Any


@dataclass(frozen=True, slots=True)
class Element:
    """Inside ``map_step``: the current element of the map step ``step`` (or its ``field``),
    optionally passed through ``transform``."""

    step: str
    field: str | None = None
    transform: Transform | None = None

    def __post_init__(self) -> None:
        _check_name("Element", self.step)
        if self.field is not None:
            _check_name("Element field", self.field)
        _check_transform("Element", self.transform)


Source = Input | Result | Value | Element


def _check_name(what: str, name: object) -> None:
    if not isinstance(name, str) or not name:
        raise TypeError(f"{what} needs a non-empty string name, got {name!r}")


def _check_transform(what: str, transform: object) -> None:
    if transform is not None and not callable(transform):
        raise TypeError(f"{what}(transform=...) must be callable, got {transform!r}")
