"""The one park-or-fail decision, for a reactor's own coordination and for a step's.

In the caller the primitive has already waited its ``wait``, so contention fails the run. In a
worker nothing waits (every gate answers busy at once) and contention parks the execution
instead: persisted, thread given back, dispatched again when the key is released or the
backstop timer fires. Parks are capped by ``park_max_attempts`` per step (counted on the root
context, per dotted step path, until that step gets in: ``entered``); an ordered lock's turn
is waited for without a cap; a rate limit parks for its ``retry_after``, a busy period claim
until the claim ends.

A store outage in a worker is not the step's failure either: the run is suspended (parked on
the ``"store"``, uncapped, no key to wake it) and goes on once the store is back, so nothing is
rolled back that would then complete anyway. In the caller it fails the step, as contention does.
"""

from __future__ import annotations

import random
import time

from py_reactor.config import get_config
from py_reactor.engine.run import Parked, Run
from py_reactor.errors import (
    CoordinationError,
    LockAcquisitionError,
    OrderedLockWaitError,
    PeriodBusyError,
    RateLimitExceededError,
    SemaphoreAcquisitionError,
    StoreUnavailableError,
)
from py_reactor.observability import events as ev

__all__ = ["CONTENTION", "STORE", "backstop", "entered", "park", "park_or_fail", "store_outage"]

#: The errors that mean "busy now" (not a bad key, not an unreachable store).
CONTENTION = (
    LockAcquisitionError,
    SemaphoreAcquisitionError,
    RateLimitExceededError,
    PeriodBusyError,
    OrderedLockWaitError,
)

#: What a run suspended by a store outage waits on (``waiting_on["primitive"]``; no key).
STORE = "store"


def park_or_fail(run: Run, step: str | None, exc: CoordinationError) -> Parked | None:
    """Park the run (returns what to park on), or None: fail it with ``exc``.

    When the step's cap is spent, ``exc``'s message says so (primitive, key and the number of
    parks) and ``exc.parks`` holds that number.
    """
    worker = run.worker
    if worker is not None and isinstance(exc, StoreUnavailableError):
        return store_outage(run, step)
    if worker is None or not isinstance(exc, CONTENTION):
        return None
    root = worker.root or run.context
    path = _path(run, step)
    ordered = isinstance(exc, OrderedLockWaitError)
    parks = root.step_parks.get(path or "", 0)
    if not ordered:
        if parks >= worker.park_max_attempts:
            where = f"reactor {exc.reactor}" + ("" if step is None else f", step {step!r}")
            exc.message = (
                f"{where}: the {exc.primitive} {exc.key!r} was still busy after "
                f"{parks} park(s) in a worker (park_max_attempts="
                f"{worker.park_max_attempts:g}); raise configure(park_max_attempts=...) or "
                "park_delay=, or make the work holding it shorter"
            )
            exc.args = (exc.message,)
            exc.parks = parks
            return None
        parks += 1
        root.step_parks[path or ""] = parks
        root.parks += 1
    delay = getattr(exc, "retry_after", None)
    parked = park(run, path, exc.primitive, exc.key, parks, delay, step_level=step is not None)
    parked.limit = getattr(exc, "limit", None)
    parked.bucket = getattr(exc, "bucket", None)
    return parked


def store_outage(run: Run, step: str | None) -> Parked:
    """Suspend a worker's run that could not reach the store at ``step`` (None: the reactor's
    own coordination): not a failure, so nothing rolls back, and not a park the cap counts.

    Dispatched again after the park delay; if even this park cannot be written, the runner's
    lease lapses and recovery runs it again from its last checkpoint.
    """
    root = (run.worker.root if run.worker is not None else None) or run.context
    return park(run, _path(run, step), STORE, None, root.parks, step_level=step is not None)


def entered(run: Run, step: str | None) -> None:
    """``step`` (None: the reactor's own coordination) got in: its park count starts over."""
    worker = run.worker
    if worker is not None:
        (worker.root or run.context).step_parks.pop(_path(run, step) or "", None)


def _path(run: Run, step: str | None) -> str | None:
    """``step``'s dotted path from the root execution (None: the reactor's own coordination,
    which for a composed child is the compose step's path, for the root reactor None)."""
    prefix = "" if run.worker is None else run.worker.prefix
    return (prefix + step) if step is not None else (prefix.rstrip(".") or None)


def park(
    run: Run,
    path: str | None,
    primitive: str | None,
    key: str | None,
    attempt: int,
    delay: float | None = None,
    *,
    step_level: bool = True,
) -> Parked:
    """Park the run at ``path`` (a dotted step path; None: the reactor's own coordination),
    waiting on ``key`` of ``primitive``: trace it on the root context, tell middleware.

    ``delay``: seconds until the backstop timer dispatches it again (None: the configured
    ``park_delay`` plus jitter). ``step_level``: a step parked (``StepParked``), not a
    reactor's own coordination (``ReactorParked``, also for a composed child's).
    """
    worker = run.worker
    root = (worker.root if worker is not None else None) or run.context
    delay = backstop(delay)
    parked = Parked(path, primitive, key, attempt, delay)
    moment = time.time() + delay
    started = time.time()
    root.trace.append(
        {
            "type": "parked",
            "step": path,
            "started_at": started,
            "finished_at": started,
            "primitive": primitive,
            "key": key,
            "attempt": attempt,
            "until": moment,
        }
    )
    event = ev.StepParked if step_level and path is not None else ev.ReactorParked
    run.emit(event, path, primitive=primitive or "", key=key or "", attempt=attempt, until=moment)
    return parked


def backstop(delay: float | None) -> float:
    """Seconds until a parked execution is dispatched again if nothing wakes it sooner:
    ``delay`` when the primitive knows (a rate limit's ``retry_after``), else the configured
    ``park_delay`` plus up to ``park_jitter``."""
    if delay is not None:
        return delay
    config = get_config()
    return config.park_delay + random.uniform(0, config.park_jitter)
