"""The ordered lock against real Redis: order, poison pills, strict short-circuit, epochs."""

from __future__ import annotations

import dataclasses
import multiprocessing
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from py_reactor import configure
from py_reactor.config import get_config
from py_reactor.coordination.ordered_lock import OrderedLock, Position, Turn
from py_reactor.coordination.store import Store
from py_reactor.errors import (
    CoordinationError,
    DefinitionError,
    OrderedLockWaitError,
    StoreUnavailableError,
)
from tests.coordination._helpers import Recording

#: Generous upper bound (seconds) for anything that should happen "promptly".
SLACK = 10.0


@pytest.fixture
def store_config(store: Store) -> dict[str, str]:
    """The ``configure`` arguments that point a child process at the same store as ``store``."""
    config = get_config()
    if config.redis_url is not None:
        return {"redis_url": config.redis_url}
    assert config.embedded_dir is not None
    return {"embedded_dir": config.embedded_dir}


@pytest.fixture
def admin(redis_url: str) -> Iterator[redis.Redis]:
    """A plain client of the private redis-server, for CONFIG RESETSTAT and INFO (not ``raw``:
    this directory's ``raw`` follows the parametrized ``store``, which may be embedded)."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def _take_in_child(config: dict[str, str], key: str, poison: float, hold: bool, taken: Any) -> None:
    """Child process: take a position (heartbeating it) and report it; then exit or hold on.

    With ``hold`` the child also takes its turn and keeps it (heartbeating) until killed.
    """
    configure(redis_url=config.get("redis_url"), embedded_dir=config.get("embedded_dir"))
    lock = OrderedLock(key, poison_pill_timeout=poison)
    position = lock.take_position()
    if hold:
        lock.wait_turn(position)
    taken.put(dataclasses.asdict(position))
    if hold:
        threading.Event().wait()


def _spawn_holder(
    config: dict[str, str], key: str, poison: float, *, hold: bool
) -> tuple[multiprocessing.process.BaseProcess, Position]:
    """Start a spawned child that takes the next position of ``key``; return it and its position."""
    ctx = multiprocessing.get_context("spawn")
    taken = ctx.Queue()
    child = ctx.Process(target=_take_in_child, args=(config, key, poison, hold, taken))
    child.start()
    try:
        position = Position(**taken.get(timeout=60))
    except BaseException:
        child.kill()
        child.join()
        raise
    finally:
        taken.close()
        taken.join_thread()
    return child, position


def _in_thread(target: Callable[[], Turn | None]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``target`` in a thread; the dict gets ``turn`` and ``at`` (monotonic), or ``error``."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["turn"] = target()
            result["at"] = time.monotonic()
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def _calls(admin: redis.Redis) -> dict[str, int]:
    """Commands run since the last CONFIG RESETSTAT, except the CONFIG and INFO themselves."""
    stats = admin.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): int(entry["calls"])
        for name, entry in stats.items()
        if not name.startswith(("cmdstat_config", "cmdstat_info"))
    }


#: Commands the ordered-lock scripts run inside the server (counted by INFO commandstats too).
SCRIPT_COMMANDS = {"time", "hget", "hmget", "hset", "hincrby", "hdel", "hexists", "pexpire"}
SCRIPT_COMMANDS |= {"del", "rpush", "lpop"}  # lpop: a release wakes parked executions


def _round_trips(admin: redis.Redis, operation: Callable[[], object]) -> dict[str, int]:
    """The commands a client sent while ``operation`` ran (those run by scripts left out)."""
    admin.config_resetstat()
    operation()
    return {name: n for name, n in _calls(admin).items() if name not in SCRIPT_COMMANDS}


def test_single_holder_passes_immediately(store: Store, key: str) -> None:
    """A lone position gets its turn at once, even with wait=0."""
    lock = OrderedLock(key, wait=0, store=store)
    position = lock.take_position()
    assert position.key == key
    assert position.number == 1
    turn = lock.wait_turn(position)
    assert turn.position == position
    assert not turn.short_circuit
    assert not turn.released
    turn.release(failed=False)
    assert turn.released
    assert lock.state().drained


def test_positions_pass_strictly_in_order(store: Store, key: str) -> None:
    """Twenty waiters started in shuffled order pass in the order their positions were taken."""
    lock = OrderedLock(key, wait=60, store=store)
    positions = [lock.take_position() for _ in range(20)]
    assert [p.number for p in positions] == list(range(1, 21))
    record: list[int] = []
    errors: list[BaseException] = []

    def work(position: Position, delay: float) -> None:
        try:
            time.sleep(delay)  # scrambles arrival order; not used for synchronisation
            turn = lock.wait_turn(position)
            record.append(position.number)
            turn.release(failed=False)
        except BaseException as exc:
            errors.append(exc)

    shuffled = positions[:]
    random.shuffle(shuffled)
    threads = [threading.Thread(target=work, args=(p, random.uniform(0, 0.05))) for p in shuffled]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert record == list(range(1, 21))
    assert lock.state().drained


def test_holder_that_never_shows_up_is_skipped_after_poison_pill_timeout(
    store: Store, key: str, store_config: dict[str, str]
) -> None:
    """A position whose process exited without releasing is skipped once its heartbeat is stale."""
    child, ghost = _spawn_holder(store_config, key, 0.3, hold=False)
    child.join(timeout=60)
    assert child.exitcode == 0
    lock = OrderedLock(key, poison_pill_timeout=0.3, wait=SLACK, store=store)
    position = lock.take_position()
    assert (ghost.number, position.number) == (1, 2)
    turn = lock.wait_turn(position)
    state = lock.state()
    assert state.last_completed == 1
    assert not state.failed
    assert not turn.short_circuit  # a skipped position is not a failure
    turn.release(failed=False)
    assert lock.state().drained


def test_live_waiting_position_is_never_skipped(store: Store, key: str) -> None:
    """A position that only waits keeps heartbeating, so it blocks later ones beyond the timeout."""
    early = OrderedLock(key, poison_pill_timeout=0.3, store=store)
    late = OrderedLock(key, poison_pill_timeout=0.3, wait=1.2, store=store)
    first = early.take_position()
    second = late.take_position()
    with pytest.raises(OrderedLockWaitError):
        late.wait_turn(second)  # four poison-pill timeouts: the live first position stays
    turn = early.wait_turn(first)
    assert early.state().last_completed == 0
    turn.release(failed=False)
    late.wait_turn(second).release(failed=False)
    assert late.state().drained


@pytest.mark.parametrize("strict", [True, False])
def test_failure_short_circuits_later_positions_only_when_strict(
    store: Store, key: str, strict: bool
) -> None:
    """After position 1 fails, positions 2 and 3 short-circuit under strict and not otherwise."""
    lock = OrderedLock(key, strict=strict, wait=SLACK, store=store)
    first, second, third = (lock.take_position() for _ in range(3))
    turn = lock.wait_turn(first)
    assert not turn.short_circuit
    turn.release(failed=True)
    assert lock.state().failed is strict
    turn = lock.wait_turn(second)
    assert turn.short_circuit is strict
    turn.release(failed=False)
    turn = lock.wait_turn(third)
    assert turn.short_circuit is strict
    turn.release(failed=False)


def test_counters_reset_and_epoch_advances_when_the_sequence_drains(store: Store, key: str) -> None:
    """Draining resets the counters and failure flag and starts a new epoch that fences the old."""
    lock = OrderedLock(key, wait=SLACK, store=store)
    first, second = lock.take_position(), lock.take_position()
    lock.wait_turn(first).release(failed=True)
    state = lock.state()
    assert (state.epoch, state.next_position, state.last_completed) == (first.epoch, 3, 1)
    assert (state.in_flight, state.failed, state.drained) == (1, True, False)
    lock.wait_turn(second).release(failed=False)
    state = lock.state()
    assert state.epoch == first.epoch + 1
    assert (state.next_position, state.last_completed, state.in_flight) == (1, 0, 0)
    assert not state.failed
    assert state.drained
    fresh = lock.take_position()
    assert (fresh.epoch, fresh.number) == (first.epoch + 1, 1)
    with pytest.raises(OrderedLockWaitError, match="will never come"):
        lock.wait_turn(first)  # an old-epoch position is fenced off
    lock.abandon(first)  # ... and releasing it changes nothing
    assert lock.state().last_completed == 0
    turn = lock.wait_turn(fresh)
    assert not turn.short_circuit
    turn.release(failed=False)


def test_wait_runs_out_with_an_error_naming_key_position_and_blocker(
    store: Store, key: str
) -> None:
    """With wait=0.2 and a live blocker, wait_turn raises and the position stays taken."""
    lock = OrderedLock(key, wait=0.2, store=store)
    blocker, position = lock.take_position(), lock.take_position()
    started = time.monotonic()
    with pytest.raises(OrderedLockWaitError) as caught:
        lock.wait_turn(position)
    assert 0.15 <= time.monotonic() - started < SLACK
    error = caught.value
    assert (error.primitive, error.key) == ("ordered_lock", key)
    assert key in str(error)
    assert "position 2" in str(error)
    assert "position 1 is still in progress" in str(error)
    assert lock.state().in_flight == 2  # not released
    lock.wait_turn(blocker).release(failed=False)
    turn = lock.wait_turn(position)
    assert not turn.short_circuit
    turn.release(failed=False)
    assert lock.state().drained


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"ttl": 0}, "ttl"),
        ({"ttl": -1}, "ttl"),
        ({"ttl": "1"}, "ttl"),
        ({"ttl": float("inf")}, "ttl"),
        ({"poison_pill_timeout": 0}, "poison_pill_timeout"),
        ({"poison_pill_timeout": True}, "poison_pill_timeout"),
        ({"strict": "yes"}, "strict"),
        ({"wait": -0.5}, "wait"),
        ({"wait": float("nan")}, "wait"),
        ({"store": "redis://localhost"}, "store"),
    ],
)
def test_bad_options_are_refused_naming_the_option(options: dict[str, Any], option: str) -> None:
    """A bad option value raises DefinitionError naming the option."""
    with pytest.raises(DefinitionError, match=option):
        OrderedLock("k", **options)


@pytest.mark.parametrize("bad_key", ["", None, 42])
def test_bad_keys_are_refused(bad_key: Any) -> None:
    """The key must be a non-empty str."""
    with pytest.raises(DefinitionError, match="key"):
        OrderedLock(bad_key)


def test_store_is_resolved_on_first_use_not_in_the_constructor(key: str) -> None:
    """Constructing an ordered lock never touches the store; the first operation does."""
    configure(redis_url="redis://127.0.0.1:1/0")
    lock = OrderedLock(key)
    with pytest.raises(StoreUnavailableError, match=r"127\.0\.0\.1:1\b"):
        lock.state()


def test_position_of_another_key_is_refused(store: Store, key: str) -> None:
    """wait_turn refuses a position taken on a different key."""
    other = OrderedLock(key + "-other", store=store)
    position = other.take_position()
    with pytest.raises(CoordinationError, match="not one of its positions"):
        OrderedLock(key, store=store).wait_turn(position)
    other.abandon(position)
    assert other.state().drained


def test_release_is_idempotent(store: Store, key: str) -> None:
    """Releasing a turn twice advances the sequence once."""
    lock = OrderedLock(key, wait=SLACK, store=store)
    first, second = lock.take_position(), lock.take_position()
    turn = lock.wait_turn(first)
    turn.release(failed=True)
    turn.release(failed=False)
    turn.release(failed=True)
    state = lock.state()
    assert (state.last_completed, state.in_flight, state.failed) == (1, 1, True)
    assert turn.released
    assert not turn.extend()
    lock.wait_turn(second).release(failed=False)
    assert lock.state().drained


def test_abandoned_position_is_skipped_without_waiting_for_the_timeout(
    store: Store, key: str
) -> None:
    """A position abandoned before its turn is skipped at once when the turn reaches it: the
    release wakes the third position's wait, which then has its turn (it neither waits out the
    600 s poison-pill timeout nor finds its turn after a timed-out sleep)."""
    recording = Recording(store)
    lock = OrderedLock(key, wait=SLACK, store=store)  # poison-pill timeout: 600 s
    first, second, third = (lock.take_position() for _ in range(3))
    turn = lock.wait_turn(first)
    lock.abandon(second)
    waiting = OrderedLock(key, wait=SLACK, store=recording)
    thread, result = _in_thread(lambda: waiting.wait_turn(third))
    turn.release(failed=False)
    thread.join(timeout=SLACK)
    assert "error" not in result
    calls = [(m, r) for m, r in recording.of(thread) if m != "ordered_lock_heartbeat"]
    assert 1 <= [method for method, _ in calls].count("ordered_lock_turn") <= 2, calls
    assert all(r for m, r in calls if m == "ordered_lock_wait"), f"a wait timed out: {calls}"
    assert not result["turn"].short_circuit
    assert lock.state().last_completed == 2
    result["turn"].release(failed=False)
    assert lock.state().drained


def test_context_manager_takes_waits_and_releases(store: Store, key: str) -> None:
    """``with`` takes a position, waits for its turn and releases it, also when the block raises."""
    lock = OrderedLock(key, wait=SLACK, store=store)
    with lock as turn:
        assert turn.position.number == 1
        assert lock.state().in_flight == 1
    assert turn.released
    assert lock.state().drained
    with pytest.raises(RuntimeError), lock as turn:
        raise RuntimeError("boom")
    assert turn.released
    assert lock.state().drained


def test_strict_failure_inside_with_short_circuits_a_waiting_position(
    store: Store, key: str
) -> None:
    """A ``with`` block that raises makes the position waiting behind it short-circuit."""
    lock = OrderedLock(key, wait=SLACK, store=store)
    entered = threading.Event()
    leave = threading.Event()

    def failing_block() -> None:
        with lock:
            entered.set()
            leave.wait(SLACK)
            raise RuntimeError("boom")

    holder, holder_result = _in_thread(failing_block)
    assert entered.wait(SLACK)
    later = lock.take_position()
    waiter, result = _in_thread(lambda: lock.wait_turn(later))
    leave.set()
    holder.join(timeout=SLACK)
    waiter.join(timeout=SLACK)
    assert isinstance(holder_result["error"], RuntimeError)
    assert result["turn"].short_circuit
    result["turn"].release(failed=False)
    assert lock.state().drained


def test_with_block_abandons_its_position_when_the_wait_runs_out(store: Store, key: str) -> None:
    """If ``with`` cannot get the turn, its position is abandoned and does not block later ones."""
    lock = OrderedLock(key, wait=0.1, store=store)
    blocker = lock.take_position()
    with pytest.raises(OrderedLockWaitError), lock:
        pytest.fail("the block must not run without the turn")
    lock.wait_turn(blocker).release(failed=False)
    assert lock.state().drained  # the abandoned position 2 was skipped at once


def test_each_operation_is_one_round_trip(
    server_store: Store, key: str, admin: redis.Redis
) -> None:
    """Taking, checking a turn, heartbeating, releasing and reading state are one EVALSHA each."""
    lock = OrderedLock(key, store=server_store)
    warm = lock.take_position()  # loads every script into the server and the client
    warm_turn = lock.wait_turn(warm)
    warm_turn.extend()
    lock.state()
    warm_turn.release(failed=False)
    spare = lock.take_position()
    lock.abandon(spare)

    one = {"evalsha": 1}
    positions: list[Position] = []
    turns: list[Turn] = []
    assert _round_trips(admin, lambda: positions.append(lock.take_position())) == one
    assert _round_trips(admin, lambda: turns.append(lock.wait_turn(positions[0]))) == one
    assert _round_trips(admin, turns[0].extend) == one
    assert _round_trips(admin, lock.state) == one
    assert _round_trips(admin, lambda: turns[0].release(failed=False)) == one
    assert lock.state().drained


def test_waiting_blocks_on_a_notification_instead_of_polling(
    server_store: Store, key: str, admin: redis.Redis
) -> None:
    """A waiter blocked for a second costs a handful of commands and is handed the turn at once."""
    lock = OrderedLock(key, wait=SLACK, store=server_store)
    first, second = lock.take_position(), lock.take_position()
    turn = lock.wait_turn(first)
    admin.config_resetstat()
    thread, result = _in_thread(lambda: lock.wait_turn(second))
    threading.Event().wait(1.0)  # the waiter is blocked all this time
    turn.release(failed=False)
    thread.join(timeout=SLACK)
    calls = _calls(admin)
    assert "error" not in result
    assert 3 <= calls.get("evalsha", 0) <= 4  # turn check, release, turn check (+1 safety)
    assert 1 <= calls.get("blpop", 0) <= 2  # it blocked on the notification, and no more
    result["turn"].release(failed=False)


def test_killed_holder_is_skipped_after_the_poison_pill_timeout(
    server_store: Store, key: str, redis_url: str
) -> None:
    """When the process holding position 1 is killed -9, position 2 passes after the timeout."""
    poison = 1.0
    child, held = _spawn_holder({"redis_url": redis_url}, key, poison, hold=True)
    try:
        impatient = OrderedLock(key, poison_pill_timeout=poison, wait=2.5, store=server_store)
        position = impatient.take_position()
        assert (held.number, position.number) == (1, 2)
        with pytest.raises(OrderedLockWaitError, match="position 1 is still in progress"):
            impatient.wait_turn(position)  # the live holder heartbeats: never skipped
    finally:
        child.kill()
        child.join(timeout=SLACK)
    killed_at = time.monotonic()
    lock = OrderedLock(key, poison_pill_timeout=poison, wait=SLACK * 3, store=server_store)
    turn = lock.wait_turn(position)
    waited = time.monotonic() - killed_at
    assert poison / 3 <= waited < poison + SLACK
    assert not turn.short_circuit
    assert lock.state().last_completed == 1
    turn.release(failed=False)
    assert lock.state().drained
