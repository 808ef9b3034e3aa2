"""Reading an execution's hold ledger in tests."""

from __future__ import annotations

from typing import Any

from py_reactor.engine.context import Context

ANY = "<any step>"


def ordered_positions(context: Context | None, step: str | None = ANY) -> list[dict[str, Any]]:
    """The ordered-lock positions ``context``'s own scopes hold in the ledger (of ``step``, of
    the reactor itself for None, of any of its scopes by default)."""
    if context is None:
        return []
    return [
        {"key": r.key, "epoch": r.data["epoch"], "number": r.data["number"]}
        for r in context.holds
        if r.primitive == "ordered_lock"
        and r.holder.startswith(f"{context.execution_id}:")
        and (step == ANY or r.step == step)
    ]


def ordered_position(context: Context, step: str | None = ANY) -> dict[str, Any]:
    """The one ordered-lock position ``context`` holds (of ``step``, if given)."""
    (position,) = ordered_positions(context, step)
    return position
