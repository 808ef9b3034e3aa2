"""The library's vocabulary of states: where an execution stands, and what a trace entry says.

Both are string enums, so every layer can name a status or a trace entry's ``"type"`` without
a bare string, while stored JSON and user code keep reading plain strings
(``Status.COMPLETED == "completed"``, ``json.dumps(TraceKind.RUN) == '"run"'``). A bottom-layer
module: it imports only the standard library, so coordination, storage and the web alike can
use it.
"""

from __future__ import annotations

import enum

__all__ = ["Status", "TraceKind"]


class Status(enum.StrEnum):
    """Where an execution stands."""

    PENDING = "pending"
    RUNNING = "running"
    WAITING = "waiting"  # parked in a worker: on a busy key, or a retry's backoff
    PAUSED = "paused"  # stopped at an interrupt step until Reactor.resume (or its timeout)
    ROLLING_BACK = "rolling_back"
    COMPLETED = "completed"
    FAILED = "failed"
    HALTED = "halted"
    ABORTED = "aborted"  # interrupted (KeyboardInterrupt/SystemExit): no rollback ran
    CANCELLED = "cancelled"  # stopped from outside: Reactor.cancel, or Reactor.undo


class TraceKind(enum.StrEnum):
    """The ``"type"`` of a trace entry: what happened to a step (or to the whole run).

    The entries stay plain dicts; their ``"type"`` is one of these, equal to its string.
    """

    RUN = "run"  # a step ran and returned its value
    SKIPPED = "skipped"  # a step was skipped (by its body, or by its period / ordered lock)
    RETRY = "retry"  # an attempt failed and the step will be tried again
    FAILED = "failed"  # a step failed for good (or was refused by its guard or coordination)
    HALTED = "halted"  # a step, or the reactor's own coordination, halted the run
    COMPENSATE = "compensate"  # a failed step's compensation ran during rollback
    UNDO = "undo"  # a completed step's undo ran during rollback
    PARKED = "parked"  # the run parked in a worker on a busy key, a backoff or an async unit
    DISPATCHED = "dispatched"  # an async unit was handed to a worker
    PAUSED = "paused"  # the run stopped at an interrupt step
    RESUMED = "resumed"  # an interrupt step was resumed with a payload
    CANCELLED = "cancelled"  # Reactor.cancel stopped the run (no rollback)
    UNDONE = "undone"  # Reactor.undo rolled the run back
