"""Reactors with interrupts that the Celery interrupt tests send to real worker processes
(``py-reactor worker --import tests.transport._celery_interrupt_reactors``).

They report as ``_celery_reactors`` does, through ``_worker_side`` (and apply the worker
settings their test passes through the environment): each step appends ``"<what>:<pid>"`` to
the list ``celery-test:<key>``. A step after the interrupt records who owns the reactor-level
lock while it runs, read from the store: the resumed run took it again.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from py_reactor import Lock, Reactor, Result, background, interrupt, step, with_lock
from tests.transport._worker_side import apply_settings, record

apply_settings()  # the settings the test gave this worker process


class Approval(BaseModel):
    """The payload a reviewer resumes with."""

    approved: bool
    by: str


def lock_key(key: str) -> str:
    return f"celery-interrupt:{key}"


@background
@with_lock(lambda i: lock_key(i["key"]), ttl=30, wait=5)
class Review(Reactor):
    """prepare -> review (resumed in a worker) -> pay, all in workers, under a lock on key."""

    key: str

    @step()
    def prepare(key: str) -> str:
        record(key, "prepare")
        return "prepared"

    review = interrupt(
        payload=Approval,
        correlation_id=lambda i: f"celery:{i['key']}",
        resume="background",
        wait_for="prepare",
    )

    @step(approval=Result("review"))
    def pay(key: str, approval: dict[str, Any]) -> str:
        owner = Lock(lock_key(key)).state().owner
        record(key, f"pay by={approval['by']} locked={owner is not None}")
        return f"paid by {approval['by']}"

    returns = "pay"


@background
class ReviewHere(Reactor):
    """Paused in a worker, resumed in the process that resumes it (``resume="inline"``)."""

    key: str

    @step()
    def prepare(key: str) -> str:
        record(key, "prepare")
        return "prepared"

    review = interrupt(wait_for="prepare")

    @step(answer=Result("review"))
    def finish(key: str, answer: dict[str, Any]) -> str:
        record(key, f"finish {answer.get('note')}")
        return f"finished {answer.get('note')}"

    returns = "finish"


@background
class Expiring(Reactor):
    """An interrupt with a short timeout: a worker's recovery loop fails it; prepare undone."""

    key: str

    @step()
    def prepare(key: str) -> str:
        record(key, "prepare")
        return "prepared"

    @prepare.undo
    def _unprepare(result: str, key: str) -> None:
        record(key, "undo prepare")

    review = interrupt(timeout=1, wait_for="prepare")

    @step(answer=Result("review"))
    def finish(key: str, answer: dict[str, Any]) -> str:
        record(key, "finish")
        return "finished"

    returns = "finish"


@background
class Ping(Reactor):
    """A warm-up job through the module's queue."""

    @step()
    def ping() -> str:
        return "pong"

    returns = "ping"
