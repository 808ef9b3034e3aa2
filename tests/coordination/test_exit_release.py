"""A process that exits normally gives back what it still holds; one killed leaves it to the ttl.

Each test runs a child interpreter (``python -c``) on the same store as the test: the private
redis-server through ``configure(redis_url=...)``, or the embedded default, which the child
finds through ``PY_REACTOR_EMBEDDED_DIR`` (set by the suite's conftest). The child takes
something, prints ``held`` and ends; right after it is gone, this process takes the same key
with ``wait=0``.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from py_reactor import configure
from py_reactor.coordination import Lock, Period, Semaphore
from py_reactor.errors import LockAcquisitionError, SemaphoreAcquisitionError
from tests._redis import PrivateRedis

ROOT = Path(__file__).resolve().parents[2]

#: Seconds a frozen store may delay a child's exit: the exit timeout (2 s) plus start-up slack.
EXIT_BOUND = 5.0

#: The child's preamble: the store, the key, and the names the bodies use.
_PREAMBLE = """\
import os, signal, sys, threading, time
from py_reactor import configure
from py_reactor.coordination import Lock, Period, Semaphore
url, key = {url!r}, {key!r}
if url:
    configure(redis_url=url)
"""

#: What a child takes before it prints ``held`` (each leaves it unreleased).
TAKES = {
    "lock": "Lock(key, ttl=60).acquire()",
    "lock without auto-extend": "Lock(key, ttl=60, auto_extend=False).acquire()",
    "semaphore slot": "Semaphore(key, limit=1, lease=60).acquire()",
    "period claim": "assert Period(key, every='day', lease=60).claim().due",
    "nested holds of one owner": (
        "Lock(key, ttl=60, owner='exiting').acquire()\n"
        "Lock(key, ttl=60, owner='exiting', auto_extend=False).acquire()"
    ),
    "lock held by another thread": (
        "taken = threading.Event()\n"
        "def hold_forever():\n"
        "    with Lock(key, ttl=60):\n"
        "        taken.set()\n"
        "        time.sleep(600)\n"
        "threading.Thread(target=hold_forever, daemon=True).start()\n"
        "assert taken.wait(30)"
    ),
}


@pytest.fixture(params=["server", "embedded"])
def child_url(request: pytest.FixtureRequest) -> str | None:
    """The store the child configures (None: the embedded default); this process uses it too."""
    if request.param == "server":
        url: str = request.getfixturevalue("redis_url")
        configure(redis_url=url)
        return url
    configure(embedded_dir=request.getfixturevalue("embedded_folder"))
    return None


def _code(url: str | None, key: str, body: str) -> str:
    return _PREAMBLE.format(url=url, key=key) + textwrap.dedent(body)


def _run(code: str, *, returncode: int = 0) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child interpreter to its end; check it held, exited cleanly, said why."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == returncode, done.stderr
    assert "held" in done.stdout.split(), (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr
    assert time.monotonic() - started < 30, "the child took too long to exit"
    return done


def _free(what: str, key: str) -> None:
    """This process takes ``key`` at once (wait=0), as ``what`` was taken, and gives it back."""
    if what == "semaphore slot":
        Semaphore(key, limit=1, wait=0).acquire().release()
    elif what == "period claim":
        claim = Period(key, every="day", wait=0).claim()
        assert claim.due, "the exiting child's claim was marked done, not given back"
        claim.release(mark=False)
    else:
        Lock(key, wait=0).acquire().release()


@pytest.mark.parametrize("what", list(TAKES))
def test_a_normal_exit_gives_back_what_the_process_holds(
    child_url: str | None, key: str, what: str
) -> None:
    """A child that reaches the end of its script leaves the key free at once, not after ttl."""
    _run(_code(child_url, key, f"{TAKES[what]}\nprint('held', flush=True)\n"))
    _free(what, key)


@pytest.mark.parametrize("what", ["lock", "lock without auto-extend", "semaphore slot"])
def test_sys_exit_gives_back_what_the_process_holds(
    child_url: str | None, key: str, what: str
) -> None:
    """``sys.exit(3)`` is a normal exit too: the key is free as soon as the child is gone."""
    _run(
        _code(child_url, key, f"{TAKES[what]}\nprint('held', flush=True)\nsys.exit(3)\n"),
        returncode=3,
    )
    _free(what, key)


@pytest.mark.parametrize("what", ["lock", "lock without auto-extend", "semaphore slot"])
def test_a_killed_process_leaves_its_holds_to_their_ttl(
    child_url: str | None, key: str, what: str
) -> None:
    """SIGKILL runs no exit code: the key stays held (its ttl still frees it later)."""
    code = _code(child_url, key, f"{TAKES[what]}\nprint('held', flush=True)\ntime.sleep(600)\n")
    with subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True
    ) as child:
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "held"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(30)
    if what == "semaphore slot":
        with pytest.raises(SemaphoreAcquisitionError):
            Semaphore(key, limit=1, wait=0).acquire()
    else:
        with pytest.raises(LockAcquisitionError):
            Lock(key, wait=0).acquire()
        ttl = Lock(key).state().ttl
        assert ttl is not None
        assert ttl > 50


def test_a_forked_child_never_gives_back_its_parents_holds(child_url: str | None, key: str) -> None:
    """A forked child that exits normally leaves the parent's holds alone; the parent's exit
    then frees them."""
    body = """\
        hold = Lock(key, ttl=60).acquire()
        loose = Lock(key + "-loose", ttl=60, auto_extend=False).acquire()
        print("held", flush=True)
        pid = os.fork()
        if pid == 0:
            sys.exit(0)  # a clean exit of the forked child: its exit code runs here
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        print("kept", Lock(key).state().owner == hold.owner,
              Lock(key + "-loose").state().owner == loose.owner, flush=True)
    """
    done = _run(_code(child_url, key, body))
    assert "kept True True" in done.stdout, done.stdout
    Lock(key, wait=0).acquire().release()
    Lock(key + "-loose", wait=0).acquire().release()


@pytest.fixture
def doomed_redis() -> Iterator[PrivateRedis]:
    """A redis-server of this test alone, which the child may stop or freeze."""
    server = PrivateRedis()
    try:
        yield server
    finally:
        if server.process.poll() is None:
            os.kill(server.process.pid, signal.SIGCONT)
        server.stop()


def test_an_unreachable_store_at_exit_is_logged_not_raised(
    doomed_redis: PrivateRedis, key: str
) -> None:
    """Holds whose store went away are reported as left to their ttl; the exit stays clean."""
    body = f"""\
        Lock(key, ttl=60).acquire()
        Lock(key + "-2", ttl=60, auto_extend=False).acquire()
        print("held", flush=True)
        os.kill({doomed_redis.process.pid}, signal.SIGKILL)
        time.sleep(0.5)
    """
    done = _run(_code(doomed_redis.url, key, body))
    assert "could not be released" in done.stderr, done.stderr
    assert "ttl" in done.stderr, done.stderr


def test_a_store_that_stops_answering_does_not_hang_the_exit(
    doomed_redis: PrivateRedis, key: str
) -> None:
    """A frozen server (it accepts, never answers) delays the exit by at most the exit timeout."""
    body = f"""\
        Lock(key, ttl=60).acquire()
        print("held", flush=True)
        os.kill({doomed_redis.process.pid}, signal.SIGSTOP)
        print("ending", time.time(), flush=True)
    """
    done = _run(_code(doomed_redis.url, key, body))
    took = time.time() - float(done.stdout.split("ending")[1])
    assert took < EXIT_BOUND, f"the exit took {took:.1f} s"
    assert "could not be released" in done.stderr, done.stderr


def test_a_hold_handed_over_with_forget_outlives_the_exit(child_url: str | None, key: str) -> None:
    """A hold the process stopped looking after (``forget``: kept across a park, handed over)
    is not this process's to give back: it stays held after a clean exit."""
    body = """\
        from py_reactor.coordination._extender import forget
        forget(Lock(key, ttl=60).acquire())
        forget(Lock(key + "-loose", ttl=60, auto_extend=False).acquire())
        print("held", flush=True)
    """
    _run(_code(child_url, key, body))
    for name in (key, key + "-loose"):
        with pytest.raises(LockAcquisitionError):
            Lock(name, wait=0).acquire()


def test_holds_are_released_newest_first(
    child_url: str | None, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The exit unwinds like nested ``with`` blocks: the last hold taken goes first."""
    from py_reactor.coordination._exit import release_at_exit

    holds = [Lock(f"{key}-{n}", ttl=60, auto_extend=n % 2 == 0).acquire() for n in range(3)]
    with caplog.at_level(logging.INFO, logger="py_reactor"):
        release_at_exit(holds)
    assert all(hold.released for hold in holds)
    released = caplog.records[-1].getMessage()
    assert [released.index(f"'{key}-{n}'") for n in (2, 1, 0)] == sorted(
        released.index(f"'{key}-{n}'") for n in range(3)
    )
    Lock(f"{key}-0", wait=0).acquire().release()


class _Kept:
    """A stand-in hold for the registry alone (no store is involved)."""

    released = False

    def extend(self) -> bool:
        return True


def test_remembered_holds_that_lapsed_are_pruned() -> None:
    """Never-released holds without auto-extend leave the registry once their ttl ran out, so a
    process that takes them as cooldowns does not grow it forever (nor release them at exit)."""
    from py_reactor.coordination._extender import PRUNE_AT, _Extender

    registry = _Extender()
    lapsed, alive = _Kept(), _Kept()
    registry.remember(lapsed, 0.01)
    registry.remember(alive, 60)
    time.sleep(0.05)
    assert registry.stop() == [alive]  # a lapsed one is not released at exit

    registry = _Extender()
    for _ in range(PRUNE_AT):
        registry.remember(_Kept(), 0.01)
    time.sleep(0.05)
    registry.remember(alive, 60)  # one past PRUNE_AT: the lapsed ones are swept
    assert [entry.hold for entry in registry._live.values()] == [alive]
