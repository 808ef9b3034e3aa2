"""The dashboard's JSON API and HTML pages against a real store, with real executions.

Background runs go to the thread worker and park on real locks this module holds
(``park_delay=30`` keeps them parked until the test releases the key); Starlette's TestClient
drives the app in this process.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import threading
import time
from typing import Any

import httpx
import pytest
import redis
from starlette.applications import Starlette
from starlette.routing import Mount

from py_reactor import Lock, Semaphore
from py_reactor.storage.executions import record_key
from py_reactor.web import app
from py_reactor.web._csrf import COOKIE, Tokens
from py_reactor.web.cli import add_dashboard_command, run_dashboard
from tests._redis import free_port
from tests._wait import status, until
from tests.engine.coordination._helpers import fresh_window
from tests.web import _reactors as r
from tests.web.conftest import client

CHARGE = "tests.web._reactors:Charge"

#: How soon a released run completes; far below the 30 s park timer of tests/web/conftest.py.
WOKEN_WITHIN = 10.0


def ids(reply: Any) -> list[str]:
    """The execution ids of a listing reply (or of its ``items``)."""
    items = reply["items"] if isinstance(reply, dict) else reply
    return [item["execution_id"] for item in items]


def section(html: str, name: str) -> str:
    """The ``<section id="name">`` of a page (sections never nest)."""
    match = re.search(rf'<section[^>]*id="{name}"[^>]*>(.*?)</section>', html, re.DOTALL)
    assert match is not None, f"the page has no section #{name}"
    return match.group(1)


def parked_on_lock(key: str) -> tuple[Any, str]:
    """A lock on ``key`` held by this test, and a Charge run parked on it ("waiting")."""
    held = Lock(key, owner="test-holder", ttl=30).acquire()
    out = r.Charge.run(key=key)
    until(lambda: status(out.execution_id) == "waiting", "the park on the held lock")
    return held, out.execution_id


# -- executions ---------------------------------------------------------------------------------


def test_executions_are_listed_newest_first_filtered_and_paged(key: str) -> None:
    """/api/executions lists newest first, filters by reactor (path or class name) and status,
    and pages with next_cursor without skipping or repeating an execution."""
    runs = []
    for n in range(3):  # one after the other: the index orders by creation time (ms)
        run = r.Charge.run(key=f"{key}-{n}", amount=n)
        assert run.wait(timeout=10).is_success
        runs.append(run)
    broken = r.Broken.run(key=key)
    broken.wait(timeout=10)
    mine = [run.execution_id for run in runs]
    c = client(app())

    charges = c.get("/api/executions", params={"reactor": CHARGE, "limit": 500}).json()
    assert [i for i in ids(charges) if i in mine] == mine[::-1]
    assert ids(charges)[0] == mine[-1]
    assert {item["reactor"] for item in charges["items"]} == {CHARGE}
    assert broken.execution_id not in ids(charges)

    failed = c.get("/api/executions", params={"reactor": "Broken", "status": "failed"}).json()
    assert broken.execution_id in ids(failed)
    assert {item["status"] for item in failed["items"]} == {"failed"}
    [item] = [i for i in failed["items"] if i["execution_id"] == broken.execution_id]
    assert item["step"] == "pay"
    assert item["error"] == f"card declined for {key}"
    completed = c.get("/api/executions", params={"status": "completed", "limit": 500}).json()
    assert broken.execution_id not in ids(completed)
    assert set(mine) <= set(ids(completed))

    first = c.get("/api/executions", params={"reactor": CHARGE, "limit": 2}).json()
    second = c.get(
        "/api/executions", params={"reactor": CHARGE, "limit": 2, "cursor": first["next_cursor"]}
    ).json()
    assert ids(first) + ids(second) == ids(charges)[:4]
    assert first["next_cursor"] is not None

    page = c.get("/", params={"reactor": CHARGE, "limit": 2})
    assert page.status_code == 200
    table = section(page.text, "live")
    assert re.findall(r'data-execution-id="(\w+)"', table) == ids(first)
    assert "older »" in table

    tests_only = c.get("/api/executions", params={"namespace": "tests", "limit": 500}).json()
    assert set(mine) <= set(ids(tests_only))
    assert {item["namespace"] for item in tests_only["items"]} == {"tests"}
    assert tests_only["filters"]["namespace"] == "tests"
    other = c.get("/api/executions", params={"namespace": f"none-{key}"}).json()
    assert other["items"] == []

    assert c.get("/api/executions", params={"status": "bogus"}).status_code == 400
    assert "not a whole number" in c.get("/api/executions", params={"limit": "x"}).json()["error"]
    assert c.get("/", params={"status": "bogus"}).status_code == 400


def test_a_failed_execution_shows_its_trace_failure_and_rollback_failures(key: str) -> None:
    """The detail (API and page) of a failed run has its timeline, the failing step and error,
    and the undo that failed during rollback."""
    broken = r.Broken.run(key=key)
    broken.wait(timeout=10)
    c = client(app())

    detail = c.get(f"/api/executions/{broken.execution_id}").json()
    assert detail["status"] == "failed"
    assert detail["inputs"] == {"key": key}
    assert [entry["type"] for entry in detail["trace"]] == ["run", "failed", "undo"]
    assert detail["outcome"]["exception_class"] == "RuntimeError"
    assert detail["outcome"]["step_name"] == "pay"
    assert detail["outcome"]["rollback_failures"] == [
        {
            "step": "book",
            "kind": "undo",
            "key": None,
            "reason": "raised",
            "message": f"RefundFailed: cannot unbook {key}",
        }
    ]
    assert set(detail["actions"]) == {"cancel", "undo", "retry"}
    assert detail["holds"] == []

    html = c.get(f"/executions/{broken.execution_id}").text
    failure = section(html, "failure")
    assert "card declined for" in failure
    assert "Rollback failures" in failure
    assert f"RefundFailed: cannot unbook {key}" in failure
    timeline = section(html, "timeline")
    assert re.findall(r'data-type="(\w+)"', timeline) == ["run", "failed", "undo"]

    assert c.get("/api/executions/no-such-id").status_code == 404
    assert c.get("/executions/no-such-id").status_code == 404


def test_a_completed_execution_shows_its_step_results_and_coordination(key: str) -> None:
    """A completed run's detail has every step's result and the keys its step ran under."""
    done = r.Charge.run(key=key, amount=3)
    assert done.wait(timeout=10).value == 300
    c = client(app())
    detail = c.get(f"/api/executions/{done.execution_id}").json()
    assert detail["results"] == {"reserve": "reserved 3", "charge": 300}
    assert detail["outcome"] == {"status": "completed", "value": 300}
    charge = [entry for entry in detail["trace"] if entry["step"] == "charge"]
    assert charge[0]["coordination"] == {"lock": key, "semaphore": f"pool:{key}"}
    html = c.get(f"/executions/{done.execution_id}").text
    assert "reserved 3" in section(html, "timeline")
    assert "300" in section(html, "outcome")


def test_a_damaged_record_shows_its_problem_and_offers_no_undo_or_retry(
    key: str, raw: redis.Redis
) -> None:
    """A completed run whose stored context is not JSON is not shown as a run where "nothing
    has run yet" with Undo and Retry buttons: its detail says what cannot be read, and offers
    nothing that would have to read it."""
    done = r.Charge.run(key=key, amount=3)
    assert done.wait(timeout=10).value == 300
    raw.hset(record_key(done.execution_id), "context", "{this is not json")
    c = client(app(auth=lambda request: True))
    detail = c.get(f"/api/executions/{done.execution_id}").json()
    assert "cannot be read" in detail["problem"]
    assert "undo" not in detail["actions"]
    assert "retry" not in detail["actions"]
    html = c.get(f"/executions/{done.execution_id}").text
    assert "Nothing has run yet" not in html
    assert "The stored record cannot be read" in section(html, "timeline")


# -- parked and held ----------------------------------------------------------------------------


def test_a_parked_run_is_waiting_with_step_key_attempt_and_next_attempt(key: str) -> None:
    """A run parked on a held lock is listed by /api/parked (and the coordination page) as
    waiting, with its step, key, primitive, attempt and next attempt time; a failed run is
    not, and the listing filters tell the two apart."""
    held, waiting = parked_on_lock(key)
    try:
        broken = r.Broken.run(key=key)
        broken.wait(timeout=10)
        c = client(app())

        parked = {p["execution_id"]: p for p in c.get("/api/parked").json()["parked"]}
        assert broken.execution_id not in parked
        entry = parked[waiting]
        assert entry["status"] == "waiting"
        assert (entry["step"], entry["primitive"], entry["key"]) == ("charge", "lock", key)
        assert entry["attempt"] == 1
        assert entry["parks"] == 1
        assert 20 < entry["next_attempt_at"] - time.time() <= 31

        waiting_ids = ids(c.get("/api/executions", params={"status": "waiting"}).json())
        failed_ids = ids(c.get("/api/executions", params={"status": "failed"}).json())
        assert waiting in waiting_ids
        assert waiting not in failed_ids
        assert broken.execution_id in failed_ids
        assert broken.execution_id not in waiting_ids

        html = c.get("/coordination").text
        waiting_rows = section(html, "parked")
        failed_rows = section(html, "failed")
        assert f'data-execution-id="{waiting}" data-status="waiting"' in waiting_rows
        assert waiting not in failed_rows
        assert f'data-execution-id="{broken.execution_id}" data-status="failed"' in failed_rows
        assert broken.execution_id not in waiting_rows

        detail = c.get(f"/executions/{waiting}").text
        assert "Next attempt" in section(detail, "waiting")
        assert 'id="failure"' not in detail
    finally:
        held.release()
    until(lambda: status(waiting) == "completed", "the wake on release", timeout=WOKEN_WITHIN)


def test_a_lock_held_outside_any_execution_is_listed_with_token_ttl_and_parked_runs(
    key: str,
) -> None:
    """/api/holds lists a lock the test holds by hand: owner, fencing token, ttl left, no
    execution; the lock's entry names the run parked on it."""
    held, waiting = parked_on_lock(key)
    try:
        state = client(app()).get("/api/holds").json()
        [hold] = [h for h in state["holds"] if (h["primitive"], h["key"]) == ("lock", key)]
        assert hold["owner"] == "test-holder"
        assert hold["scope"] == "outside"
        assert hold["execution_id"] is None
        assert hold["fencing_token"] == held.fencing_token
        assert 0 < hold["ttl_left"] <= 30
        assert hold["live"] is True
        [lock] = [entry for entry in state["locks"] if entry["key"] == key]
        assert lock["owner"] == "test-holder"
        assert lock["parked"] == [waiting]
    finally:
        held.release()
    until(lambda: status(waiting) == "completed", "the wake on release", timeout=WOKEN_WITHIN)


def test_every_kind_of_hold_of_a_running_step_is_listed(key: str, raw: redis.Redis) -> None:
    """While Gated.work runs, /api/holds names each hold's primitive, key, step (or the
    reactor), owner execution, token and ttl; the semaphore's free slots come from its
    declared limit; the rate limit's usage, the period claim and the ordered lock's turn show;
    once it ends, none of its holds is listed and the period is marked done."""
    r.GATES[key], r.STARTED[key] = threading.Event(), threading.Event()
    fresh_window(raw, 60, margin=10)  # the minute's count is read in the window it was charged
    out = r.Gated.run(key=key)
    assert r.STARTED[key].wait(10)
    c = client(app())
    state = c.get("/api/holds").json()
    holds = {(h["primitive"], h["key"]): h for h in state["holds"]}
    mine = {where for where, h in holds.items() if h["execution_id"] == out.execution_id}
    assert mine == {
        ("lock", f"outer:{key}"),
        ("lock", key),
        ("semaphore", f"pool:{key}"),
        ("period", f"daily:{key}"),
    }
    reactor_lock, step_lock = holds[("lock", f"outer:{key}")], holds[("lock", key)]
    assert (reactor_lock["scope"], reactor_lock["step"]) == ("reactor", None)
    assert (step_lock["scope"], step_lock["step"]) == ("step", "work")
    assert step_lock["fencing_token"] > 0
    assert 0 < step_lock["ttl_left"] <= 30
    assert holds[("semaphore", f"pool:{key}")]["step"] == "work"
    [semaphore] = [s for s in state["semaphores"] if s["key"] == f"pool:{key}"]
    assert (semaphore["held"], semaphore["limit"], semaphore["free"]) == (1, 3, 2)
    assert [h["execution_id"] for h in semaphore["holders"]] == [out.execution_id]
    [limit] = [entry for entry in state["rate_limits"] if entry["key"] == f"api:{key}"]
    assert [(w["window"], w["count"], w["limit"]) for w in limit["windows"]] == [(60, 1, 5)]
    [claim] = [entry for entry in state["period_claims"] if entry["key"] == f"daily:{key}"]
    assert claim["execution_id"] == out.execution_id
    [line] = [entry for entry in state["ordered_locks"] if entry["key"] == f"line:{key}"]
    assert (line["next"], line["last_completed"], line["in_flight"]) == (1, 0, 1)
    assert [p["position"] for p in line["positions"]] == [1]

    detail = c.get(f"/api/executions/{out.execution_id}").json()
    assert {(h["primitive"], h["key"]) for h in detail["holds"]} == mine
    page = c.get("/coordination").text
    assert f'data-key="pool:{key}"' in section(page, "semaphores")
    assert f'data-key="line:{key}"' in section(page, "ordered-locks")

    r.GATES[key].set()
    assert out.wait(timeout=10).is_success
    after = c.get("/api/holds").json()
    assert not [h for h in after["holds"] if h["execution_id"] == out.execution_id]
    [marker] = [m for m in after["periods"] if m["key"] == f"daily:{key}"]
    assert marker["marked_by"] == out.execution_id
    assert marker["expires_in"] > 0


def test_the_holds_of_parallel_branches_belong_to_their_execution(key: str) -> None:
    """A @parallel run's branches hold under owners of their own ("<root id>/<step>"): the
    dashboard lists those holds as the execution's, step by step, not as outside ones."""
    names = (f"{key}-left", f"{key}-right")
    for name in names:
        r.GATES[name], r.STARTED[name] = threading.Event(), threading.Event()
    out = r.Branches.run(key=key)
    assert all(r.STARTED[name].wait(10) for name in names)
    try:
        state = client(app()).get("/api/holds").json()
        holds = {h["key"]: h for h in state["holds"] if h["key"].endswith(key)}
        assert set(holds) == {f"left:{key}", f"right:{key}"}
        for step in ("left", "right"):
            hold = holds[f"{step}:{key}"]
            assert hold["execution_id"] == out.execution_id
            assert hold["owner"] == f"{out.execution_id}/{step}"
            assert (hold["scope"], hold["step"]) == ("step", step)
    finally:
        for name in names:
            r.GATES[name].set()
    assert out.wait(timeout=10).is_success


@pytest.mark.parametrize("handed", [False, True], ids=["taken", "handed"])
def test_the_holds_of_a_step_running_in_the_caller_name_its_step_and_execution(
    key: str, handed: bool
) -> None:
    """A run in the caller is never stored, yet while its step runs /api/holds names the
    execution and the step of its lock and semaphore slot (and the reactor's own lock), read
    from the hold records in the store: whether it took them, or queued and was handed them by
    a release."""
    r.GATES[key], r.STARTED[key] = threading.Event(), threading.Event()
    blockers = []
    if handed:  # the step's lock and both slots are taken: the run queues for them
        blockers.append(Lock(key, owner="test-holder", ttl=30).acquire())
        for n in range(2):
            blockers.append(Semaphore(f"pool:{key}", limit=2, owner=f"test-{n}").acquire())
    ended: list[Any] = []
    runner = threading.Thread(target=lambda: ended.append(r.InCaller.run(key=key)))
    runner.start()
    try:
        if handed:
            until(lambda: Lock(key).state().waiters == 1, "the run queued for the lock")
            blockers.pop(0).release()
            slots = Semaphore(f"pool:{key}", limit=2)
            until(lambda: slots.state().waiters == 1, "the run queued for a slot")
            blockers.pop(0).release()
        assert r.STARTED[key].wait(10)
        state = client(app()).get("/api/holds").json()
    finally:
        r.GATES[key].set()
        for blocker in blockers:
            blocker.release()
        runner.join(10)
    [outcome] = ended
    assert outcome.is_success, outcome
    assert status(outcome.execution_id) is None  # not stored: only the holds tell
    run = outcome.execution_id
    holds = {(h["primitive"], h["key"]): h for h in state["holds"] if h["owner"] == run}
    assert {where: (h["scope"], h["step"], h["execution_id"]) for where, h in holds.items()} == {
        ("lock", f"outer:{key}"): ("reactor", None, run),
        ("lock", key): ("step", "hold", run),
        ("semaphore", f"pool:{key}"): ("step", "hold", run),
    }
    assert holds[("lock", key)]["fencing_token"] > 0
    assert holds[("lock", key)]["live"] is True
    [semaphore] = [s for s in state["semaphores"] if s["key"] == f"pool:{key}"]
    assert [h["execution_id"] for h in semaphore["holders"] if h["owner"] == run] == [run]


def test_holds_kept_across_a_park_come_from_the_stored_ledger(key: str) -> None:
    """A run parked at its step still holds its reactor-level lock and its ordered-lock turn:
    both are listed from its stored ledger, checked live against the store."""
    r.GATES[key] = threading.Event()
    r.GATES[key].set()  # once woken, the step finishes at once
    r.STARTED[key] = threading.Event()
    held = Lock(key, owner="test-holder", ttl=30).acquire()
    try:
        out = r.Gated.run(key=key)
        until(lambda: status(out.execution_id) == "waiting", "the park")
        state = client(app()).get("/api/holds").json()
        mine = {
            (h["primitive"], h["key"]): h
            for h in state["holds"]
            if h["execution_id"] == out.execution_id
        }
        assert set(mine) == {("lock", f"outer:{key}"), ("ordered_lock", f"line:{key}")}
        outer = mine[("lock", f"outer:{key}")]
        assert (outer["scope"], outer["live"]) == ("reactor", True)
        assert outer["fencing_token"] == Lock(f"outer:{key}").state().fencing_token
        turn = mine[("ordered_lock", f"line:{key}")]
        assert (turn["step"], turn["live"], turn["details"]["position"]) == ("work", True, 1)
        [line] = [entry for entry in state["ordered_locks"] if entry["key"] == f"line:{key}"]
        assert line["positions"][0]["execution_id"] == out.execution_id
    finally:
        held.release()
    assert out.wait(timeout=10).is_success


# -- the reactor page ---------------------------------------------------------------------------


def test_a_reactor_page_shows_its_declared_coordination() -> None:
    """/reactors/<path> and /api/reactors/<path> list what the reactor and each step declare."""
    c = client(app())
    described = c.get("/api/reactors/tests.web._reactors:Gated").json()
    assert [d["primitive"] for d in described["coordination"]] == ["lock"]
    [work] = described["steps"]
    assert sorted(d["primitive"] for d in work["coordination"]) == [
        "lock",
        "ordered_lock",
        "period",
        "rate_limit",
        "semaphore",
    ]
    [semaphore] = [d for d in work["coordination"] if d["primitive"] == "semaphore"]
    assert semaphore["options"]["limit"] == 3
    html = c.get("/reactors/tests.web._reactors:Gated").text
    declared = section(html, "declared")
    assert declared.count('data-step="work"') == 5
    assert declared.count('data-step="reactor"') == 1
    assert c.get("/reactors/nowhere:Nothing").status_code == 404
    assert c.get("/api/reactors/nowhere:Nothing").status_code == 404


# -- actions: auth and CSRF ---------------------------------------------------------------------


def test_without_auth_the_dashboard_is_read_only(key: str) -> None:
    """No auth hook: no action buttons, and every POST is refused with 403."""
    held, waiting = parked_on_lock(key)
    try:
        c = client(app())
        page = c.get(f"/executions/{waiting}").text
        assert "data-action=" not in page
        assert "read only" in page
        assert "data-action=" not in c.get("/coordination").text
        token = c.cookies[COOKIE]
        refused = c.post(f"/executions/{waiting}/cancel", data={"csrf_token": token})
        assert refused.status_code == 403
        assert "read only" in refused.text
        api = c.post(f"/api/executions/{waiting}/cancel", headers={"X-CSRF-Token": token})
        assert api.status_code == 403
        assert "app(auth=...)" in api.json()["error"]
        assert status(waiting) == "waiting"
    finally:
        held.release()
    until(lambda: status(waiting) == "completed", "the wake on release", timeout=WOKEN_WITHIN)


def test_an_auth_hook_that_refuses_gets_403_and_no_buttons(key: str) -> None:
    """With an auth hook, buttons and actions follow its answer for each request."""
    held, waiting = parked_on_lock(key)
    try:
        c = client(app(auth=lambda request: request.headers.get("x-operator") == "yes"))
        assert "data-action=" not in c.get(f"/executions/{waiting}").text
        token = c.cookies[COOKIE]
        refused = c.post(f"/executions/{waiting}/cancel", data={"csrf_token": token})
        assert refused.status_code == 403
        assert "auth hook refused" in refused.text
        assert status(waiting) == "waiting"
        allowed = c.get(f"/executions/{waiting}", headers={"x-operator": "yes"}).text
        assert 'data-action="cancel"' in allowed
    finally:
        held.release()
    until(lambda: status(waiting) == "completed", "the wake on release", timeout=WOKEN_WITHIN)


def test_posts_without_a_matching_signed_csrf_token_are_refused(key: str) -> None:
    """A POST needs the cookie's token back (form field or header), signed by this app, from
    this origin; each miss is a 403 that changes nothing, and the right one cancels."""
    held, waiting = parked_on_lock(key)
    try:
        c = client(app(auth=lambda request: True))
        c.get("/")
        token = c.cookies[COOKIE]
        url = f"/executions/{waiting}/cancel"
        forged = Tokens("another secret").issue()
        cases = {
            "no token": c.post(url, data={}),
            "another token": c.post(url, data={"csrf_token": forged}),
            "cross-origin": c.post(
                url, data={"csrf_token": token}, headers={"origin": "http://evil.test"}
            ),
        }
        c.cookies.set(COOKIE, forged, domain="dashboard.test")
        cases["forged cookie and field"] = c.post(url, data={"csrf_token": forged})
        c.cookies.clear()
        cases["no cookie"] = c.post(url, data={"csrf_token": token})
        for case, response in cases.items():
            assert response.status_code == 403, case
            assert "CSRF check failed" in response.text, case
        assert status(waiting) == "waiting"

        c.cookies.set(COOKIE, token, domain="dashboard.test")
        done = c.post(url, data={"csrf_token": token}, follow_redirects=False)
        assert done.status_code == 303
        assert done.headers["location"] == f"/executions/{waiting}?done=cancel"
        assert status(waiting) == "cancelled"
        page = c.get(done.headers["location"]).text
        assert "Cancelled." in page
        assert 'data-status="cancelled"' in page
        assert Lock(key).state().owner == "test-holder"  # cancel gives back only its own holds
    finally:
        held.release()


def test_retry_and_undo_run_the_operations_and_link_the_runs(key: str) -> None:
    """Retry starts a new run linked both ways to the failed one; undo rolls a completed run
    back (its undo ran) and cancels it; an action that does not apply is a 409."""
    c = client(app(auth=lambda request: True))
    c.get("/")
    token = c.cookies[COOKIE]
    broken = r.Broken.run(key=key)
    broken.wait(timeout=10)
    assert 'data-action="retry"' in c.get(f"/executions/{broken.execution_id}").text

    retried = c.post(
        f"/executions/{broken.execution_id}/retry",
        data={"csrf_token": token},
        follow_redirects=False,
    )
    assert retried.status_code == 303
    match = re.fullmatch(r"/executions/(\w+)\?done=retry&from=(\w+)", retried.headers["location"])
    assert match is not None
    new_id = match.group(1)
    assert new_id != broken.execution_id
    assert match.group(2) == broken.execution_id
    until(lambda: status(new_id) == "failed", "the retried run")
    assert c.get(f"/api/executions/{new_id}").json()["retry_of"] == broken.execution_id
    assert c.get(f"/api/executions/{broken.execution_id}").json()["retried_by"] == new_id
    assert "this is the new run" in c.get(retried.headers["location"]).text

    done = r.Charge.run(key=key)
    done.wait(timeout=10)
    undone = c.post(f"/api/executions/{done.execution_id}/undo", headers={"X-CSRF-Token": token})
    assert undone.status_code == 200
    assert undone.json()["execution"]["status"] == "cancelled"
    assert key in r.UNDONE
    again = c.post(f"/api/executions/{done.execution_id}/undo", headers={"X-CSRF-Token": token})
    assert again.status_code == 409
    assert "cancelled" in again.json()["error"]
    assert c.get(f"/api/executions/{done.execution_id}").json()["actions"] == ["retry"]
    unknown = c.post("/api/executions/no-such-id/cancel", headers={"X-CSRF-Token": token})
    assert unknown.status_code == 404
    nonsense = c.post(
        f"/api/executions/{done.execution_id}/explode", headers={"X-CSRF-Token": token}
    )
    assert nonsense.status_code == 404


def test_a_paused_run_is_resumed_with_a_json_payload_in_a_worker(key: str) -> None:
    """A paused run shows its interrupt and a resume form; the form (and the API) resume it
    with a JSON payload, validated (a bad one is a 409 and it stays paused), in a worker."""
    c = client(app(auth=lambda request: True))
    c.get("/")
    token = c.cookies[COOKIE]
    out = r.Review.run(key=key)
    page = c.get(f"/executions/{out.execution_id}").text
    paused = section(page, "paused")
    assert "review" in paused
    assert key in paused
    assert 'name="payload"' in paused
    listed = c.get("/api/executions", params={"status": "paused"}).json()
    assert out.execution_id in ids(listed)

    bad = c.post(
        f"/api/executions/{out.execution_id}/resume",
        headers={"X-CSRF-Token": token},
        json={"payload": {"approved": "perhaps"}},
    )
    assert bad.status_code == 409
    assert "approved" in bad.json()["error"]
    assert status(out.execution_id) == "paused"
    not_json = c.post(
        f"/executions/{out.execution_id}/resume",
        data={"csrf_token": token, "payload": "{nope"},
        follow_redirects=False,
    )
    assert not_json.status_code == 400
    assert "not JSON" in not_json.text

    resumed = c.post(
        f"/executions/{out.execution_id}/resume",
        data={"csrf_token": token, "payload": '{"approved": true}'},
        follow_redirects=False,
    )
    assert resumed.status_code == 303
    until(lambda: status(out.execution_id) == "completed", "the resumed run")
    again = c.post(
        f"/api/executions/{out.execution_id}/resume",
        headers={"X-CSRF-Token": token},
        json={"payload": {"approved": True}},
    )
    assert again.status_code == 409
    assert "cannot be resumed" in again.json()["error"]

    other = r.Review.run(key=f"{key}-b")
    read_only = client(app()).post(
        f"/api/executions/{other.execution_id}/resume", json={"payload": {"approved": True}}
    )
    assert read_only.status_code == 403
    api = c.post(
        f"/api/executions/{other.execution_id}/resume",
        headers={"X-CSRF-Token": token},
        json={"payload": {"approved": False}},
    )
    assert api.status_code == 200
    assert api.json()["done"] == "resume"
    until(lambda: status(other.execution_id) == "completed", "the API-resumed run")


def test_mounted_under_a_path_its_links_and_redirects_stay_under_it(key: str) -> None:
    """Mounted at /ops in another ASGI app, every link, script and live URL of its pages and
    the redirect after an action start with /ops/."""
    held, waiting = parked_on_lock(key)
    try:
        parent = Starlette(routes=[Mount("/ops", app(auth=lambda request: True))])
        c = client(parent)
        links: list[str] = []
        for path in ("/ops/", "/ops/coordination", f"/ops/executions/{waiting}"):
            page = c.get(path)
            assert page.status_code == 200, path
            links += re.findall(r'(?:href|src|action|data-live)="(/[^"]*)"', page.text)
        assert links
        assert [link for link in links if not link.startswith("/ops/")] == []
        assert c.get("/ops/static/dashboard.js").status_code == 200
        token = c.cookies[COOKIE]
        done = c.post(
            f"/ops/executions/{waiting}/cancel", data={"csrf_token": token}, follow_redirects=False
        )
        assert done.headers["location"] == f"/ops/executions/{waiting}?done=cancel"
    finally:
        held.release()


# -- store, packaging, command line -------------------------------------------------------------


def test_an_unreachable_store_is_a_503_that_names_it() -> None:
    """Pages and API answer 503 with the store's error when Redis cannot be reached."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    c = client(app(redis_url=url))
    api = c.get("/api/executions")
    assert api.status_code == 503
    assert "unreachable" in api.json()["error"]
    page = c.get("/coordination")
    assert page.status_code == 503
    assert "Store unavailable" in page.text


def test_importing_py_reactor_and_the_cli_module_does_not_import_starlette() -> None:
    """Starlette, jinja2 and uvicorn load only when the dashboard app is built."""
    code = (
        "import sys, py_reactor, py_reactor.web, py_reactor.web.cli\n"
        "print(sorted(m for m in ('starlette', 'jinja2', 'uvicorn') if m in sys.modules))\n"
        "py_reactor.web.app\n"
        "print('starlette' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split("\n")[:2] == ["[]", "True"]


def test_the_dashboard_command_parses_its_options_and_refuses_a_bad_import(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``dashboard`` defaults to 127.0.0.1:8000; a module that cannot be imported exits 2."""
    parser = argparse.ArgumentParser()
    add_dashboard_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["dashboard"])
    assert (args.host, args.port, args.redis_url, args.modules) == ("127.0.0.1", 8000, None, [])
    bad = parser.parse_args(["dashboard", "--import", "no_such_module_here"])
    assert run_dashboard(bad) == 2
    assert "no_such_module_here" in capsys.readouterr().err


def test_the_dashboard_command_serves_the_api(redis_url: str) -> None:
    """``run_dashboard`` serves the app with uvicorn on the given host and port."""
    port = free_port()
    code = (
        "import argparse, sys\n"
        "from py_reactor.web.cli import add_dashboard_command, run_dashboard\n"
        "parser = argparse.ArgumentParser()\n"
        "add_dashboard_command(parser.add_subparsers(dest='command'))\n"
        "sys.exit(run_dashboard(parser.parse_args(sys.argv[1:])))\n"
    )
    command = [sys.executable, "-c", code, "dashboard", "--redis-url", redis_url]
    command += ["--port", str(port), "--import", "tests.web._reactors"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:

        def answered() -> httpx.Response | None:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/api/reactors/{CHARGE}", timeout=2)
            except httpx.TransportError:
                assert server.poll() is None, server.communicate()[1].decode()
                return None

        reply = until(answered, "the dashboard answering", timeout=20)
        assert reply.status_code == 200
        assert reply.json()["name"] == "Charge"
    finally:
        server.terminate()
        server.communicate(timeout=10)
