"""Give back what a stored execution still holds, from its ledger alone (no frames, no live
hold objects): what cancelling or undoing a parked or aborted run in another process needs.

A hold record names its primitive, key, owner and the scope that took it (``holder``:
``"<execution id>:<step>"``); the declaration it came from is found again through the reactor
class of that execution of the tree (the root, or a composed child), so the release runs through
the same gates as a scope's own exit. Ordered-lock positions step aside (later positions need
not wait); period claims are released unmarked; rate-limit charges are spent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from py_reactor.coordination.declarations import Declaration
from py_reactor.coordination.gates import gate_for
from py_reactor.coordination.holds import HoldRecord
from py_reactor.dsl.declaration import StepKind
from py_reactor.dsl.reactor import Reactor
from py_reactor.engine.context import Context

__all__ = ["release_ledger"]

logger = logging.getLogger("py_reactor")


def release_ledger(cls: type[Reactor], context: Context) -> int:
    """Release every record of ``context``'s ledger, newest first; how many were released.

    A record whose declaration cannot be found (the class changed) is dropped and left to its
    ttl; a release the store refuses is logged, and that hold lapses by its ttl too.
    """
    classes = dict(_tree(cls, context))
    released = 0
    for record in reversed(list(context.holds)):
        context.holds.remove(record)
        declaration = _declaration(classes, record)
        if declaration is None:
            logger.warning(
                "py_reactor: %s %r of execution %s: its declaration is gone; it lapses by its ttl",
                record.primitive, record.key, record.owner,
            )  # fmt: skip
            continue
        try:
            gate_for(declaration.make(record.key)).exit(record, succeeded=False, failed=True)
            released += 1
        except Exception:
            logger.exception(
                "py_reactor: releasing %s %r of execution %s failed; it lapses by its ttl",
                record.primitive, record.key, record.owner,
            )  # fmt: skip
    return released


def _tree(cls: type[Reactor], context: Context) -> Iterator[tuple[str, type[Reactor]]]:
    """``(execution id, reactor class)`` of ``context`` and of its composed children."""
    yield context.execution_id, cls
    plan = cls.__py_reactor_plan__
    for name, child in context.children.items():
        step = plan.get(name.partition("[")[0])  # a map step's element: "<step>[<i>]"
        if step is not None and step.declaration.kind in (StepKind.REACTOR, StepKind.MAP):
            yield from _tree(step.declaration.target, child)


def _declaration(classes: dict[str, type[Reactor]], record: HoldRecord) -> Declaration | None:
    execution_id, _, step = record.holder.partition(":")
    cls = classes.get(execution_id)
    if cls is None:
        return None
    if not step:
        found = cls.coordination.get(record.primitive)
    else:
        plan = cls.__py_reactor_plan__.get(step.removesuffix("/rollback"))
        found = None if plan is None else plan.declaration.coordination.get(record.primitive)
    return found if isinstance(found, Declaration) else None
