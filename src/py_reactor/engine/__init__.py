"""Running workflows: the executor, the step runner, rollback, contexts and outcomes."""

from py_reactor.engine.context import Context, Status
from py_reactor.engine.results import (
    CancelledResult,
    DispatchedResult,
    FailureResult,
    HaltedResult,
    Outcome,
    PausedResult,
    RollbackFailure,
    SuccessResult,
)

__all__ = [
    "CancelledResult",
    "Context",
    "DispatchedResult",
    "FailureResult",
    "HaltedResult",
    "Outcome",
    "PausedResult",
    "RollbackFailure",
    "Status",
    "SuccessResult",
]
