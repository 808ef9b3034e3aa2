"""Store a run that paused at an interrupt: created ``"paused"`` when it ran in the caller,
written under its runner's epoch in a worker; a timeout puts it in the due set."""

from __future__ import annotations

import time

from py_reactor.config import get_config
from py_reactor.engine.results import PausedResult
from py_reactor.engine.serializer import dumps_context
from py_reactor.runtime.namespaces import celery_queue, namespace_of
from py_reactor.runtime.pinning import this_script
from py_reactor.runtime.transport import Transport
from py_reactor.storage import executions as stored_executions
from py_reactor.storage.executions import ExecutionStore

__all__ = ["INTERRUPT", "store_pause"]

#: ``waiting_on["primitive"]`` of a paused run (its ``key`` is the correlation id).
INTERRUPT = "interrupt"


def store_pause(
    paused: PausedResult,
    *,
    epoch: int | None = None,
    executions: ExecutionStore | None = None,
    transport: Transport | None = None,
) -> bool:
    """Store the run ``paused`` stopped: created now (``epoch`` None: it ran in the caller) or
    written under its runner's ``epoch``. False when nothing was written (a stale runner).

    A pause with a timeout needs a worker's recovery loop to fail it in time: in the caller,
    ``transport`` serves here (the thread worker starts; Celery workers serve elsewhere).
    """
    executions = executions or stored_executions()
    context = paused.context
    deadline = paused.deadline
    waiting_on = {
        "step": paused.step_name,
        "primitive": INTERRUPT,
        "key": paused.correlation_id,
        "attempt": 0,
        "until": deadline,
    }
    config = get_config()
    namespace = namespace_of(context.reactor)
    written = executions.pause(
        context.execution_id,
        epoch,
        context.reactor,
        dumps_context(context),
        waiting_on=waiting_on,
        timeout_in=None if deadline is None else max(0.0, deadline - time.time()),
        queue=celery_queue(namespace) if config.worker == "celery" else "",
        pinned=this_script() if context.reactor.startswith("__main__:") else "",
        namespace=namespace,
    )
    if written and deadline is not None and epoch is None and transport is not None:
        transport.serve_here()
    return written
