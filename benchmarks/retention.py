"""Retention: Redis memory over a long run of background executions, with and without it.

One private redis-server; the thread worker of this process runs ``--runs`` (20,000) one-step
background executions, dispatched in batches, once with ``configure(retention=5)`` and once
(the baseline, in the same run) with ``retention=None``. Redis's ``used_memory`` is sampled
after every batch. With retention, terminal executions expire 5 s after they ended and the
recovery pass drops them from the index, so memory levels off at what about 5 s of traffic
holds; without it, memory grows with every execution.

Target: with retention, the memory at the end is within 1.5x of the memory after the first
quarter of the run (flat), while the baseline's grows (its end / its first quarter > 2).
Run from the repository root: ``.venv/bin/python benchmarks/retention.py [--quick]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._report import verdict  # noqa: E402
from benchmarks._server import PrivateRedis  # noqa: E402
from py_reactor import Reactor, background, configure, step, workers  # noqa: E402

BATCH = 500


@background
class Tiny(Reactor):
    n: int

    @step
    def one(n: int) -> int:
        return n + 1

    returns = "one"


def _memory(client: object) -> int:
    return int(client.info("memory")["used_memory"])  # type: ignore[attr-defined]


def _measure(url: str, runs: int, retention: float | None) -> list[tuple[int, int, float]]:
    """``(executions done, used_memory bytes, seconds)`` after each batch."""
    import redis

    client = redis.Redis.from_url(url)
    client.flushdb()  # this benchmark's own server
    configure(redis_url=url, retention=retention, worker_threads=8)
    samples = [(0, _memory(client), 0.0)]
    started = time.monotonic()
    done = 0
    while done < runs:
        batch = [Tiny.run(n=i) for i in range(min(BATCH, runs - done))]
        for run in batch:
            run.wait(timeout=120)
        done += len(batch)
        samples.append((done, _memory(client), time.monotonic() - started))
    workers.stop(wait=True)
    return samples


def _report(name: str, samples: list[tuple[int, int, float]]) -> float:
    quarter = samples[max(1, len(samples) // 4)]
    end = samples[-1]
    peak = max(memory for _, memory, _ in samples)
    growth = end[1] / quarter[1]
    rate = end[0] / end[2]
    print(
        f"{name:>16}: start {samples[0][1] / 1e6:6.2f} MB, after {quarter[0]:>6} runs "
        f"{quarter[1] / 1e6:6.2f} MB, peak {peak / 1e6:6.2f} MB, end ({end[0]} runs) "
        f"{end[1] / 1e6:6.2f} MB: end/quarter {growth:.2f}x, {rate:.0f} executions/s"
    )
    return growth


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--retention", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true", help="4,000 runs, retention 3 s")
    args = parser.parse_args()
    runs, retention = (4_000, 3.0) if args.quick else (args.runs, args.retention)
    server = PrivateRedis()
    try:
        kept = _measure(server.url, runs, retention)
        baseline = _measure(server.url, runs, None)
    finally:
        server.stop()
    print(f"{runs} one-step background executions on the thread worker, batches of {BATCH}")
    flat = _report(f"retention={retention:g}", kept)
    grows = _report("retention=None", baseline)
    ok = flat <= 1.5 and grows > 2
    print(
        f"with retention memory stays flat (end/quarter {flat:.2f}x <= 1.5x; the baseline "
        f"{grows:.2f}x) {verdict(ok)}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
