"""A runner frozen inside a locked step (SIGSTOP past its lease) never lets a third run in.

Real worker processes (thread workers, started as separate OS processes) on the session's
private redis-server. The runner of an execution is stopped with SIGSTOP inside a step that
holds ``with_lock(key)``; its lease lapses, another worker process recovers the execution and
re-enters the step (same execution, same owner). The stopped runner is woken with SIGCONT
while the recovered run is still inside: it leaves and gives back its own level of the lock,
never the recovered run's, so a third execution on the key parks until the recovered run is
out. Every stay inside the step is written to an ``OverlapRecorder``.

The same with the lock held by the reactor (``FrozenUnderReactorLock``): the checkpoint the
recovered run loads lists the stopped runner's hold, and the recovered run must re-enter beside
it (a level of its own) rather than adopt it, or the stopped runner's release on waking would
free the key under the recovered run.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from typing import TypeVar

import pytest
import redis

import py_reactor
import py_reactor.transport.threads
import py_reactor.workers
from py_reactor import DispatchedResult, Lock, Reactor, SuccessResult, configure, find
from tests._overlap import OverlapRecorder
from tests._processes import child
from tests._wait import until
from tests.concurrency import _frozen_reactors as fr

T = TypeVar("T")


@pytest.fixture(autouse=True)
def _no_worker(
    _default_settings: None, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """The private server, and no thread worker in this process: the worker processes run
    everything this test dispatches."""
    configure(redis_url=redis_url, execution_lease=fr.LEASE)
    py_reactor.workers.stop()
    monkeypatch.setattr(py_reactor.transport.threads, "ensure_worker", lambda: None)
    yield
    py_reactor.workers.stop()


def worker(url: str) -> subprocess.Popen[bytes]:
    """A worker process (``_frozen_reactors.serve``) in a new interpreter."""
    return child("tests.concurrency._frozen_reactors", "serve", url)


def dispatch(key: str, reactor: type[Reactor] = fr.Frozen) -> str:
    """Dispatch a ``reactor`` run (``Frozen`` by default) on lock ``key``; its execution id."""
    out = reactor.run(lock=key)
    assert isinstance(out, DispatchedResult), out
    return out.execution_id


def executions_inside(events: list[tuple[str, str]]) -> int:
    """The most distinct executions inside at once, replayed from the recorder's events
    (two runners of one execution count once: a recovery re-enters its own hold)."""
    inside: dict[str, int] = {}
    most = 0
    for kind, who in events:
        execution = who.partition("@")[0]
        inside[execution] = inside.get(execution, 0) + (1 if kind == "enter" else -1)
        most = max(most, sum(1 for n in inside.values() if n > 0))
    return most


def test_a_runner_stopped_past_its_lease_never_lets_a_third_run_into_the_lock(
    redis_url: str, key: str, raw: redis.Redis
) -> None:
    """Runner A (process W1) is inside the locked step; SIGSTOP W1; its lease lapses and W2
    recovers the execution: runner B re-enters the step, A's level kept beside B's. SIGCONT
    W1: A leaves and releases its own level; the lock stays B's. A third execution C parks
    on the key and enters only after B is out: never two executions inside at once."""
    recorder = OverlapRecorder(redis_url, key)
    w1 = worker(redis_url)
    w2: subprocess.Popen[bytes] | None = None
    try:
        first = dispatch(key)
        a = fr.label(first, w1.pid)
        until(lambda: recorder.events == [("enter", a)] or w1.poll() is not None, "A inside")
        assert w1.poll() is None, w1.communicate(timeout=10)[1].decode()
        os.kill(w1.pid, signal.SIGSTOP)

        w2 = worker(redis_url)  # recovers the execution once A's lease has lapsed
        b = fr.label(first, w2.pid)
        until(lambda: len(recorder.events) >= 2, "the recovered run inside", timeout=60)
        assert recorder.events == [("enter", a), ("enter", b)]
        both = Lock(key).state()  # A is stopped inside, B runs inside: two levels

        raw.set(f"{key}:{first}:go:1", "1")  # A may leave once it wakes
        os.kill(w1.pid, signal.SIGCONT)
        until(lambda: raw.lrange(f"{key}:released", 0, -1), "A releasing its level")
        assert raw.lrange(f"{key}:released", 0, -1) == [f"{a}|lost=False"]
        assert recorder.events == [("enter", a), ("enter", b), ("leave", a)]
        after_a = Lock(key).state()  # B is still inside

        third = dispatch(key)
        raw.set(f"{key}:{third}:go:1", "1")  # C leaves as soon as it is in

        def parked_or_inside() -> bool:
            found = find(third)
            waiting = found is not None and found.status == "waiting"
            return waiting or any(who.startswith(third) for _, who in recorder.events)

        until(parked_or_inside, "C parking on the lock, or entering it")
        while_b = find(third)
        raw.set(f"{key}:{first}:go:2", "1")  # B leaves
        assert isinstance(py_reactor.workers.wait(first, timeout=30), SuccessResult)
        assert isinstance(py_reactor.workers.wait(third, timeout=30), SuccessResult)

        events = recorder.events
        assert executions_inside(events) == 1, events
        assert events[:4] == [("enter", a), ("enter", b), ("leave", a), ("leave", b)]
        assert [kind for kind, _ in events[4:]] == ["enter", "leave"]
        assert all(who.startswith(f"{third}@") for _, who in events[4:])
        assert (both.owner, both.count) == (first, 2)  # recovery shed nothing of A's
        assert (after_a.owner, after_a.count) == (first, 1)  # A's release left B's level
        assert after_a.fencing_token == both.fencing_token
        assert while_b is not None
        assert while_b.status == "waiting"
        assert while_b.waiting_on is not None
        assert (while_b.waiting_on["primitive"], while_b.waiting_on["key"]) == ("lock", key)
        assert Lock(key).state().owner is None  # everything given back in the end
    finally:
        for process in (w1, w2):
            if process is not None:
                os.kill(process.pid, signal.SIGCONT)
                process.kill()
                process.wait(10)
                process.communicate(timeout=10)


def test_a_runner_stopped_inside_a_reactor_lock_keeps_its_own_level_beside_the_recovered_run(
    redis_url: str, key: str, raw: redis.Redis
) -> None:
    """The reactor holds the lock; runner A (W1) is inside its second step, after a checkpoint
    that lists the reactor's hold. SIGSTOP W1; W2 recovers the execution from that checkpoint:
    runner B re-enters the reactor's hold with a level of its own (count 2) instead of adopting
    A's record. SIGCONT W1: A leaves, finds the execution claimed, and releases the level it
    took, never B's; a third execution C parks on the key until B is out. Had B adopted A's
    record, there would be one level, A's release would free the key under B, and C would
    enter beside B."""
    recorder = OverlapRecorder(redis_url, key)
    w1 = worker(redis_url)
    w2: subprocess.Popen[bytes] | None = None
    try:
        first = dispatch(key, fr.FrozenUnderReactorLock)
        a = fr.label(first, w1.pid)
        until(lambda: recorder.events == [("enter", a)] or w1.poll() is not None, "A inside")
        assert w1.poll() is None, w1.communicate(timeout=10)[1].decode()
        checkpointed = find(first)  # written after `before`, before A entered `inside`
        alone = Lock(key).state()
        os.kill(w1.pid, signal.SIGSTOP)

        w2 = worker(redis_url)  # recovers the execution once A's lease has lapsed
        b = fr.label(first, w2.pid)
        until(lambda: len(recorder.events) >= 2, "the recovered run inside", timeout=60)
        assert recorder.events == [("enter", a), ("enter", b)]
        both = Lock(key).state()  # A is stopped inside, B runs inside

        raw.set(f"{key}:{first}:go:1", "1")  # A may leave once it wakes
        os.kill(w1.pid, signal.SIGCONT)
        until(lambda: raw.lrange(f"{key}:released", 0, -1), "A releasing its level")
        after_a = Lock(key).state()  # B is still inside
        released_by_a = raw.lrange(f"{key}:released", 0, -1)
        events_after_a = recorder.events

        third = dispatch(key, fr.FrozenUnderReactorLock)
        raw.set(f"{key}:{third}:go:1", "1")  # C leaves as soon as it is in

        def parked_or_inside() -> bool:
            found = find(third)
            waiting = found is not None and found.status == "waiting"
            return waiting or any(who.startswith(third) for _, who in recorder.events)

        until(parked_or_inside, "C parking on the lock, or entering it")
        while_b = find(third)
        raw.set(f"{key}:{first}:go:2", "1")  # B leaves
        first_outcome = py_reactor.workers.wait(first, timeout=30)
        third_outcome = py_reactor.workers.wait(third, timeout=30)

        # The checkpoint B recovered from lists the reactor's hold (A's level 1): there was a
        # record to adopt.
        assert checkpointed is not None
        assert checkpointed.results == {"before": "checkpointed"}
        assert [
            (h["primitive"], h["key"], h["step"], h["state"], h["data"]["level"])
            for h in checkpointed.holds
        ] == [("lock", key, None, "held", 1)]
        assert (alone.owner, alone.count) == (first, 1)
        # Never two executions inside; C entered only after B left.
        events = recorder.events
        assert executions_inside(events) == 1, events
        assert events[:4] == [("enter", a), ("enter", b), ("leave", a), ("leave", b)], events
        assert [kind for kind, _ in events[4:]] == ["enter", "leave"], events
        assert all(who.startswith(f"{third}@") for _, who in events[4:]), events
        # B re-entered beside A's level (adopting it would leave count 1), and A's release
        # freed A's level only: the key stayed the execution's, with the same token.
        assert (both.owner, both.count) == (first, 2)
        assert events_after_a == [("enter", a), ("enter", b), ("leave", a)]
        assert released_by_a == [f"{a}|lost=False"]
        assert (after_a.owner, after_a.count) == (first, 1)
        assert after_a.fencing_token == both.fencing_token == alone.fencing_token
        assert while_b is not None
        assert while_b.status == "waiting"
        assert while_b.waiting_on is not None
        assert (while_b.waiting_on["primitive"], while_b.waiting_on["key"]) == ("lock", key)
        # B's level was still its own when B released it; then C's.
        released = raw.lrange(f"{key}:released", 0, -1)
        assert released[:2] == [f"{a}|lost=False", f"{b}|lost=False"], released
        assert len(released) == 3, released
        assert released[2].startswith(f"{third}@"), released
        assert released[2].endswith("|lost=False"), released
        assert isinstance(first_outcome, SuccessResult), first_outcome
        assert isinstance(third_outcome, SuccessResult), third_outcome
        assert Lock(key).state().owner is None  # everything given back in the end
    finally:
        for process in (w1, w2):
            if process is not None:
                os.kill(process.pid, signal.SIGCONT)
                process.kill()
                process.wait(10)
                process.communicate(timeout=10)
