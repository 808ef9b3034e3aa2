"""The reactor and the worker-process entry point of the frozen-runner test.

They live at module level in a module of their own so that worker processes import them by
``module:qualname``. A worker process is started as ``python -c "from
tests.concurrency._frozen_reactors import serve; serve(url)"``: a thread worker with a short
execution lease, whose lock releases are written to Redis (``<lock>:released``) so the test
sees when a runner gave its level back.

The locked step records its stay in the ``OverlapRecorder`` named after the lock, labelled
``<execution id>@<pid>``, and stays inside until the test sets ``<lock>:<execution id>:go:<n>``
(``n``: which runner of that execution this is, 1 for the first, 2 for a recovery).

``Frozen`` takes the lock in its step (a step-level hold: the last checkpoint before the step
lists nothing to adopt). ``FrozenUnderReactorLock`` takes it for the whole run (reactor-level)
and stays in its second step: the checkpoint after its first step lists the reactor's hold, so a
recovered run loads a record of the hold the presumed-dead runner still has.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from typing import Any

import redis

import py_reactor.workers
from py_reactor import Middleware, Reactor, Step, Success, background, configure, step, with_lock
from py_reactor.config import get_config
from py_reactor.observability import events as ev
from tests._overlap import OverlapRecorder

__all__ = ["LEASE", "LOCK_TTL", "Frozen", "FrozenUnderReactorLock", "Guarded", "Inside", "serve"]

#: The execution lease of the worker processes (seconds): a stopped runner is presumed dead
#: this long after its last renewal.
LEASE = 1.0

#: The locks' ttl (seconds): far longer than the runner stays stopped, so the level it took is
#: still live when the recovered run enters and when the runner wakes.
LOCK_TTL = 30.0

#: Seconds a runner stays inside the step waiting for the test's go before it gives up.
STAY_LIMIT = 60.0


@functools.cache
def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


def client() -> redis.Redis:
    """A client of the server this process is configured for."""
    url = get_config().redis_url
    if url is None:  # pragma: no cover - every process here configures one
        raise RuntimeError("configure(redis_url=...) first")
    return _client(url)


@functools.cache
def recorder(url: str, name: str) -> OverlapRecorder:
    """One recorder per (url, name) in this process."""
    return OverlapRecorder(url, name)


def label(execution_id: str, pid: int) -> str:
    """How a runner is named in the recorder: the execution and the process running it."""
    return f"{execution_id}@{pid}"


def stay(lock: str, me: str) -> int:
    """Record this runner's stay inside ``lock`` until the test's go; which runner it was."""
    url = get_config().redis_url
    assert url is not None
    c = client()
    runner = int(c.incr(f"{lock}:{me}:runner"))  # before entering: the test waits for the entry
    with recorder(url, lock).inside(label(me, os.getpid())):
        deadline = time.monotonic() + STAY_LIMIT
        while not c.get(f"{lock}:{me}:go:{runner}"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"runner {runner} of {me} never got its go")
            time.sleep(0.01)
    return runner


@with_lock(lambda args: str(args["lock"]), ttl=LOCK_TTL, wait=0)
class Guarded(Step):
    """Inside the lock: recorded in the overlap recorder, until the test says go."""

    lock: str

    def run(self) -> Any:
        return Success(stay(self.inputs.lock, self.context.root_id))


@background
class Frozen(Reactor):
    """One step under a lock on the ``lock`` input."""

    lock: str

    guarded = step(Guarded)
    returns = "guarded"


class Inside(Step):
    """Inside the reactor's lock (it takes none of its own): recorded, until the test says go."""

    lock: str

    def run(self) -> Any:
        return Success(stay(self.inputs.lock, self.context.root_id))


@background
@with_lock(lambda args: str(args["lock"]), ttl=LOCK_TTL, wait=0)
class FrozenUnderReactorLock(Reactor):
    """The lock on the ``lock`` input held by the reactor around both steps: ``before`` ends
    (its checkpoint lists the reactor's hold), then ``inside`` stays until the test's go."""

    lock: str

    @step()
    def before(lock: str) -> str:
        return "checkpointed"

    inside = step(Inside, wait_for="before")
    returns = "inside"


class ReleaseLog(Middleware):
    """Writes every lock release of this process to ``<lock key>:released``."""

    def on_lock_released(self, event: ev.LockReleased) -> None:
        entry = f"{label(event.execution_id, os.getpid())}|lost={event.lost}"
        client().rpush(f"{event.key}:released", entry)


def serve(url: str) -> None:
    """A worker process: a thread worker with a ``LEASE`` s lease, until it is killed."""
    configure(redis_url=url, execution_lease=LEASE, middleware=[ReleaseLog()])
    py_reactor.workers.start()
    time.sleep(300)
    sys.exit("serve was not stopped")
