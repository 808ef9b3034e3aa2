"""The read-only view of validated inputs a step or key function receives."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["Inputs"]


class Inputs(Mapping[str, Any]):
    """Validated values, readable as ``inputs.name`` or ``inputs["name"]``, never writable."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            names = ", ".join(self._values) or "(none)"
            raise AttributeError(f"no input named {name!r}; the inputs are: {names}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("step inputs are read-only")

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"Inputs({inner})"
