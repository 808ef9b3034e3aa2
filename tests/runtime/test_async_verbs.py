"""The verbs on an event loop: ``aresume``, ``afind``, ``aundo``, ``aretry``, ``acancel``.

Each is its sync twin in a bridge: the same store records and scripts, every read and wait
awaited on the loop. A run of async steps pauses at an interrupt, is found, resumed, undone
(its async undo awaited), retried and cancelled, all from coroutines.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

import py_reactor
from py_reactor import Input, Reactor, Result, configure, interrupt, step
from py_reactor.engine.results import PausedResult
from py_reactor.errors import StoreUnavailableError
from py_reactor.states import Status
from tests._aio import run
from tests._redis import PrivateRedis

LOG: dict[str, list[str]] = {}


@pytest.fixture(autouse=True)
def _server(_default_settings: None, redis_url: str) -> None:
    configure(redis_url=redis_url)


class Decision(BaseModel):
    approved: bool


class Approve(Reactor):
    key: str

    @step(key=Input("key"))
    async def prepare(key: str) -> str:
        await asyncio.sleep(0)
        LOG.setdefault(key, []).append("prepare")
        return "prepared"

    @prepare.undo
    async def _unprepare(result: str, key: str) -> None:
        await asyncio.sleep(0)
        LOG[key].append(f"undo {result}")

    review = interrupt(payload=Decision, wait_for="prepare")

    @step(key=Input("key"), decision=Result("review"))
    async def apply(key: str, decision: dict[str, Any]) -> str:
        LOG[key].append(f"apply {decision['approved']}")
        return "applied" if decision["approved"] else "rejected"

    returns = "apply"


def test_a_paused_run_is_found_resumed_undone_retried_and_cancelled_from_coroutines(
    key: str,
) -> None:
    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        paused = await Approve.arun(key=key)
        assert isinstance(paused, PausedResult)
        found = await py_reactor.afind(paused.execution_id)
        assert found is not None
        seen["paused"] = found.status
        done = await Approve.aresume(paused.execution_id, {"approved": True})
        seen["resumed"] = (done.is_success, done.value)
        undone = await Approve.aundo(paused.execution_id)
        seen["undone"] = undone.status
        again = await Approve.aretry(paused.execution_id)
        seen["retry paused"] = isinstance(again, PausedResult)
        cancelled = await Approve.acancel(again.execution_id, "changed my mind")
        seen["cancelled"] = cancelled.status
        final = await Approve.afind(again.execution_id)
        assert final is not None
        seen["retry_of"] = final.retry_of == paused.execution_id
        return seen

    seen = run(main)
    assert seen == {
        "paused": Status.PAUSED,
        "resumed": (True, "applied"),
        "undone": Status.CANCELLED,
        "retry paused": True,
        "cancelled": Status.CANCELLED,
        "retry_of": True,
    }
    assert LOG[key] == ["prepare", "apply True", "undo prepared", "prepare"]


def test_afind_of_an_unknown_id_is_none() -> None:
    assert run(lambda: py_reactor.afind("0" * 32)) is None


def test_the_sync_verbs_that_run_steps_refuse_inside_a_coroutine(key: str) -> None:
    """``resume``, ``undo`` and ``retry`` run steps: from a coroutine they would block its
    loop for the whole run, so they refuse and name their awaitable twin."""

    async def main() -> None:
        paused = await Approve.arun(key=key)
        for call, twin in (
            (lambda: Approve.resume(paused.execution_id, {"approved": True}), "aresume"),
            (lambda: Approve.undo(paused.execution_id), "aundo"),
            (lambda: Approve.retry(paused.execution_id), "aretry"),
        ):
            with pytest.raises(RuntimeError, match=rf"running event loop.*{twin}"):
                call()
        found = await Approve.afind(paused.execution_id)
        assert found is not None
        assert found.status == Status.PAUSED  # nothing ran

    run(main)


def test_find_and_afind_report_a_store_that_is_down_as_unavailable() -> None:
    """A plain read of a record (``find``, ``afind``, ``wait``) raises the same
    ``StoreUnavailableError`` the scripts raise when the store is down, not redis-py's own."""
    server = PrivateRedis()
    try:
        configure(redis_url=server.url)
        server.halt()
        with pytest.raises(StoreUnavailableError, match="unreachable"):
            py_reactor.find("0" * 32)

        async def main() -> None:
            with pytest.raises(StoreUnavailableError, match="unreachable"):
                await py_reactor.afind("0" * 32)

        run(main)
    finally:
        server.stop()
