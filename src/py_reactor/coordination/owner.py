"""Who a hold belongs to: the running execution's root id, else a fresh id per acquisition.

The engine sets ``current_owner`` while it runs an execution, so a ``Lock`` taken in a step
body (or by a composed child) on a key the execution already holds is re-entrant instead of
deadlocking on itself.
"""

from __future__ import annotations

import itertools
import os
import uuid
from contextvars import ContextVar

__all__ = ["current_owner", "new_owner", "owner_or_new"]

#: The root execution id of the execution running in this thread, if any.
current_owner: ContextVar[str | None] = ContextVar("py_reactor_owner", default=None)


_prefix = ("", -1)
_counter = itertools.count(1)


def new_owner() -> str:
    """A fresh owner id for an acquisition made outside any execution.

    A random per-process prefix plus a counter: unique across processes and machines, and
    cheaper than a uuid per acquisition (this is on every uncontended acquire's path).
    """
    global _prefix
    prefix, pid = _prefix
    if pid != os.getpid():  # first call, or a forked child: never share the parent's ids
        prefix, pid = uuid.uuid4().hex[:16], os.getpid()
        _prefix = (prefix, pid)
    return f"{prefix}-{next(_counter)}"


def owner_or_new(owner: str | None) -> str:
    """``owner`` if given, else the running execution's root id, else a fresh id."""
    return owner or current_owner.get() or new_owner()
