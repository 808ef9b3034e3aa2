"""``py-reactor``: the command line.

``py-reactor demo`` shows step-scoped coordination at work; ``py-reactor dashboard`` serves the
operators' dashboard (``py_reactor[web]``); ``py-reactor worker`` starts a
Celery worker that has imported the user's reactor modules; ``py-reactor sweep`` runs one
recovery pass.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from collections.abc import Sequence

from py_reactor import workers
from py_reactor.config import configure, get_config
from py_reactor.demo import add_demo_command
from py_reactor.demo import main as demo
from py_reactor.states import Status

__all__ = ["main"]


def _imports(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--import",
        dest="modules",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module that defines the reactors to run (repeatable)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; the process exit status."""
    parser = argparse.ArgumentParser(prog="py-reactor", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    sweep = commands.add_parser(
        "sweep",
        help="one recovery pass: dispatch parked executions that are due and executions whose "
        "runner's lease lapsed, run them here, then exit",
    )
    sweep.add_argument("--redis-url", help="the store (default: the embedded server)")
    _imports(sweep)
    sweep.add_argument(
        "--wait", type=float, default=30.0, help="seconds to let dispatched runs finish"
    )
    sweep.add_argument(
        "--worker",
        choices=("threads", "celery"),
        default="threads",
        help="run what is due here (threads, the default) or send it to Celery workers",
    )
    worker = commands.add_parser(
        "worker",
        help="start a Celery worker for py_reactor's jobs (needs py_reactor[celery])",
    )
    worker.add_argument("--redis-url", required=True, help="the store, and Celery's broker")
    _imports(worker)
    worker.add_argument("--concurrency", type=int, default=None, help="pool size")
    worker.add_argument("--pool", choices=("prefork", "threads", "solo"), default="prefork")
    worker.add_argument("--loglevel", default="INFO")
    worker.add_argument("--queue", default=None, help="the queue to serve (default py_reactor)")
    from py_reactor.web.cli import add_dashboard_command

    add_demo_command(commands)
    add_dashboard_command(commands)
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo(args)
    if args.command == "dashboard":
        from py_reactor.web.cli import run_dashboard

        return run_dashboard(args)
    if args.command == "worker":
        return _worker(args)
    return _sweep(args.redis_url, args.modules, args.wait, args.worker)


def _worker(args: argparse.Namespace) -> int:

    try:
        configure(redis_url=args.redis_url, worker="celery")
        if args.queue:
            configure(celery_queue=args.queue)
    except ValueError as exc:
        print(f"py-reactor worker: {exc}", file=sys.stderr)
        return 2
    os.environ["PY_REACTOR_REDIS_URL"] = args.redis_url  # for what the pool processes import
    try:
        from py_reactor.workers.celery import app
    except ImportError as exc:
        print(
            f'py-reactor worker: Celery is not installed (pip install "py_reactor[celery]"): {exc}',
            file=sys.stderr,
        )
        return 2
    for module in args.modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            print(f"py-reactor worker: cannot import {module!r}: {exc}", file=sys.stderr)
            return 2

    # The store's server is the broker: the one given, or the one an imported module set.
    app.conf.broker_url = get_config().redis_url or args.redis_url
    argv = [
        "worker",
        "--queues", get_config().celery_queue,
        "--pool", args.pool,
        "--loglevel", args.loglevel,
        "--hostname", f"py_reactor-{os.getpid()}@%h",
        "--without-gossip", "--without-mingle",
    ]  # fmt: skip
    if args.concurrency:
        argv += ["--concurrency", str(args.concurrency)]
    app.worker_main(argv)
    return 0


def _sweep(redis_url: str | None, modules: list[str], wait: float, worker: str) -> int:

    try:
        if redis_url:
            configure(redis_url=redis_url)
        configure(worker=worker)
    except ValueError as exc:
        print(f"py-reactor sweep: {exc}", file=sys.stderr)
        return 2
    for module in modules:
        importlib.import_module(module)
    due, recovered = workers.sweep()
    print(f"due: {len(due)}, recovered from lapsed leases: {len(recovered)}")
    deadline = time.monotonic() + wait
    for execution_id in due:
        while time.monotonic() < deadline:
            found = workers.find(execution_id)
            if found is None or found.status not in (Status.PENDING, Status.RUNNING):
                break
            time.sleep(0.05)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
