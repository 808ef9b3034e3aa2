"""Run a process entry point in several spawned children started together; gather replies.

Each child gets the same ``args`` and must wait at the shared ``start`` barrier, then put one
``("ok", [outcome, ...])`` or ``("error", traceback)`` on ``results``.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any

from tests._wait import until

__all__ = ["SPAWN", "gather"]

SPAWN = multiprocessing.get_context("spawn")


def gather(
    target: Callable[..., None],
    args: tuple[Any, ...],
    *,
    processes: int,
    start: Any,
    results: Any,
    before_start: Callable[[], None] | None = None,
) -> list[Any]:
    """Start ``processes`` children of ``target(*args)`` and return every outcome they report.

    ``before_start()`` runs in this process once every child waits at ``start``, just before
    they go. A child that reports an error fails the calling test with its traceback.
    """
    children = [SPAWN.Process(target=target, args=args, daemon=True) for _ in range(processes)]
    for child in children:
        child.start()
    try:
        if before_start is not None:
            until(
                lambda: start.n_waiting == start.parties - 1,
                "start.n_waiting == start.parties - 1",
                timeout=60,
            )
            before_start()
        start.wait(60)
        replies = [results.get(timeout=60) for _ in children]
    finally:
        for child in children:
            child.join(10)
            if child.is_alive():
                child.kill()
                child.join()
        results.close()
        results.join_thread()
    errors = [detail for kind, detail in replies if kind == "error"]
    assert errors == [], errors[0] if errors else ""
    return [outcome for _, seen in replies for outcome in seen]
