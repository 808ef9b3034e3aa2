"""``py-reactor dashboard``: serve the dashboard with uvicorn.

``add_dashboard_command(subparsers)`` registers the command without importing Starlette or
uvicorn (the ``web`` extra may not be installed); ``run_dashboard(args)`` imports them and
serves until interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from typing import Any

from py_reactor.config import configure

__all__ = ["add_dashboard_command", "run_dashboard"]


def add_dashboard_command(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``dashboard`` to ``subparsers`` (what ``ArgumentParser.add_subparsers`` returned)."""
    command: argparse.ArgumentParser = subparsers.add_parser(
        "dashboard",
        help="serve the dashboard: executions, live coordination state, parked runs "
        "(needs py_reactor[web])",
        description="Serve the py_reactor dashboard (an ASGI app) with uvicorn.",
    )
    command.add_argument(
        "--redis-url",
        help="the store to show (default: $PY_REACTOR_REDIS_URL, then the embedded server)",
    )
    command.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    command.add_argument("--port", type=int, default=8000, help="port to listen on (8000)")
    command.add_argument(
        "--import",
        dest="modules",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module that defines reactors (repeatable): shows their declared coordination "
        "and lets retry/undo run them",
    )
    command.add_argument(
        "--auth",
        metavar="MODULE:FUNCTION",
        help="a function taking the request and returning True when it may retry, undo or "
        "cancel; without it the dashboard is read only",
    )
    command.add_argument(
        "--worker",
        choices=("threads", "celery"),
        default="threads",
        help="where a retried background run goes: this process's thread worker (default) or "
        "Celery workers",
    )
    command.add_argument(
        "--refresh", type=float, default=2.0, help="seconds between live refreshes (2)"
    )
    return command


def run_dashboard(args: argparse.Namespace) -> int:
    """Serve the dashboard for ``args`` until interrupted; the process exit status."""
    try:
        import uvicorn

        from py_reactor.web import app
    except ImportError as exc:
        print(
            f"py-reactor dashboard: {exc}; install it with: pip install -e '.[web]' in your "
            "py_reactor checkout",
            file=sys.stderr,
        )
        return 2
    try:
        configure(worker=args.worker)
        if args.redis_url:
            configure(redis_url=args.redis_url)
        for module in args.modules:
            importlib.import_module(module)
        auth = _callable(args.auth) if args.auth else None
        dashboard = app(redis_url=args.redis_url, auth=auth, refresh=args.refresh)
    except Exception as exc:
        print(f"py-reactor dashboard: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    where = "read only" if auth is None else f"actions allowed by {args.auth}"
    print(f"py-reactor dashboard on http://{args.host}:{args.port}/ ({where})", file=sys.stderr)
    uvicorn.run(dashboard, host=args.host, port=args.port, log_level="info")
    return 0


def _callable(path: str) -> Callable[..., bool]:
    """The function named ``module:function``."""
    module_name, _, name = path.partition(":")
    if not module_name or not name:
        raise ValueError(f"--auth takes MODULE:FUNCTION, got {path!r}")
    target = getattr(importlib.import_module(module_name), name, None)
    if not callable(target):
        raise ValueError(f"--auth {path}: {name!r} in {module_name} is not a function")
    return target  # type: ignore[no-any-return]
