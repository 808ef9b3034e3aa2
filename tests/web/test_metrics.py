"""``GET /metrics``: the store's state in the Prometheus text format, against a real store.

The store is shared with the other dashboard tests, so each test runs a reactor of a package
made for it alone (its namespace label is unique) and asserts exact values for that label;
holds, which have no namespace, are compared before and after.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from py_reactor import Lock
from py_reactor.states import Status
from py_reactor.web import app
from py_reactor.web._metrics import namespace_of
from tests._redis import free_port
from tests._wait import status, until
from tests.web.conftest import client

#: A package of its own per test: its top-level name is the namespace label of its runs.
SOURCE = '''
from py_reactor import Reactor, background, step, with_lock


@background
class Tally(Reactor):
    """Counts under the lock ``tally:<key>``; fails on purpose when asked."""

    key: str
    fail: bool = False

    @step
    @with_lock(lambda args: f"tally:{args['key']}", ttl=30)
    def count(key: str, fail: bool) -> str:
        if fail:
            raise RuntimeError(f"tally {key} fails on purpose")
        return "counted"

    returns = "count"
'''

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def package(tmp_path: Path) -> Iterator[ModuleType]:
    """``<unique package>.reactors``, importable (the thread worker finds Tally by path)."""
    name = f"metricsns{uuid.uuid4().hex[:10]}"
    folder = tmp_path / name
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "reactors.py").write_text(textwrap.dedent(SOURCE))
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(f"{name}.reactors")
    finally:
        sys.path.remove(str(tmp_path))
        for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
            del sys.modules[module]


def scrape(dashboard: Any) -> Samples:
    """Every sample of one ``GET /metrics``, parsed by prometheus-client's own parser."""
    reply = client(dashboard).get("/metrics")
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(reply.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sample ``name{labels}``; None when the scrape has no such series."""
    return samples.get((name, tuple(sorted(labels.items()))))


def namespace(module: ModuleType) -> str:
    return module.__name__.partition(".")[0]


def test_executions_are_counted_by_namespace_and_status(package: ModuleType, key: str) -> None:
    """Two completed runs and a failed one of a namespace are 2 completed, 1 failed and 0 of
    every other status, labelled with the reactor module's top-level package."""
    tally = package.Tally
    for n in range(2):
        tally.run(key=f"{key}-{n}").wait(timeout=10)
    tally.run(key=f"{key}-failing", fail=True).wait(timeout=10)

    samples = scrape(app())
    ns = namespace(package)
    counts = {
        str(s): value(samples, "py_reactor_executions", namespace=ns, status=str(s)) for s in Status
    }
    assert counts == {str(s): 0.0 for s in Status} | {"completed": 2.0, "failed": 1.0}


def test_a_parked_run_counts_under_its_primitive_and_how_long_it_waits(
    package: ModuleType, key: str
) -> None:
    """A run parked on a held lock is 1 parked on ``lock`` in its namespace, waiting for more
    than 0 s; once the release wakes it, its namespace has no parked series left."""
    held = Lock(f"tally:{key}", owner="test-holder", ttl=30).acquire()
    try:
        out = package.Tally.run(key=key)
        until(lambda: status(out.execution_id) == "waiting", "the park on the held lock")
        time.sleep(0.3)
        samples = scrape(app())
    finally:
        held.release()
    ns = namespace(package)
    assert value(samples, "py_reactor_parked", namespace=ns, primitive="lock") == 1.0
    assert value(samples, "py_reactor_executions", namespace=ns, status="waiting") == 1.0
    oldest = value(samples, "py_reactor_oldest_waiting_seconds", namespace=ns)
    assert oldest is not None
    assert 0.3 <= oldest < 30

    out.wait(timeout=10)
    after = scrape(app())
    assert value(after, "py_reactor_parked", namespace=ns, primitive="lock") is None
    assert value(after, "py_reactor_oldest_waiting_seconds", namespace=ns) is None
    assert value(after, "py_reactor_executions", namespace=ns, status="completed") == 1.0


def test_a_held_lock_counts_as_one_more_lock_hold(key: str) -> None:
    """Taking a lock adds one to ``py_reactor_holds{primitive="lock"}``; releasing it takes
    it away. Every primitive that can be held has a series, 0 included."""
    dashboard = app()
    before = scrape(dashboard)
    for primitive in ("lock", "semaphore", "period", "ordered_lock"):
        assert value(before, "py_reactor_holds", primitive=primitive) is not None
    held = Lock(f"metrics:{key}", owner="test-holder", ttl=30).acquire()
    try:
        during = scrape(dashboard)
    finally:
        held.release()
    after = scrape(dashboard)
    lock_holds = value(before, "py_reactor_holds", primitive="lock")
    assert lock_holds is not None
    assert value(during, "py_reactor_holds", primitive="lock") == lock_holds + 1
    assert value(after, "py_reactor_holds", primitive="lock") == lock_holds


def test_two_apps_in_one_process_each_have_their_own_registry(package: ModuleType) -> None:
    """Two dashboards in one process both serve /metrics (a shared registry would refuse the
    second collector) and neither registers on prometheus-client's global registry."""
    package.Tally.run(key="two-apps").wait(timeout=10)
    ns = namespace(package)
    for dashboard in (app(), app()):
        samples = scrape(dashboard)
        assert value(samples, "py_reactor_executions", namespace=ns, status="completed") == 1.0
    assert not [name for name in REGISTRY._names_to_collectors if name.startswith("py_reactor")]


def test_metrics_are_readable_without_the_auth_hook_like_the_api() -> None:
    """/metrics is read as the JSON API is: the auth hook decides who may act, not who may
    read (a Prometheus server has no session)."""
    dashboard = app(auth=lambda request: False)
    assert client(dashboard).get("/api/executions").status_code == 200
    assert scrape(dashboard)


def test_an_unreachable_store_is_a_503_that_names_it() -> None:
    """A scrape of an unreachable store fails (503, so Prometheus records the target down)
    with the store's error, rather than reporting zeros."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    reply = client(app(redis_url=url)).get("/metrics")
    assert reply.status_code == 503
    assert "unreachable" in reply.text


def test_openmetrics_is_served_when_the_scraper_asks_for_it() -> None:
    """A scraper that accepts OpenMetrics gets it (its content type, its ``# EOF`` end)."""
    reply = client(app()).get(
        "/metrics", headers={"accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("application/openmetrics-text")
    assert reply.text.endswith("# EOF\n")
    assert "# TYPE py_reactor_executions gauge" in reply.text


def test_without_prometheus_client_the_pages_work_and_metrics_is_a_501(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The dashboard does not need prometheus-client for its pages; /metrics says what to
    install."""
    for name in ("prometheus_client", "prometheus_client.exposition"):
        monkeypatch.setitem(sys.modules, name, None)
    c = client(app())
    assert c.get("/api/executions").status_code == 200
    reply = c.get("/metrics")
    assert reply.status_code == 501
    assert "pip install 'py_reactor[web]'" in reply.text


def test_building_the_app_does_not_import_prometheus_client() -> None:
    """prometheus-client loads on the first scrape, not when the dashboard is built."""
    code = (
        "import sys\n"
        "from py_reactor.web import app\n"
        "app()\n"
        "print('prometheus_client' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout == "False\n"


@pytest.mark.parametrize(
    ("reactor", "expected"),
    [
        ("shop.reactors:Checkout", "shop"),
        ("shop:Checkout", "shop"),
        ("__main__:Ship", "__main__"),
        ("", ""),
        (None, ""),
    ],
)
def test_the_namespace_label_is_the_reactor_modules_top_level_package(
    reactor: str | None, expected: str
) -> None:
    assert namespace_of(reactor) == expected
