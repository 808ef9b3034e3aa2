"""``py-reactor sweep``: one recovery pass from the command line."""

from __future__ import annotations

import subprocess
import sys


def _sweep(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "py_reactor.cli", "sweep", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_sweep_runs_one_pass_and_says_what_it_found(redis_url: str) -> None:
    done = _sweep("--redis-url", redis_url, "--wait", "0")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("due: ")


def test_sweep_refuses_a_bad_store_url_naming_the_option() -> None:
    done = _sweep("--redis-url", "nonsense")
    assert done.returncode == 2
    assert "redis_url" in done.stderr
