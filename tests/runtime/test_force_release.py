"""Freeing a stale hold by force (``py-reactor holds release``, ``runtime.holds``): the hold is
given back as its holder's own release would, so whoever waits for the key gets it at once:
a run parked on it (woken by the release, long before the park timer), a waiter queued in
another thread, the next position of an ordered lock.

Real store (the session's private redis-server), the thread worker of this process, and the
command line in a process of its own, as an operator runs it.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from py_reactor import Lock, Semaphore, configure
from py_reactor.errors import CoordinationError
from py_reactor.runtime.holds import force_release, holds_to_free
from py_reactor.storage import current_store
from tests._processes import CHILD_PATH
from tests._wait import status, until
from tests.runtime import _reactors as r

#: The park timer of this module's runs: far longer than WOKEN_WITHIN, so a run that completes
#: within WOKEN_WITHIN of the forced release was woken by it.
PARK_DELAY = 30.0

#: How long after a release a woken run may take to complete (a loaded 2-core box included).
WOKEN_WITHIN = 10.0

#: The ttl of the stale holds (ms): far past the end of every test.
STALE_MS = 600_000

#: A process that takes lock ``argv[2]`` on ``argv[1]`` for ten minutes, says so, and sleeps
#: until it is killed.
HOLDER = """
import sys, time
from py_reactor import Lock, configure
configure(redis_url=sys.argv[1])
Lock(sys.argv[2], ttl=600, owner="killed-worker").acquire()
print("held", flush=True)
time.sleep(600)
"""


@pytest.fixture(autouse=True)
def _store(redis_url: str) -> Iterator[None]:
    configure(redis_url=redis_url, park_delay=PARK_DELAY, park_jitter=0.0)
    yield
    r.HOOKS.clear()


def _cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PY_REACTOR_REDIS_URL": url}
    return subprocess.run(
        [sys.executable, "-m", "py_reactor.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def _killed_holder(url: str, key: str) -> None:
    """Lock ``key`` in a process of its own (ttl ten minutes), then kill -9 that process."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, key],
        env={**os.environ, "PYTHONPATH": CHILD_PATH},
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == b"held\n"
    finally:
        holder.kill()
        holder.wait(10)
        if holder.stdout is not None:
            holder.stdout.close()


def test_a_run_parked_on_a_lock_a_killed_process_held_completes_after_the_forced_release(
    key: str, redis_url: str
) -> None:
    _killed_holder(redis_url, key)
    assert Lock(key).state().owner == "killed-worker"  # and will be for ten minutes
    out = r.LockedStep.run(key=key)
    until(lambda: status(out.execution_id) == "waiting", "the park")

    released = time.monotonic()
    done = _cli("holds", "release", key, "--primitive", "lock", "--force", url=redis_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"freed lock '{key}' held by 'killed-worker' (token "), (
        done.stdout
    )
    assert done.stdout.rstrip().endswith("; woke 1 parked execution"), done.stdout
    outcome = out.wait(timeout=WOKEN_WITHIN)
    assert time.monotonic() - released < WOKEN_WITHIN  # woken by the release, not the timer
    assert outcome.is_success, outcome
    assert Lock(key).state().owner is None


def test_a_hold_of_a_parked_run_names_its_execution_in_the_log_and_the_run_still_completes(
    key: str, caplog: pytest.LogCaptureFixture
) -> None:
    """LockedBoth holds ``outer:<key>`` (its reactor's lock) while parked on ``<key>``: the
    forced release names the execution; the run takes its lock again when it is woken."""
    held = Lock(key, owner="someone-else", ttl=30).acquire()
    out = r.LockedBoth.run(key=key)
    until(lambda: status(out.execution_id) == "waiting", "the park")
    outer = f"outer:{key}"
    [hold] = holds_to_free("lock", outer)
    assert (hold.owner, hold.execution_id, hold.step) == (out.execution_id, out.execution_id, None)

    with caplog.at_level(logging.WARNING, logger="py_reactor"):
        released = force_release("lock", outer)
    assert [h.owner for h in released.freed] == [out.execution_id]
    assert released.woken == 0  # nobody was parked on the reactor's lock
    assert Lock(outer).state().owner is None
    [record] = [rec for rec in caplog.records if "released by force" in rec.getMessage()]
    assert record.name == "py_reactor"
    assert record.levelno == logging.WARNING
    message = record.getMessage()
    assert f"lock '{outer}' held by execution {out.execution_id} (the reactor's own hold" in message
    assert record.py_reactor["execution_ids"] == [out.execution_id]  # type: ignore[attr-defined]

    held.release()
    outcome = out.wait(timeout=WOKEN_WITHIN)
    assert outcome.is_success, outcome


def test_a_semaphore_slot_freed_by_force_is_handed_to_the_queued_waiter(key: str) -> None:
    store = current_store()
    assert store.semaphore_acquire(key, "dead-owner", 1, STALE_MS).held
    got: list[str] = []

    def wait_for_a_slot() -> None:
        with Semaphore(key, limit=1, wait=WOKEN_WITHIN, owner="waiter"):
            got.append("slot")

    waiter = threading.Thread(target=wait_for_a_slot)
    waiter.start()
    until(lambda: store.semaphore_state(key).waiters == 1, "the waiter queued")
    released = force_release("semaphore", key)
    waiter.join(WOKEN_WITHIN)
    assert got == ["slot"]
    assert [h.owner for h in released.freed] == ["dead-owner"]


def test_a_run_parked_behind_a_stale_ordered_turn_completes_after_the_forced_release(
    key: str,
) -> None:
    sequence = f"seq:{key}"
    store = current_store()
    epoch, stale = store.ordered_lock_take(sequence, STALE_MS)  # nobody heartbeats it
    out = r.OrderedStep.run(key=key)
    until(lambda: status(out.execution_id) == "waiting", "the park behind the stale turn")

    released = force_release("ordered_lock", sequence)
    assert [h.data["number"] for h in released.freed] == [stale]
    assert released.woken == 1
    outcome = out.wait(timeout=WOKEN_WITHIN)
    assert outcome.is_success, outcome
    turn = store.ordered_lock_turn(sequence, epoch, stale, STALE_MS, STALE_MS)
    assert turn.outcome == "never"  # the stale position is out of line for good


def test_what_cannot_be_freed_is_refused_with_what_to_do(key: str) -> None:
    with pytest.raises(CoordinationError, match=f"no live hold on lock '{key}'"):
        force_release("lock", key)
    with pytest.raises(CoordinationError, match="has no holder to free"):
        force_release("rate_limit", key)
    with Lock(key, owner="someone", ttl=30):
        with pytest.raises(CoordinationError, match=r"by 'someone-else' \(held by 'someone'\)"):
            force_release("lock", key, owner="someone-else")
        assert Lock(key).state().owner == "someone"
