"""``py-reactor``: every command run as a subprocess, as an operator runs it from a shell.

The commands run with ``python -P -m py_reactor.cli`` (``-P``: the interpreter does not put the
current folder on ``sys.path`` itself, as the installed ``py-reactor`` script does not), from a
temporary project folder whose package defines the reactors, with ``PY_REACTOR_REDIS_URL`` set
to the session's private Redis. The executions they act on are made here, in the test process.
Every error path must print exactly one line on stderr, exit 2, and never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import py_reactor
from py_reactor import Lock, configure
from py_reactor.cli import _parser
from py_reactor.storage import current_store
from py_reactor.storage.embedded import embedded_store, stop_embedded
from py_reactor.version import __version__

REACTORS = '''
from pydantic import BaseModel

from py_reactor import Reactor, Result, background, interrupt, step


class Approval(BaseModel):
    approved: bool


@background
class Breaks(Reactor):
    """Fails at its second step, in a worker: a stored failed run."""

    order: int

    @step()
    def reserve(order: int) -> str:
        return f"reserved {order}"

    @step(reserved=Result("reserve"))
    def charge(reserved: str) -> str:
        raise RuntimeError("card declined")


class Asks(Reactor):
    """Pauses at an interrupt: a stored paused run."""

    order: int

    @step()
    def quote(order: int) -> int:
        return order * 10

    review = interrupt(payload=Approval, wait_for="quote")

    @step(approval=Result("review"), quote=Result("quote"))
    def pay(approval: dict, quote: int) -> str:
        return f"paid {quote}" if approval["approved"] else "declined"

    returns = "pay"
'''


@pytest.fixture(scope="module")
def project() -> Iterator[tuple[Path, str]]:
    """A project folder holding a package of reactors no other test defines; its path and the
    package's name. The test process imports it from there too."""
    folder = Path(tempfile.mkdtemp(prefix="py-reactor-cli-"))
    package = f"cliapp_{uuid.uuid4().hex[:8]}"
    (folder / package).mkdir()
    (folder / package / "__init__.py").write_text("")
    (folder / package / "reactors.py").write_text(textwrap.dedent(REACTORS))
    sys.path.insert(0, str(folder))
    yield folder, package
    sys.path.remove(str(folder))
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def app(project: tuple[Path, str], redis_url: str) -> ModuleType:
    """The project's reactors module, with py_reactor configured for the private Redis."""
    configure(redis_url=redis_url)
    return __import__(f"{project[1]}.reactors", fromlist=["Breaks"])


def _cli(
    *args: str, url: str | None, cwd: Path | None = None, env_url: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``py-reactor ARGS`` with ``PY_REACTOR_REDIS_URL`` set to ``env_url or url`` (unset when
    both are None), from ``cwd`` (default: an empty temporary folder)."""
    env = {k: v for k, v in os.environ.items() if k != "PY_REACTOR_REDIS_URL"}
    if (env_url or url) is not None:
        env["PY_REACTOR_REDIS_URL"] = str(env_url or url)
    with tempfile.TemporaryDirectory() as empty:
        return subprocess.run(
            [sys.executable, "-P", "-m", "py_reactor.cli", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=cwd or empty,
            env=env,
        )


def _refused(done: subprocess.CompletedProcess[str], *words: str) -> str:
    """The one line a refused command printed, checked: exit 2, no traceback, ``words`` in it."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def _failed_run(app: ModuleType) -> str:
    outcome = app.Breaks.run(order=1)
    assert outcome.wait(timeout=30).status == "failed"
    return str(outcome.execution_id)


def _paused_run(app: ModuleType) -> str:
    outcome = app.Asks.run(order=4)
    assert outcome.status == "paused"
    return str(outcome.execution_id)


# -- the program -------------------------------------------------------------------------------


def test_version_prints_the_package_version() -> None:
    done = _cli("--version", url=None)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"py-reactor {__version__}"


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _parsers(child)


def test_every_option_has_help_and_no_help_text_is_raw_markup() -> None:
    parsers = list(_parsers(_parser()))
    assert {p.prog for p in parsers} >= {
        "py-reactor executions resume",
        "py-reactor holds",
        "py-reactor embedded stop",
        "py-reactor demo",
    }
    for parser in parsers:
        assert "``" not in (parser.description or ""), parser.prog
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            assert action.help, f"{parser.prog} {action.option_strings or action.dest}"
            assert "``" not in action.help


# -- the store, the imports and the errors every command shares ----------------------------------


def test_sweep_runs_one_pass_and_says_what_it_found(redis_url: str) -> None:
    done = _cli("sweep", "--wait", "0", "--namespace", "nobody-here", url=redis_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "due: 0, recovered from lapsed leases: 0\n"


def test_a_sweep_or_worker_that_serves_no_namespace_is_refused(redis_url: str) -> None:
    for command in ("sweep", "worker"):
        _refused(_cli(command, url=redis_url), "serves no namespace", "--import MODULE")
    _refused(_cli("sweep", "--namespace", "a b", url=redis_url), "--namespace", "'a b'")


def test_sweep_imports_a_module_of_the_project_folder_it_runs_from(
    project: tuple[Path, str], redis_url: str
) -> None:
    folder, package = project
    done = _cli(
        "sweep", "--import", f"{package}.reactors", "--wait", "0", url=redis_url, cwd=folder
    )
    assert done.returncode == 0, done.stderr


def test_sweep_refuses_a_bad_store_url_naming_the_option() -> None:
    _refused(_cli("sweep", "--redis-url", "nonsense", url=None), "--redis-url", "redis_url")


def test_a_bad_url_in_the_environment_is_named_as_such() -> None:
    _refused(_cli("sweep", url=None, env_url="nonsense"), "PY_REACTOR_REDIS_URL")


def test_a_down_store_is_one_line_and_the_option_wins_over_the_environment(
    redis_url: str,
) -> None:
    down = "redis://127.0.0.1:1"
    for command in (["sweep"], ["executions", "list"]):
        line = _refused(_cli(*command, "--redis-url", down, url=redis_url))
        assert f"{' '.join(command)}: the coordination store at {down} is unreachable" in line


def test_a_module_that_does_not_import_is_one_line(redis_url: str) -> None:
    _refused(
        _cli("sweep", "--import", "missing.module", url=redis_url),
        "py-reactor sweep:",
        "'missing.module'",
        "No module named 'missing'",
    )


def test_worker_without_a_url_says_it_needs_one() -> None:
    _refused(_cli("worker", url=None), "--redis-url", "PY_REACTOR_REDIS_URL")


@pytest.mark.parametrize("command", [["sweep"], ["executions", "retry", "some-id"]])
def test_celery_without_a_url_says_it_needs_one(command: list[str]) -> None:
    _refused(_cli(*command, "--worker", "celery", url=None), "--worker celery", "--redis-url")


def test_demo_workers_without_a_url_says_it_needs_one() -> None:
    _refused(_cli("demo", "--workers", "2", "--plain", url=None), "PY_REACTOR_REDIS_URL")


def test_the_dashboard_command_refuses_a_missing_module_and_a_bad_url(redis_url: str) -> None:
    _refused(_cli("dashboard", "--import", "no_such_module_here", url=redis_url), "no_such_module")
    _refused(_cli("dashboard", "--redis-url", "nonsense", url=None), "--redis-url")


def test_embedded_stop_says_when_nothing_runs() -> None:
    folder = tempfile.mkdtemp(prefix="pr-", dir="/tmp")
    try:
        done = _cli("embedded", "stop", "--dir", folder, url=None)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"no embedded Redis runs in {folder}: nothing to stop\n"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_argparse_usage_errors_still_exit_2(redis_url: str) -> None:
    done = _cli("executions", "list", "--limit", "0", url=redis_url)
    assert done.returncode == 2
    assert "--limit" in done.stderr
    assert "Traceback" not in done.stderr


# -- executions ----------------------------------------------------------------------------------


def test_list_shows_the_newest_first_as_a_table_and_as_json(
    app: ModuleType, redis_url: str
) -> None:
    older = _failed_run(app)
    newer = _failed_run(app)
    paused = _paused_run(app)
    reactor = f"{app.__name__}:Breaks"

    table = _cli("executions", "list", "--reactor", reactor, url=redis_url)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:4] == ["ID", "NAMESPACE", "REACTOR", "STATUS"]
    ids = [line.split()[0] for line in lines[1:-1]]
    assert ids.index(newer) < ids.index(older)
    assert paused not in ids
    assert "card declined" in table.stdout

    listing = _cli(
        "executions", "list", "--status", "paused", "--limit", "500", "--json", url=redis_url
    )
    assert listing.returncode == 0, listing.stderr
    items = json.loads(listing.stdout)["items"]
    assert paused in [item["execution_id"] for item in items]
    assert {item["status"] for item in items} == {"paused"}


def test_show_gives_status_steps_trace_and_holds(app: ModuleType, redis_url: str) -> None:
    failed = _failed_run(app)
    shown = _cli("executions", "show", failed, url=redis_url)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert re.search(rf"^execution: +{failed}$", text, re.MULTILINE)
    assert re.search(r"^status: +failed$", text, re.MULTILINE)
    assert re.search(r"^error: +card declined$", text, re.MULTILINE)
    assert "reserve" in text
    assert "RuntimeError: card declined" in text
    assert "holds: none" in text

    as_json = _cli("executions", "show", failed, "--json", url=redis_url)
    assert as_json.returncode == 0, as_json.stderr
    detail = json.loads(as_json.stdout)
    assert detail["execution_id"] == failed
    assert detail["status"] == "failed"
    assert [entry["step"] for entry in detail["trace"]][:2] == ["reserve", "charge"]
    assert set(detail["actions"]) == {"cancel", "undo", "retry"}


@pytest.mark.parametrize(
    "command",
    [
        ["show"],
        ["cancel"],
        ["undo"],
        ["retry"],
        ["resume", "--payload", "{}"],
    ],
    ids=lambda command: command[0],
)
def test_an_unknown_id_is_one_line(command: list[str], redis_url: str) -> None:
    unknown = f"nope-{uuid.uuid4().hex[:6]}"
    action, *rest = command
    _refused(_cli("executions", action, unknown, *rest, url=redis_url), unknown)


def test_show_refuses_what_cannot_be_an_id(redis_url: str) -> None:
    _refused(_cli("executions", "show", "a/b", url=redis_url), "'a/b' is not an execution id")


def test_cancel_stops_a_paused_run_with_its_reason(app: ModuleType, redis_url: str) -> None:
    paused = _paused_run(app)
    done = _cli("executions", "cancel", paused, "--reason", "customer left", url=redis_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"cancelled {paused}: status cancelled"
    found = py_reactor.find(paused)
    assert found is not None
    assert found.status == "cancelled"
    assert found.outcome is not None
    assert found.outcome.reason == "customer left"
    again = _cli("executions", "cancel", paused, url=redis_url)
    _refused(again, "cancelled")  # a cancelled run cannot be cancelled: the refusal says why


def test_undo_rolls_back_importing_the_reactor_from_the_project_folder(
    app: ModuleType, project: tuple[Path, str], redis_url: str
) -> None:
    failed = _failed_run(app)
    done = _cli("executions", "undo", failed, url=redis_url, cwd=project[0])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"undone {failed}: status cancelled"
    found = py_reactor.find(failed)
    assert found is not None
    assert found.status == "cancelled"
    assert found.trace[-1]["type"] == "undone"


def test_retry_runs_a_new_run_here_and_reports_it(
    app: ModuleType, project: tuple[Path, str], redis_url: str
) -> None:
    failed = _failed_run(app)
    done = _cli("executions", "retry", failed, url=redis_url, cwd=project[0])
    assert done.returncode == 0, done.stderr
    first, _, rest = done.stdout.strip().partition(" as ")
    new_id, _, status = rest.partition(": ")
    assert first == f"retried {failed}"
    assert status == "status failed"  # it fails again, in this CLI's thread worker
    found = py_reactor.find(new_id)
    assert found is not None
    assert found.retry_of == failed
    assert found.status == "failed"


def test_resume_completes_a_paused_run_and_refuses_bad_payloads(
    app: ModuleType, project: tuple[Path, str], redis_url: str
) -> None:
    paused = _paused_run(app)
    folder = project[0]
    _refused(
        _cli("executions", "resume", paused, "--payload", "{nope", url=redis_url, cwd=folder),
        "--payload is not JSON",
    )
    _refused(
        _cli("executions", "resume", paused, "--payload", '{"approved": "maybe"}', url=redis_url,
             cwd=folder),
        "approved",
    )  # fmt: skip
    found = py_reactor.find(paused)
    assert found is not None
    assert found.status == "paused"

    done = _cli(
        "executions", "resume", paused, "--payload", '{"approved": true}', url=redis_url, cwd=folder
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"resumed {paused}: status completed"
    found = py_reactor.find(paused)
    assert found is not None
    assert found.status == "completed"
    assert found.outcome is not None
    assert found.outcome.value == "paid 40"


# -- holds and the embedded server ---------------------------------------------------------------


def test_holds_lists_a_live_hold_as_a_table_and_as_json(redis_url: str, key: str) -> None:
    configure(redis_url=redis_url)
    with Lock(key, ttl=60):
        table = _cli("holds", url=redis_url)
        as_json = _cli("holds", "--json", url=redis_url)
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if key in line)
    assert row.split()[:3] == ["lock", key, "held"]
    assert as_json.returncode == 0, as_json.stderr
    holds: list[dict[str, Any]] = json.loads(as_json.stdout)["holds"]
    assert [(h["primitive"], h["scope"]) for h in holds if h["key"] == key] == [("lock", "outside")]


# -- holds release: an operator frees a stale hold ------------------------------------------------
#
# The stale holds are taken straight from the store, with a ttl of ten minutes and nobody to
# extend or release them: what a holder that died (kill -9) leaves behind.

#: The ttl and lease of the stale holds (ms): far past the end of every test.
STALE_MS = 600_000


def _release(
    key: str, primitive: str, *more: str, url: str | None
) -> subprocess.CompletedProcess[str]:
    return _cli("holds", "release", key, "--primitive", primitive, *more, url=url)


def _freed(done: subprocess.CompletedProcess[str], *words: str) -> str:
    """The one line a forced release printed, checked: exit 0, ``words`` in it; the release is
    logged (WARNING on the py_reactor logger, which the command leaves on stderr)."""
    assert done.returncode == 0, (done.stdout, done.stderr)
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    for word in words:
        assert word in lines[0], lines[0]
    assert lines[0].startswith("freed "), lines[0]
    assert "py_reactor: released by force: " + lines[0].removeprefix("freed ") in done.stderr
    return lines[0]


def test_holds_release_without_force_says_what_it_would_free_and_frees_nothing(
    redis_url: str, key: str
) -> None:
    configure(redis_url=redis_url)
    token = current_store().lock_acquire(key, "dead-owner", STALE_MS).token
    line = _refused(
        _release(key, "lock", url=redis_url),
        "py-reactor holds release: would free lock",
        f"'{key}'",
        "held by 'dead-owner'",
        f"token {token}",
        "add --force",
    )
    assert "released by force" not in line
    assert Lock(key).state().owner == "dead-owner"


@pytest.mark.parametrize("primitive", ["lock", "semaphore", "period", "ordered_lock"])
def test_holds_release_of_a_key_nobody_holds_is_one_line(
    primitive: str, redis_url: str, key: str
) -> None:
    for more in ((), ("--force",)):
        _refused(
            _release(key, primitive, *more, url=redis_url), f"no live hold on {primitive} '{key}'"
        )


def test_holds_release_refuses_a_rate_limit_and_an_unknown_primitive(
    redis_url: str, key: str
) -> None:
    _refused(
        _release(key, "rate_limit", "--force", url=redis_url),
        f"rate_limit '{key}' has no holder to free",
    )
    _refused(_release(key, "mutex", "--force", url=redis_url), "'mutex'", "lock, semaphore")


def test_holds_release_takes_the_store_before_or_after_the_action(redis_url: str, key: str) -> None:
    configure(redis_url=redis_url)
    current_store().lock_acquire(key, "dead-owner", STALE_MS)
    for args in (
        ("holds", "--redis-url", redis_url, "release", key, "--primitive", "lock"),
        ("holds", "release", key, "--primitive", "lock", "--redis-url", redis_url),
    ):
        _refused(_cli(*args, url=None), "would free lock", "'dead-owner'")


def test_holds_release_force_frees_every_level_of_a_lock_and_logs_it(
    redis_url: str, key: str
) -> None:
    configure(redis_url=redis_url)
    store = current_store()
    token = store.lock_acquire(key, "dead-owner", STALE_MS).token
    assert store.lock_acquire(key, "dead-owner", STALE_MS).count == 2  # re-entered: two levels
    line = _freed(
        _release(key, "lock", "--force", url=redis_url),
        f"freed lock '{key}' held by 'dead-owner' (token {token}, 2 levels, ",
        "woke 0 parked executions",
    )
    assert "now held by" not in line
    assert Lock(key).state().owner is None
    _refused(_release(key, "lock", "--force", url=redis_url), f"no live hold on lock '{key}'")


def test_holds_release_force_frees_every_holder_of_a_semaphore_or_the_one_named(
    redis_url: str, key: str
) -> None:
    configure(redis_url=redis_url)
    store = current_store()
    for owner in ("first", "second"):
        assert store.semaphore_acquire(key, owner, 2, STALE_MS).held
    _refused(
        _release(key, "semaphore", url=redis_url),
        f"would free 2 holds of semaphore '{key}': 'first' (lease ",
        "'second' (lease ",
        "--force",
        "--owner OWNER",
    )
    _refused(
        _release(key, "semaphore", "--owner", "third", "--force", url=redis_url),
        f"no live hold on semaphore '{key}' by 'third'",
        "'first', 'second'",
    )
    line = _freed(
        _release(key, "semaphore", "--owner", "first", "--force", url=redis_url),
        f"freed semaphore '{key}' held by 'first'",
    )
    assert "second" not in line
    assert store.semaphore_state(key).held == 1
    _freed(
        _release(key, "semaphore", "--force", url=redis_url),
        f"freed semaphore '{key}' held by 'second'",
    )
    assert store.semaphore_state(key).held == 0


def test_holds_release_force_frees_a_period_claim_without_marking_its_bucket_done(
    redis_url: str, key: str
) -> None:
    configure(redis_url=redis_url)
    store = current_store()
    claimed = store.period_claim(key, "day", "dead-owner", STALE_MS)
    assert claimed.outcome == "due"
    assert store.period_claim(key, "day", "another", 1000).outcome == "busy"
    _freed(
        _release(key, "period", "--force", url=redis_url),
        f"freed period '{key}' held by 'dead-owner' (bucket '{claimed.bucket}', ",
    )
    assert not store.period_check(key, "day")  # its work was not done: the next run does it
    assert store.period_claim(key, "day", "another", 1000).outcome == "due"


def test_holds_release_force_passes_a_stale_ordered_turn_on_as_not_failed(
    redis_url: str, key: str
) -> None:
    configure(redis_url=redis_url)
    store = current_store()
    epoch, first = store.ordered_lock_take(key, STALE_MS)
    _, second = store.ordered_lock_take(key, STALE_MS)
    assert store.ordered_lock_turn(key, epoch, second, STALE_MS, STALE_MS).outcome == "wait"
    _refused(
        _release(key, "ordered_lock", "--owner", "someone", "--force", url=redis_url),
        "--owner",
        "no owner",
    )
    _refused(
        _release(key, "ordered_lock", url=redis_url),
        f"would free the turn of ordered_lock '{key}': position {first} of epoch {epoch} (",
        "--force",
    )
    _freed(
        _release(key, "ordered_lock", "--force", url=redis_url),
        f"freed the turn of ordered_lock '{key}': position {first} of epoch {epoch} (",
        "last heartbeat ",
    )
    assert store.ordered_lock_turn(key, epoch, second, STALE_MS, STALE_MS).outcome == "turn"
    assert store.ordered_lock_turn(key, epoch, first, STALE_MS, STALE_MS).outcome == "never"
    assert not store.ordered_lock_state(key).failed  # skipped, as a poison pill is: no failure


def test_embedded_status_and_stop_act_on_the_folder_given() -> None:
    folder = tempfile.mkdtemp(prefix="pr-", dir="/tmp")  # short: a unix socket path
    try:
        before = _cli("embedded", "status", "--dir", folder, url=None)
        assert before.returncode == 0, before.stderr
        assert "not running" in before.stdout
        embedded_store(folder).client.ping()  # a server of this test's own, in its folder
        running = _cli("embedded", "status", "--dir", folder, url=None)
        assert re.search(r"^embedded: +running$", running.stdout, re.MULTILINE)
        assert re.search(rf"^socket: +{folder}/redis.sock$", running.stdout, re.MULTILINE)
        stopped = _cli("embedded", "stop", "--dir", folder, url=None)
        assert stopped.stdout.strip() == f"stopped the embedded Redis in {folder}"
        after = _cli("embedded", "status", "--dir", folder, url=None)
        assert "not running" in after.stdout
    finally:
        stop_embedded(folder)
        shutil.rmtree(folder, ignore_errors=True)
