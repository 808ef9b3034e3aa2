"""Who a hold belongs to: the running execution's root id, else a fresh id per acquisition.

The engine binds the owner (``bind_owner``) while it runs an execution, so a ``Lock`` taken in
a step body (or by a composed child) on a key the execution already holds is re-entrant
instead of deadlocking on itself. The binding is per thread: work handed to another thread is
another owner, even when it carries a copy of the context.

A ``@parallel`` reactor runs each branch (one step) in a thread of its own, under an owner
derived from the execution's: ``"<root id>/<step>"`` (``branch_owner``). The store then keeps
sibling branches apart like two executions, while ``encloses`` tells a scope which holds of the
tree are its own or an ancestor's (the reactor's, taken under the root id), to re-enter.

While a scope of the engine takes its holds it also binds *who* takes them (``bind_held_by``):
the execution and the step. A lock or semaphore writes that into its hold record in the store,
so that a reader of the store alone (the dashboard) names the step of a live hold, even of a
run that is never stored (one in the caller).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import uuid
from collections.abc import Iterator
from contextvars import ContextVar, Token
from typing import Any, NamedTuple

from py_reactor.aio import here

__all__ = [
    "HeldBy",
    "bind_held_by",
    "bind_owner",
    "branch_owner",
    "encloses",
    "new_owner",
    "owner_or_new",
    "owning",
    "related",
    "running_held_by",
    "running_owner",
    "unbind_held_by",
    "unbind_owner",
]

#: Separates an owner from the branch below it: ``"<root id>/<step>/<step of a child>"``.
BRANCH_SEPARATOR = "/"

# The root execution id of the execution running in this thread, and where it was bound (the
# thread, and the task of its loop: ``aio.here``). A context copied into another thread or task
# (``contextvars.copy_context``, ``asyncio.to_thread``, ``asyncio.create_task``) carries the
# value along, but ownership never crosses to another thread or task: there it reads as unset.
# With it, the ledger of that execution (where a call made inside it records its holds).
_Bound = tuple[str, tuple[int, object], Any]
_current: ContextVar[_Bound | None] = ContextVar("py_reactor_owner", default=None)


def bind_owner(owner: str, ledger: Any = None) -> Token[_Bound | None]:
    """Make ``owner`` the default owner of holds taken in this thread, and ``ledger`` (a
    :class:`~py_reactor.coordination.holds.Ledger`) the registry they are recorded in; undo
    with the token."""
    return _current.set((owner, here(), ledger))


def unbind_owner(token: Token[_Bound | None]) -> None:
    """Restore the owner that ``bind_owner`` replaced."""
    _current.reset(token)


def running_owner() -> str | None:
    """The owner bound in this thread, if any."""
    bound = _current.get()
    if bound is None or bound[1] != here():
        return None
    return str(bound[0])


def running_ledger() -> Any:
    """The ledger of the execution running in this thread (bound with its owner), if any:
    a primitive used inside a step body re-enters what that execution holds."""
    bound = _current.get()
    if bound is None or bound[1] != here():
        return None
    return bound[2]


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
    """``owner`` if given, else the owner bound in this thread, else a fresh id."""
    return owner or running_owner() or new_owner()


@contextlib.contextmanager
def owning(owner: str) -> Iterator[None]:
    """Make ``owner`` the owner of holds taken in this thread for the block (then restore);
    they are still recorded in the running execution's ledger."""
    token = bind_owner(owner, running_ledger())
    try:
        yield
    finally:
        unbind_owner(token)


def branch_owner(owner: str, step: str) -> str:
    """The owner a parallel branch running ``step`` works under, below ``owner``.

    Deterministic, so a branch run again after a park or a crash finds the holds it left.
    """
    return f"{owner}{BRANCH_SEPARATOR}{step}"


def encloses(outer: str, inner: str) -> bool:
    """Whether work running as ``inner`` is inside ``outer``'s: the same owner, or one of its
    branches (at any depth). A hold of ``outer`` is then one to re-enter, never to wait for."""
    return inner == outer or inner.startswith(outer + BRANCH_SEPARATOR)


def related(one: str, other: str) -> bool:
    """Whether two owners are on one line of descent (neither is a sibling's branch)."""
    return encloses(one, other) or encloses(other, one)


class HeldBy(NamedTuple):
    """Which execution took a hold, and for which of its steps (None: the reactor itself)."""

    execution_id: str
    step: str | None = None


# Who takes the holds being taken in this thread right now (a scope of the engine), and that
# thread: like the owner, never read in another thread that copied the context.
_Named = tuple[HeldBy, tuple[int, object]]
_held_by: ContextVar[_Named | None] = ContextVar("py_reactor_held_by", default=None)


def bind_held_by(by: HeldBy) -> Token[_Named | None]:
    """Name ``by`` in the holds taken in this thread; undo with the token."""
    return _held_by.set((by, here()))


def unbind_held_by(token: Token[_Named | None]) -> None:
    """Restore what ``bind_held_by`` replaced."""
    _held_by.reset(token)


def running_held_by() -> HeldBy | None:
    """Who takes the holds taken in this thread now, if a scope said so."""
    bound = _held_by.get()
    if bound is None or bound[1] != here():
        return None
    return bound[0]
