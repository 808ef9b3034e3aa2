"""What a Wait means where the run is: the caller blocks, a worker parks.

Every place a run could wait (a busy key, a retry's backoff, a store outage, an async unit)
asks the run's :class:`Waiter` instead of asking "am I in a worker?":

- :class:`Blocking` (a run in the caller, an inline resume): a primitive waits its declared
  ``wait``, then contention fails the step; a backoff is slept; a store outage fails the step.
- :class:`Parking` (a run in a worker): nothing waits (every gate answers busy at once) and the
  run parks instead: persisted, thread given back, dispatched again when the key is released
  or the backstop timer fires. Parks are capped by ``park_max_attempts`` per step (counted on
  the root context, per dotted step path, until that step gets in: :meth:`Waiter.entered`); an
  ordered lock's turn is waited for without a cap; a rate limit parks for its
  ``retry_after``, a busy period claim until the claim ends. A store outage is not the step's
  failure either: the run is suspended (parked on the ``"store"``, uncapped, no key to wake
  it) and goes on once the store is back, so nothing is rolled back that would then complete.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from py_reactor.aio import sleep
from py_reactor.config import get_config
from py_reactor.coordination.gates import Busy
from py_reactor.engine.answers import STORE, Parked
from py_reactor.engine.context import Context
from py_reactor.errors import (
    CoordinationError,
    OrderedLockWaitError,
    StoreUnavailableError,
)
from py_reactor.observability import events as ev
from py_reactor.states import TraceKind

if TYPE_CHECKING:
    from py_reactor.engine.run import Run

__all__ = ["BLOCKING", "Blocking", "Parking", "Waiter", "backstop", "park"]


_sleep = sleep  # module-level so tests can swap in a fake clock


class Waiter:
    """What a Wait means here. The base answers for a run that blocks (see :class:`Blocking`).

    Attributes:
        parks: whether a Wait suspends the run (a worker) rather than blocking this thread.
        checkpoint: called after every step to persist the root context (None: not stored
            step by step); raises ``StaleExecution`` when another runner owns it now.
        root: the execution's root context, where parks are counted and traced (None: the
            run's own context).
        prefix: the dotted path of the composed child running now (``"child."``).
        recovered: this run resumes one whose runner was presumed dead (its lease lapsed):
            that runner may still be inside a step, so its lock and semaphore levels are
            re-entered beside, never adopted or given back (they lapse with their ttl).
    """

    parks: bool = False
    checkpoint: Callable[[Context], None] | None = None
    root: Context | None = None
    prefix: str = ""
    recovered: bool = False

    def gate_wait(self, declared: float | None) -> float | None:
        """How long a primitive may wait for a busy key: its declared ``wait`` when blocking,
        0 when parking (the run parks instead)."""
        return declared

    def nested(self, step: str) -> Waiter:
        """The waiter of a composed child or map element run as ``step`` of this run."""
        return self

    def branch(self, root: Context) -> Waiter:
        """The waiter of a parallel branch whose copy of the root context is ``root``."""
        return self

    def busy(self, run: Run, step: str | None, busy: Busy) -> Parked | None:
        """``step``'s coordination (None: the reactor's own) answered busy: what to park on,
        or None to fail the step with ``busy.error`` (the primitive has waited its ``wait``)."""
        return None

    def refused(self, run: Run, step: str | None, exc: CoordinationError) -> Parked | None:
        """``step``'s coordination raised ``exc`` instead of answering: the store could not be
        reached (what :meth:`outage` says), or a key function failed (None: fail the step)."""
        if isinstance(exc, StoreUnavailableError):
            return self.outage(run, step)
        return None

    def outage(self, run: Run, step: str | None) -> Parked | None:
        """``step`` could not reach the store: what to park on, or None to fail the step."""
        return None

    def backoff(self, run: Run, step: str, attempt: int, delay: float) -> Parked | None:
        """Attempt ``attempt`` of ``step`` failed and is retried after ``delay`` seconds: wait
        here (None), or what to park on until then."""
        if delay > 0:
            _sleep(delay)
        return None

    def entered(self, run: Run, step: str | None) -> None:
        """``step`` (None: the reactor's own coordination) got in: its park count starts
        over."""


class Blocking(Waiter):
    """A run in the caller (or an inline resume): every Wait blocks this thread."""


#: The waiter of every run that is not in a worker.
BLOCKING = Blocking()


@dataclass(frozen=True, slots=True)
class Parking(Waiter):
    """A run in a worker: every Wait parks it and gives the thread back.

    Attributes:
        park_max_attempts: parks on contention one step may make before it gets in (ordered
            turns exempt).
    """

    park_max_attempts: float
    checkpoint: Callable[[Context], None] | None = None
    root: Context | None = None
    prefix: str = ""
    recovered: bool = False
    parks: bool = dataclasses.field(default=True, init=False)

    def gate_wait(self, declared: float | None) -> float | None:
        return 0

    def nested(self, step: str) -> Waiter:
        return dataclasses.replace(self, prefix=f"{self.prefix}{step}.")

    def branch(self, root: Context) -> Waiter:
        return dataclasses.replace(self, checkpoint=None, root=root)

    def busy(self, run: Run, step: str | None, busy: Busy) -> Parked | None:
        """Park on the busy key, or None once ``step``'s cap is spent: then ``busy.error``'s
        message says so (primitive, key and the number of parks) and its ``parks`` holds
        that number."""
        exc = busy.error
        root = self.root or run.context
        path = self.path(step)
        ordered = isinstance(exc, OrderedLockWaitError)
        parks = root.step_parks.get(path or "", 0)
        if not ordered:
            if parks >= self.park_max_attempts:
                where = f"reactor {exc.reactor}" + ("" if step is None else f", step {step!r}")
                exc.message = (
                    f"{where}: the {exc.primitive} {exc.key!r} was still busy after "
                    f"{parks} park(s) in a worker (park_max_attempts="
                    f"{self.park_max_attempts:g}); raise configure(park_max_attempts=...) or "
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
        parked.turn = getattr(exc, "turn", None)
        return parked

    def outage(self, run: Run, step: str | None) -> Parked:
        """Suspend the run: not a failure, so nothing rolls back, and not a park the cap
        counts. Dispatched again after the park delay; if even this park cannot be written,
        the runner's lease lapses and recovery runs it again from its last checkpoint."""
        root = self.root or run.context
        return park(run, self.path(step), STORE, None, root.parks, step_level=step is not None)

    def backoff(self, run: Run, step: str, attempt: int, delay: float) -> Parked | None:
        """Never sleep in a worker: park until the backoff is over."""
        if delay <= 0:
            return None
        run.context.attempts[step] = attempt
        return Parked(step, None, None, attempt, delay)

    def entered(self, run: Run, step: str | None) -> None:
        (self.root or run.context).step_parks.pop(self.path(step) or "", None)

    def path(self, step: str | None) -> str | None:
        """``step``'s dotted path from the root execution (None: the reactor's own
        coordination, which for a composed child is the compose step's path, for the root
        reactor None)."""
        return (self.prefix + step) if step is not None else (self.prefix.rstrip(".") or None)


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
    root = run.waiter.root or run.context
    delay = backstop(delay)
    parked = Parked(path, primitive, key, attempt, delay)
    moment = time.time() + delay
    started = time.time()
    root.trace.append(
        {
            "type": TraceKind.PARKED.value,
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
