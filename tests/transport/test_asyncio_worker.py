"""The asyncio worker: background executions as tasks on an event loop.

``configure(worker="asyncio")`` plus ``await workers.astart()`` runs what ``@background``
reactors dispatch as tasks of the loop; contention parks a run (the task is given back) and the
release of the key wakes it through the ready list. ``py-reactor worker --pool asyncio`` runs the
same worker in a process of its own. Async steps also run on the thread worker (on a loop of
their own per step).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
import redis

from py_reactor import Lock, configure, workers
from py_reactor.aio import call, close_loop_resources
from py_reactor.runtime.execution import find, wait
from py_reactor.states import Status
from py_reactor.storage import executions as stored_executions
from tests._processes import CHILD_PATH
from tests._redis import PrivateRedis
from tests.transport import _asyncio_reactors as reactors

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def _server(_default_settings: None, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(reactors.URL_ENV, redis_url)
    configure(redis_url=redis_url)


def test_a_thousand_background_runs_complete_without_overlap_every_park_woken_by_a_release(
    key: str, raw: redis.Redis
) -> None:
    """1,000 executions, one in ten on one shared key: all complete, no two ever inside the
    locked step at once, and the parked ones were all woken by releases (their timer is 600 s
    off)."""
    configure(worker="asyncio", worker_concurrency=200, park_delay=600, park_jitter=0)
    runs = 1000

    async def main() -> list[str]:
        await workers.astart()
        try:
            dispatched = []
            for index in range(runs):
                shared = index % 10 == 0
                target = f"{key}:hot" if shared else f"{key}:{index}"
                dispatched.append(await reactors.Charge.arun(key=target, tag=key))
            deadline = time.monotonic() + 120
            while int(await reactors._raw().get(f"{key}:done") or 0) < runs:
                assert time.monotonic() < deadline, "the runs did not all complete in 120 s"
                await asyncio.sleep(0.1)
            return [outcome.execution_id for outcome in dispatched]
        finally:
            await reactors.close_raw()
            await workers.astop()

    ids = asyncio.run(main())
    statuses, parks = set(), 0
    for execution_id in ids:
        found = find(execution_id)
        assert found is not None
        statuses.add(found.status)
        parks += found.parks
    assert statuses == {Status.COMPLETED}
    assert int(raw.get(f"{key}:overlaps") or 0) == 0
    assert parks > 0  # they contended, parked, and were woken by releases only


def test_runs_on_the_asyncio_worker_survive_a_store_restart() -> None:
    """300 runs, one in five on each of five keys; the store is stopped for a second mid-way
    and started again (its data kept): every run completes, the locked step never overlaps,
    and no run failed: the outage suspended them. (A step whose end could not be stored runs
    again from the last checkpoint, so the last step ran at least once per run.)"""
    server = PrivateRedis(persistent=True)
    reactors.INSIDE.clear()
    reactors.OVERLAPS[0] = reactors.LAST_RAN[0] = 0
    runs = 300
    try:
        configure(
            redis_url=server.url, worker="asyncio", park_delay=1, park_jitter=0.5,
            execution_lease=2,
        )  # fmt: skip

        async def main() -> list[str]:
            await workers.astart()
            try:
                ids = [
                    (await reactors.Counted.arun(key=f"k{i % 5}")).execution_id for i in range(runs)
                ]
                await asyncio.sleep(0.3)
                server.halt()
                await asyncio.sleep(1)
                server.restart()
                deadline = time.monotonic() + 120
                while reactors.LAST_RAN[0] < runs:
                    assert time.monotonic() < deadline, f"{reactors.LAST_RAN[0]} of {runs} ended"
                    await asyncio.sleep(0.2)
                return ids
            finally:
                await workers.astop()

        ids = asyncio.run(main())
        statuses = set()
        for execution_id in ids:
            found = find(execution_id)
            assert found is not None
            statuses.add(found.status)
        assert statuses == {Status.COMPLETED}
        assert reactors.OVERLAPS[0] == 0
        assert reactors.LAST_RAN[0] >= runs
    finally:
        server.stop()


def test_astart_refuses_unless_the_worker_is_asyncio() -> None:
    async def main() -> None:
        with pytest.raises(RuntimeError, match=r"configure\(worker='asyncio'\)"):
            await workers.astart()
        await close_loop_resources()

    asyncio.run(main())


def test_arun_of_a_background_reactor_starts_the_worker_on_the_loop_by_itself() -> None:
    configure(worker="asyncio")

    async def main() -> int:
        try:
            dispatched = await reactors.Mixed.arun(n=20)
            final = await dispatched.await_outcome(timeout=30)
            return int(final.value)
        finally:
            await workers.astop()

    assert asyncio.run(main()) == 41


def test_astop_leaves_what_outlives_its_timeout_to_recovery_with_its_key_free(
    key: str,
) -> None:
    """A run still inside its step when the stop's timeout ends is cancelled as if its worker
    had died, except that its lock is given back at once: nothing is rolled back or written,
    and once its lease lapses a worker started again runs it from its last checkpoint."""
    configure(worker="asyncio", execution_lease=3)  # a lapse soon after the stop, not before

    async def first_worker() -> str:
        await workers.astart()
        dispatched = await reactors.Sleepy.arun(key=key)
        while not await reactors._raw().get(f"{key}:entered"):
            await asyncio.sleep(0.02)
        await workers.astop(timeout=0.5)
        hold = await Lock(key, wait=0).aacquire()  # free at once, not after the 60 s ttl
        await hold.arelease()
        await reactors.close_raw()
        await close_loop_resources()
        return dispatched.execution_id

    execution_id = asyncio.run(first_worker())
    left = find(execution_id)
    assert left is not None
    assert left.status == Status.RUNNING  # not aborted: its lease lapses, recovery takes it

    async def second_worker() -> Any:
        await workers.astart()
        try:
            return await wait_async(execution_id)
        finally:
            await reactors.close_raw()
            await workers.astop()

    outcome = asyncio.run(second_worker())
    assert outcome.is_success, outcome
    assert outcome.value == "done"


async def wait_async(execution_id: str) -> Any:
    """The outcome of ``execution_id`` once it ended, waited for on the loop."""
    return await call(wait, execution_id, timeout=30)


def test_async_steps_run_on_the_thread_worker_too() -> None:
    configure(worker="threads")
    dispatched = reactors.Mixed.run(n=5)
    assert dispatched.wait(timeout=30).value == 11


def test_py_reactor_worker_pool_asyncio_runs_what_another_process_dispatched(
    redis_url: str, key: str, raw: redis.Redis
) -> None:
    workers.stop(wait=True)  # this process's thread worker (an earlier test's) serves no more
    env = {**os.environ, reactors.URL_ENV: redis_url, "PYTHONPATH": CHILD_PATH}
    worker = subprocess.Popen(
        [
            sys.executable, "-m", "py_reactor.cli", "worker", "--pool", "asyncio",
            "--redis-url", redis_url, "--import", "tests.transport._asyncio_reactors",
            "--concurrency", "20",
        ],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert worker.stdout is not None
        assert "asyncio worker: serving tests" in worker.stdout.readline()
        configure(worker="asyncio")  # stored for a worker; none runs in this process
        ids = [reactors.Charge.run(key=f"{key}:{i % 3}", tag=key).execution_id for i in range(30)]
        for execution_id in ids:
            found = wait(execution_id, timeout=60)
            assert found.is_success, found
            stored = stored_executions().load(execution_id)
            assert stored is not None
            assert stored.worker is not None
            assert str(worker.pid) in stored.worker  # run by that process
        assert int(raw.get(f"{key}:overlaps") or 0) == 0
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err


def test_py_reactor_worker_pool_asyncio_refuses_a_queue() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "py_reactor.cli", "worker", "--pool", "asyncio", "--queue", "x"],
        check=False, cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONPATH": CHILD_PATH},
    )  # fmt: skip
    assert done.returncode == 2
    assert "takes no queue" in done.stderr
