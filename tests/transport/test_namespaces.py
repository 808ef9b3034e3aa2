"""Many applications on one store: each worker takes only its own application's executions.

Two applications (two packages, ``shopapp`` and ``blogapp``, in two processes) share one Redis
server and one coordination key. Each dispatches background runs that take the shared lock;
contention parks them, and a release by one application wakes the other's parked runs. Every
run must be completed by its own application's worker: before namespaces, a worker popped the
other application's executions and failed them ("cannot import module 'shopapp.reactors'").

A Celery worker started for one namespace consumes that namespace's queue only: another
namespace's job never reaches it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import redis

from py_reactor import Reactor, background, configure, step
from py_reactor.runtime.namespaces import celery_queue, namespace_of, serve, served
from tests._processes import CHILD_PATH
from tests.transport._harness import Worker

APP = textwrap.dedent(
    """
    import os, sys, time
    import redis
    from py_reactor import Reactor, background, step, with_lock

    URL, KEY = os.environ["APP_URL"], os.environ["APP_KEY"]
    RAW = redis.Redis.from_url(URL, decode_responses=True)

    @background
    class Publish(Reactor):
        n: int

        @step
        @with_lock(KEY, ttl=30)
        def write(n: int) -> dict:
            RAW.rpush(f"{KEY}:log", f"in {__name__} {n} {os.getpid()}")
            time.sleep(0.05)
            RAW.rpush(f"{KEY}:log", f"out {__name__} {n} {os.getpid()}")
            return {"pid": os.getpid(), "app": __name__.partition(".")[0]}

        returns = "write"
    """
)

DRIVER = textwrap.dedent(
    """
    import json, os, sys
    from py_reactor import configure
    # the park timer far off: a run completes only if a release woke it into its own queue
    configure(redis_url=os.environ["APP_URL"], park_delay=600, park_jitter=0)
    import importlib
    app = importlib.import_module(sys.argv[1])
    started = [app.Publish.run(n=n) for n in range(int(sys.argv[2]))]
    print(json.dumps([run.execution_id for run in started]), flush=True)
    for run in started:
        run.wait(timeout=90)
    print("done", flush=True)
    """
)


@pytest.fixture
def apps(tmp_path: Path) -> Path:
    for name in ("shopapp", "blogapp"):
        package = tmp_path / name
        package.mkdir()
        (package / "__init__.py").write_text("")
        (package / "reactors.py").write_text(APP)
    (tmp_path / "driver.py").write_text(DRIVER)
    return tmp_path


def _start(folder: Path, module: str, runs: int, url: str, key: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(folder / "driver.py"), module, str(runs)],
        cwd=folder,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(folder), CHILD_PATH]),
            "APP_URL": url,
            "APP_KEY": key,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_two_apps_on_one_store_each_complete_their_own_runs_parking_on_a_shared_key(
    apps: Path, redis_url: str, raw: redis.Redis, key: str
) -> None:
    runs = 6
    shop = _start(apps, "shopapp.reactors", runs, redis_url, key)
    blog = _start(apps, "blogapp.reactors", runs, redis_url, key)
    outs = {}
    for name, process in (("shopapp", shop), ("blogapp", blog)):
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, f"{name}: {err}"
        outs[name] = (process.pid, json.loads(out.splitlines()[0]))
    parks = 0
    for name, (pid, ids) in outs.items():
        for execution_id in ids:
            record = raw.hgetall(f"py_reactor:exec:{execution_id}")
            assert record["status"] == "completed", (name, record.get("outcome"))
            assert record["namespace"] == name
            assert record["worker"].split(":")[1] == str(pid), f"{name}'s run ran elsewhere"
            result = json.loads(record["outcome"])["value"]
            assert result == {"pid": pid, "app": name}
            parks += int(record["parks"])
    assert parks > 0, "no run parked on the shared key: the test proved nothing about wakes"
    log = raw.lrange(f"{key}:log", 0, -1)
    assert len(log) == 4 * runs
    for first, second in zip(log[::2], log[1::2], strict=True):  # one holder at a time
        assert first.startswith("in "), log
        assert second == "out " + first[3:], log


@background(namespace="elsewhere")
class Elsewhere(Reactor):
    @step
    def one() -> int:
        return 1


@background
class Local(Reactor):  # defined in tests.transport.test_namespaces
    @step
    def one() -> int:
        return 1


def test_the_namespace_is_the_top_level_package_unless_one_is_named() -> None:
    assert namespace_of(Local) == "tests"
    assert namespace_of("shop.reactors:Checkout") == "shop"
    assert namespace_of(Elsewhere) == "elsewhere"  # @background(namespace=) wins
    configure(namespace="site")
    assert namespace_of(Local) == "site"
    assert namespace_of(Elsewhere) == "elsewhere"
    assert {"site", "elsewhere"} <= served()


def test_a_bad_namespace_is_refused_naming_where() -> None:
    from py_reactor.errors import DefinitionError

    with pytest.raises(ValueError, match=r"configure\(namespace=\.\.\.\).*'a b'"):
        configure(namespace="a b")
    with pytest.raises(DefinitionError, match=r"@background\(namespace=\.\.\.\)"):
        background(namespace="-x")
    with pytest.raises(ValueError, match="--namespace"):
        serve("")


def test_a_celery_worker_for_one_namespace_never_receives_another_namespaces_jobs(
    redis_url: str, raw: redis.Redis, key: str
) -> None:
    """The worker serves ``tests`` (it imported tests.transport._celery_reactors); a job of
    namespace ``elsewhere`` goes to queue ``<prefix>.elsewhere``, which it does not consume."""
    prefix = f"ns-{key}"
    worker = Worker(redis_url, prefix)
    try:
        worker.wait_ready()
        configure(worker="celery", redis_url=redis_url, celery_queue=prefix)
        assert f"{prefix}.tests" in worker.output()  # the queue it consumes, as Celery says
        theirs = Elsewhere.run()
        from tests.transport._celery_reactors import Three

        ours = Three.run(key=key, n=1)
        assert ours.wait(timeout=60).status == "completed"
        time.sleep(1.0)  # the other job had all this time to reach the worker: it must not
        assert raw.hget(f"py_reactor:exec:{theirs.execution_id}", "status") == "pending"
        assert theirs.execution_id not in worker.output()
        assert celery_queue("elsewhere") == f"{prefix}.elsewhere"
        # waiting for a worker of its own (kombu keeps a list per priority: "<queue>\x06\x166")
        waiting = raw.keys(f"{prefix}.elsewhere*")
        assert sum(raw.llen(name) for name in waiting) == 1, waiting
    finally:
        worker.stop()
        raw.delete(*raw.keys(f"{prefix}.elsewhere*"), f"py_reactor:exec:{theirs.execution_id}")
        raw.zrem("py_reactor:due:elsewhere", theirs.execution_id)
