"""``py-reactor demo``, on the embedded-style thread worker and on Celery worker processes it
starts itself, checked with nothing but the pytest plugin's fixtures and helpers (FR-030)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from py_reactor import find
from py_reactor.coordination import Lock
from py_reactor.demo import Checkout, card_key, describe, run_demo
from py_reactor.states import Status, TraceKind
from py_reactor.testing import (
    IsolatedStore,
    LockHolder,
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


#: A line of the plain display: checkout, what it does now, where.
_ROW = re.compile(r"^   (?P<label>order-\d+) +(?P<status>\S+) +(?P<detail>.*)$")


def _scene(printed: str, letter: str) -> list[str]:
    """The lines of scene ``letter`` ("A", "B" or "C") of the demo's plain output."""
    text = printed.split(f"\n== {letter}. ")[1]
    return text.split("\n== ")[0].splitlines()


def _check_lines(shown: dict[str, Any], printed: str) -> None:
    """What the demo printed is true: one charge shown running at a time, and only once the
    checkout holds the card's lock (in the order the charges really ran); clean keys; scenes
    lettered A-C (examples/demo.py numbers its own 1-6)."""
    headings = re.findall(r"^== (\S+)\. ", printed, flags=re.MULTILINE)
    assert headings == ["A", "B", "C"], printed
    scenes = printed[printed.index("\n== ") :]  # the header names the store's URL (a port)
    assert not re.search(r"\d{5,}", scenes), scenes  # no pid or timestamp in a key or a label
    keys = set(re.findall(r"\bcard:\S*\w", printed))
    assert keys == {"card:4242", "card:1881", "card:0000"}, keys
    now: dict[str, str] = {}
    holding: list[str] = []
    for line in _scene(printed, "A"):
        row = _ROW.match(line)
        if row is None:
            continue
        label, status, detail = row["label"], row["status"], row["detail"]
        if detail.startswith("charge") and status == "running":
            assert detail.startswith("charge, holding the lock card:4242") or "released" in detail
        if detail.startswith("charge, holding"):
            holding.append(label)
        now[label] = f"{status} {detail}"
        inside = [other for other, state in now.items() if "holding the lock" in state]
        assert len(inside) <= 1, f"{inside} shown holding card:4242 at once: {line}"
    ids = dict(zip([f"order-{n}" for n in range(1, 5)], shown["serialized"]["ids"], strict=True))
    by_entry = sorted(ids, key=lambda label: _entered(ids[label]))
    assert holding == by_entry  # shown getting in in the order the charges really ran
    waited = [row for line in _scene(printed, "A") if (row := _ROW.match(line))
              and row["status"] in ("waiting", "parked")]  # fmt: skip
    assert all("the lock card:4242" in row["detail"] for row in waited)
    shown_parked = {row["label"] for row in waited if row["status"] == "parked"}
    assert shown_parked <= {label for label in ids if _was_parked(ids[label])}
    assert len(shown_parked) >= 1  # the summary counts at least one park (see _check)
    parked = _scene(printed, "B")
    on_lock = next(i for i, line in enumerate(parked) if "parked    on the lock card:1881" in line)
    released = parked.index("   (the demo releases card:1881)")
    got_in = next(i for i, line in enumerate(parked) if "holding the lock card:1881" in line)
    assert on_lock < released < got_in
    assert "compensate charge (voids the authorization), still holding the lock card:0000" in (
        printed
    )


def _was_parked(execution_id: str) -> bool:
    found = find(execution_id)
    assert found is not None
    return any(entry["type"] == TraceKind.PARKED for entry in found.trace)


def _entered(execution_id: str) -> float:
    found = find(execution_id)
    assert found is not None
    return float(found.results["charge"]["inside"][0])


def test_the_demo_on_the_thread_worker(
    reactor_worker: ReactorWorker, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = run_demo(live=False)
    _check(shown)
    printed = capsys.readouterr().out
    assert "charges overlapping: 0 (one at a time)" in printed
    _check_lines(shown, printed)


def test_the_demo_on_celery_worker_processes(
    reactor_store: IsolatedStore, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = run_demo(redis_url=reactor_store.url, workers=1, live=False)
    _check(shown)
    printed = capsys.readouterr().out
    assert "1 Celery worker process(es)" in printed
    _check_lines(shown, printed)


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
    assert "charges overlapping: 0 (one at a time)" in result.stdout
    assert re.findall(r"^== (\S+)\. ", result.stdout, flags=re.MULTILINE) == ["A", "B", "C"]


def test_a_checkout_at_charge_shows_running_only_while_it_holds_the_card(
    reactor_worker: ReactorWorker, hold_lock: LockHolder
) -> None:
    """A checkout at ``charge`` that does not hold the card's lock is shown waiting for it (or
    parked on it), never running: running only while the lock's owner is the checkout itself."""
    with hold_lock(card_key({"card": "9999"}), ttl=30):
        out = Checkout.run(order="order-9", card="9999")
        deadline = time.monotonic() + 30
        while (found := find(out.execution_id)) is None or found.status != Status.WAITING:
            assert time.monotonic() < deadline, found
            time.sleep(0.02)
        owners = {"card:9999": Lock("card:9999").state().owner}
        assert owners["card:9999"] not in (None, found.execution_id)  # the test holds it
        held: set[str] = set()
        assert describe(found, owners, held) == (
            "parked",
            "on the lock card:9999 at charge (no thread waits; the release wakes it)",
        )
        # The same checkout between its reserve and the lock (stored status running, charge
        # not done): it only tries the lock, so it is not shown running charge.
        trying = dataclasses.replace(found, status=Status.RUNNING, waiting_on=None)
        assert describe(trying, owners, held) == (
            "waiting",
            "for the lock card:9999 (to run charge)",
        )
        assert held == set()
        inside = {"card:9999": found.execution_id}
        assert describe(trying, inside, held) == ("running", "charge, holding the lock card:9999")
        assert held == {found.execution_id}
        # It let go, its charge result not yet stored: no longer shown as holding the lock.
        assert describe(trying, {"card:9999": None}, held) == (
            "running",
            "charge done, the lock card:9999 released",
        )
    done = out.wait(timeout=30)  # type: ignore[attr-defined]
    assert_succeeded(done)
