"""Celery workers: the same background executions, parks and recovery across processes.

``configure(worker="celery", redis_url=...)`` sends each dispatched execution to Celery as one
job that carries only ids: ``py_reactor.run(execution_id, epoch)``. The context lives in the
store; a worker claims the execution at that epoch (a redelivered or duplicated message finds
the epoch moved and runs nothing), runs it until it ends or parks, and checkpoints after every
step, exactly as the thread worker does.

Parks never use Celery's ``countdown``/``eta`` (on a Redis broker an ETA message waits unacked
in a worker's memory and is redelivered after ``visibility_timeout``, so it could run twice).
A parked execution waits in py_reactor's own due set; the release of the key it waits on pushes
it to the ready list, and a dispatcher thread in every worker (a bootstep) sends its job at
once. The same thread sends what falls due by its timer and what a dead worker's lapsed lease
left, each job once (``ExecutionStore.take_for_sending``).

``app`` is a Celery app configured from ``PY_REACTOR_REDIS_URL`` (``celery -A
py_reactor.workers.celery worker``); ``install(app)`` puts py_reactor's task and dispatcher on
an application's own Celery app, whose settings, queues and routing stay its own.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any

from celery import Celery, bootsteps

from py_reactor.config import configure, get_config
from py_reactor.dsl.reactor import Reactor
from py_reactor.errors import DispatchError
from py_reactor.runtime import leases
from py_reactor.runtime.drive import recovery_pass, run_execution, worker_name
from py_reactor.runtime.namespaces import celery_queue, namespace_of
from py_reactor.runtime.units import store_new
from py_reactor.storage import executions as stored_executions
from py_reactor.transport.loop import serve

if TYPE_CHECKING:
    from py_reactor.engine.context import Context

__all__ = [
    "CELERY",
    "TASK",
    "CeleryTransport",
    "Dispatcher",
    "app",  # noqa: F822 - made on first access (module __getattr__)
    "check_can_send",
    "current_sender",
    "default_app",
    "install",
    "run_job",
    "send",
]

logger = logging.getLogger("py_reactor")

#: The name of the one task py_reactor registers.
TASK = "py_reactor.run"

#: The Celery priority of a new execution's first job. Jobs of executions already under way
#: (woken by a release, due after a park or a retry delay, recovered) go without one, which a
#: Redis broker serves first (0 is its highest): what was started, and may hold keys across
#: its park, finishes before new work piles in front of it.
NEW_WORK_PRIORITY = 6

#: Settings py_reactor's jobs need, and why (see docs/workers.md). ``install`` sets the
#: per-task ones on the task itself, so an application's own settings stay untouched.
SETTINGS: dict[str, Any] = {
    "task_acks_late": True,  # a worker killed mid-job leaves the message to be redelivered
    "task_reject_on_worker_lost": True,  # ... also when its pool process dies
    "worker_prefetch_multiplier": 1,  # a busy worker does not sit on jobs others could run
    "task_ignore_result": True,  # the outcome lives in the store, not in a result backend
    "broker_connection_retry_on_startup": True,
}


def run_job(execution_id: str, epoch: int) -> str:
    """The task: claim ``execution_id`` at ``epoch`` and run it until it ends or parks."""
    became = run_execution(
        execution_id, worker_name(), on_claim=leases.track, transport=CELERY, sent_at_epoch=epoch
    )
    if became in ("not claimed", "gone"):
        logger.info(
            "py_reactor: the job of execution %s (sent at epoch %d) ran nothing: %s (a "
            "redelivered or duplicated message, or the run moved on since it was sent)",
            execution_id,
            epoch,
            became,
        )
    return became


class Dispatcher:
    """Sends the jobs of executions that are due: woken by a release (the ready list), due by
    their timer, or left by a worker whose lease lapsed. One per worker process (a bootstep);
    several share the store safely, each job being taken for sending once."""

    def __init__(self) -> None:
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._loop, name="py_reactor-celery-dispatcher", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def sweep(self) -> tuple[list[str], list[str]]:
        """One recovery pass: send what is due; ``(due ids, ids recovered from a lapsed
        lease)``."""
        executions = stored_executions()
        due, lapsed = recovery_pass(executions)
        self.send_due(due)
        return due, lapsed

    def send_due(self, ids: list[str]) -> None:
        """Send a job for each of ``ids`` still due (and not being sent by another)."""
        executions = stored_executions()
        for execution_id, epoch, queue, namespace in executions.take_for_sending(
            ids, resend_after=get_config().celery_resend_after
        ):  # one stored by a thread worker has no queue yet: its namespace's
            send(execution_id, epoch, queue=queue or celery_queue(namespace))

    def _loop(self) -> None:
        serve(self._stopped, lambda ready: self.send_due([ready]), self.sweep, "the dispatcher")


class DispatcherStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """Runs a :class:`Dispatcher` in the worker's main process while the worker runs.

    It starts after the pool, so that the prefork children are forked before its thread
    exists: a child forked while that thread was inside a Redis call could inherit a lock held
    for good and never run a job (the job it had been handed sat reserved until re-sent).
    """

    requires = ("celery.worker.components:Pool",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.dispatcher: Dispatcher | None = None

    def start(self, parent: Any) -> None:
        self.dispatcher = Dispatcher()
        self.dispatcher.start()

    def stop(self, parent: Any) -> None:
        if self.dispatcher is not None:
            self.dispatcher.stop()


def install(target: Celery) -> None:
    """Register py_reactor's task and dispatcher on ``target`` (an application's Celery app).

    The app keeps its own settings; py_reactor's task acks late and is rejected when its
    worker is lost, whatever the app's defaults. Start its workers with ``-Q`` including
    ``configure(celery_queue=...)`` (``"py_reactor"``), and ideally
    ``worker_prefetch_multiplier=1``. Installing twice does nothing more.
    """
    global _sender
    if getattr(target, "_py_reactor_installed", False):
        _sender = target
        return
    target.task(name=TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)(run_job)
    target.steps["worker"].add(DispatcherStep)
    target._py_reactor_installed = True
    _sender = target


def check_can_send(cls: type) -> None:
    """Refuse, before anything is stored, what Celery workers could not run.

    Raises:
        DispatchError: no ``redis_url`` is configured, or ``cls`` is defined in ``__main__``.
    """
    config = get_config()
    if config.redis_url is None:
        raise DispatchError(
            f"{cls.__qualname__} cannot be sent to Celery: configure(worker='celery') needs "
            "configure(redis_url='redis://host:6379/0'), the Redis server that holds the "
            "executions for every worker (and, unless install(app) brings a broker of its own, "
            "Celery's broker); the embedded server serves one machine only"
        )
    if cls.__module__ == "__main__":
        raise DispatchError(
            f"{cls.__qualname__} is defined in the __main__ script, which Celery workers cannot "
            "import: move it into a module and start the workers with --import that module"
        )


def send(execution_id: str, epoch: int, *, queue: str, priority: int | None = None) -> None:
    """Send the job that runs ``execution_id`` (claimed at ``epoch``) to ``queue`` (its
    namespace's, ``runtime.namespaces.celery_queue``; a re-sent job goes to the queue the
    execution was first sent to, whoever sends it), at Celery ``priority`` (None: the broker's
    first).

    A broker that cannot be reached is logged, not raised: the execution is stored and due,
    and the recovery loop sends it again later.
    """
    sender = current_sender()
    options: dict[str, Any] = {} if priority is None else {"priority": priority}
    try:
        sender.send_task(TASK, args=(execution_id, epoch), queue=queue, **options)
    except Exception as exc:
        logger.warning(
            "py_reactor: sending the job of execution %s failed (%s: %s); it stays due and "
            "the recovery loop sends it again",
            execution_id,
            type(exc).__name__,
            exc,
        )


def current_sender() -> Celery:
    """The Celery app jobs are sent through now: the application's own (``install``), else
    the default app for the configured store's server."""
    sender = _sender
    if sender is not None and sender is not _app:
        return sender
    return _default_sender(get_config().redis_url)


def _default_sender(redis_url: str | None) -> Celery:
    """The default app, sending to the configured store's server (an app per server URL, as
    a Celery app's broker cannot change once it has connected)."""
    url = os.environ.get("PY_REACTOR_REDIS_URL") or redis_url
    app = default_app()
    if not app.conf.broker_url:
        app.conf.broker_url = url
    if url is None or url == app.conf.broker_url:
        return app
    with _senders_lock:
        sender = _senders.get(url)
        if sender is None:
            sender = _senders[url] = Celery("py_reactor", set_as_current=False)
            sender.conf.update(broker_url=url, **SETTINGS)
    return sender


_senders: dict[str, Celery] = {}
_senders_lock = threading.Lock()


def _default_app() -> Celery:
    url = os.environ.get("PY_REACTOR_REDIS_URL")
    if url:
        configure(redis_url=url, worker="celery")
    celery_app = Celery("py_reactor")
    celery_app.conf.update(
        broker_url=url or get_config().redis_url,
        task_default_queue=get_config().celery_queue,
        **SETTINGS,
    )
    return celery_app


_app: Celery | None = None
_app_lock = threading.Lock()
_sender: Celery | None = None


def default_app() -> Celery:
    """The default app, made (with py_reactor's task and dispatcher installed) on first use,
    not at import: ``celery -A py_reactor.workers.celery worker`` with PY_REACTOR_REDIS_URL.

    With PY_REACTOR_REDIS_URL set, making it also configures py_reactor for that server and
    ``worker="celery"``: what a worker process started by Celery's own command needs.
    """
    global _app
    with _app_lock:
        if _app is None:
            _app = _default_app()
            install(_app)
        return _app


class CeleryTransport:
    """Executions stored here are sent to Celery workers as jobs that carry only ids."""

    def dispatch(self, reactor: type[Reactor], context: Context) -> None:
        config = get_config()
        check_can_send(reactor)
        queue = celery_queue(namespace_of(reactor))
        created = store_new(
            reactor, context, sent_by_caller=config.celery_resend_after, queue=queue
        )
        if created:  # else it was dispatched before (an async unit's id is derived, not random)
            send(context.execution_id, 0, queue=queue, priority=NEW_WORK_PRIORITY)

    def serve_here(self) -> None:
        """Celery workers serve (their dispatcher bootstep): nothing to start here."""


#: The one Celery transport (the app it sends through is ``current_sender()``).
CELERY = CeleryTransport()


def __getattr__(name: str) -> Any:
    """``app``: the default app, made on first access (importing this module makes none)."""
    if name == "app":
        return default_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
