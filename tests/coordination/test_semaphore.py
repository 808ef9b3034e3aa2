"""``Semaphore`` against a real Redis: limits, re-entrancy, handoff, leases, processes."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from typing import Any

import pytest

from py_reactor import configure
from py_reactor.coordination import Semaphore, SemaphoreHold, SemaphoreState
from py_reactor.coordination.store import Store, WaitTicket
from py_reactor.errors import DefinitionError, SemaphoreAcquisitionError
from tests._overlap import OverlapRecorder
from tests._redis import PrivateRedis
from tests._wait import until
from tests.coordination._helpers import (
    Recording,
    StoreProxy,
    WakeMissed,
    client_commands,
    in_thread,
    join_all,
    sha,
    store_settings,
)

SPAWN = multiprocessing.get_context("spawn")


# ----------------------------------------------------------------------------- helpers


def _hold_slot_until_killed(settings: dict[str, Any], key: str, lease: float, ready: Any) -> None:
    """Child process: take a slot (lease renewed while alive), say so, then idle until killed."""
    configure(**settings)
    hold = Semaphore(key, limit=1, lease=lease).acquire()
    ready.set()
    threading.Event().wait(60)
    hold.release()


# ----------------------------------------------------------------------------- limits


def test_limit_admits_that_many_owners_and_refuses_one_more(store: Store, key: str) -> None:
    """limit=3 admits three distinct owners; the fourth is refused with an error naming the key."""
    semaphore = Semaphore(key, limit=3)
    holds = [semaphore.acquire() for _ in range(3)]
    try:
        assert len({hold.owner for hold in holds}) == 3
        assert [hold.count for hold in holds] == [1, 1, 1]
        assert semaphore.state() == SemaphoreState(held=3, waiters=0)
        with pytest.raises(SemaphoreAcquisitionError) as caught:
            Semaphore(key, limit=3).acquire()
        assert caught.value.key == key
        assert caught.value.primitive == "semaphore"
        assert key in str(caught.value)
        holds.pop().release()
        holds.append(Semaphore(key, limit=3).acquire())  # a freed slot is usable again
    finally:
        for hold in holds:
            hold.release()
    assert semaphore.state() == SemaphoreState(held=0, waiters=0)


def test_contenders_never_exceed_the_limit(store: Store, redis_url: str, key: str) -> None:
    """Nine threads competing for three slots never have more than three inside, and all finish."""
    limit = 3
    inside = OverlapRecorder(redis_url, f"semaphore:{key}")

    def worker() -> None:
        for _ in range(15):
            with (
                Semaphore(key, limit=limit, wait=30),
                inside.inside(threading.current_thread().name),
            ):
                time.sleep(0.002)  # the work: long enough for holders to coincide

    boxes = [in_thread(worker) for _ in range(3 * limit)]
    join_all([thread for thread, _ in boxes])
    assert [box.get("error") for _, box in boxes] == [None] * (3 * limit)
    assert inside.entries == 9 * 15
    assert 2 <= inside.max_concurrency <= limit  # a semaphore, not a lock
    assert inside.replayed_max() == inside.max_concurrency
    assert Semaphore(key, limit=limit).state() == SemaphoreState(held=0, waiters=0)


def test_same_owner_reenters_its_own_slot(store: Store, key: str) -> None:
    """One owner acquiring twice holds one slot with count 2, freed at the outermost release."""
    semaphore = Semaphore(key, limit=1, owner="owner-a")
    with semaphore as outer:
        with semaphore as inner:
            assert (outer.count, inner.count) == (1, 2)
            assert semaphore.state().held == 1
            with pytest.raises(SemaphoreAcquisitionError):
                Semaphore(key, limit=1, owner="owner-b").acquire()
        with pytest.raises(SemaphoreAcquisitionError):
            Semaphore(key, limit=1, owner="owner-b").acquire()
    assert semaphore.state().held == 0
    Semaphore(key, limit=1, owner="owner-b").acquire().release()


def test_a_waiter_is_handed_a_freed_slot_promptly(store: Store, key: str) -> None:
    """A waiter is handed the slot by the release (its sleep on the wake list returns it; it
    does not find the slot free by asking again)."""
    recording = Recording(store)
    semaphore = Semaphore(key, limit=1)
    holder = semaphore.acquire()
    thread, box = in_thread(lambda: Semaphore(key, limit=1, wait=5, store=recording).acquire())
    until(lambda: semaphore.state().waiters == 1, "the waiter to queue")
    holder.release()
    join_all([thread])
    assert "error" not in box, box.get("error")
    waiter: SemaphoreHold = box["result"]
    try:
        calls = recording.of(thread)
        assert calls[0][0] == "semaphore_acquire"
        assert calls[-1][0] == "wait_for_handoff"
        assert calls[-1][1] is not None  # handed off, not found by polling
        assert semaphore.state() == SemaphoreState(held=1, waiters=0)
        with pytest.raises(SemaphoreAcquisitionError):
            Semaphore(key, limit=1).acquire()
    finally:
        waiter.release()
    assert semaphore.state().held == 0


def test_a_waiter_that_gives_up_leaves_the_queue(store: Store, key: str) -> None:
    """A waiter whose wait ran out is dequeued and not handed a slot later."""
    semaphore = Semaphore(key, limit=1)
    holder = semaphore.acquire()
    started = time.monotonic()
    with pytest.raises(SemaphoreAcquisitionError, match="after waiting"):
        Semaphore(key, limit=1, wait=0.3).acquire()
    assert time.monotonic() - started >= 0.25
    assert semaphore.state() == SemaphoreState(held=1, waiters=0)
    holder.release()
    assert semaphore.state() == SemaphoreState(held=0, waiters=0)


def test_waiters_are_served_in_arrival_order(store: Store, key: str) -> None:
    """Four waiters queued one after another for a single slot get it in that order."""
    semaphore = Semaphore(key, limit=1)
    holder = semaphore.acquire()
    order: list[int] = []
    guard = threading.Lock()

    def waiter(number: int) -> None:
        with Semaphore(key, limit=1, wait=15), guard:
            order.append(number)

    threads = []
    for number in range(4):
        thread = threading.Thread(target=waiter, args=(number,), daemon=True)
        thread.start()
        threads.append(thread)
        queued = number + 1
        until(lambda: semaphore.state().waiters == queued, f"waiter {number} to queue")
    holder.release()
    join_all(threads)
    assert order == [0, 1, 2, 3]


def test_state_counts_holders_and_waiters(store: Store, key: str) -> None:
    """``state()`` reports live holders and queued waiters."""
    semaphore = Semaphore(key, limit=2)
    assert semaphore.state() == SemaphoreState(held=0, waiters=0)
    first, second = semaphore.acquire(), semaphore.acquire()
    thread, box = in_thread(lambda: Semaphore(key, limit=2, wait=5).acquire())
    until(lambda: semaphore.state().waiters == 1, "the waiter to queue")
    assert semaphore.state() == SemaphoreState(held=2, waiters=1)
    first.release()
    join_all([thread])
    assert semaphore.state() == SemaphoreState(held=2, waiters=0)
    second.release()
    box["result"].release()
    assert semaphore.state() == SemaphoreState(held=0, waiters=0)


def test_release_is_idempotent(store: Store, key: str) -> None:
    """Releasing a slot twice frees one slot, not two."""
    semaphore = Semaphore(key, limit=2)
    first, other = semaphore.acquire(), semaphore.acquire()
    first.release()
    first.release()
    assert semaphore.state().held == 1
    other.release()
    assert semaphore.state().held == 0


def test_a_release_during_a_waiters_timed_out_sleep_still_hands_it_one_slot(
    store: Store, key: str
) -> None:
    """A waiter handed a slot between its sleep timing out and its retry holds it once."""
    # The retry must not count as re-entering the slot it was just handed: count 1, and a
    # single release frees the slot (else it stays taken, un-renewed, until its lease lapses).
    holder = Semaphore(key, limit=1).acquire()
    waiting = Semaphore(key, limit=1, wait=5, store=WakeMissed(store, holder.release))
    hold = waiting.acquire()
    hold.release()
    state = Semaphore(key, limit=1).state()
    assert hold.count == 1, "the retry re-entered the slot it had just been handed"
    assert state.held == 0, f"the slot is still taken after its only release: {state}"


# ----------------------------------------------------------------------------- leases


def test_a_killed_holder_gives_its_slot_back_after_its_lease(store: Store, key: str) -> None:
    """A holder killed with SIGKILL stops renewing and its slot frees about one lease later."""
    ready = SPAWN.Event()
    child = SPAWN.Process(target=_hold_slot_until_killed, args=(store_settings(), key, 0.5, ready))
    child.start()
    try:
        assert ready.wait(30), "the child never took the slot"
        semaphore = Semaphore(key, limit=1)
        with pytest.raises(SemaphoreAcquisitionError):  # renewed past its lease while alive
            Semaphore(key, limit=1, wait=0.8).acquire()
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        killed_at = time.monotonic()
        assert semaphore.state().held == 1  # the kill itself frees nothing
        with Semaphore(key, limit=1, wait=5):
            elapsed = time.monotonic() - killed_at
            assert semaphore.state().held == 1
        assert 0.15 <= elapsed <= 4.0
    finally:
        if child.is_alive():
            child.kill()
        child.join()


# ----------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1.5}, "limit"),
        ({"limit": True}, "limit"),
        ({"lease": 0}, "lease"),
        ({"wait": -1}, "wait"),
        ({"key": ""}, "key"),
    ],
)
def test_bad_options_are_refused_naming_the_option(options: dict[str, Any], option: str) -> None:
    """An invalid option raises DefinitionError when the Semaphore is made, naming the option."""
    arguments: dict[str, Any] = {"key": "mailer", "limit": 2, **options}
    with pytest.raises(DefinitionError, match=rf"\b{option}\b"):
        Semaphore(**arguments)


def test_acquire_and_release_are_two_round_trips(
    server_store: Store, private_redis: PrivateRedis, key: str
) -> None:
    """One uncontended acquire plus release sends exactly two EVALSHA and nothing else."""
    semaphore = Semaphore(key, limit=2)
    with semaphore:  # warm up: scripts loaded on the server, a pooled connection open
        pass

    def acquire_and_release() -> None:
        with semaphore:
            pass

    sent, calls = client_commands(private_redis.url, server_store, key, acquire_and_release)
    assert [command.split()[:2] for command in sent] == [
        ["EVALSHA", sha("semaphore_acquire")],
        ["EVALSHA", sha("semaphore_release")],
    ], sent
    assert calls.get("evalsha", 0) >= 2  # server-wide: other clients may add to it
    assert "eval" not in calls  # no fallback to sending the script text
    assert "script" not in calls


def test_two_waiters_of_one_owner_give_the_slot_back_after_both_release(
    store: Store, key: str
) -> None:
    """Two queued waiters of one owner share the handed slot, and their releases free it."""
    blocker = Semaphore(key, limit=1, lease=1).acquire()
    done: list[str] = []

    def wait_and_hold(name: str) -> None:
        with Semaphore(key, limit=1, wait=10, owner="exec-O"):
            done.append(name)
            time.sleep(0.1)

    threads = [threading.Thread(target=wait_and_hold, args=(name,)) for name in ("T1", "T2")]
    for number, thread in enumerate(threads, start=1):
        thread.start()
        until(
            lambda n=number: Semaphore(key, limit=1).state().waiters >= n,
            f"{number} waiter(s) queued",
        )
    blocker.release()
    for thread in threads:
        thread.join(15)
    assert sorted(done) == ["T1", "T2"]
    assert Semaphore(key, limit=1).state().held == 0
    Semaphore(key, limit=1).acquire().release()  # a fresh owner gets the slot at once


def test_a_freed_slot_skips_a_waiter_whose_owner_already_holds_one(store: Store, key: str) -> None:
    """A release hands its slot on past a queued waiter of an owner that already holds one:
    C's sleep on the wake list ends with the slot Y's release handed on."""
    recording = Recording(store)
    x = Semaphore(key, limit=2, owner="X").acquire()
    y = Semaphore(key, limit=2, owner="Y").acquire()
    got: dict[str, float] = {}

    def wait_for_slot(name: str, owner: str) -> None:
        with Semaphore(key, limit=2, wait=10, owner=owner, store=recording):
            got[name] = time.monotonic()
            time.sleep(0.8)

    threads: dict[str, threading.Thread] = {}
    for number, (name, owner) in enumerate([("A", "O"), ("B", "O"), ("C", "Z")], start=1):
        thread = threading.Thread(target=wait_for_slot, args=(name, owner))
        thread.start()
        threads[name] = thread
        until(lambda n=number: Semaphore(key, limit=2).state().waiters >= n, f"{name} queued")
    x.release()  # handed to A: owner O now holds a slot
    until(lambda: "A" in got, "A got its slot")
    released = time.monotonic()
    y.release()  # B's owner O already holds one: this slot must go on to C
    for thread in threads.values():
        thread.join(15)
        assert not thread.is_alive()
    assert got["C"] >= released
    calls = recording.of(threads["C"])
    taking = calls[: [method for method, _ in calls].index("semaphore_release")]
    assert taking[-1][0] == "wait_for_handoff"
    assert taking[-1][1] is not None, f"the freed slot was not handed on to C: {taking}"


class _SlowToRetry(StoreProxy):
    """A real store whose waiter, woken by its timer, takes ``delay`` seconds to try again."""

    def __init__(self, inner: Store, delay: float) -> None:
        super().__init__(inner)
        self.delay = delay

    def wait_for_handoff(self, ticket: WaitTicket, timeout: float) -> int | None:
        signal = self.inner.wait_for_handoff(ticket, timeout)
        if signal is None:
            time.sleep(self.delay)
        return signal


def test_a_slot_freed_by_a_lapsed_lease_goes_to_the_oldest_waiter(store: Store, key: str) -> None:
    """When a dead holder's lease lapses, the oldest waiter gets the slot, even if slow to ask."""
    from py_reactor.coordination._extender import forget

    dead = Semaphore(key, limit=1, lease=0.5).acquire()
    forget(dead)  # its process "died": nothing extends the lease any more
    order: list[str] = []

    def wait_for_slot(name: str, semaphore: Semaphore) -> None:
        with semaphore.acquire():
            order.append(name)
            time.sleep(0.05)

    first = threading.Thread(
        target=wait_for_slot,
        args=("B", Semaphore(key, limit=1, wait=10, store=_SlowToRetry(store, 0.3))),
    )
    second = threading.Thread(target=wait_for_slot, args=("C", Semaphore(key, limit=1, wait=10)))
    first.start()
    until(lambda: Semaphore(key, limit=1).state().waiters == 1, "B queued")
    second.start()
    until(lambda: Semaphore(key, limit=1).state().waiters == 2, "C queued")
    first.join(15)
    second.join(15)
    assert order == ["B", "C"], f"the slot went out of turn: {order}"
