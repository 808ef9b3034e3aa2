"""The read-only view of validated inputs a step receives as ``self.inputs``."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["Inputs"]


class Inputs(Mapping[str, Any]):
    """Validated values, readable as ``inputs.name`` or ``inputs["name"]``, never writable.

    Attribute access prefers the inputs: with an input called ``items``, ``inputs.items`` is
    that input, not the ``Mapping`` method (``inputs["items"]`` works either way). ``_asdict()``
    returns a plain dict copy; input names never start with ``_``, so it cannot clash.
    """

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_values", dict(values))

    def __getattribute__(self, name: str) -> Any:
        if name[:1] != "_":
            values = object.__getattribute__(self, "_values")
            if name in values:
                return values[name]
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # copy/pickle probe dunders before _values exists
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            names = ", ".join(self._values) or "(none)"
            raise AttributeError(f"no input named {name!r}; the inputs are: {names}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("step inputs are read-only")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("step inputs are read-only")

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __copy__(self) -> Inputs:
        return Inputs(self._values)

    def __deepcopy__(self, memo: dict[int, Any]) -> Inputs:

        return Inputs(copy.deepcopy(self._values, memo))

    def _asdict(self) -> dict[str, Any]:
        """A shallow copy of the values as a plain dict."""
        return dict(self._values)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._values.items())
        return f"Inputs({inner})"
