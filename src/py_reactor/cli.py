"""``py-reactor``: the command line.

``main`` builds the parser, puts the current folder on ``sys.path`` (as ``celery -A`` does, so
``--import myapp.reactors`` works from the project folder) and turns every error into one line
on stderr with exit status 2. ``worker`` and ``sweep`` are here; ``demo`` is in
``py_reactor.demo``, ``dashboard`` in ``py_reactor.web.cli``, and the operator's commands
(``executions``, ``holds``, ``embedded``) in ``py_reactor.cli_operator``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from py_reactor import workers
from py_reactor.cli_operator import (
    REDIS_URL_ENV,
    CommandError,
    add_imports,
    add_namespaces,
    add_operator_commands,
    add_store_option,
    import_modules,
    one_line,
    reach_store,
    serve_namespaces,
    settle,
    use_store,
    use_worker,
)
from py_reactor.config import configure, get_config
from py_reactor.runtime.namespaces import celery_queue
from py_reactor.version import __version__

__all__ = ["main"]

DESCRIPTION = f"""\
Run and operate py_reactor from a shell.

Each command reads the store from its --redis-url URL, else from the environment variable
{REDIS_URL_ENV}, else uses the embedded Redis server. The current folder is on the import
path, so --import myapp.reactors works from the project folder. An error is one line on
stderr and exit status 2.
"""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; the process exit status."""
    parser = _parser()
    args = parser.parse_args(argv)  # a usage error exits 2 with argparse's message
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # every error, one line: an operator's shell, not a debugger
        command = " ".join(filter(None, (args.command, getattr(args, "action", None))))
        print(f"py-reactor {command}: {one_line(exc)}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="py-reactor",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"py-reactor {__version__}",
        help="print the version and exit",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sweep = commands.add_parser(
        "sweep",
        help="one recovery pass: run what is due and what a dead worker left, then exit",
        description="One recovery pass: dispatch parked executions that are due and executions "
        "whose runner's lease lapsed, run them here (or send them to Celery), then exit.",
    )
    add_store_option(sweep)
    add_imports(sweep, "the reactors to run")
    add_namespaces(sweep)
    sweep.add_argument(
        "--wait",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="seconds to let dispatched runs finish (default 30)",
    )
    sweep.add_argument(
        "--worker",
        choices=("threads", "celery"),
        default="threads",
        help="run what is due here (threads, the default) or send it to Celery workers",
    )
    sweep.set_defaults(handler=_sweep)

    worker = commands.add_parser(
        "worker",
        help="start a worker for py_reactor's background executions: a Celery worker (needs "
        "py_reactor[celery]), or with --pool asyncio an asyncio worker in this process",
        description="Start a worker that has imported your reactor modules: a Celery worker "
        "(the store is also Celery's broker), or with --pool asyncio the asyncio worker, which "
        "runs executions as tasks on an event loop of this process (no Celery needed).",
    )
    add_store_option(worker, needed="required for Celery: the store is its broker")
    add_imports(worker, "the reactors to run")
    add_namespaces(worker)
    worker.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="pool size (asyncio: executions running at once, default 100)",
    )
    worker.add_argument(
        "--pool",
        choices=("prefork", "threads", "solo", "asyncio"),
        default="prefork",
        help="Celery's pool (default prefork), or asyncio: tasks on an event loop, no Celery",
    )
    worker.add_argument("--loglevel", default="INFO", help="Celery's log level (default INFO)")
    worker.add_argument(
        "--queue",
        default=None,
        metavar="PREFIX",
        help="the prefix of the queues to serve, <PREFIX>.<namespace> (default py_reactor)",
    )
    worker.set_defaults(handler=_worker)

    from py_reactor.web.cli import add_dashboard_command  # registers without Starlette

    add_demo_command(commands)
    commands.choices["demo"].set_defaults(handler=_demo)
    add_dashboard_command(commands).set_defaults(handler=_dashboard)
    add_operator_commands(commands)
    return parser


def _demo(args: argparse.Namespace) -> int:
    # Imported here: the demo's reactors must not make every command serve their namespace.
    from py_reactor.demo import main as demo

    url = use_store(args)
    args.redis_url = url
    return demo(args)


def _dashboard(args: argparse.Namespace) -> int:
    from py_reactor.web.cli import run_dashboard

    args.redis_url = use_store(args)
    return run_dashboard(args)


def _worker(args: argparse.Namespace) -> int:
    if args.pool == "asyncio":
        return _asyncio_worker(args)
    url = use_store(args)
    if url is None:
        raise CommandError(
            f"needs --redis-url URL or ${REDIS_URL_ENV}: Celery workers share a Redis server "
            "(the store is their broker)"
        )
    reach_store()  # the broker too: Celery would retry it for ever, a traceback at each try
    configure(worker="celery")
    if args.queue:
        configure(celery_queue=args.queue)
    os.environ[REDIS_URL_ENV] = url  # for what the pool processes import
    try:
        from py_reactor.workers.celery import app
    except ImportError as exc:
        raise CommandError(
            'Celery is not installed (pip install -e ".[celery]" in your py_reactor checkout): '
            f"{exc}"
        ) from None
    import_modules(args.modules)
    queues = ",".join(celery_queue(namespace) for namespace in serve_namespaces(args))

    # The store's server is the broker: the one given, or the one an imported module set.
    app.conf.broker_url = get_config().redis_url or url
    argv = [
        "worker",
        "--queues", queues,
        "--pool", args.pool,
        "--loglevel", args.loglevel,
        "--hostname", f"py_reactor-{os.getpid()}@%h",
        "--without-gossip", "--without-mingle",
    ]  # fmt: skip
    if args.concurrency:
        argv += ["--concurrency", str(args.concurrency)]
    app.worker_main(argv)
    return 0


def _asyncio_worker(args: argparse.Namespace) -> int:
    """``worker --pool asyncio``: the asyncio worker on this process's loop, until SIGINT or
    SIGTERM; then the running executions get 30 s to end (the rest run again elsewhere)."""
    use_store(args)
    reach_store()
    if args.concurrency is not None and args.concurrency < 1:
        raise CommandError(f"--concurrency takes a whole number >= 1, got {args.concurrency}")
    configure(worker="asyncio", worker_concurrency=args.concurrency or None)
    if args.queue:
        raise CommandError("--queue names Celery queues; the asyncio worker takes no queue")
    import_modules(args.modules)
    namespaces = serve_namespaces(args)
    logging.basicConfig(level=args.loglevel.upper(), format="%(asctime)s %(message)s")
    concurrency = get_config().worker_concurrency
    print(
        f"py_reactor asyncio worker: serving {', '.join(namespaces)} "
        f"({concurrency} at once); Ctrl-C to stop",
        flush=True,
    )
    asyncio.run(_serve_until_signalled())
    return 0


async def _serve_until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await workers.astart()
    try:
        await stop.wait()
    finally:
        await workers.astop(timeout=30)


def _sweep(args: argparse.Namespace) -> int:
    url = use_store(args)
    use_worker(args.worker, url)
    reach_store()
    import_modules(args.modules)
    serve_namespaces(args)
    due, recovered = workers.sweep()
    print(f"due: {len(due)}, recovered from lapsed leases: {len(recovered)}")
    settle(due, args.wait)
    return 0


def add_demo_command(commands: Any) -> None:
    """Add ``demo`` to the ``py-reactor`` subcommands."""
    demo = commands.add_parser(
        "demo",
        help="watch step-scoped coordination at work (no server needed)",
        description="Watch step-scoped coordination at work: three short scenes on the "
        "in-process thread worker, or on Celery workers the demo starts.",
    )
    demo.add_argument(
        "--redis-url",
        metavar="URL",
        help="a Redis server (default: $PY_REACTOR_REDIS_URL, else the embedded one)",
    )
    demo.add_argument(
        "--workers", type=_workers, default=0, metavar="N",
        help="run on N Celery worker processes the demo starts (needs a Redis URL)",
    )  # fmt: skip
    demo.add_argument("--plain", action="store_true", help="print lines, not a live table")


def _workers(text: str) -> int:
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if count < 0:
        raise argparse.ArgumentTypeError(f"{count} is below 0 (0: the thread worker)")
    return count


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
