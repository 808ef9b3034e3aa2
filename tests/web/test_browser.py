"""The dashboard in a real browser: Playwright driving Debian's chromium, headless.

A uvicorn server runs the app in a thread of this process (so the runs it shows are this
module's, on the session's private Redis) on a free port; chromium is the system's
(``/usr/bin/chromium``, or ``PY_REACTOR_CHROMIUM``): Playwright downloads no browser.
Screenshots of every test are kept in ``tests/web/artifacts/`` (ignored by git).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from playwright.sync_api import Browser, Page, expect, sync_playwright

from py_reactor import Lock
from py_reactor.web import app
from tests._redis import free_port
from tests._wait import status, until
from tests.web import _reactors as r

#: How soon a released run completes; far below the 30 s park timer of tests/web/conftest.py.
WOKEN_WITHIN = 10.0

CHROMIUM = os.environ.get("PY_REACTOR_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(__file__).parent / "artifacts"


@pytest.fixture(scope="module")
def server(redis_url: str) -> Iterator[str]:
    """The dashboard (actions allowed, refreshing every 0.3 s) served by uvicorn in a thread."""
    port = free_port()
    dashboard = app(redis_url=redis_url, auth=lambda request: True, refresh=0.3)
    config = uvicorn.Config(dashboard, host="127.0.0.1", port=port, log_level="warning")
    served = uvicorn.Server(config)
    thread = threading.Thread(target=served.run, name="dashboard", daemon=True)
    thread.start()
    until(lambda: served.started or not thread.is_alive(), "the dashboard serving", timeout=10)
    assert served.started, "the dashboard's uvicorn server did not start"
    yield f"http://127.0.0.1:{port}"
    served.should_exit = True
    thread.join(10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's chromium, headless, driven by Playwright."""
    if not Path(CHROMIUM).exists():
        raise AssertionError(
            f"no chromium at {CHROMIUM}: install Debian's (apt-get install chromium) or point "
            "PY_REACTOR_CHROMIUM at a chromium binary"
        )
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield launched
        launched.close()
    print(f"\nscreenshots of the browser tests: {ARTIFACTS}")


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A fresh page; its screenshot is saved as ``artifacts/<test>.png`` when the test ends,
    passed or failed."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    opened = context.new_page()
    opened.set_default_timeout(10_000)
    opened.on("dialog", lambda dialog: dialog.accept())  # the actions' confirm()
    yield opened
    shot = ARTIFACTS / f"{request.node.name}.png"
    opened.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    context.close()


def parked_on_lock(key: str) -> tuple[Any, str]:
    """A lock on ``key`` held by this test, and a Charge run parked on it ("waiting")."""
    held = Lock(key, owner="test-holder", ttl=30).acquire()
    out = r.Charge.run(key=key)
    until(lambda: status(out.execution_id) == "waiting", "the park on the held lock")
    return held, out.execution_id


def test_the_coordination_page_shows_a_parked_run_as_waiting_not_failed(
    server: str, page: Page, key: str
) -> None:
    """A parked run is a WAITING row of the waiting table, with its step, key and next
    attempt; a failed run is a FAILED row of the failed table, in another colour."""
    held, waiting = parked_on_lock(key)
    try:
        broken = r.Broken.run(key=key)
        broken.wait(timeout=10)
        page.goto(f"{server}/coordination")
        row = page.locator(f'#parked tr[data-execution-id="{waiting}"]')
        expect(row).to_be_visible()
        expect(row.locator(".badge")).to_have_text("WAITING")
        expect(row).to_contain_text("charge")
        expect(row).to_contain_text(key)
        expect(row).to_contain_text("in ")  # the next attempt, from now
        failed = page.locator(f'#failed tr[data-execution-id="{broken.execution_id}"]')
        expect(failed.locator(".badge")).to_have_text("FAILED")
        expect(page.locator(f'#failed tr[data-execution-id="{waiting}"]')).to_have_count(0)
        expect(
            page.locator(f'#parked tr[data-execution-id="{broken.execution_id}"]')
        ).to_have_count(0)
        colours = [
            locator.locator(".badge").evaluate("e => getComputedStyle(e).backgroundColor")
            for locator in (row, failed)
        ]
        assert colours[0] != colours[1]
        expect(page.locator(f'#holds tr[data-key="{key}"]')).to_contain_text(
            "outside any execution"
        )
        # what the page showed while the run was parked (the end-of-test shot is after it)
        page.screenshot(path=str(ARTIFACTS / "coordination-while-parked.png"), full_page=True)
    finally:
        held.release()
    until(lambda: status(waiting) == "completed", "the wake on release", timeout=WOKEN_WITHIN)


def test_the_live_view_shows_a_new_execution_without_reloading(
    server: str, page: Page, key: str
) -> None:
    """The executions list and the coordination page pick up a run started after they loaded,
    in the same document (no navigation)."""
    page.goto(f"{server}/?reactor=Charge")
    page.evaluate("window.__loaded_once = true")
    done = r.Charge.run(key=key)
    done.wait(timeout=10)
    expect(page.locator(f'tr[data-execution-id="{done.execution_id}"]')).to_be_visible()
    assert page.evaluate("window.__loaded_once") is True

    page.goto(f"{server}/coordination")
    page.evaluate("window.__loaded_once = true")
    held, waiting = parked_on_lock(key)
    try:
        expect(page.locator(f'#parked tr[data-execution-id="{waiting}"]')).to_be_visible()
        assert page.evaluate("window.__loaded_once") is True
    finally:
        held.release()
    expect(page.locator(f'#parked tr[data-execution-id="{waiting}"]')).to_have_count(0)
    assert page.evaluate("window.__loaded_once") is True


def test_the_cancel_button_cancels_a_parked_run(server: str, page: Page, key: str) -> None:
    """With auth, the waiting row's Cancel button (confirmed) cancels the run: its page then
    says so, and the lock it waited for stays with its holder."""
    held, waiting = parked_on_lock(key)
    try:
        page.goto(f"{server}/coordination")
        page.locator(
            f'#parked tr[data-execution-id="{waiting}"] button[data-action="cancel"]'
        ).click()
        page.wait_for_url(f"**/executions/{waiting}?done=cancel")
        expect(page.locator("#notice")).to_have_text("Cancelled.")
        expect(page.locator(".head-row .badge")).to_have_text("CANCELLED")
        assert status(waiting) == "cancelled"
        assert Lock(key).state().owner == "test-holder"
        page.goto(f"{server}/coordination")
        expect(page.locator(f'#parked tr[data-execution-id="{waiting}"]')).to_have_count(0)
        expect(page.locator(f'#locks tr[data-key="{key}"]')).not_to_contain_text(waiting[:12])
    finally:
        held.release()


def test_an_execution_page_shows_its_timeline_failure_and_rollback_failures(
    server: str, page: Page, key: str
) -> None:
    """A failed run's page shows the timeline in order, the error of the failing step and the
    undo that failed, with the buttons that apply."""
    broken = r.Broken.run(key=key)
    broken.wait(timeout=10)
    page.goto(f"{server}/executions/{broken.execution_id}")
    entries = page.locator("#timeline li.entry")
    expect(entries).to_have_count(3)
    assert [entries.nth(i).get_attribute("data-type") for i in range(3)] == [
        "run",
        "failed",
        "undo",
    ]
    expect(page.locator("#failure")).to_contain_text(f"card declined for {key}")
    expect(page.locator("#rollback-failures")).to_contain_text(f"cannot unbook {key}")
    buttons = page.locator(".head-row button[data-action]")
    assert sorted(buttons.all_inner_texts()) == ["Cancel", "Retry", "Undo"]
