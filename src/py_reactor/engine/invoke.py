"""Direct invocation: one step, alone, with the reactor engine's semantics and no retries."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from py_reactor.config import get_config
from py_reactor.coordination.holds import Ledger
from py_reactor.coordination.owner import new_owner
from py_reactor.dsl.declaration import StepDeclaration
from py_reactor.engine.answers import Halted, Parked, Paused, StepFailure
from py_reactor.engine.compensation import rollback
from py_reactor.engine.context import Context, Status, running, running_context
from py_reactor.engine.results import HaltedResult, Outcome, SuccessResult
from py_reactor.engine.run import Run
from py_reactor.engine.step_runner import run_resolved
from py_reactor.engine.stepping import failure_result

__all__ = ["invoke_declaration"]


def invoke_declaration(
    decl: StepDeclaration, args: Mapping[str, Any] | None, *, context: Any = None
) -> Outcome:
    """Validate ``args`` and run ``decl`` once; compensate it if its work started and failed.

    ``context`` (optional) is the context of the execution this call is nested in; the new
    execution shares its root id, so it belongs to the same execution tree. The step's
    coordination is taken as in a reactor run: contention waits the declared ``wait`` and then
    fails the outcome (there is no execution to park). Holds are owned by the execution running
    in this thread (a step body calling ``invoke``), whatever ``context=`` says, else by this
    call alone: a ``context=`` used from another thread shares the trace, never the holds.

    Raises:
        TypeError: ``args`` is not a mapping or ``context`` is not a Context.
    """
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise TypeError(f"{decl.label}.invoke(args) takes a mapping of arguments, got {args!r}")
    if context is not None and not isinstance(context, Context):
        raise TypeError(
            f"{decl.label}.invoke(context=...) takes a py_reactor Context, got {context!r}"
        )
    name = decl.label
    raw = dict(args)
    # This call is part of the given execution, else of the one running in this thread (a
    # step body calling invoke), else of none.
    here = running_context()
    parent = context if context is not None else here
    own = Context(reactor=name, inputs=raw) if parent is None else parent.child(name, raw)
    own.status = Status.RUNNING
    run = Run(name, own, get_config().middleware)
    owner = None
    if here is not None:
        # Synchronous work of the execution this thread runs: its owner and its registry,
        # whatever ``context=`` says for the trace (never another thread's registry).
        own.holds = here.holds
    elif context is not None:
        # ``context=`` of an execution this thread is not running: traced as part of it, but
        # ownership never crosses threads, so its holds are its own, in a registry of its own.
        owner = new_owner()
        own.holds = Ledger()
    with running(own, owner=owner):
        return _run(run, name, decl, raw)


def _run(run: Run, name: str, decl: StepDeclaration, raw: dict[str, Any]) -> Outcome:
    own = run.context
    failure: StepFailure | None = None
    try:
        result = run_resolved(run, name, decl, raw, retry=False)
        if isinstance(result, StepFailure):
            failure = result
            rollback(run, {name: decl}, result)
            return failure_result(run, result)  # step events only: no reactor ran
    except BaseException:
        if failure is not None:
            failure.release_holds()  # interrupted before its rollback released them
        own.status = Status.ABORTED
        raise
    if isinstance(result, Halted):
        own.status = Status.HALTED
        return HaltedResult(own, reason=result.reason, step_name=name)
    # An invoke is never a worker's run: it never parks; and a step is never an interrupt.
    assert not isinstance(result, Parked | Paused)
    own.status = Status.COMPLETED
    return SuccessResult(own, result.value)
