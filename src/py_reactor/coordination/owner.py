"""Who a hold belongs to: the running execution's root id, else a fresh id per acquisition.

The engine sets ``current_owner`` while it runs an execution, so a ``Lock`` taken in a step
body (or by a composed child) on a key the execution already holds is re-entrant instead of
deadlocking on itself.
"""

from __future__ import annotations

import uuid
from contextvars import ContextVar

__all__ = ["current_owner", "new_owner", "owner_or_new"]

#: The root execution id of the execution running in this thread, if any.
current_owner: ContextVar[str | None] = ContextVar("py_reactor_owner", default=None)


def new_owner() -> str:
    """A fresh owner id for an acquisition made outside any execution."""
    return uuid.uuid4().hex


def owner_or_new(owner: str | None) -> str:
    """``owner`` if given, else the running execution's root id, else a fresh id."""
    return owner or current_owner.get() or new_owner()
