"""How many more parks a waiting execution may make before its step fails.

A worker caps the parks one step makes on contention at ``park_max_attempts`` (counted on the
root context per dotted step path, ``Context.step_parks``, until the step gets in; see
``engine.waiter.Parking``). Only contention on a lock, a semaphore, a rate limit or a period
counts: an ordered lock's turn, a store outage, an async unit and a retry's backoff park
without a cap.
"""

from __future__ import annotations

import math
from typing import Any

from py_reactor.config import get_config
from py_reactor.states import Status
from py_reactor.storage.executions import StoredExecution

__all__ = ["CAPPED", "parks_left"]

#: The primitives whose parks count toward ``park_max_attempts``.
CAPPED = frozenset({"lock", "semaphore", "rate_limit", "period"})


def parks_left(stored: StoredExecution, context: Any) -> int | None:
    """How many more parks the step ``stored`` is parked at may make before the next
    contention fails it, against this process's ``park_max_attempts`` (the workers' own
    setting is not stored); None when it is not parked, the cap is ``math.inf``, or what it
    waits for never counts.

    ``context`` is its stored context (None when it cannot be read: then the park's
    ``attempt``, the same count, is used).
    """
    waiting = stored.waiting_on or {}
    if stored.status != Status.WAITING or waiting.get("primitive") not in CAPPED:
        return None
    cap = get_config().park_max_attempts
    if not math.isfinite(cap):
        return None
    counted = None if context is None else context.step_parks.get(waiting.get("step") or "")
    if not isinstance(counted, int):
        counted = waiting.get("attempt")
    return max(0, int(cap) - counted) if isinstance(counted, int) else None
