"""py_reactor: saga orchestration for Python.

Workflows ("reactors") are made of steps that run as a dependency graph; when one fails, the
completed ones are rolled back by compensation. This module re-exports the public surface only.
"""

from py_reactor.api import Reactor, Step, afind, find
from py_reactor.config import configure, get_config
from py_reactor.coordination import Lock, OrderedLock, Period, RateLimit, Semaphore
from py_reactor.dsl import (
    Element,
    Failure,
    Halt,
    Input,
    MapResult,
    Result,
    RetryPolicy,
    Skipped,
    Success,
    Value,
    async_reactor,
    async_step,
    compose,
    map_step,
    retries,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
    with_rate_limit,
    with_semaphore,
)
from py_reactor.dsl.background import background
from py_reactor.dsl.interrupt import interrupt
from py_reactor.dsl.parallel import parallel
from py_reactor.engine import (
    CancelledResult,
    Context,
    DispatchedResult,
    FailureResult,
    HaltedResult,
    Outcome,
    PausedResult,
    Status,
    SuccessResult,
)
from py_reactor.engine.serializer import dumps_context, loads_context
from py_reactor.errors import CorruptRecordError, ExecutionNotFoundError
from py_reactor.observability import Middleware
from py_reactor.runtime.execution import Execution
from py_reactor.states import TraceKind
from py_reactor.version import __version__

__all__ = [
    "CancelledResult",
    "Context",
    "CorruptRecordError",
    "DispatchedResult",
    "Element",
    "Execution",
    "ExecutionNotFoundError",
    "Failure",
    "FailureResult",
    "Halt",
    "HaltedResult",
    "Input",
    "Lock",
    "MapResult",
    "Middleware",
    "OrderedLock",
    "Outcome",
    "PausedResult",
    "Period",
    "RateLimit",
    "Reactor",
    "Result",
    "RetryPolicy",
    "Semaphore",
    "Skipped",
    "Status",
    "Step",
    "Success",
    "SuccessResult",
    "TraceKind",
    "Value",
    "__version__",
    "afind",
    "async_reactor",
    "async_step",
    "background",
    "compose",
    "configure",
    "dumps_context",
    "find",
    "get_config",
    "interrupt",
    "loads_context",
    "map_step",
    "parallel",
    "retries",
    "step",
    "with_lock",
    "with_ordered_lock",
    "with_period",
    "with_rate_limit",
    "with_semaphore",
]
