"""The dashboard never imports a module because the store names it (issue 21).

A stored record names its reactor as ``module:qualname`` and, once failed, its exception as
``module.Class``. Here they name a module that is importable (its folder is on ``sys.path``)
and that, imported, writes a marker file: whatever the pages, the API and the actions do,
the marker never appears, and the actions that need the class say how to import it instead.
``py_reactor.workers.resume``, a library user's call, still imports the module.
"""

from __future__ import annotations

import json
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from py_reactor import workers
from py_reactor.storage.executions import record_key
from py_reactor.web import app
from py_reactor.web._csrf import COOKIE
from tests._wait import status
from tests.web import _reactors as r
from tests.web.conftest import client

MODULE_SOURCE = '''
"""Imported, it leaves a marker: the test asserts that the dashboard never did."""
from pathlib import Path
from typing import Any

from py_reactor import Reactor, Result, interrupt, step

Path({marker!r}).write_text("imported")


class Boom(Exception):
    """An exception class the stored outcome names."""


class Review(Reactor):
    key: str

    review = interrupt(correlation_id=lambda i: i["key"])

    @step(approval=Result("review"))
    def record(key: str, approval: dict[str, Any]) -> str:
        return f"approved={{approval['approved']}}"

    returns = "record"
'''


@pytest.fixture
def side_effect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """``(module name, marker file)``: a module importable from ``sys.path`` that writes the
    marker when it is imported."""
    name = f"pyr_side_effect_{uuid.uuid4().hex[:10]}"
    marker = tmp_path / "imported.marker"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(MODULE_SOURCE).format(marker=str(marker)))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, marker
    sys.modules.pop(name, None)


def rename(raw: redis.Redis, execution_id: str, reactor: str, **outcome: Any) -> None:
    """Make the stored record of ``execution_id`` name ``reactor`` (record and context), and
    set ``outcome`` fields on its stored outcome."""
    record = record_key(execution_id)
    document = json.loads(raw.hget(record, "context"))  # type: ignore[arg-type]
    document["context"]["reactor"] = reactor
    fields = {"reactor": reactor, "context": json.dumps(document)}
    if outcome:
        stored = json.loads(raw.hget(record, "outcome"))  # type: ignore[arg-type]
        fields["outcome"] = json.dumps({**stored, **outcome})
    raw.hset(record, mapping=fields)


def test_the_dashboard_never_imports_the_reactor_module_a_paused_record_names(
    key: str, raw: redis.Redis, side_effect: tuple[str, Path]
) -> None:
    """A paused run of a reactor this process has not imported: its page and detail import
    nothing; the resume form says to start the dashboard with --import; a resume (form or
    API) is refused with that message and the run stays paused. The library's own resume
    does import the module, as it always did."""
    module, marker = side_effect
    reactor = f"{module}:Review"
    out = r.Review.run(key=key)
    rename(raw, out.execution_id, reactor)
    c = client(app(auth=lambda request: True))

    page = c.get(f"/executions/{out.execution_id}")
    assert page.status_code == 200
    assert "--import" in page.text
    assert 'name="payload"' not in page.text  # no form that could only be refused
    assert c.get(f"/api/executions/{out.execution_id}").status_code == 200
    token = c.cookies[COOKIE]

    refused = c.post(
        f"/api/executions/{out.execution_id}/resume",
        headers={"X-CSRF-Token": token},
        json={"payload": {"approved": True}},
    )
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert reactor in error
    assert f"py-reactor dashboard --import {module}" in error
    form = c.post(
        f"/executions/{out.execution_id}/resume",
        data={"csrf_token": token, "payload": '{"approved": true}'},
    )
    assert form.status_code == 409
    assert "--import" in form.text
    assert status(out.execution_id) == "paused"
    assert not marker.exists()
    assert module not in sys.modules

    done = workers.resume(out.execution_id, {"approved": True})
    assert marker.exists()  # Reactor.resume / workers.resume import the class, as before
    assert done.value == "approved=True"


def test_the_pages_import_neither_the_reactor_nor_the_exception_class_a_record_names(
    key: str, raw: redis.Redis, side_effect: tuple[str, Path]
) -> None:
    """A failed run whose record names an unimported reactor and exception class: every page
    and API read shows it (the class name as text) without importing either module."""
    module, marker = side_effect
    broken = r.Broken.run(key=key)
    broken.wait(timeout=10)
    rename(raw, broken.execution_id, f"{module}:Review", exception_class=f"{module}.Boom")
    c = client(app(auth=lambda request: True))

    detail = c.get(f"/api/executions/{broken.execution_id}")
    assert detail.status_code == 200
    assert detail.json()["outcome"]["exception_class"] == f"{module}.Boom"
    assert detail.json()["problem"] is None
    page = c.get(f"/executions/{broken.execution_id}")
    assert page.status_code == 200
    assert f"{module}.Boom" in page.text
    for path in ("/", "/coordination", "/api/executions", "/api/holds", "/api/parked", "/metrics"):
        assert c.get(path).status_code in (200, 501), path
    assert not marker.exists()
    assert module not in sys.modules


def test_undo_and_retry_are_refused_and_cancel_imports_nothing(
    key: str, raw: redis.Redis, side_effect: tuple[str, Path]
) -> None:
    """A failed run of a reactor this process has not imported: undo and retry, which run its
    code, are refused with the --import hint and change nothing; cancel, which needs none of
    it, cancels the run; nothing imports the module."""
    module, marker = side_effect
    broken = r.Broken.run(key=key)
    broken.wait(timeout=10)
    rename(raw, broken.execution_id, f"{module}:Review")
    c = client(app(auth=lambda request: True))
    c.get("/")
    token = c.cookies[COOKIE]

    for action in ("undo", "retry"):
        refused = c.post(
            f"/api/executions/{broken.execution_id}/{action}", headers={"X-CSRF-Token": token}
        )
        assert refused.status_code == 409, action
        assert f"py-reactor dashboard --import {module}" in refused.json()["error"], action
    assert status(broken.execution_id) == "failed"
    assert not marker.exists()

    cancelled = c.post(
        f"/api/executions/{broken.execution_id}/cancel", headers={"X-CSRF-Token": token}
    )
    assert cancelled.status_code == 200
    assert cancelled.json()["execution"]["status"] == "cancelled"
    assert not marker.exists()
    assert module not in sys.modules
