"""How middleware follows an execution across its hand-off to a worker, and across its parks.

Events tell middleware what happens in one process. A dispatched execution goes on in a worker
(another thread, or a Celery process), and may park and resume many times, each time in a new
*worker run*. Middleware that connects those pieces (the OpenTelemetry trace context, the
``wake`` log line) also subclasses :class:`HandoffHooks`, and the dispatch protocol calls:

- :func:`dispatching` when the caller stores an execution for a worker: the hooks may write
  JSON-safe data into ``context.carried`` (it is stored with the execution), under keys
  namespaced by the middleware (``"otel.trace_context"``): the one field of the context that is
  the middleware's, not the library's;
- :func:`worker_run` around each run of a stored execution in a worker: the hooks read what
  was stored, and learn when that run ends (done, parked, or cut off).

This module imports no optional dependency: the dispatch protocol calls it whether or not
OpenTelemetry is installed, and it does nothing unless a configured middleware asks for it.
A hook that raises is logged on the ``py_reactor`` logger and the run goes on.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from py_reactor.config import get_config
from py_reactor.states import Status, TraceKind

if TYPE_CHECKING:
    from py_reactor.engine.context import Context

__all__ = ["HandoffHooks", "Wake", "dispatching", "qualname_of", "wake_of", "worker_run"]

logger = logging.getLogger("py_reactor")


class HandoffHooks:
    """Mixed into a middleware that needs to see executions cross into workers.

    Every hook is a no-op until overridden.
    """

    def on_dispatch(self, context: Context) -> None:
        """``context`` is about to be stored for a worker (a background run or an async unit);
        what the hook writes into ``context.carried`` (JSON-safe, keys namespaced by the
        middleware) is stored with it. ``context.unit_of`` tells an async unit (or a fanned-out
        map element) from a background run: where it was dispatched from."""

    def on_worker_start(self, context: Context) -> None:
        """A worker is about to run the stored execution ``context`` (fresh, resumed after a
        park, or recovered); no event of that run has been delivered yet."""

    def on_worker_end(self, context: Context, error: BaseException | None) -> None:
        """That run ended: completed, failed, parked (``context.status`` is ``waiting``) or cut
        off by ``error``. What the hook writes into ``context.carried`` is stored with it."""


@dataclass(frozen=True, slots=True)
class Wake:
    """What a parked execution waited on, read from its trace when a worker resumes it.

    Attributes:
        step: the parked step's dotted path (None: the reactor's own coordination).
        primitive, key: what it waited on.
        attempt: the park's number, as the ``parked`` trace entry counts it.
        parked_at: when it parked (wall clock, seconds).
        waited: seconds from the park to this resume.
    """

    step: str | None
    primitive: str | None
    key: str | None
    attempt: int
    parked_at: float
    waited: float


def wake_of(context: Context) -> Wake | None:
    """How ``context`` is being resumed after a park, or None when it did not park (a fresh
    run, a recovered one, or one whose last pause was a retry's backoff)."""
    if context.status is not Status.WAITING or not context.trace:
        return None
    last = context.trace[-1]
    if last.get("type") != TraceKind.PARKED:
        return None
    parked_at = float(last.get("started_at") or time.time())
    return Wake(
        step=last.get("step"),
        primitive=last.get("primitive"),
        key=last.get("key"),
        attempt=int(last.get("attempt") or 0),
        parked_at=parked_at,
        waited=max(0.0, time.time() - parked_at),
    )


def qualname_of(reactor_path: str) -> str:
    """The qualified name in a stored ``module:qualname`` (what events call the reactor)."""
    return reactor_path.rpartition(":")[2] or reactor_path


def _hooks() -> list[HandoffHooks]:
    return [mw for mw in get_config().middleware if isinstance(mw, HandoffHooks)]


def _call(hooks: list[HandoffHooks], name: str, context: Context, *args: Any) -> None:
    for mw in hooks:
        try:
            getattr(mw, name)(context, *args)
        except Exception:
            logger.exception(
                "middleware %s raised in %s (execution %s); the run continues",
                type(mw).__qualname__,
                name,
                context.execution_id,
            )


def dispatching(context: Context) -> None:
    """Tell the configured middleware that ``context`` is being stored for a worker."""
    hooks = _hooks()
    if hooks:
        _call(hooks, "on_dispatch", context)


@contextlib.contextmanager
def worker_run(context: Context) -> Iterator[None]:
    """Bracket one worker run of the stored execution ``context`` for the configured
    middleware: ``on_worker_start`` before, ``on_worker_end`` after (in reverse order)."""
    hooks = _hooks()
    if not hooks:
        yield
        return
    _call(hooks, "on_worker_start", context)
    error: BaseException | None = None
    try:
        yield
    except BaseException as exc:
        error = exc
        raise
    finally:
        _call(list(reversed(hooks)), "on_worker_end", context, error)
