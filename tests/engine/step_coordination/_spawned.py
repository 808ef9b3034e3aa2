"""A reactor whose one step takes a short-lived step lock, for ``spawn`` children to hold and die.

It lives at module level in a module of its own so that a ``spawn`` child imports it by name.
In the child (``hold_forever``) the step signals that it is inside and never leaves; the test
kills the process with SIGKILL. In the test process ``_inside`` is None and the same step just
returns, so a run there takes and releases the same lock.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from py_reactor import Reactor, Step, configure, step, with_lock

__all__ = ["KILLABLE_TTL", "Held", "HoldStep", "held_key", "hold_forever"]

#: Seconds the step's lock lives without extension (the dead holder's lock lapses after this).
KILLABLE_TTL = 2

#: The event ``HoldStep`` sets once inside, in a child started by ``hold_forever`` (else None).
_inside: Any = None


def held_key(args: Mapping[str, Any]) -> str:
    """The step's lock key, from its arguments."""
    return f"{args['ns']}:acct:{args['account_id']}"


@with_lock(held_key, ttl=KILLABLE_TTL, wait=5)
class HoldStep(Step):
    """In a ``hold_forever`` child: signal, then stay inside for good. Elsewhere: return."""

    ns: str
    account_id: int

    def run(self) -> Any:
        if _inside is not None:
            _inside.set()
            threading.Event().wait()  # never leaves: the test kills this process
        return "held"


class Held(Reactor):
    ns: str
    account_id: int
    hold = step(HoldStep)
    returns = "hold"


def hold_forever(url: str, ns: str, account_id: int, inside: Any) -> None:
    """Process entry point: run ``Held`` against ``url``; its step sets ``inside`` and blocks."""
    global _inside
    configure(redis_url=url)
    _inside = inside
    Held.run(ns=ns, account_id=account_id)
