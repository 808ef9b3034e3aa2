"""examples/fastapi_app.py behaves as docs/asyncio.md says: a route awaits a reactor's outcome,
a step lock serializes one account's charges while other accounts overlap, and a background
dispatch is run by the asyncio worker the app's lifespan starts.

The app is driven with Starlette's TestClient (its lifespan runs: ``workers.astart()`` on entry,
``astop()`` on exit) against the session's private Redis.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from py_reactor import configure, get_config

with warnings.catch_warnings():  # Starlette 1.x prefers httpx2 and says so when it imports httpx
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "fastapi_app.py"


def _load() -> ModuleType:
    """examples/fastapi_app.py imported as the module ``fastapi_app`` (its ``__main__`` part is
    not run); the asyncio worker imports the background reactor by that name."""
    spec = importlib.util.spec_from_file_location("fastapi_app", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # annotations are resolved through sys.modules
    spec.loader.exec_module(module)
    return module


example = _load()


@pytest.fixture
def client(redis_url: str) -> Iterator[TestClient]:
    """The example app on the private Redis, its lifespan running for the whole test."""
    configure(redis_url=redis_url)
    example.INSIDE.reset()
    with TestClient(example.app) as client:
        yield client


def _account() -> str:
    return f"acct-{uuid.uuid4().hex[:8]}"


def _charge_at_once(client: TestClient, accounts: list[str], amount: int) -> list[Any]:
    """POST one charge per entry of ``accounts``, all in flight at once (each from a thread
    of its own; the app serves them all on its one loop)."""
    start = threading.Barrier(len(accounts))

    def post(account: str) -> Any:
        start.wait()
        return client.post(f"/accounts/{account}/charge", params={"amount": amount})

    with ThreadPoolExecutor(len(accounts)) as pool:
        return list(pool.map(post, accounts))


def test_the_charge_route_returns_the_reactor_outcome(client: TestClient) -> None:
    """A charge answers with the saga's value; one the balance cannot cover answers 402 with
    the failing step and its error."""
    account = _account()
    reply = client.post(f"/accounts/{account}/charge", params={"amount": 29})
    assert reply.status_code == 200
    assert reply.json() == {
        "status": "completed",
        "receipt": f"charged 30 to {account}, balance 70",
    }

    refused = client.post(f"/accounts/{account}/charge", params={"amount": 500})
    assert refused.status_code == 402
    assert refused.json() == {
        "status": "failed",
        "step": "debit",
        "error": "insufficient funds: 70 < 501",
    }
    assert example.BALANCES[account] == 70


def test_one_accounts_charges_never_overlap_in_the_locked_step_while_accounts_do(
    client: TestClient,
) -> None:
    """Five charges on each of two accounts, all sent at once: never two runs of one account
    inside ``debit`` (so no update is lost), but the two accounts inside it together."""
    first, second = _account(), _account()
    replies = _charge_at_once(client, [first, second] * 5, amount=9)

    assert [reply.status_code for reply in replies] == [200] * 10
    assert example.INSIDE.peak_per_account == {first: 1, second: 1}
    assert example.INSIDE.peak >= 2  # the lock is per account: the other one went on
    assert example.BALANCES[first] == example.BALANCES[second] == 100 - 5 * 10
    assert example.CHARGES[first] == example.CHARGES[second] == [10] * 5


def test_a_background_statement_is_run_by_the_lifespans_asyncio_worker(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The statement route answers 202 at once; the asyncio worker runs the execution as a
    task on the app's own loop, and ``GET /executions/{id}`` (``afind``) shows it completed."""
    assert get_config().worker == "asyncio"
    account = _account()
    assert client.post(f"/accounts/{account}/charge", params={"amount": 4}).status_code == 200

    seen: list[tuple[str, str]] = []

    class Charges(dict[str, list[int]]):
        def get(self, key: str, default: Any = None) -> Any:
            task = asyncio.current_task()
            seen.append((task.get_name() if task else "", threading.current_thread().name))
            return super().get(key, default)

    monkeypatch.setattr(example, "CHARGES", Charges(example.CHARGES))

    queued = client.post(f"/accounts/{account}/statements")
    assert queued.status_code == 202
    execution_id = queued.json()["id"]

    deadline = time.monotonic() + 20
    while not (found := client.get(f"/executions/{execution_id}").json())["ended"]:
        assert time.monotonic() < deadline, found
        time.sleep(0.02)

    assert found == {
        "id": execution_id,
        "status": "completed",
        "ended": True,
        "value": f"{account}: 1 charges, 5 in all",
    }
    [(task, thread)] = seen
    assert task == f"py_reactor-{execution_id}"  # a task of the asyncio worker
    assert not thread.startswith("py_reactor-worker")  # not the thread worker's pool


def test_an_unknown_execution_is_a_404(client: TestClient) -> None:
    """``afind`` of an id the store does not know is None: the route answers 404."""
    assert client.get("/executions/no-such-id").status_code == 404
