"""A FastAPI service on py_reactor's asyncio API: sagas awaited on the app's own event loop.

``POST /accounts/{account}/charge`` runs the ``Charge`` reactor with ``await Charge.arun(...)``.
Its ``debit`` step reads a balance, waits on "the bank" and writes the balance back: a
read-modify-write that two requests on one account must never interleave. A step lock on the
account (``@with_lock`` on that one step) serializes them, while charges on other accounts, and
every other step, overlap freely. A waiting request holds no thread: it awaits the release on
the loop.

``POST /accounts/{account}/statements`` dispatches the ``@background`` reactor ``Statement``;
the asyncio worker that the app's lifespan starts (``await workers.astart()``) runs it as a task
on the same loop. ``GET /executions/{execution_id}`` reads it with ``await py_reactor.afind()``.

Nothing is configured but the worker: the store is py_reactor's embedded Redis (no server to
install). It needs FastAPI (``pip install fastapi``; the project's dev extras have it, and
httpx). Run ``python examples/fastapi_app.py`` to drive the app in-process (httpx, a dozen
requests at once) and print what happened; serve it with ``uvicorn fastapi_app:app --app-dir
examples``. See docs/asyncio.md.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse

import py_reactor
from py_reactor import Failure, Reactor, Result, background, configure, step, with_lock, workers

#: Every account starts with this balance.
OPENING_BALANCE = 100
#: How long "the bank" takes to answer, in seconds.
BANK_LATENCY = 0.05

#: Balances, kept in this process for the example (a database in a real service).
BALANCES: dict[str, int] = {}
#: The amounts charged per account, in order.
CHARGES: dict[str, list[int]] = {}


class Inside:
    """Who is inside the locked step right now, and the most ever seen at once."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self.now: dict[str, int] = {}
        self.peak_per_account: dict[str, int] = {}
        self.peak = 0

    @contextmanager
    def enter(self, account: str) -> Iterator[None]:
        """Count this run inside the step for ``account`` while the block runs."""
        with self._guard:
            self.now[account] = self.now.get(account, 0) + 1
            self.peak_per_account[account] = max(
                self.peak_per_account.get(account, 0), self.now[account]
            )
            self.peak = max(self.peak, sum(self.now.values()))
        try:
            yield
        finally:
            with self._guard:
                self.now[account] -= 1

    def reset(self) -> None:
        """Forget what was seen."""
        with self._guard:
            self.now.clear()
            self.peak_per_account.clear()
            self.peak = 0


#: What the locked step saw (the test reads it).
INSIDE = Inside()


class Charge(Reactor):
    account: str
    amount: int

    @step
    async def quote(amount: int) -> int:
        """The amount plus a fee, from a pricing service (no lock needed)."""
        await asyncio.sleep(0.01)
        return amount + 1

    @step(total=Result("quote"))
    @with_lock(lambda a: f"account:{a['account']}", ttl=30, wait=10)
    async def debit(account: str, total: int) -> int | Failure:
        """Read the balance, ask the bank, write the balance back: one run per account."""
        with INSIDE.enter(account):
            balance = BALANCES.get(account, OPENING_BALANCE)
            await asyncio.sleep(BANK_LATENCY)  # other requests run meanwhile
            if balance < total:
                return Failure(f"insufficient funds: {balance} < {total}", retryable=False)
            BALANCES[account] = balance - total
            CHARGES.setdefault(account, []).append(total)
            return balance - total

    @step(total=Result("quote"), balance=Result("debit"))
    def receipt(account: str, total: int, balance: int) -> str:
        """A plain def step (a blocking SDK, say): it runs in the loop's thread pool."""
        time.sleep(0.005)
        return f"charged {total} to {account}, balance {balance}"

    returns = "receipt"


@background
class Statement(Reactor):
    account: str

    @step
    async def gather(account: str) -> list[int]:
        await asyncio.sleep(0.02)
        return list(CHARGES.get(account, []))

    @step(charges=Result("gather"))
    def render(account: str, charges: list[int]) -> str:
        return f"{account}: {len(charges)} charges, {sum(charges)} in all"

    returns = "render"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Run background executions as tasks on this app's loop, from startup to shutdown."""
    configure(worker="asyncio")  # the store is left as it is: the embedded one by default
    await workers.astart()
    try:
        yield
    finally:
        await workers.astop(timeout=30)  # also closes py_reactor's connections on this loop


app = FastAPI(title="py_reactor on asyncio", lifespan=lifespan)


@app.post("/accounts/{account}/charge")
async def charge(account: str, amount: int) -> JSONResponse:
    outcome = await Charge.arun(account=account, amount=amount)
    if outcome.is_success:
        return JSONResponse({"status": outcome.status, "receipt": outcome.value})
    return JSONResponse(
        {"status": outcome.status, "step": outcome.step_name, "error": str(outcome.error)},
        status_code=402,
    )


@app.post("/accounts/{account}/statements", status_code=202)
async def statement(account: str) -> dict[str, str]:
    dispatched = await Statement.arun(account=account)  # returns at once: a DispatchedResult
    return {"id": dispatched.execution_id}


@app.get("/executions/{execution_id}")
async def execution(execution_id: str) -> dict[str, Any]:
    found = await py_reactor.afind(execution_id)
    if found is None:
        raise HTTPException(404, f"no execution {execution_id}")
    outcome = found.outcome  # None until it ended
    value = outcome.value if outcome is not None and outcome.is_success else None
    return {
        "id": found.execution_id,
        "status": found.status,
        "ended": outcome is not None,
        "value": value,
    }


async def _drive() -> None:
    """Start the app (its lifespan), fire requests at it at once, print what happened."""
    import httpx  # FastAPI's test client's dependency; only this demonstration needs it

    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://shop") as client,
    ):
        accounts = ["alice"] * 4 + ["bob"] * 4 + ["carol"] * 4
        start = time.monotonic()
        replies = await asyncio.gather(
            *(client.post(f"/accounts/{name}/charge", params={"amount": 9}) for name in accounts)
        )
        elapsed = time.monotonic() - start
        print(f"{len(replies)} charges of 9 (+1 fee) on 3 accounts, sent at once:")
        print(f"  the first reply: {replies[0].status_code} {replies[0].json()}")
        for name in ("alice", "bob", "carol"):
            print(
                f"  {name}: balance {BALANCES[name]}, "
                f"at most {INSIDE.peak_per_account[name]} request inside `debit` at once"
            )
        print(
            f"  at most {INSIDE.peak} requests inside `debit` at once across accounts; "
            f"{elapsed:.2f} s in all (one account's 4 debits take {4 * BANK_LATENCY:.2f} s)"
        )

        refused = await client.post("/accounts/alice/charge", params={"amount": 500})
        print(f"a charge of 500 on alice: {refused.status_code} {refused.json()}")

        queued = await client.post("/accounts/alice/statements")
        execution_id = queued.json()["id"]
        print(f"statement dispatched: {queued.status_code}, run by the asyncio worker")
        for _ in range(500):
            seen = (await client.get(f"/executions/{execution_id}")).json()
            if seen["ended"]:
                break
            await asyncio.sleep(0.02)
        print(f"  {seen['status']}: {seen['value']}")


if __name__ == "__main__":
    asyncio.run(_drive())
