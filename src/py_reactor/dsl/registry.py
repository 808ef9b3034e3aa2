"""Reactor and step classes by ``module:qualname``, so a worker can find them from a name.

Classes defined inside functions (``<locals>`` in the qualname) are left out: they run in-process
only. Defining a class again under the same name replaces the old entry silently, as a reload does.
"""

from __future__ import annotations

__all__ = ["class_path", "classes", "count", "lookup", "register"]

_classes: dict[str, type] = {}


def class_path(cls: type) -> str:
    """The ``module:qualname`` that names ``cls`` across processes."""
    return f"{cls.__module__}:{cls.__qualname__}"


def register(cls: type) -> None:
    """Remember ``cls`` under its path, unless it is local to a function."""
    if "<locals>" not in cls.__qualname__:
        _classes[class_path(cls)] = cls


def lookup(path: str) -> type | None:
    """The class registered under ``path``, or None."""
    return _classes.get(path)


def count() -> int:
    """How many classes are registered (what changes when a module defining reactors is
    imported)."""
    return len(_classes)


def classes() -> list[type]:
    """Every registered class (a snapshot: a worker asks which applications it can serve)."""
    return list(_classes.values())
