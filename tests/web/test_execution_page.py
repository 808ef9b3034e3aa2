"""What one execution's page and ``/api/executions/{id}`` tell an operator (issue 21): the
parks a waiting run has left before its step fails, the payload a paused run's resume form
expects, and the keys its rollback ran under.

Real runs on the session's private Redis; the thread worker of this process parks them.
"""

from __future__ import annotations

import html
import json
import math
import re
import threading
from typing import Any

from py_reactor import Lock, configure
from py_reactor.web import app
from tests._wait import status, until
from tests.web import _reactors as r
from tests.web.conftest import client
from tests.web.test_api import WOKEN_WITHIN, parked_on_lock, section


def entries(page: str, kind: str) -> list[str]:
    """The timeline entries of ``kind`` on an execution's page, as their HTML."""
    timeline = section(page, "timeline")
    return re.findall(rf'<li class="entry[^"]*" data-type="{kind}">(.*?)</li>', timeline, re.S)


# -- parks left ---------------------------------------------------------------------------------


def test_a_parked_run_shows_the_parks_it_has_left_before_its_step_fails(key: str) -> None:
    """With park_max_attempts=3, a run parked once on a lock may park twice more: the detail
    (API and the Waiting panel) says 2; once the key is released it runs, and a run that is
    not parked has no such number."""
    configure(park_max_attempts=3)
    held, waiting = parked_on_lock(key)
    try:
        c = client(app())
        detail = c.get(f"/api/executions/{waiting}").json()
        assert detail["waiting_on"]["primitive"] == "lock"
        assert detail["parks_left"] == 2
        panel = section(c.get(f"/executions/{waiting}").text, "waiting")
        assert "Parks left" in panel
        assert re.search(r"<dd[^>]*>2 of 3\b", panel), panel
    finally:
        held.release()
    until(lambda: status(waiting) == "completed", "the wake on release", timeout=WOKEN_WITHIN)
    assert client(app()).get(f"/api/executions/{waiting}").json()["parks_left"] is None


def test_without_a_park_cap_a_parked_run_has_no_parks_left_number(key: str) -> None:
    """park_max_attempts=math.inf: the step never fails for parking, so parks_left is null
    and the page says there is no cap."""
    configure(park_max_attempts=math.inf)
    held, waiting = parked_on_lock(key)
    try:
        c = client(app())
        assert c.get(f"/api/executions/{waiting}").json()["parks_left"] is None
        panel = section(c.get(f"/executions/{waiting}").text, "waiting")
        assert "no cap" in panel
    finally:
        held.release()
    until(lambda: status(waiting) == "completed", "the wake on release", timeout=WOKEN_WITHIN)


def test_a_run_waiting_for_its_ordered_lock_turn_spends_no_parks(key: str) -> None:
    """A run parked for its ordered-lock turn: turns never count toward the cap, so
    parks_left is null and the page says turns never count."""
    configure(park_max_attempts=3)
    r.GATES[key], r.STARTED[key] = threading.Event(), threading.Event()
    first = r.Lined.run(key=key)
    assert r.STARTED[key].wait(10)
    second = r.Lined.run(key=key)
    try:
        until(lambda: status(second.execution_id) == "waiting", "the park for its turn")
        c = client(app())
        detail = c.get(f"/api/executions/{second.execution_id}").json()
        assert detail["waiting_on"]["primitive"] == "ordered_lock"
        assert detail["parks_left"] is None
        panel = section(c.get(f"/executions/{second.execution_id}").text, "waiting")
        assert "ordered-lock turns never count" in panel
    finally:
        r.GATES[key].set()
    assert first.wait(timeout=10).is_success
    assert second.wait(timeout=WOKEN_WITHIN).is_success


# -- the resume form's payload ------------------------------------------------------------------


def test_the_resume_form_shows_the_json_schema_of_the_interrupts_payload_model(key: str) -> None:
    """A run paused at an interrupt with a pydantic payload model: the Paused panel names the
    model and shows its JSON Schema (fields and types), next to the form."""
    out = r.Review.run(key=key)
    c = client(app(auth=lambda request: True))
    paused = section(c.get(f"/executions/{out.execution_id}").text, "paused")
    assert "Approval" in paused
    match = re.search(r'<pre class="payload-schema">(.*?)</pre>', paused, re.S)
    assert match is not None, paused
    schema = json.loads(html.unescape(match.group(1)))
    assert schema["properties"]["approved"]["type"] == "boolean"
    assert schema["required"] == ["approved"]
    assert 'name="payload"' in paused


def test_an_interrupt_without_a_model_takes_any_json_object(key: str) -> None:
    """An interrupt without a payload model: the panel says any JSON object will do."""
    out = r.Note.run(key=key)
    assert out.status == "paused"
    paused = section(client(app()).get(f"/executions/{out.execution_id}").text, "paused")
    assert "any JSON object" in paused
    assert "payload-schema" not in paused


# -- rollback rows ------------------------------------------------------------------------------


def test_compensate_and_undo_rows_show_the_keys_they_ran_under(key: str) -> None:
    """The timeline's compensate row names the lock of the failed step it ran under, and the
    undo row the lock and semaphore its step's undo re-took, as a step's run row does."""
    out = r.Refunds.run(key=key)
    outcome: Any = out.wait(timeout=10)
    assert not outcome.is_success
    page = client(app()).get(f"/executions/{out.execution_id}").text
    [run] = entries(page, "run")
    assert f"hold:{key}" in run
    [compensate] = entries(page, "compensate")
    assert re.search(rf"lock <code>pay:{key}</code>", compensate), compensate
    [undo] = entries(page, "undo")
    assert re.search(rf"lock <code>hold:{key}</code>", undo), undo
    assert re.search(rf"semaphore <code>slots:{key}</code>", undo), undo
    assert Lock(f"hold:{key}").state().owner is None  # the undo gave its keys back
