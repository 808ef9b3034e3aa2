"""How fast a parked execution resumes after the release of the key it waits on.

Each round: another owner holds a lock; a background run of ``Charge`` meets it in a worker and
parks; the holder releases; we time release -> the run's completion. Two ways in one run:

* ``wake``: as shipped, the release makes the oldest execution parked on the key due now.
* ``timer``: the parked list is emptied just before the release, so only the backstop timer
  (``park_delay``, here 1 s, no jitter) brings the run back: the original's behaviour.

Target (issue 10): wake p50 <= 50 ms after release. Run: ``python benchmarks/park_wake.py``.
"""

from __future__ import annotations

import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._park_reactors import Charge
from benchmarks._server import PrivateRedis
from py_reactor import Lock, configure, find, workers
from py_reactor.storage.keys import parked

ROUNDS = 30


def one(mode: str, client: object) -> float:
    key = f"bench-{uuid.uuid4().hex[:8]}"
    held = Lock(key, owner="holder", ttl=30).acquire()
    out = Charge.run(key=key)
    while (found := find(out.execution_id)) is None or found.status != "waiting":
        time.sleep(0.001)
    if mode == "timer":
        client.delete(parked("lock", key))  # type: ignore[attr-defined]
    released = time.perf_counter()
    held.release()
    while (found := find(out.execution_id)) is None or found.status != "completed":
        time.sleep(0.0005)
    return (time.perf_counter() - released) * 1000


def main() -> None:
    server = PrivateRedis()
    try:
        configure(redis_url=server.url, park_delay=1.0, park_jitter=0.0)
        workers.start()
        client = server.client()
        one("wake", client)  # warm up: scripts loaded, worker threads started
        figures = {}
        for mode in ("wake", "timer"):
            samples = sorted(one(mode, client) for _ in range(ROUNDS if mode == "wake" else 5))
            figures[mode] = samples
            print(
                f"{mode:5}: p50 {statistics.median(samples):7.1f} ms  "
                f"max {samples[-1]:7.1f} ms  ({len(samples)} rounds)"
            )
        ratio = statistics.median(figures["timer"]) / statistics.median(figures["wake"])
        verdict = "PASS" if statistics.median(figures["wake"]) <= 50 else "FAIL"
        print(f"wake is {ratio:.0f}x faster than timer-only; target p50 <= 50 ms: {verdict}")
    finally:
        workers.stop()
        server.stop()


if __name__ == "__main__":
    main()
