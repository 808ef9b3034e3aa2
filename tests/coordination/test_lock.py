"""``Lock`` against a real Redis: exclusion, handoff, fencing, re-entrancy, expiry, processes."""

from __future__ import annotations

import functools
import itertools
import multiprocessing
import os
import signal
import threading
import time
from typing import Any

import pytest

from py_reactor import configure
from py_reactor.coordination import Lock, LockHold, LockState
from py_reactor.coordination.owner import bind_owner, unbind_owner
from py_reactor.coordination.store import Store, WaitTicket
from py_reactor.errors import DefinitionError, LockAcquisitionError
from tests._overlap import OverlapRecorder
from tests._redis import PrivateRedis
from tests._wait import until
from tests.coordination._helpers import (
    Recording,
    WakeMissed,
    client_commands,
    in_thread,
    join_all,
    sha,
    store_settings,
)

SPAWN = multiprocessing.get_context("spawn")


# ----------------------------------------------------------------------------- helpers


def _overlap_child(
    settings: dict[str, Any], key: str, inside: OverlapRecorder, cycles: int, go: Any
) -> None:
    """Child process: ``cycles`` times take the lock and record being inside it."""
    configure(**settings)
    if not go.wait(30):
        raise RuntimeError("never told to start")
    for _ in range(cycles):
        with Lock(key, wait=30), inside.inside(f"pid {os.getpid()}"):
            pass


def _hold_until_killed(settings: dict[str, Any], key: str, ttl: float, ready: Any) -> None:
    """Child process: take the lock (auto-extended), say so, then idle until killed."""
    configure(**settings)
    hold = Lock(key, ttl=ttl).acquire()
    ready.set()
    threading.Event().wait(60)
    hold.release()


# ----------------------------------------------------------------------------- basics


def test_with_block_acquires_and_releases(store: Store, key: str) -> None:
    """``with Lock(...) as hold`` holds the key inside the block and frees it on exit."""
    lock = Lock(key, ttl=30, wait=5)
    with lock as hold:
        assert isinstance(hold, LockHold)
        assert hold.key == key
        assert hold.count == 1
        assert hold.fencing_token >= 1
        assert lock.state().owner == hold.owner
    assert hold.released
    assert lock.state().owner is None
    with Lock(key, wait=0) as again:  # free for anyone now
        assert again.owner != hold.owner


def test_second_owner_is_refused_with_an_error_naming_the_key(store: Store, key: str) -> None:
    """A different owner is refused with LockAcquisitionError carrying and naming the key."""
    with Lock(key, ttl=30), pytest.raises(LockAcquisitionError) as caught:
        Lock(key, wait=0).acquire()
    error = caught.value
    assert error.key == key
    assert error.primitive == "lock"
    assert key in str(error)


def test_wait_zero_does_not_wait_but_a_wait_does(store: Store, key: str) -> None:
    """wait=0 is refused at once (one acquire call, no sleep on the wake list); wait=0.3 is
    refused only after about 0.3 s."""
    recording = Recording(store)
    with Lock(key, ttl=30):
        with pytest.raises(LockAcquisitionError, match=r"wait=0: did not wait"):
            Lock(key, wait=0, store=recording).acquire()
        assert [method for method, _ in recording.of(threading.current_thread())] == [
            "lock_acquire"
        ]
        started = time.monotonic()
        with pytest.raises(LockAcquisitionError, match="after waiting"):
            Lock(key, wait=0.3).acquire()
        assert 0.25 <= time.monotonic() - started < 2.0


def test_waiter_is_handed_the_lock_promptly_with_a_larger_token(store: Store, key: str) -> None:
    """A waiting owner is handed the lock by the release (its sleep on the wake list returns
    the new token; it does not find the key free by trying again)."""
    recording = Recording(store)
    lock = Lock(key, ttl=60)
    holder = lock.acquire()
    thread, box = in_thread(lambda: Lock(key, wait=5, store=recording).acquire())
    until(lambda: lock.state().waiters == 1, "the waiter to queue")
    holder.release()
    join_all([thread])
    assert "error" not in box, box.get("error")
    waiter: LockHold = box["result"]
    try:
        calls = recording.of(thread)
        assert calls[0][0] == "lock_acquire"
        assert calls[-1] == ("wait_for_handoff", waiter.fencing_token)  # handed off
        assert waiter.fencing_token > holder.fencing_token
        assert lock.state().owner == waiter.owner
    finally:
        waiter.release()


def test_fencing_tokens_strictly_increase(store: Store, key: str) -> None:
    """Fifty sequential holds of one key get strictly increasing fencing tokens."""
    tokens = []
    for _ in range(50):
        with Lock(key) as hold:
            tokens.append(hold.fencing_token)
    assert all(a < b for a, b in itertools.pairwise(tokens))


# ----------------------------------------------------------------------------- owners


def test_same_owner_reenters_and_frees_at_the_outermost_release(store: Store, key: str) -> None:
    """The same owner re-enters (count 2, same token); the key frees at the outermost release."""
    lock = Lock(key, ttl=30, owner="owner-a")
    with lock as outer:
        with lock as inner:
            assert inner.count == 2
            assert inner.fencing_token == outer.fencing_token
            assert lock.state().count == 2
            with pytest.raises(LockAcquisitionError):
                Lock(key, owner="owner-b").acquire()
        state = lock.state()
        assert (state.owner, state.count) == ("owner-a", 1)
        with pytest.raises(LockAcquisitionError):
            Lock(key, owner="owner-b").acquire()
    assert lock.state().owner is None
    Lock(key, owner="owner-b").acquire().release()


def test_separate_blocks_outside_an_execution_exclude_each_other(store: Store, key: str) -> None:
    """Outside any execution each acquisition is its own owner, even nested in one thread."""
    lock = Lock(key, wait=0)
    entered = []
    with Lock(key), pytest.raises(LockAcquisitionError), Lock(key, wait=0):
        entered.append("separate objects")
    with lock, pytest.raises(LockAcquisitionError), lock:
        entered.append("one object")
    assert entered == []
    assert lock.state().owner is None


def test_locks_inside_an_execution_are_reentrant(store: Store, key: str) -> None:
    """With an owner bound, nested Locks on one key re-enter as that owner."""
    token = bind_owner("execution-1")
    try:
        with Lock(key, wait=0) as outer, Lock(key, wait=0) as inner:
            assert outer.owner == inner.owner == "execution-1"
            assert inner.count == 2
            with pytest.raises(LockAcquisitionError):
                Lock(key, owner="execution-2").acquire()
    finally:
        unbind_owner(token)
    assert Lock(key).state().owner is None


# ----------------------------------------------------------------------------- expiry


def test_a_hold_without_auto_extend_expires_after_its_ttl(store: Store, key: str) -> None:
    """A ttl=0.5 hold that is not extended frees on its own after about 0.5 s, not before."""
    lock = Lock(key, ttl=0.5, auto_extend=False)
    first = lock.acquire()
    taken_at = time.monotonic()
    ttl = lock.state().ttl
    assert ttl is not None
    assert 0 < ttl <= 0.5
    with pytest.raises(LockAcquisitionError):
        Lock(key, wait=0).acquire()
    second = Lock(key, wait=5).acquire()
    try:
        assert 0.35 <= time.monotonic() - taken_at < 3.0
        assert second.fencing_token > first.fencing_token
        first.release()  # the stale hold must not free the new owner's lock
        assert first.lost
        assert lock.state().owner == second.owner
    finally:
        second.release()


def test_auto_extend_keeps_a_short_ttl_lock_held(store: Store, key: str) -> None:
    """A ttl=0.6 hold with auto-extend stays held through 2 s of work."""
    lock = Lock(key, ttl=0.6)
    with lock as hold:
        with pytest.raises(LockAcquisitionError):  # someone trying for the whole 2 s
            Lock(key, wait=2.0).acquire()
        state = lock.state()
        assert state.owner == hold.owner
        assert state.fencing_token == hold.fencing_token
        assert not hold.lost


def test_a_waiter_that_gives_up_leaves_the_queue(store: Store, key: str) -> None:
    """A waiter whose wait ran out is dequeued and is not handed the lock later."""
    lock = Lock(key, ttl=30)
    holder = lock.acquire()
    started = time.monotonic()
    with pytest.raises(LockAcquisitionError):
        Lock(key, wait=0.4).acquire()
    assert time.monotonic() - started >= 0.35
    assert lock.state().waiters == 0
    holder.release()
    state = lock.state()
    assert state.owner is None
    assert state.count == 0
    Lock(key, wait=0).acquire().release()


def test_release_is_idempotent(store: Store, key: str) -> None:
    """Releasing a hold twice is harmless and never frees the next owner's hold."""
    first = Lock(key).acquire()
    first.release()
    second = Lock(key).acquire()
    try:
        first.release()
        assert not first.lost
        assert Lock(key).state().owner == second.owner
        with pytest.raises(LockAcquisitionError):
            Lock(key).acquire()
    finally:
        second.release()
        second.release()
    assert Lock(key).state().owner is None


def test_state_reports_owner_count_token_ttl_and_waiters(store: Store, key: str) -> None:
    """``state()`` reflects the holder, nesting, token, remaining ttl and queue length."""
    lock = Lock(key, ttl=30, owner="holder")
    assert lock.state() == LockState(owner=None, count=0, fencing_token=0, ttl=None, waiters=0)
    with lock as outer, lock:
        state = lock.state()
        assert (state.owner, state.count, state.waiters) == ("holder", 2, 0)
        assert state.fencing_token == outer.fencing_token
        assert state.ttl is not None
        assert 25 < state.ttl <= 30
        thread, box = in_thread(lambda: Lock(key, wait=5, owner="waiter").acquire())
        until(lambda: lock.state().waiters == 1, "the waiter to queue")
    join_all([thread])
    waiter: LockHold = box["result"]
    state = lock.state()
    assert (state.owner, state.count, state.waiters) == ("waiter", 1, 0)
    assert state.fencing_token == waiter.fencing_token > outer.fencing_token
    waiter.release()
    state = lock.state()
    assert (state.owner, state.count, state.ttl) == (None, 0, None)


def test_waiters_are_served_in_arrival_order(store: Store, key: str) -> None:
    """Five waiters queued one after another get the lock in exactly that order."""
    lock = Lock(key, ttl=30)
    holder = lock.acquire()
    order: list[int] = []
    guard = threading.Lock()

    def waiter(number: int) -> None:
        with Lock(key, wait=15), guard:
            order.append(number)

    threads = []
    for number in range(5):
        thread = threading.Thread(target=waiter, args=(number,), daemon=True)
        thread.start()
        threads.append(thread)
        queued = number + 1
        until(lambda: lock.state().waiters == queued, f"waiter {number} to queue")
    holder.release()
    join_all(threads)
    assert order == [0, 1, 2, 3, 4]


def test_a_release_during_a_waiters_timed_out_sleep_still_hands_it_one_hold(
    store: Store, key: str
) -> None:
    """A waiter handed the lock between its sleep timing out and its retry holds it once."""
    # The retry must not count as re-entering the hold it was just handed: count 1, and a
    # single release frees the key (else the key stays held, un-extended, until its ttl).
    holder = Lock(key, ttl=30).acquire()
    waiting = Lock(key, ttl=30, wait=5, store=WakeMissed(store, holder.release))
    hold = waiting.acquire()
    hold.release()
    state = Lock(key).state()
    assert hold.fencing_token > holder.fencing_token
    assert hold.count == 1, "the retry re-entered the hold it had just been handed"
    assert state.owner is None, f"the key is still held after its only release: {state}"


# ----------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"ttl": 0}, "ttl"),
        ({"ttl": -1}, "ttl"),
        ({"wait": -1}, "wait"),
        ({"auto_extend": "yes"}, "auto_extend"),
        ({"key": ""}, "key"),
        ({"key": None}, "key"),
    ],
)
def test_bad_options_are_refused_naming_the_option(options: dict[str, Any], option: str) -> None:
    """An invalid option raises DefinitionError when the Lock is made, naming the option."""
    arguments: dict[str, Any] = {"key": "invoice:1", **options}
    with pytest.raises(DefinitionError, match=rf"\b{option}\b"):
        Lock(**arguments)


def test_uncontended_acquire_and_release_are_two_round_trips(
    server_store: Store, private_redis: PrivateRedis, key: str
) -> None:
    """One uncontended acquire plus release sends exactly two EVALSHA and nothing else."""
    lock = Lock(key, ttl=60, auto_extend=True)
    with lock:  # warm up: scripts loaded on the server, a pooled connection open
        pass

    def acquire_and_release() -> None:
        with lock:
            pass

    sent, calls = client_commands(private_redis.url, server_store, key, acquire_and_release)
    assert [command.split()[:2] for command in sent] == [
        ["EVALSHA", sha("lock_acquire")],
        ["EVALSHA", sha("lock_release")],
    ], sent
    assert calls.get("evalsha", 0) >= 2  # server-wide: other clients may add to it
    assert "eval" not in calls  # no fallback to sending the script text
    assert "script" not in calls


def test_a_waiter_queues_in_its_first_call_and_is_handed_the_lock_without_another(
    server_store: Store, private_redis: PrivateRedis, key: str
) -> None:
    """A busy lock queues a waiting acquire in that same call: the waiter sends one acquire and
    one BLPOP, and the holder's release hands it the lock (no retry, no polling)."""
    waiting = Lock(key, ttl=60, wait=10, store=server_store)
    with waiting:  # warm up: scripts loaded on the server
        pass
    holder = Lock(key, ttl=60, store=server_store).acquire()
    holds: list[LockHold] = []

    def wait_and_get_handed() -> None:
        thread = threading.Thread(target=lambda: holds.append(waiting.acquire()))
        thread.start()
        until(lambda: server_store.lock_state(key).waiters == 1, "the waiter queued")
        time.sleep(0.05)  # its BLPOP is sent
        holder.release()
        thread.join(10)

    sent, _ = client_commands(private_redis.url, server_store, key, wait_and_get_handed)
    names = [command.split()[:2] for command in sent]
    ours = [name for name in names if name != ["EVALSHA", sha("lock_state")]]
    assert [name[0] if name[0] == "BLPOP" else name for name in ours] == [
        ["EVALSHA", sha("lock_acquire")],
        "BLPOP",
        ["EVALSHA", sha("lock_release")],
    ], sent
    assert len(holds) == 1
    assert holds[0].fencing_token > holder.fencing_token
    holds[0].release()


# ----------------------------------------------------------------------------- concurrency


def test_threads_on_one_key_never_overlap(store: Store, redis_url: str, key: str) -> None:
    """Eight threads x 100 acquisitions of one key are never inside together."""
    inside = OverlapRecorder(redis_url, f"lock-threads:{key}")

    def worker() -> None:
        for _ in range(100):
            with Lock(key, wait=30), inside.inside(threading.current_thread().name):
                pass

    boxes = [in_thread(worker) for _ in range(8)]
    join_all([thread for thread, _ in boxes])
    assert [box.get("error") for _, box in boxes] == [None] * 8
    assert inside.entries == 800
    assert inside.max_concurrency == 1
    assert inside.overlaps == 0
    assert inside.replayed_max() == 1


def test_different_keys_are_held_at_the_same_time(store: Store, key: str) -> None:
    """Two threads holding two different keys are inside at the same moment."""
    both_inside = threading.Barrier(2, timeout=5)

    def worker(name: str) -> None:
        with Lock(name, wait=0):
            both_inside.wait()

    boxes = [in_thread(functools.partial(worker, f"{key}:{i}")) for i in range(2)]
    join_all([thread for thread, _ in boxes])
    assert [box.get("error") for _, box in boxes] == [None, None]


def test_processes_on_one_key_never_overlap(store: Store, redis_url: str, key: str) -> None:
    """Four OS processes x 25 acquisitions of one key are never inside together."""
    inside = OverlapRecorder(redis_url, f"lock-processes:{key}")
    go = SPAWN.Event()
    children = [
        SPAWN.Process(target=_overlap_child, args=(store_settings(), key, inside, 25, go))
        for _ in range(4)
    ]
    for child in children:
        child.start()
    try:
        go.set()
        for child in children:
            child.join(60)
        assert [child.exitcode for child in children] == [0] * 4
    finally:
        for child in children:
            if child.is_alive():
                child.kill()
                child.join()
    assert inside.entries == 100
    assert inside.max_concurrency == 1
    assert inside.overlaps == 0
    assert len({label for _, label in inside.events}) == 4  # all four processes took turns


def test_a_killed_holder_frees_the_key_after_its_ttl(store: Store, key: str) -> None:
    """A holder killed with SIGKILL loses the lock about one ttl later, with no operator action."""
    ready = SPAWN.Event()
    child = SPAWN.Process(target=_hold_until_killed, args=(store_settings(), key, 1.0, ready))
    child.start()
    try:
        assert ready.wait(30), "the child never took the lock"
        lock = Lock(key)
        holder = lock.state().owner
        assert holder is not None
        with pytest.raises(LockAcquisitionError):  # auto-extended past its ttl while alive
            Lock(key, wait=1.2).acquire()
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(10)
        killed_at = time.monotonic()
        assert lock.state().owner == holder  # the kill itself frees nothing
        with Lock(key, wait=5) as hold:
            elapsed = time.monotonic() - killed_at
            assert hold.owner != holder
        assert 0.4 <= elapsed <= 4.0
    finally:
        if child.is_alive():
            child.kill()
        child.join()


# ----------------------------------------------------------------------------- review findings


def test_two_waiters_of_one_owner_leave_the_lock_free_after_both_release(
    store: Store, key: str
) -> None:
    """Two queued waiters of one owner share the handed lock, and their releases free it."""
    blocker = Lock(key, ttl=1).acquire()
    done: list[str] = []

    def wait_and_hold(name: str) -> None:
        with Lock(key, ttl=30, wait=10, owner="exec-O"):
            done.append(name)
            time.sleep(0.1)

    threads = [threading.Thread(target=wait_and_hold, args=(name,)) for name in ("T1", "T2")]
    for number, thread in enumerate(threads, start=1):
        thread.start()
        until(lambda n=number: Lock(key).state().waiters == n, f"{number} queued waiter(s)")
    blocker.release()
    for thread in threads:
        thread.join(15)
    assert sorted(done) == ["T1", "T2"]
    state = Lock(key).state()
    assert state.owner is None, f"nobody holds the lock, yet it is taken: {state}"
    assert state.waiters == 0
    Lock(key).acquire().release()  # a fresh owner gets it at once


def test_a_waiter_queued_behind_an_expired_hold_is_handed_the_lock_promptly(
    store: Store, key: str
) -> None:
    """After a dead holder's lock expires, each release still hands it to the next waiter: C's
    last call is the sleep on the wake list that B's release ended with C's token."""
    recording = Recording(store)
    Lock(key, ttl=0.5, auto_extend=False).acquire()  # a holder that dies: never released
    got: dict[str, float] = {}
    released: dict[str, float] = {}
    tokens: dict[str, int] = {}

    def waiter(name: str, hold_for: float) -> None:
        with Lock(key, ttl=30, wait=10, store=recording) as hold:
            tokens[name] = hold.fencing_token
            got[name] = time.monotonic()
            time.sleep(hold_for)
            released[name] = time.monotonic()

    first = threading.Thread(target=waiter, args=("B", 0.1))
    second = threading.Thread(target=waiter, args=("C", 0.0))
    first.start()
    until(lambda: Lock(key).state().waiters == 1, "B queued")
    second.start()
    until(lambda: Lock(key).state().waiters == 2, "C queued")
    first.join(15)
    second.join(15)
    assert not first.is_alive()
    assert not second.is_alive()
    assert got["C"] >= released["B"]
    calls = recording.of(second)
    taking = calls[: [method for method, _ in calls].index("lock_release")]
    assert taking[-1] == ("wait_for_handoff", tokens["C"]), f"C was not handed it: {taking}"


def _fork_child_holds(url: str, key: str, result: Any) -> None:
    """Forked child: hold a short-ttl lock longer than its ttl, report whether it kept it."""
    configure(redis_url=url)
    with Lock(key, ttl=0.6) as hold:
        time.sleep(1.5)
        result.put(Lock(key).state().owner == hold.owner)


def test_a_forked_child_keeps_extending_its_holds(
    server_store: Store, redis_url: str, key: str
) -> None:
    """A child forked while the extender's lock is held gets its own extender, not a dead lock."""
    from py_reactor.coordination._extender import _extender

    context = multiprocessing.get_context("fork")
    result = context.Queue()
    child = context.Process(target=_fork_child_holds, args=(redis_url, key, result))
    parent_hold = Lock(key + "-parent", ttl=0.3).acquire()  # the parent's extender is busy
    try:
        with _extender._changed:  # the worst moment to fork: the extender's lock is taken
            child.start()
        kept = result.get(timeout=20)
        child.join(10)
        assert kept, "the forked child's lock expired while it was held"
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()
        parent_hold.release()


def test_the_last_of_one_owners_parallel_holds_keeps_the_key_alive(store: Store, key: str) -> None:
    """Two holds of one owner released out of order: the one left keeps extending the lock."""
    first = Lock(key, ttl=0.3, owner="exec-P").acquire()
    second = Lock(key, ttl=0.3, owner="exec-P").acquire()
    first.release()  # the outer hold goes first
    time.sleep(1.0)  # > 3 ttls: only auto-extension keeps the key
    with pytest.raises(LockAcquisitionError):
        Lock(key).acquire()
    assert not second.lost
    second.release()
    Lock(key).acquire().release()


def test_a_stale_hold_of_the_same_owner_cannot_release_a_newer_one(store: Store, key: str) -> None:
    """A hold that expired does not free the lock its owner has since taken again."""
    stale = Lock(key, ttl=0.3, auto_extend=False, owner="exec-S").acquire()
    time.sleep(0.5)  # expired
    fresh = Lock(key, ttl=30, owner="exec-S").acquire()
    assert fresh.fencing_token > stale.fencing_token
    stale.release()
    assert stale.lost
    assert Lock(key).state().owner == "exec-S"
    with pytest.raises(LockAcquisitionError):
        Lock(key).acquire()
    fresh.release()


def test_each_level_of_one_owner_lapses_and_releases_on_its_own(store: Store, key: str) -> None:
    """Two levels of one owner (a runner presumed dead, stopped inside, and the recovered run
    of its execution): the level nobody extends lapses with its own ttl while the other lives
    on; the lapsed one then extends and frees nothing, and a level's release never frees the
    owner's other level."""
    frozen = Lock(key, ttl=0.3, auto_extend=False, owner="exec-R").acquire()
    recovered = Lock(key, ttl=0.3, owner="exec-R").acquire()  # auto-extended
    assert (recovered.count, recovered.fencing_token) == (2, frozen.fencing_token)
    until(lambda: Lock(key).state().count == 1, "the frozen level lapsing", timeout=5)
    assert not frozen.extend()
    frozen.release()
    assert frozen.lost
    state = Lock(key).state()
    assert (state.owner, state.count, state.fencing_token) == ("exec-R", 1, frozen.fencing_token)
    with pytest.raises(LockAcquisitionError):
        Lock(key).acquire()

    late = Lock(key, ttl=30, auto_extend=False, owner="exec-R").acquire()
    assert late.count == 2
    recovered.release()  # the older level first: the newer one keeps the key
    assert not recovered.lost
    state = Lock(key).state()
    assert (state.owner, state.count) == ("exec-R", 1)
    with pytest.raises(LockAcquisitionError):
        Lock(key).acquire()
    late.release()
    assert Lock(key).state().owner is None


def test_a_sub_millisecond_wait_never_blocks_forever(store: Store, key: str) -> None:
    """BLPOP with a timeout under 1 ms (which Redis 6.2 reads as 'forever') returns promptly."""
    started = time.monotonic()
    ticket = WaitTicket("lock", key, "nobody", "exec-W", 1000, 1000)
    assert store.wait_for_handoff(ticket, 0.0005) is None
    assert time.monotonic() - started < 1.0


class _InterruptedAfterHandoff(WakeMissed):
    """A real store whose first wait lets the holder release (handing the lock to the waiter)
    and then raises, as a Ctrl-C during the waiter's BLPOP would."""

    def wait_for_handoff(self, ticket: WaitTicket, timeout: float) -> int | None:
        self.meanwhile()
        raise KeyboardInterrupt


def test_an_interrupted_waiter_gives_back_a_lock_it_was_handed(store: Store, key: str) -> None:
    """A wait cut short after a handoff leaves the lock free, not held until its ttl."""
    holder = Lock(key, ttl=30).acquire()
    waiting = Lock(key, ttl=30, wait=5, store=_InterruptedAfterHandoff(store, holder.release))
    with pytest.raises(KeyboardInterrupt):
        waiting.acquire()
    state = Lock(key).state()
    assert state.owner is None, f"the interrupted waiter's handed lock is stranded: {state}"
    assert state.waiters == 0
    Lock(key).acquire().release()
