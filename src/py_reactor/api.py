"""Where the verbs land: run, resume, cancel, undo, retry, find, wait, invoke.

``dsl`` declares workflows and runs nothing; ``Reactor`` and ``Step`` here are the declaring
classes plus the verbs, each of which picks the transport ``configure(worker=...)`` names and
hands it to the runtime. This is the one place that wires the layers together.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from py_reactor.aio import call, in_coroutine
from py_reactor.dsl.declaration import StepDeclaration
from py_reactor.dsl.reactor import Reactor as DeclaredReactor
from py_reactor.dsl.step import Step as DeclaredStep
from py_reactor.dsl.step import declare_class_step
from py_reactor.engine.invoke import invoke_declaration
from py_reactor.engine.results import Outcome
from py_reactor.runtime import interrupts, operations
from py_reactor.runtime.drive import start
from py_reactor.runtime.execution import Execution
from py_reactor.runtime.execution import find as find_stored
from py_reactor.runtime.execution import wait as wait_stored
from py_reactor.transport import current

__all__ = [
    "Reactor",
    "Step",
    "acancel",
    "afind",
    "aresume",
    "aretry",
    "arun",
    "aundo",
    "cancel",
    "find",
    "resume",
    "retry",
    "run",
    "undo",
    "wait",
]


def run(cls: type[DeclaredReactor], inputs: Mapping[str, Any]) -> Outcome:
    """Run ``cls`` with ``inputs``: here, or up to its ``@background`` hand-off and then in a
    worker. A run started inside a step body is part of that execution and runs in place.

    Raises:
        RuntimeError: called from a coroutine (it would block the event loop): ``arun``.
    """
    _not_on_a_loop(f"{cls.__qualname__}.run()", f"await {cls.__qualname__}.arun(...)")
    handoff = getattr(cls, "__py_reactor_handoff__", None)
    return start(cls, inputs, transport=current(), handoff=handoff)


def _not_on_a_loop(verb: str, instead: str) -> None:
    """Refuse a verb that runs steps (and waits) when called from a coroutine: it would block
    the event loop for the whole run.

    Raises:
        RuntimeError: naming the verb and its awaitable twin.
    """
    if in_coroutine():
        raise RuntimeError(
            f"{verb} was called inside a running event loop, which it would block for the whole "
            f"run; use `{instead}` there (or call it in a thread)"
        )


async def arun(cls: type[DeclaredReactor], inputs: Mapping[str, Any]) -> Outcome:
    """:func:`run` on the running event loop: async steps are awaited on it, sync ones run in
    its thread pool, and every wait (a busy key, a backoff) is awaited, never blocking it."""
    return await call(run, cls, inputs)


def resume(
    execution_id: str | None = None,
    payload: Any = None,
    *,
    correlation_id: str | None = None,
    reactor: type[DeclaredReactor] | None = None,
    mode: str | None = None,
) -> Outcome:
    """Resume a run paused at an interrupt with ``payload`` (``runtime.interrupts.resume``)."""
    _not_on_a_loop("resume()", "await Reactor.aresume(...)")
    return interrupts.resume(
        execution_id,
        payload,
        correlation_id=correlation_id,
        reactor=reactor,
        mode=mode,
        transport=current(),
    )


async def aresume(
    execution_id: str | None = None,
    payload: Any = None,
    *,
    correlation_id: str | None = None,
    reactor: type[DeclaredReactor] | None = None,
    mode: str | None = None,
) -> Outcome:
    """:func:`resume` on the running event loop."""
    return await call(
        resume, execution_id, payload, correlation_id=correlation_id, reactor=reactor, mode=mode
    )


async def afind(execution_id: str) -> Execution | None:
    """:func:`find` on the running event loop (the store is read with asyncio)."""
    return await call(find, execution_id)


async def acancel(execution_id: str, reason: str | None = None) -> Execution:
    """:func:`cancel` on the running event loop."""
    return await call(cancel, execution_id, reason)


async def aundo(execution_id: str) -> Execution:
    """:func:`undo` on the running event loop (async undo bodies awaited on it)."""
    return await call(undo, execution_id)


async def aretry(execution_id: str) -> Outcome:
    """:func:`retry` on the running event loop."""
    return await call(retry, execution_id)


def find(execution_id: str) -> Execution | None:
    """The stored execution ``execution_id``, or None if the store does not know it; a record
    that cannot be read comes back with ``.problem`` saying why (never as an empty one).

    Raises:
        TypeError: ``execution_id`` is not a str.
    """
    return find_stored(execution_id)


def wait(execution_id: str, *, timeout: float | None = None) -> Outcome:
    """Block until ``execution_id`` ends; its outcome, rebuilt from the store.

    Raises:
        TimeoutError: it did not end within ``timeout`` seconds.
        ExecutionNotFoundError: the store does not know ``execution_id`` (a ``LookupError``).
        CorruptRecordError: its stored record cannot be read (raised at once, not waited on).
        TypeError: ``execution_id`` is not a str.
    """
    return wait_stored(execution_id, timeout=timeout)


def cancel(execution_id: str, reason: str | None = None) -> Execution:
    """Stop a stored run that waits, or failed, without rollback (``runtime.operations``)."""
    return operations.cancel(execution_id, reason)


def undo(execution_id: str) -> Execution:
    """Roll a stored run that is not running back, then cancel it (``runtime.operations``)."""
    _not_on_a_loop("undo()", "await Reactor.aundo(...)")
    return operations.undo(execution_id)


def retry(execution_id: str) -> Outcome:
    """Start a new run with the inputs of an ended one, linked to it (``runtime.operations``)."""
    _not_on_a_loop("retry()", "await Reactor.aretry(...)")
    return operations.retry(execution_id, current())


class Reactor(DeclaredReactor, verbs=True):
    """A workflow: subclass it, annotate inputs, bind steps, name what it ``returns``.

    ``MyReactor.run(**inputs)`` validates the inputs, runs the steps in dependency order and
    returns an outcome; when a step fails, completed steps are rolled back newest first.
    """

    @classmethod
    def run(cls, /, **inputs: Any) -> Outcome:
        """Run this reactor and return its outcome.

        Synchronously in this process; a ``@background`` reactor runs the steps before its
        hand-off here and returns a ``DispatchedResult`` (``.wait()`` for the end). Never
        raises for a failing step or bad inputs: both come back as a failure outcome.
        ``KeyboardInterrupt`` and ``SystemExit`` propagate without running rollback.
        """
        return run(cls, inputs)

    @classmethod
    async def arun(cls, /, **inputs: Any) -> Outcome:
        """Run this reactor on the running event loop and return its outcome: ``run``'s
        outcome and semantics, with ``async def`` steps awaited on the loop, plain ones run
        in its thread pool, and every wait for a busy key awaited (the loop never blocks).
        Cancelling the awaiting task aborts the run as ``KeyboardInterrupt`` does: no
        rollback, what it holds given back at once, status ``aborted``."""
        return await arun(cls, inputs)

    @classmethod
    async def aresume(
        cls,
        execution_id: str | None = None,
        payload: Any = None,
        *,
        correlation_id: str | None = None,
    ) -> Outcome:
        """``resume`` on the running event loop."""
        return await aresume(execution_id, payload, correlation_id=correlation_id, reactor=cls)

    @classmethod
    async def afind(cls, execution_id: str) -> Execution | None:
        """``find`` on the running event loop."""
        return await afind(execution_id)

    @classmethod
    async def acancel(cls, execution_id: str, reason: str | None = None) -> Execution:
        """``cancel`` on the running event loop."""
        return await acancel(execution_id, reason)

    @classmethod
    async def aundo(cls, execution_id: str) -> Execution:
        """``undo`` on the running event loop."""
        return await aundo(execution_id)

    @classmethod
    async def aretry(cls, execution_id: str) -> Outcome:
        """``retry`` on the running event loop."""
        return await aretry(execution_id)

    @classmethod
    def resume(
        cls,
        execution_id: str | None = None,
        payload: Any = None,
        *,
        correlation_id: str | None = None,
    ) -> Outcome:
        """Resume this reactor's run paused at an interrupt with ``payload`` (validated by the
        interrupt's model), found by ``execution_id`` or by ``correlation_id``. The outcome of
        the rest of the run (``resume="inline"``), or a ``DispatchedResult``
        (``resume="background"``).

        Raises:
            ExecutionNotFoundError: no execution ``execution_id`` is stored (a LookupError).
            ResumeError: it is not paused (a second resume included), or no run is paused
                with ``correlation_id``.
            CorruptRecordError: its stored record cannot be read.
            InputValidationError: a bad payload; the run stays paused.
        """
        return resume(execution_id, payload, correlation_id=correlation_id, reactor=cls)

    @classmethod
    def find(cls, execution_id: str) -> Execution | None:
        """The stored execution ``execution_id`` (an ``Execution``), or None; ``.problem``
        says what of its record cannot be read (None when it reads well)."""
        return find(execution_id)

    @classmethod
    def cancel(cls, execution_id: str, reason: str | None = None) -> Execution:
        """Stop the stored run ``execution_id`` (waiting, pending, failed or aborted) with no
        rollback; what it holds is given back, its results kept (``undo`` may follow). Its
        ``Execution``, now ``"cancelled"``.

        Raises:
            ExecutionStateError: it is running or has ended well.
            ExecutionNotFoundError: unknown id (a LookupError); TypeError: not a str.
        """
        return cancel(execution_id, reason)

    @classmethod
    def undo(cls, execution_id: str) -> Execution:
        """Roll the stored run ``execution_id`` back (any status but running: pending,
        waiting, paused, failed, aborted, cancelled, finished), newest step first, giving back
        what it holds; then mark it ``"cancelled"``. Its ``Execution``; what could not be
        undone is in ``.outcome.rollback_failures``.

        Raises:
            ExecutionStateError: it is running, or was undone already.
            ExecutionNotFoundError: unknown id (a LookupError); TypeError: not a str.
            CorruptRecordError: its stored record cannot be read.
        """
        return undo(execution_id)

    @classmethod
    def retry(cls, execution_id: str) -> Outcome:
        """Start a new run with the inputs of the ended run ``execution_id``, linked to it
        (``find(new).retry_of``); the new run's outcome.

        Raises:
            ExecutionStateError: it has not ended.
            ExecutionNotFoundError: unknown id (a LookupError); TypeError: not a str.
            CorruptRecordError: its stored record cannot be read.
        """
        return retry(execution_id)

    @classmethod
    def invoke_step(
        cls, declaration: StepDeclaration, args: Mapping[str, Any] | None, *, context: Any = None
    ) -> Outcome:
        """Run one of this reactor's inline steps alone (``MyReactor.step.invoke(args)``)."""
        return invoke_declaration(declaration, args, context=context)


class Step(DeclaredStep, verbs=True):
    """A unit of work with an input contract.

    Subclass it, annotate its inputs (validated by pydantic before anything runs), and define
    ``run``; optionally ``guard`` (a precondition checked after validation, before ``run``),
    ``compensate(error)`` (this step failed after its work started) and ``undo(result)`` (this
    step succeeded and a later one failed). Each returns a signal (``Success``, ``Failure``,
    ``Halt``, ``Skipped``) or a plain value, or raises.
    """

    @classmethod
    def invoke(cls, args: Mapping[str, Any] | None = None, *, context: Any = None) -> Outcome:
        """Validate ``args`` against the contract and run this step alone.

        Returns the same outcome object a reactor run returns; contention and validation
        problems are reported on it, not raised. A direct invocation never retries.
        """
        return invoke_declaration(declare_class_step(cls), args, context=context)
