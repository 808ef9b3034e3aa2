"""The plugin as a project sees it: registered through the ``pytest11`` entry point, its
fixtures usable in a fresh test session without any import, and nothing done unasked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Strict like this repository's own configuration: a warning anywhere is an error.
STRICT = ("-p", "no:cacheprovider", "-W", "error", "-q")

FRESH_MODULE = """
from py_reactor import Reactor, background, get_config, step, with_lock
from py_reactor.testing import assert_parked_at, assert_succeeded


@background
class Ship(Reactor):
    key: str

    @step
    @with_lock(lambda args: args["key"], ttl=10)
    def send(key: str) -> str:
        return "sent"

    returns = "send"


def test_store_worker_and_hold_lock(reactor_store, reactor_worker, hold_lock):
    assert get_config().redis_url == reactor_store.url
    with hold_lock("parcel") as hold:
        out = Ship.run(key="parcel")
        reactor_worker.drain(timeout=10)
        assert_parked_at(out, "send", key="parcel")
        hold.release()
        reactor_worker.drain(timeout=10)
    assert_succeeded(out, value="sent")
"""


def test_a_fresh_session_gets_the_fixtures_through_the_entry_point(
    pytester: pytest.Pytester,
) -> None:
    """A new pytest process, with no conftest and no import of the plugin, runs a test that
    uses reactor_store, reactor_worker and hold_lock."""
    pytester.makepyfile(test_fresh=FRESH_MODULE)
    result = pytester.runpytest_subprocess(*STRICT)
    result.assert_outcomes(passed=1)


def test_the_fixtures_come_from_the_plugin_named_py_reactor(pytester: pytest.Pytester) -> None:
    """With ``-p no:py_reactor`` the same test finds no such fixture: the entry point is what
    provides them."""
    pytester.makepyfile(test_fresh=FRESH_MODULE)
    result = pytester.runpytest_subprocess(*STRICT, "-p", "no:py_reactor")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'reactor_store' not found*"])


def test_the_plugin_registers_no_autouse_fixture_and_changes_no_setting(
    pytester: pytest.Pytester,
) -> None:
    """A test that asks for nothing gets none of the plugin's fixtures, default settings and
    no thread worker; the plugin is registered as ``py_reactor``."""
    pytester.makepyfile(
        test_quiet="""
        from py_reactor import get_config
        from py_reactor.config import Config
        from py_reactor.transport import threads

        PLUGIN = {"reactor_server", "reactor_store", "reactor_worker", "hold_lock"}

        def test_nothing_asked(request):
            plugin = request.config.pluginmanager.get_plugin("py_reactor")
            assert plugin is not None
            assert plugin.__name__ == "py_reactor.testing.plugin"
            assert not PLUGIN & set(request.fixturenames)
            assert repr(get_config()) == repr(Config())
            assert threads._worker is None
        """
    )
    result = pytester.runpytest_subprocess(*STRICT)
    result.assert_outcomes(passed=1)


def test_a_failing_helper_reports_its_message_at_the_test_line(pytester: pytest.Pytester) -> None:
    """pytest shows the helper's message, and the traceback stops at the test's own line."""
    pytester.makepyfile(
        test_failing="""
        from py_reactor import Reactor, step
        from py_reactor.testing import assert_failed_at


        class Fine(Reactor):
            @step
            def work():
                return 1

            returns = "work"


        def test_expects_a_failure(reactor_store):
            out = Fine.run()
            assert_failed_at(out, "work")
        """
    )
    result = pytester.runpytest_subprocess(*STRICT)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            '*assert_failed_at(out, "work")*',
            "E*AssertionError: expected Fine (execution *) to fail at step 'work', but it "
            "ended 'completed' with value 1",
            "E*1. run        work: attempt 1, returned 1",
        ]
    )
    assert "_outcomes.py" not in result.stdout.str()


def test_a_lock_left_held_is_released_before_the_next_test(pytester: pytest.Pytester) -> None:
    """A hold a test never released is released when it ends: the next test finds the key free
    and takes it. The next test opens no ``reactor_store`` (which would flush the server and
    free the key whatever happened); a control pair shows that such a test does see a hold the
    plugin did not take (a plain ``Lock`` left held, 60 s ttl)."""
    pytester.makepyfile(
        test_left="""
        from py_reactor import Lock, configure

        def test_leaves_it_held(hold_lock):
            hold = hold_lock.acquire("shared")
            assert Lock("shared").state().owner == hold.owner

        def test_takes_it(reactor_server):
            configure(redis_url=reactor_server.url)
            assert Lock("shared").state().owner is None
            with Lock("shared", wait=0):
                pass

        def test_leaves_a_plain_hold(reactor_store):
            Lock("plain", ttl=60).acquire()

        def test_sees_the_plain_hold(reactor_server):
            configure(redis_url=reactor_server.url)
            assert Lock("plain").state().owner is not None
        """
    )
    result = pytester.runpytest_subprocess(*STRICT, "-p", "no:randomly")
    result.assert_outcomes(passed=4)


def _worked_example() -> str:
    page = (ROOT / "docs" / "testing.md").read_text(encoding="utf-8")
    found = re.search(r"```python\n(# test_checkout\.py\n.*?)```", page, re.DOTALL)
    assert found is not None, "docs/testing.md lost its worked example (# test_checkout.py)"
    return found.group(1)


def test_the_documented_worked_example_passes_under_pytest(pytester: pytest.Pytester) -> None:
    """docs/testing.md's test module, run by pytest as a user would, passes all its tests."""
    pytester.makepyfile(test_checkout=_worked_example())
    result = pytester.runpytest_subprocess(*STRICT)
    result.assert_outcomes(passed=3)
