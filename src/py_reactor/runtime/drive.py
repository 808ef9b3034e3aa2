"""The dispatch protocol: persist, enqueue an id, claim, run until done or parked, persist.

Every background execution goes through the same few moves, whoever runs it:

1. ``dispatch``: the caller stores the execution (its context, holds included) *before*
   anything is enqueued, and makes it due now.
2. ``run_execution``: a runner claims it (epoch + lease), loads the context, imports the
   reactor by ``module:qualname`` and executes it in worker mode, checkpointing after every
   step (a compare-and-set on the epoch: a stale runner writes nothing).
3. The run ends (the outcome is stored) or parks: stored ``waiting`` in the due set, and in the
   parked list of the key it waits on, whose release makes it due at once.

A runner that cannot read the stored context fails that execution with an error naming the
cause and goes on serving. One that cannot import the reactor leaves it for another worker for
``unimportable_grace`` seconds (counted from the first worker that could not), then fails it
with a ``ReactorNotImportableError``, every completed step reported as a rollback failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager
from typing import Any

from py_reactor.config import get_config
from py_reactor.coordination.scope import Scope
from py_reactor.dsl.reactor import Reactor
from py_reactor.dsl.registry import class_path, lookup
from py_reactor.engine.context import Context, Status, running, running_context
from py_reactor.engine.executor import execute
from py_reactor.engine.results import (
    DispatchedResult,
    Outcome,
    RollbackFailure,
)
from py_reactor.engine.run import StaleExecution, describe_exception
from py_reactor.engine.serializer import dumps_context, loads_context
from py_reactor.engine.waiter import BLOCKING, Parking, Waiter
from py_reactor.errors import (
    ReactorError,
    ReactorNotImportableError,
    SerializationError,
    StoreUnavailableError,
)
from py_reactor.observability import events as ev
from py_reactor.observability.middleware import emit
from py_reactor.observability.propagation import worker_run
from py_reactor.runtime.execution import finish
from py_reactor.runtime.journal import CallerJournal, Journal, StoredJournal, run_failure
from py_reactor.runtime.namespaces import served
from py_reactor.runtime.pinning import foreign
from py_reactor.runtime.transport import Transport
from py_reactor.runtime.units import StoreUnits, dispatch
from py_reactor.states import TraceKind
from py_reactor.storage import executions as stored_executions
from py_reactor.storage.executions import ExecutionStore, StoredExecution

__all__ = [
    "WORKER_STOPS",
    "dispatch",
    "drive",
    "recovery_pass",
    "run_execution",
    "start",
    "worker_name",
]

logger = logging.getLogger("py_reactor")

#: Seconds after which an execution left by a worker that cannot import its reactor is due
#: again (at most what is left of ``unimportable_grace``): another worker may take it then.
UNIMPORTABLE_AGAIN_IN = 2.0

#: The message of the ``CancelledError`` an asyncio worker that stops cancels its runs with:
#: such a run is left to lease recovery (as if its worker had died), not aborted.
WORKER_STOPS = "py_reactor: the worker stops"

#: The ``reason`` of the rollback failure reported for each completed step of an execution
#: failed because its reactor cannot be imported (its undo could not run).
NOT_IMPORTABLE = "reactor not importable here"


def worker_name() -> str:
    """``host:pid:<random>``: who claimed an execution (for people reading the record)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def start(
    cls: type[Reactor],
    inputs: Mapping[str, Any],
    *,
    transport: Transport,
    handoff: str | None = None,
    retry_of: str | None = None,
) -> Outcome:
    """``cls.run(**inputs)``: a new execution driven in the caller, up to its ``handoff`` step
    if it has one (``@background``), then stored and dispatched to a worker.

    Started from inside a running execution (a step body), the run is part of that execution:
    it shares its root id and its registry of held keys (so it re-enters the holds), runs in
    place whatever its hand-off, and stores nothing of its own (a pause fails the step).
    ``retry_of``: the execution this new one retries (``Reactor.retry``).
    """
    path, raw = class_path(cls), dict(inputs)
    parent = running_context()
    if parent is not None:
        context = parent.child(path, raw)
        return _in_caller(cls, context, CallerJournal(transport, nested=True), transport)
    context = Context(reactor=path, inputs=raw, retry_of=retry_of)
    journal = CallerJournal(transport)
    order = cls.__py_reactor_order__
    if handoff is not None and order and handoff == order[0]:
        # The whole run is the worker's: nothing is taken in the caller but its ordered turn.
        try:
            context.inputs = cls.__py_reactor_contract__.validate(
                context.inputs, reactor=cls.__py_reactor_name__
            )
        except ReactorError:  # the same failure outcome a run in place gives
            return _in_caller(cls, context, journal, transport)
        _take_ordered_position(cls, context)
        context.status = Status.PENDING
        return journal.commit(cls, context, DispatchedResult(context, finish=finish))[0]
    return _in_caller(cls, context, journal, transport, handoff)


def _in_caller(
    cls: type[Reactor],
    context: Context,
    journal: Journal,
    transport: Transport,
    handoff: str | None = None,
) -> Outcome:
    """``drive()`` in the caller: it blocks where a worker would park, and raises a store
    outage a worker would leave to recovery, so there is always an outcome."""
    outcome, _ = drive(
        cls, context, waiter=BLOCKING, journal=journal, transport=transport, handoff=handoff
    )
    if outcome is None:  # pragma: no cover - only a stale worker's run answers nothing
        raise RuntimeError(f"{cls.__py_reactor_name__}: a run in the caller answered nothing")
    return outcome


def _take_ordered_position(cls: type[Reactor], context: Context) -> None:
    """A reactor-level ordered lock's position is taken when ``run()`` dispatches, so
    background executions pass in dispatch order (the worker waits for the turn)."""
    declared = cls.coordination.get("ordered_lock")
    if declared is None:
        return
    scope = Scope(
        {"ordered_lock": declared},
        context.inputs,
        reactor=cls.__py_reactor_name__,
        ledger=context.holds,
        holder=context.holder(None),
        wait=0,
    )
    with running(context), contextlib.suppress(Exception):
        scope.enter(parking=True)  # busy is the common answer: the position is what we want
    scope.detach()


def recovery_pass(
    executions: ExecutionStore, namespaces: Collection[str] | None = None
) -> tuple[list[str], list[str]]:
    """One pass of the recovery loop, for any worker, over ``namespaces`` (default: those this
    process serves): ``(ids due now, ids whose runner's lease lapsed)``; the lapsed ones are due
    again and reported (``ExecutionRecovered``, a log line).
    """
    due, lapsed = executions.due(served() if namespaces is None else namespaces)
    for execution_id in lapsed:
        middleware = get_config().middleware
        if middleware:
            stored = executions.load(execution_id)
            reactor = "" if stored is None else stored.reactor.rpartition(":")[2]
            emit(middleware, ev.ExecutionRecovered(execution_id=execution_id, reactor=reactor))
        logger.info("py_reactor: execution %s lost its runner; dispatching it again", execution_id)
    return due, lapsed


def run_execution(
    execution_id: str,
    name: str,
    on_claim: Any = None,
    *,
    transport: Transport,
    sent_at_epoch: int | None = None,
) -> str:
    """Claim and run one execution until it ends or parks; what became of it.

    ``on_claim(execution_id, epoch)`` / ``on_claim(execution_id, None)`` bracket the run (the
    worker renews leases in between). ``sent_at_epoch``: the epoch a job (a Celery message)
    carries; a job sent before somebody else claimed the execution runs nothing (``"stale"``).
    Never raises for the execution's own problems.
    """
    executions = stored_executions()
    config = get_config()
    ahead = executions.load(execution_id)
    elsewhere = None if ahead is None else foreign(ahead.pinned)
    if elsewhere == "alive":
        return "another script's"  # a __main__ reactor: only its own script can run it
    if ahead is not None and ahead.problem is None and not elsewhere and _left(executions, ahead):
        return "left for another worker"
    if sent_at_epoch is None:
        epoch = executions.claim(execution_id, name, config.execution_lease)
    else:  # the job is the authority that it is due; its epoch says whether it is stale
        epoch = executions.claim(
            execution_id, name, config.execution_lease, due=False, sent_at_epoch=sent_at_epoch
        )
    if epoch <= 0:
        return "not claimed"
    stored = executions.load(execution_id)
    if stored is None:
        return "gone"
    try:
        if stored.problem is not None:
            raise SerializationError(f"its stored record cannot be read: {stored.problem}")
        if elsewhere:  # its script is gone; a same-named class here is not the one it meant
            raise ReactorNotImportableError(f"reactor {stored.reactor} belongs to another script")
        cls, context = revive(stored)
    except Exception as exc:
        _unreadable(executions, stored, epoch, exc)
        return "failed"

    def checkpoint(_: Context) -> None:  # whichever context finished a step: store the root
        if not executions.checkpoint(
            execution_id,
            epoch,
            dumps_context(context),
            Status.RUNNING,
            lease=config.execution_lease,
        ):
            raise StaleExecution(execution_id)

    waiter = Parking(
        park_max_attempts=config.park_max_attempts,
        checkpoint=checkpoint,
        root=context,
        # It was running when this runner could claim it: its runner's lease had lapsed.
        recovered=ahead is not None and ahead.status == Status.RUNNING,
    )
    if on_claim is not None:
        on_claim(execution_id, epoch)
    try:
        journal = StoredJournal(executions, epoch)
        _, became = drive(  # middleware sees the run start and end (trace context, wake)
            cls, context, waiter=waiter, journal=journal, transport=transport, around=worker_run
        )
    finally:
        if on_claim is not None:
            on_claim(execution_id, None)
    return became


def _nothing_around(context: Context) -> AbstractContextManager[None]:
    return contextlib.nullcontext()


def drive(
    cls: type[Reactor],
    context: Context,
    *,
    waiter: Waiter,
    journal: Journal,
    transport: Transport,
    handoff: str | None = None,
    around: Callable[[Context], AbstractContextManager[None]] = _nothing_around,
) -> tuple[Outcome | None, str]:
    """Run ``cls`` on from where ``context`` stopped, then write how it ended with one write
    (``journal``). The one path of every run, whoever runs it: a new run in the caller
    (``Blocking`` waiter, :class:`CallerJournal`: stored only if it pauses or hands off at
    ``handoff``), a worker's claimed run (``Parking``, :class:`StoredJournal` under its epoch)
    and an inline resume (``Blocking``, :class:`StoredJournal`). Returns the outcome (None
    when nothing could be written) and what became of the execution.

    A store outage the run did not suspend on leaves a worker's execution to lease recovery,
    from its last checkpoint (nothing was rolled back); in the caller it raises. An interrupt
    (KeyboardInterrupt, SystemExit) is written as the journal says (a stored run: ``aborted``,
    no rollback ran, undo it later) and propagates.

    ``around(context)`` brackets the engine's part only, so that what it writes into the
    context (the middleware's ``worker_run`` hooks: the trace context, the park link) is in
    the one write that follows.
    """
    execution_id = context.execution_id
    try:
        with around(context):
            outcome = execute(
                cls, context, waiter=waiter, handoff=handoff, units=StoreUnits(transport)
            )
    except StaleExecution:
        logger.warning("py_reactor: execution %s was claimed by another runner", execution_id)
        return None, "stale"
    except StoreUnavailableError as exc:  # a store call the run did not suspend on
        if not waiter.parks:
            raise
        return None, _left_to_recovery(execution_id, exc)
    except SerializationError as exc:
        outcome = run_failure(context, exc, cls.__py_reactor_name__)
    except BaseException as exc:  # SystemExit, KeyboardInterrupt in a step: no rollback ran
        if waiter.parks and _worker_stops(exc):  # what it held is given back; nothing written
            logger.warning(
                "py_reactor: execution %s is left to lease recovery, from its last "
                "checkpoint: its worker stopped before it ended", execution_id,
            )  # fmt: skip
            raise
        journal.abort(cls, context, exc)
        raise
    try:
        return journal.commit(cls, context, outcome)
    except StoreUnavailableError as exc:  # how it ended (a suspension too) cannot be written
        if not waiter.parks:
            raise
        return outcome, _left_to_recovery(execution_id, exc)


def _worker_stops(exc: BaseException) -> bool:
    """Whether ``exc`` is the cancellation of a stopping asyncio worker (``WORKER_STOPS``)."""
    return isinstance(exc, asyncio.CancelledError) and exc.args[:1] == (WORKER_STOPS,)


def _left_to_recovery(execution_id: str, exc: StoreUnavailableError) -> str:
    """Write nothing: the store cannot be reached. Its lease lapses and recovery runs it again
    from its last checkpoint, which is safe because a store outage never rolls anything back."""
    logger.warning(
        "py_reactor: execution %s is left to lease recovery, from its last checkpoint: %s",
        execution_id,
        exc,
    )
    return "store unavailable"


def _left(executions: ExecutionStore, stored: StoredExecution) -> bool:
    """True when this worker cannot import ``stored``'s reactor and leaves the execution for
    another worker (unclaimed, due again shortly), as it may until ``unimportable_grace`` has
    passed since a worker first could not; False: claim it (and fail it, if still unimportable).
    """
    try:
        _reactor_class(stored.reactor)
    except ReactorNotImportableError as exc:
        grace = get_config().unimportable_grace
        if executions.leave(stored.id, grace, UNIMPORTABLE_AGAIN_IN):
            logger.warning(
                "py_reactor: execution %s is left for another worker: %s (it fails once "
                "unimportable_grace, %g s, has passed)", stored.id, exc, grace,
            )  # fmt: skip
            return True
    return False


def _reactor_class(path: str, *, importing: bool = True) -> type[Reactor]:
    """The reactor class named ``module:qualname``, its module imported if need be (unless
    ``importing`` is False: then only a class this process imported already).

    Raises:
        ReactorNotImportableError: the module fails to import or defines no such reactor (or,
            not ``importing``, the class is not imported here).
    """
    cls = lookup(path)
    module, _, name = path.partition(":")
    if cls is None and not importing:
        raise ReactorNotImportableError(
            f"reactor {path} is not imported in this process (and its module {module!r} is not "
            "imported on the store's word here)",
            reactor=name,
        )
    if cls is None:
        try:
            __import__(module)
        except Exception as exc:
            raise ReactorNotImportableError(
                f"cannot import module {module!r} of reactor {path} "
                f"({type(exc).__name__}: {exc}); start the worker where it is importable",
                reactor=name,
            ) from None
        cls = lookup(path)
    if cls is None or not (isinstance(cls, type) and issubclass(cls, Reactor)):
        raise ReactorNotImportableError(
            f"reactor {path} is not defined (renamed, removed, or defined inside a "
            "function); a worker can only run reactors it can import by module:qualname",
            reactor=name,
        )
    return cls


def revive(stored: StoredExecution, *, importing: bool = True) -> tuple[type[Reactor], Context]:
    """The reactor class and context of a stored execution; ``importing=False`` takes only a
    class this process imported already, never importing the module the record names.

    Raises:
        ReactorNotImportableError: the class cannot be imported (a ``LookupError``);
        SerializationError: the context is bad.
    """
    return _reactor_class(stored.reactor, importing=importing), loads_context(stored.context)


def _unreadable(
    executions: ExecutionStore, stored: StoredExecution, epoch: int, exc: Exception
) -> None:
    """Fail an execution this runner cannot revive, with the cause as its error; when its
    reactor cannot be imported, each completed step is reported as a rollback failure (its undo
    could not run here: ``Reactor.undo`` where the class imports runs it)."""
    message = f"execution {stored.id} of {stored.reactor} cannot be run here: {exc}"
    if stored.pinned and stored.reactor.startswith("__main__:"):
        message += (
            f" (it was defined in the __main__ script of process {stored.pinned}, which "
            "exited before the execution finished)"
        )
    outcome: dict[str, Any] = {
        "status": Status.FAILED,
        "error": message,
        "exception_class": describe_exception(exc)[0],
        "step_name": None,
        "reactor_name": stored.reactor.rpartition(":")[2],
    }
    logger.error("py_reactor: %s", message)
    context = stored.context
    try:
        completed = loads_context(context).completed
    except SerializationError:
        completed = []
        context = dumps_context(Context(reactor=stored.reactor, inputs={}, execution_id=stored.id))
    if isinstance(exc, ReactorNotImportableError):
        outcome["rollback_failures"] = _not_undone(completed, stored.reactor, exc)
    executions.checkpoint(stored.id, epoch, context, Status.FAILED, outcome=outcome)


def _not_undone(
    completed: list[str], reactor: str, exc: ReactorNotImportableError
) -> list[RollbackFailure]:
    """A rollback failure for each completed step, newest first (as a rollback would undo
    them): nothing of the run is silently left done."""
    return [
        RollbackFailure(
            step=name,
            kind=TraceKind.UNDO,
            key=None,
            reason=NOT_IMPORTABLE,
            message=(
                f"the undo of step {name!r} did not run: reactor {reactor} cannot be imported "
                f"here ({exc}); Reactor.undo(id) where it imports rolls the run back"
            ),
        )
        for name in reversed(completed)
    ]
