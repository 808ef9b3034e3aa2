"""Runs of one reactor in many threads at once stay independent of each other."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from py_reactor import Failure, Reactor, Result, Step, step

THREADS = 8
RUNS_PER_THREAD = 50
_barrier = threading.Barrier(THREADS)
_undone: list[tuple[int, int]] = []
_undone_lock = threading.Lock()


class Double(Step):
    n: int

    def run(self) -> int:
        return self.inputs.n * 2

    def undo(self, result: int) -> None:
        with _undone_lock:
            _undone.append((self.inputs.n, result))


class Parallel(Reactor):
    n: int

    double = step(Double)

    @step(doubled=Result("double"))
    def check(n: int, doubled: int) -> int | Failure:
        if n % 7 == 0:
            return Failure(f"{n} is a multiple of 7")
        return doubled + 1

    returns = "check"


def _work(thread: int) -> list[tuple[int, object, str]]:
    _barrier.wait()  # start every thread together so their runs interleave
    seen = []
    for i in range(RUNS_PER_THREAD):
        n = thread * 1000 + i
        outcome = Parallel.run(n=n)
        seen.append(
            (n, outcome.value if outcome.is_success else outcome.error, outcome.execution_id)
        )
    return seen


def test_concurrent_runs_keep_their_own_values_contexts_and_rollbacks() -> None:
    """8 threads x 50 runs: each outcome matches its inputs, ids are unique, undo is per run."""
    _undone.clear()
    with ThreadPoolExecutor(THREADS) as pool:
        results = [r for batch in pool.map(_work, range(THREADS)) for r in batch]

    assert len(results) == THREADS * RUNS_PER_THREAD
    assert len({execution_id for _, _, execution_id in results}) == len(results)
    for n, value, _ in results:
        expected = f"{n} is a multiple of 7" if n % 7 == 0 else n * 2 + 1
        assert value == expected
    failing = sorted(n for n, _, _ in results if n % 7 == 0)
    assert sorted(_undone) == [(n, n * 2) for n in failing]
