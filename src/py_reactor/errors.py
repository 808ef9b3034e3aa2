"""The one error tree of py_reactor.

Every error the library raises or reports derives from :class:`ReactorError`::

    ReactorError
    ├── DefinitionError          a reactor, step or decorator is declared wrongly (raised at import)
    ├── InputValidationError     inputs do not satisfy a reactor's or step's contract
    ├── ArgumentResolutionError  a step argument could not be taken from its source at run time
    ├── SerializationError       a context could not be written to / read from JSON
    ├── DispatchError            a background execution could not be handed to its worker
    ├── AsyncUnitTimeoutError    a reader of an async unit's result gave up waiting for it
    ├── ExecutionStateError      an operation (cancel, undo, retry) does not apply to that status
    ├── ExecutionNotFoundError   no execution with that id is stored (also LookupError)
    ├── CorruptRecordError       a stored execution record cannot be read (not JSON, bad status)
    ├── ReactorNotImportableError  a worker cannot import an execution's reactor (also LookupError)
    ├── InterruptError           an interrupt could not pause (its correlation id taken or bad)
    │   └── InterruptTimeoutError      nobody resumed the run within the interrupt's ``timeout``
    ├── ResumeError              no run paused at an interrupt to resume (resumed already, ...)
    └── CoordinationError        a lock, semaphore, rate limit, period or ordered lock said no
        ├── LockAcquisitionError       the lock stayed held by another owner for ``wait`` seconds
        ├── SemaphoreAcquisitionError  every slot stayed taken for ``wait`` seconds
        ├── RateLimitExceededError     a window is full; ``retry_after`` says for how long
        ├── PeriodBusyError            another run held the period's claim for ``wait`` seconds
        ├── OrderedLockWaitError       this position's turn did not come within ``wait``
        ├── CoordinationKeyError       a key function raised or returned None / an empty key
        ├── HandoffRefusedError        an async unit wants a key its dispatcher holds (deadlock)
        └── StoreUnavailableError      the coordination store (Redis) could not be reached

Errors carry where they happened as attributes (``reactor``, ``step``) so that handlers need not
parse messages; ``str(error)`` is always a full sentence that says what to do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "ArgumentResolutionError",
    "AsyncUnitTimeoutError",
    "CoordinationError",
    "CoordinationKeyError",
    "CorruptRecordError",
    "DefinitionError",
    "DispatchError",
    "ExecutionNotFoundError",
    "ExecutionStateError",
    "HandoffRefusedError",
    "InputValidationError",
    "InterruptError",
    "InterruptTimeoutError",
    "LockAcquisitionError",
    "OrderedLockWaitError",
    "PeriodBusyError",
    "RateLimitExceededError",
    "ReactorError",
    "ReactorNotImportableError",
    "ResumeError",
    "SemaphoreAcquisitionError",
    "SerializationError",
    "StoreUnavailableError",
]


class ReactorError(Exception):
    """Base class of every py_reactor error."""

    def __init__(self, message: str, *, reactor: str | None = None, step: str | None = None):
        super().__init__(message)
        self.message = message
        self.reactor = reactor
        self.step = step

    def __str__(self) -> str:
        return self.message


class DefinitionError(ReactorError):
    """A reactor, step or decorator is declared wrongly; raised when the class is defined."""


class InputValidationError(ReactorError):
    """Inputs do not satisfy a contract.

    ``errors`` holds one mapping per offending field: ``{"field", "message", "type", "input"}``.
    """

    def __init__(
        self,
        message: str,
        *,
        errors: Sequence[Mapping[str, Any]],
        reactor: str | None = None,
        step: str | None = None,
    ):
        super().__init__(message, reactor=reactor, step=step)
        self.errors: list[dict[str, Any]] = [dict(e) for e in errors]

    @property
    def fields(self) -> list[str]:
        """The names of the offending fields, in the order pydantic reported them."""
        return [str(e["field"]) for e in self.errors]


class ArgumentResolutionError(ReactorError):
    """A step argument could not be read from its source (for example a missing result field)."""


class SerializationError(ReactorError):
    """A context payload could not be encoded to or decoded from JSON."""


class DispatchError(ReactorError):
    """A background execution could not be handed to its worker: the worker setting cannot be
    used in this process (e.g. ``worker="celery"`` without ``redis_url``, Celery not installed),
    or the reactor cannot run there (defined in a ``__main__`` script)."""


class AsyncUnitTimeoutError(ReactorError):
    """A step (or the reactor's ``returns``) read the result of an async unit that did not end
    in time: ``async_wait_timeout`` in the caller, ``async_park_timeout`` in a worker.

    ``unit`` names the async step, ``execution_id`` the unit's own execution (``find()`` it).
    """

    def __init__(
        self,
        message: str,
        *,
        unit: str = "",
        execution_id: str = "",
        reactor: str | None = None,
        step: str | None = None,
    ):
        super().__init__(message, reactor=reactor, step=step)
        self.unit = unit
        self.execution_id = execution_id


class ExecutionStateError(ReactorError):
    """``cancel``, ``undo`` or ``retry`` was asked of a stored execution whose status does not
    allow it (a running one, say); ``status`` is what it was."""

    def __init__(self, message: str, *, status: str = "", reactor: str | None = None):
        super().__init__(message, reactor=reactor)
        self.status = status


class ExecutionNotFoundError(ReactorError, LookupError):
    """No execution with the id given is stored in the configured store: ``cancel``, ``undo``,
    ``retry``, ``resume`` and ``wait`` by id raise it (``find`` answers None). A
    ``LookupError`` too, as an unknown id always was. ``execution_id`` is the id asked for."""

    def __init__(self, message: str, *, execution_id: str = "", reactor: str | None = None):
        super().__init__(message, reactor=reactor)
        self.execution_id = execution_id


class CorruptRecordError(ReactorError):
    """A stored execution record cannot be read: its context, outcome or trace is not what
    py_reactor writes, or its status is not one of py_reactor's (a hand edit, another program
    writing the same keys). ``wait()`` raises it instead of waiting for an end that cannot be
    read; ``find()`` returns the execution with the same sentence as ``.problem``.

    ``execution_id`` names the record, ``problem`` what is wrong with it.
    """

    def __init__(
        self,
        message: str,
        *,
        execution_id: str = "",
        problem: str = "",
        reactor: str | None = None,
    ):
        super().__init__(message, reactor=reactor)
        self.execution_id = execution_id
        self.problem = problem


class ReactorNotImportableError(ReactorError, LookupError):
    """The reactor class an execution names (``module:qualname``) cannot be imported in this
    process: its module fails to import, or defines no such reactor (renamed, removed, defined
    inside a function). A worker leaves the execution for another worker for
    ``unimportable_grace`` seconds, then fails it with this error."""


class InterruptError(ReactorError):
    """An interrupt step could not pause the run: its correlation id function failed, or the
    correlation id is taken by another paused run of the same reactor (``execution_id`` names
    that run)."""

    def __init__(
        self,
        message: str,
        *,
        correlation_id: str | None = None,
        execution_id: str | None = None,
        reactor: str | None = None,
        step: str | None = None,
    ):
        super().__init__(message, reactor=reactor, step=step)
        self.correlation_id = correlation_id
        self.execution_id = execution_id


class InterruptTimeoutError(InterruptError):
    """No resume came within the interrupt's ``timeout``: the interrupt step failed (and the
    run rolled back as for any failure)."""


class ResumeError(ReactorError):
    """``Reactor.resume`` found no run to resume: no run is paused with the correlation id, the
    run is not paused at an interrupt (resumed already, cancelled, timed out), or it is a run of
    another reactor. ``status`` is the run's status ("" when none was found). An unknown
    execution id is :class:`ExecutionNotFoundError`, as for every operation by id."""

    def __init__(
        self,
        message: str,
        *,
        status: str = "",
        execution_id: str | None = None,
        reactor: str | None = None,
    ):
        super().__init__(message, reactor=reactor)
        self.status = status
        self.execution_id = execution_id


class CoordinationError(ReactorError):
    """A coordination primitive refused: contention, a bad key, or an unreachable store.

    ``primitive`` is ``"lock"``, ``"semaphore"``, ``"rate_limit"``, ``"period"`` or
    ``"ordered_lock"``; ``key`` is the user's key (without the library's namespace). ``parks``
    is set on contention that failed a step in a worker: the parks that step had made (the
    park cap); None otherwise.
    """

    def __init__(
        self,
        message: str,
        *,
        primitive: str | None = None,
        key: str | None = None,
        reactor: str | None = None,
        step: str | None = None,
    ):
        super().__init__(message, reactor=reactor, step=step)
        self.primitive = primitive
        self.key = key
        self.parks: int | None = None


class LockAcquisitionError(CoordinationError):
    """The lock stayed held by another owner for the whole ``wait``."""


class SemaphoreAcquisitionError(CoordinationError):
    """Every slot of the semaphore stayed taken for the whole ``wait``; ``limit`` is its
    number of slots."""

    def __init__(
        self,
        message: str,
        *,
        primitive: str | None = None,
        key: str | None = None,
        reactor: str | None = None,
        step: str | None = None,
        limit: int | None = None,
    ):
        super().__init__(message, primitive=primitive, key=key, reactor=reactor, step=step)
        self.limit = limit


class RateLimitExceededError(CoordinationError):
    """A rate-limit window is full; ``retry_after`` is the seconds until it admits again."""

    def __init__(
        self,
        message: str,
        *,
        retry_after: float,
        primitive: str | None = "rate_limit",
        key: str | None = None,
        reactor: str | None = None,
        step: str | None = None,
    ):
        super().__init__(message, primitive=primitive, key=key, reactor=reactor, step=step)
        self.retry_after = retry_after


class PeriodBusyError(CoordinationError):
    """Another run held the claim on the period's current bucket for the whole ``wait``;
    ``bucket`` is that bucket's id."""

    def __init__(
        self,
        message: str,
        *,
        bucket: str = "",
        primitive: str | None = "period",
        key: str | None = None,
        reactor: str | None = None,
        step: str | None = None,
    ):
        super().__init__(message, primitive=primitive, key=key, reactor=reactor, step=step)
        self.bucket = bucket


class OrderedLockWaitError(CoordinationError):
    """An ordered-lock position's turn did not come within ``wait``.

    ``stale`` is True when it never will: the position is no longer in the sequence (skipped
    as a poison pill, abandoned or released, or its batch ended); take a new one. ``turn`` is
    the waiting position as ``"<epoch>:<number>"`` (None when stale).
    """

    def __init__(
        self,
        message: str,
        *,
        stale: bool = False,
        turn: str | None = None,
        primitive: str | None = None,
        key: str | None = None,
        reactor: str | None = None,
        step: str | None = None,
    ):
        super().__init__(message, primitive=primitive, key=key, reactor=reactor, step=step)
        self.stale = stale
        self.turn = turn


class CoordinationKeyError(CoordinationError):
    """A key function raised, or returned None or an empty key; nothing was taken."""


class HandoffRefusedError(CoordinationError):
    """Dispatch of an async unit was refused before anything was enqueued: the unit declares an
    exclusive lock (or a limit-1 semaphore) on a key its own execution holds. The unit would run
    under an owner of its own, wait for that key, and the execution would wait for the unit.

    ``holder`` names who in the execution holds the key (``"reactor Checkout"``, ``"step
    'reserve' of Checkout"``).
    """

    def __init__(
        self,
        message: str,
        *,
        primitive: str | None = None,
        key: str | None = None,
        holder: str = "",
        reactor: str | None = None,
        step: str | None = None,
    ):
        super().__init__(message, primitive=primitive, key=key, reactor=reactor, step=step)
        self.holder = holder


class StoreUnavailableError(CoordinationError):
    """The coordination store could not be reached; the protected work did not run."""


class StaleExecution(Exception):
    """Another runner claimed this execution: drop the work, write nothing, release nothing.

    Not part of the error tree: the runtime catches it and no user ever sees it (middleware
    may, as the error that ended a run's spans).
    """


#: The coordination errors that mean "busy now" (not a bad key, not an unreachable store): a
#: worker parks on them, and logs and test helpers report them as contention.
CONTENTION: tuple[type[CoordinationError], ...] = (
    LockAcquisitionError,
    SemaphoreAcquisitionError,
    RateLimitExceededError,
    PeriodBusyError,
    OrderedLockWaitError,
)
