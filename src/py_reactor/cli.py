"""``py-reactor``: the command line. ``py-reactor sweep`` runs one recovery pass.

More commands (``worker``, ``dashboard``) arrive with the issues that build them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


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
    sweep.add_argument(
        "--import",
        dest="modules",
        action="append",
        default=[],
        metavar="MODULE",
        help="a module that defines the reactors to run (repeatable)",
    )
    sweep.add_argument(
        "--wait", type=float, default=30.0, help="seconds to let dispatched runs finish"
    )
    args = parser.parse_args(argv)
    return _sweep(args.redis_url, args.modules, args.wait)


def _sweep(redis_url: str | None, modules: list[str], wait: float) -> int:
    import importlib
    import time

    from py_reactor import configure, workers

    if redis_url:
        try:
            configure(redis_url=redis_url)
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
            if found is None or found.status not in ("pending", "running"):
                break
            time.sleep(0.05)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
