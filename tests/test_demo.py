"""``py-reactor demo``, on the embedded-style thread worker and on Celery worker processes it
starts itself, checked with nothing but the pytest plugin's fixtures and helpers (FR-030)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from py_reactor import find
from py_reactor.demo import run_demo
from py_reactor.testing import (
    IsolatedStore,
    ReactorWorker,
    assert_contended_at,
    assert_failed_at,
    assert_ran,
    assert_succeeded,
    assert_unlocked,
)

ROOT = Path(__file__).resolve().parent.parent


def _check(shown: dict[str, Any]) -> None:
    serialized = shown["serialized"]
    assert serialized["charge_overlaps"] == 0  # the locked step ran one at a time
    assert serialized["other_overlaps"] > 0  # while the others overlapped
    # A busy card parked a checkout, which then completed. Not proven here: that the release
    # woke it (run_demo sets a 5 s park timer, too close to tell apart);
    # tests/test_examples.py's part 6 and tests/runtime prove the wake.
    assert serialized["parked"] >= 1
    for execution_id in serialized["ids"]:
        found = find(execution_id)
        assert found is not None
        assert_succeeded(found.outcome)
        assert_ran(found, "charge", after="reserve")
        assert_ran(found, "ship", after="charge")
    parked = find(shown["parked"]["id"])
    assert parked is not None
    assert_succeeded(parked.outcome)
    assert_contended_at(parked, "charge", primitive="lock")  # it parked there, then completed
    declined = find(shown["compensation"]["id"])
    assert declined is not None
    assert_failed_at(declined.outcome, "charge", error="card declined")
    assert shown["compensation"]["compensate_key"] is not None  # compensate under the lock
    assert_unlocked(shown["compensation"]["compensate_key"])


def test_the_demo_on_the_thread_worker(
    reactor_worker: ReactorWorker, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = run_demo(live=False)
    _check(shown)
    printed = capsys.readouterr().out
    assert "charges overlapping: 0" in printed
    assert "compensate charge under the lock" in printed


def test_the_demo_on_celery_worker_processes(
    reactor_store: IsolatedStore, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = run_demo(redis_url=reactor_store.url, workers=1, live=False)
    _check(shown)
    assert "1 Celery worker process(es)" in capsys.readouterr().out


def test_the_command_line_demo_runs(reactor_store: IsolatedStore) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "py_reactor.cli",
            "demo",
            "--plain",
            "--redis-url",
            reactor_store.url,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "charges overlapping: 0" in result.stdout
