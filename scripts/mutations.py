#!/usr/bin/env python3
"""Deliberate breakages of py_reactor, each of which a named selection of tests must catch.

Not a mutation-testing tool: a short, hand-written list of the breakages that matter most (a
release that wakes nobody, a stale runner's write accepted, an undo skipped, ...), each paired
with the tests that claim to guard against it. For every mutation the script:

1. copies the committed tree (``git archive <rev>``, HEAD by default) into a temporary
   directory, so the working tree is never touched (uncommitted changes are not checked);
2. applies the change: ``old`` must occur exactly once in ``file``, else the script stops
   before running anything (the list cannot silently rot when the code moves on);
3. points one virtualenv, shared by every copy, at the copy (``pip install --no-deps -e``,
   about 3 s): Celery and thread worker processes import the *installed* py_reactor, so the
   mutated copy must be the installed one, not merely first on a path;
4. runs the selection with ``pytest -x -q -p no:randomly`` under a timeout, in the copy
   (with ``--each``, each listed test or file on its own: with ``-x`` a fast unit test that
   catches the breakage first would hide an end-to-end test that does not);
5. records CAUGHT (a test failed), SURVIVED (every test passed: the selection does not guard
   what it claims to), TIMEOUT, or ERROR (pytest could not run the selection: a node id that
   no longer exists, a collection error, or only errors in fixtures: no test reached its
   assertions, so nothing was caught).

It prints a table, and exits 1 if any mutation survived, 2 if one could not be checked
(error, timeout, a stale ``old`` text), else 0.

Usage::

    python3 scripts/mutations.py                 # every mutation (about 5-10 minutes)
    python3 scripts/mutations.py --list          # the list, validated against the tree
    python3 scripts/mutations.py --only no-wake-on-release,undo-skipped
    python3 scripts/mutations.py --baseline      # also run each selection unmutated first
    python3 scripts/mutations.py --each          # every listed test must catch it on its own

The virtualenv is created on first use (``--venv``, default ``$TMPDIR/py_reactor-mutations-
venv``, with ``pip install -e '.[dev]'``, about a minute) and reused by later runs. The script
itself needs only the standard library and git.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_VENV = Path(tempfile.gettempdir()) / "py_reactor-mutations-venv"
PYTEST_ARGS = ["-x", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]


@dataclass(frozen=True)
class Mutation:
    """One deliberate breakage.

    Attributes:
        id: short name, for ``--only``.
        breaks: one line: what the library gets wrong once it is applied.
        file: the file changed, relative to the repository root.
        old: text that occurs exactly once in ``file``.
        new: what replaces it.
        tests: the pytest node ids or files that must catch it (run in this order, ``-x``).
    """

    id: str
    breaks: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        id="async-wait-blocks-the-loop",
        breaks="a run on an event loop waits for a hand-off with a blocking BLPOP (the loop stops)",
        file="src/py_reactor/storage/redis.py",
        old="            if in_bridge():\n                reply = await_(",
        new="            if False:\n                reply = await_(",
        tests=(
            "tests/concurrency/test_asyncio_concurrency.py"
            "::test_the_loop_ticks_while_a_run_waits_for_a_key_a_thread_holds",
        ),
    ),
    Mutation(
        id="sync-body-on-the-loop",
        breaks="a plain step body of a run on an event loop runs on the loop's thread, blocking it",
        file="src/py_reactor/engine/bodies.py",
        old="    if in_bridge():\n        return to_thread(carried(fn), *args, **kwargs)\n",
        new="",
        tests=(
            "tests/engine/test_async_steps.py"
            "::test_sync_steps_run_in_a_thread_and_the_loop_keeps_ticking",
        ),
    ),
    Mutation(
        id="async-body-outside-the-execution",
        breaks="an async step body runs outside its execution's context (its own lock is foreign)",
        file="src/py_reactor/aio.py",
        old="        return await_(coroutine)\n",
        new="        return await_(asyncio.get_running_loop().create_task(coroutine, "
        "context=contextvars.Context()))\n",
        tests=(
            "tests/engine/test_async_steps.py"
            "::test_bodies_re_enter_what_their_step_holds_from_the_loop_and_from_the_thread",
        ),
    ),
    Mutation(
        id="cancel-keeps-the-key",
        breaks="cancelling the task of a run does not unwind it: what it holds stays held",
        file="src/py_reactor/aio.py",
        old="        except BaseException as exc:  # CancelledError included: unwind fn where it waits\n"
        "            value = bridge.throw(exc)\n",
        new="        except BaseException:  # CancelledError included: unwind fn where it waits\n"
        "            raise\n",
        tests=(
            "tests/concurrency/test_asyncio_concurrency.py"
            "::test_cancelling_a_run_that_holds_a_key_hands_it_to_a_waiting_process_at_once",
        ),
    ),
    Mutation(
        id="worker-serves-every-namespace",
        breaks="a worker takes the executions of every namespace on the store, not only its own",
        file="src/py_reactor/runtime/namespaces.py",
        old="    result = frozenset(names)\n",
        new="    from py_reactor.storage import current_store\n"
        "    from py_reactor.storage.inspect import Inspector\n\n"
        "    result = frozenset(names | Inspector(current_store()).namespaces())\n",
        tests=(
            "tests/transport/test_namespaces.py"
            "::test_two_apps_on_one_store_each_complete_their_own_runs_parking_on_a_shared_key",
        ),
    ),
    Mutation(
        id="wake-into-the-releasers-queue",
        breaks="a release wakes a parked run into one fixed queue, not its own namespace's",
        file="src/py_reactor/storage/lua/_wake_parked.lua",
        old="    local due, ready = queues_of(EXECUTION_PREFIX .. id)\n",
        new="    local due, ready = DUE_PREFIX .. 'tests', READY_PREFIX .. 'tests'\n",
        tests=(
            "tests/transport/test_namespaces.py"
            "::test_two_apps_on_one_store_each_complete_their_own_runs_parking_on_a_shared_key",
        ),
    ),
    Mutation(
        id="no-wake-on-release",
        breaks="a lock's release no longer wakes the run parked on it (only the backstop does)",
        file="src/py_reactor/storage/lua/lock_release.lua",
        old="  wake_parked(KEYS[3], false)\n",
        new="  -- wake_parked(KEYS[3], false)\n",
        tests=(
            "tests/storage/test_inspect.py::test_a_park_on_a_busy_key_is_woken_by_its_release",
            "tests/runtime/test_background.py"
            "::test_a_step_that_meets_a_held_lock_parks_and_the_release_wakes_it",
            "tests/transport/test_celery.py"
            "::test_a_release_in_this_process_wakes_the_run_parked_in_a_worker",
        ),
    ),
    Mutation(
        id="park-counted-twice",
        breaks="every park on contention counts twice toward park_max_attempts",
        file="src/py_reactor/engine/waiter.py",
        old="\n            parks += 1\n",
        new="\n            parks += 2\n",
        tests=("tests/engine/test_waiter.py",),
    ),
    Mutation(
        id="no-epoch-check",
        breaks="a stale runner's checkpoint, park or finish is written over the new runner's",
        file="src/py_reactor/storage/lua/execution_checkpoint.lua",
        old="if tonumber(redis.call('HGET', KEYS[1], 'epoch') or '-1') ~= tonumber(ARGV[2]) then",
        new="if false then",
        tests=(
            "tests/runtime/test_recovery.py::test_a_stale_epoch_writes_nothing",
            "tests/runtime/test_recovery.py"
            "::test_a_runner_made_stale_mid_step_stops_and_writes_nothing",
        ),
    ),
    Mutation(
        id="undo-skipped",
        breaks="rollback passes over completed steps without calling their undo",
        file="src/py_reactor/engine/compensation.py",
        old='        elif defines(decl, "undo"):\n',
        new='        elif defines(decl, "undo") and False:\n',
        tests=("tests/engine/test_rollback.py",),
    ),
    Mutation(
        id="park-cap-never-resets",
        breaks="a step that gets in keeps its park count (Waiter.entered does nothing)",
        file="src/py_reactor/engine/waiter.py",
        old='        (self.root or run.context).step_parks.pop(self.path(step) or "", None)\n',
        new="        pass\n",
        tests=(
            "tests/engine/test_waiter.py"
            "::test_the_park_cap_counts_per_step_and_resets_when_the_step_gets_in",
        ),
    ),
    Mutation(
        id="abort-passes-the-turn",
        breaks="an abnormal exit (KeyboardInterrupt, SystemExit) inside an ordered turn closes "
        "it as failed instead of leaving the position in line",
        file="src/py_reactor/engine/step_runner.py",
        old="        elif isinstance(result, Parked) or aborted:\n",
        new="        elif isinstance(result, Parked):\n",
        tests=(
            "tests/engine/step_coordination/test_regressions.py"
            "::test_an_interrupt_inside_an_ordered_turn_leaves_the_position_for_the_poison_pill",
        ),
    ),
    Mutation(
        id="rate-limit-charged-again",
        breaks="a scope built again (after a park, in another process) is charged its rate "
        "limit again although its ledger records the charge",
        file="src/py_reactor/coordination/gates.py",
        old="        if record is not None:\n"
        "            return Entered(record, fresh=False)\n"
        "        try:\n"
        "            self.p.acquire(wait=wait)\n"
        "        except RateLimitExceededError as exc:\n",
        new="        try:\n"
        "            self.p.acquire(wait=wait)\n"
        "        except RateLimitExceededError as exc:\n",
        tests=(
            "tests/coordination/test_ledger.py"
            "::test_a_rate_limit_is_charged_once_per_scope_even_when_entered_again",
            "tests/transport/test_celery.py"
            "::test_a_reactor_level_rate_limit_is_charged_once_across_a_park",
        ),
    ),
    Mutation(
        id="recovery-adopts-dead-level",
        breaks="a recovered run adopts the presumed-dead runner's lock level instead of "
        "re-entering beside it",
        file="src/py_reactor/coordination/scope.py",
        old="        return None if self.recovered and gate.exclusive else mine\n",
        new="        return mine\n",
        tests=(
            "tests/coordination/test_ledger.py"
            "::test_a_recovered_run_re_enters_beside_a_checkpointed_hold_instead_of_adopting_it",
            "tests/concurrency/test_frozen_runner.py"
            "::test_a_runner_stopped_inside_a_reactor_lock_keeps_its_own_level_beside_the_recovered_run",
        ),
    ),
    Mutation(
        id="stale-runner-gives-up-the-executions-holds",
        breaks="a runner that finds its execution claimed by another releases the reactor's "
        "ordered turn and period claim, which the claimant carries now",
        file="src/py_reactor/engine/executor.py",
        old="        elif stale:  # the runner that claimed the execution carries its turn and "
        "claim now\n",
        new="        elif False:\n",
        tests=(
            "tests/runtime/test_recovery.py"
            "::test_a_stale_runner_leaves_the_executions_ordered_turn_to_the_run_that_claimed_it",
            "tests/runtime/test_recovery.py"
            "::test_a_stale_runner_leaves_the_executions_period_claim_to_the_run_that_claimed_it",
        ),
    ),
    Mutation(
        id="outage-fails-the-step",
        breaks="a store outage in a worker fails the step (and rolls back) instead of "
        "suspending the run",
        file="src/py_reactor/engine/waiter.py",
        old="        if isinstance(exc, StoreUnavailableError):\n"
        "            return self.outage(run, step)\n",
        new="        if isinstance(exc, StoreUnavailableError):\n            return None\n",
        tests=(
            "tests/engine/test_waiter.py"
            "::test_a_store_outage_suspends_a_worker_run_and_a_bad_key_fails_it",
            "tests/runtime/test_store_outage.py"
            "::test_a_store_outage_in_a_worker_suspends_the_run_and_undoes_nothing",
        ),
    ),
    Mutation(
        id="release-frees-every-level",
        breaks="releasing one level of a lock frees the whole hold, so a frozen runner's "
        "release frees the recovered run's level too",
        file="src/py_reactor/storage/lua/lock_release.lua",
        old="if tonumber(h[2]) > 1 then\n",
        new="if tonumber(h[2]) > 1 and false then\n",
        tests=(
            "tests/coordination/test_lock.py"
            "::test_each_level_of_one_owner_lapses_and_releases_on_its_own",
            "tests/concurrency/test_frozen_runner.py",
        ),
    ),
)


class Stale(Exception):
    """The list no longer matches the tree."""


def git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True)


def validate(mutations: tuple[Mutation, ...], rev: str) -> None:
    """Every ``old`` occurs once in its file at ``rev``, ids are unique, test files exist."""
    problems: list[str] = []
    ids = [m.id for m in mutations]
    for dup in sorted({i for i in ids if ids.count(i) > 1}):
        problems.append(f"{dup}: the id is used twice")
    for m in mutations:
        if m.old == m.new:
            problems.append(f"{m.id}: old and new are the same text")
        try:
            text = git("show", f"{rev}:{m.file}").stdout.decode("utf-8")
        except subprocess.CalledProcessError:
            problems.append(f"{m.id}: {m.file} does not exist at {rev}")
            continue
        found = text.count(m.old)
        if found != 1:
            problems.append(f"{m.id}: the old text occurs {found} times in {m.file} (must be 1)")
        if not m.tests:
            problems.append(f"{m.id}: no tests selected")
        for node in m.tests:
            path = node.split("::", 1)[0]
            if git("ls-tree", "--name-only", rev, "--", path).stdout.strip() == b"":
                problems.append(f"{m.id}: the selected test file {path} does not exist at {rev}")
    if problems:
        raise Stale("\n".join(problems))


def copy_tree(rev: str, into: Path) -> None:
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", rev], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    assert archive.stdout is not None
    archive.stdout.close()
    if archive.wait() != 0:
        raise RuntimeError(f"git archive {rev} failed")


def apply(m: Mutation, tree: Path) -> None:
    target = tree / m.file
    text = target.read_text("utf-8")
    if text.count(m.old) != 1:
        raise Stale(f"{m.id}: the old text occurs {text.count(m.old)} times in {m.file}")
    target.write_text(text.replace(m.old, m.new), "utf-8")


def pip(venv: Path, *args: str) -> None:
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q", *args],
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pip {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


def point_venv(venv: Path, tree: Path) -> None:
    """Make ``tree`` the py_reactor installed in ``venv`` (created on first use)."""
    ready = venv / ".py_reactor-mutations-ready"
    if not ready.exists():
        print(f"creating the virtualenv {venv} (once; about a minute)", flush=True)
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip(venv, "install", "-e", f"{tree}[dev]")
        ready.write_text("dependencies of py_reactor[dev] installed\n")
    else:
        pip(venv, "install", "--no-deps", "-e", str(tree))


def child_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


@dataclass
class Outcome:
    mutation: Mutation
    tests: tuple[str, ...]
    result: str
    seconds: float
    detail: str
    log: Path

    @property
    def label(self) -> str:
        """The mutation, and which of its tests ran when not all of them."""
        label = self.mutation.id
        if self.tests != self.mutation.tests:
            label += " <- " + ", ".join(t.rsplit("/", 1)[-1] for t in self.tests)
        if self.result in ("PASSED", "FAILED"):
            label += " (baseline)"
        return label


FAILED = re.compile(r"^FAILED (\S+)", re.MULTILINE)
ERRORED = re.compile(r"^ERROR (\S+)", re.MULTILINE)


def run_tests(
    tests: tuple[str, ...], tree: Path, venv: Path, timeout: float, log: Path
) -> tuple[int | None, str]:
    """pytest's exit code (None: timed out) and its output."""
    command = [str(venv / "bin" / "python"), "-m", "pytest", *PYTEST_ARGS, *tests]
    with log.open("w") as out:
        out.write(f"$ cd {tree} && {' '.join(command)}\n")
        out.flush()
        process = subprocess.Popen(
            command,
            cwd=tree,
            env=child_env(venv),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its worker processes go with it on a timeout
        )
        try:
            code: int | None = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            code = None
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # anything it left running
    return code, log.read_text("utf-8", errors="replace")


def check(
    m: Mutation,
    selections: list[tuple[str, ...]],
    *,
    rev: str,
    venv: Path,
    timeout: float,
    logs: Path,
    keep: bool,
    mutate: bool = True,
) -> list[Outcome]:
    """Run each of ``selections`` on one copy of ``rev`` with ``m`` applied (``mutate``) or
    not (a baseline)."""
    tree = Path(tempfile.mkdtemp(prefix=f"py_reactor-mut-{m.id}-"))
    outcomes: list[Outcome] = []
    try:
        started = time.monotonic()
        copy_tree(rev, tree)
        if mutate:
            apply(m, tree)
        point_venv(venv, tree)
        setup = time.monotonic() - started
        for n, tests in enumerate(selections):
            name = m.id if mutate else f"{m.id}.baseline"
            log = logs / (f"{name}.log" if len(selections) == 1 else f"{name}.{n + 1}.log")
            started = time.monotonic()
            code, output = run_tests(tests, tree, venv, timeout, log)
            seconds = time.monotonic() - started + (setup if n == 0 else 0.0)
            outcomes.append(judge(m, tests, code, output, seconds, log, timeout, mutate))
            print(
                f"  {outcomes[-1].result:<8} {outcomes[-1].label} ({seconds:.0f} s): "
                f"{outcomes[-1].detail}",
                flush=True,
            )
    finally:
        if not keep:
            shutil.rmtree(tree, ignore_errors=True)
    return outcomes


def judge(
    m: Mutation,
    tests: tuple[str, ...],
    code: int | None,
    output: str,
    seconds: float,
    log: Path,
    timeout: float,
    mutate: bool,
) -> Outcome:
    failed = FAILED.findall(output)
    if code is None:
        return Outcome(m, tests, "TIMEOUT", seconds, f"no result within {timeout:g} s", log)
    if code == 0:
        result = "SURVIVED" if mutate else "PASSED"
        return Outcome(m, tests, result, seconds, "every test passed", log)
    if code == 1 and failed:
        return Outcome(m, tests, "CAUGHT" if mutate else "FAILED", seconds, failed[0], log)
    errored = ERRORED.findall(output)
    if code == 1 and errored:  # a fixture or collection error: no test got to its claim
        detail = f"errored, did not fail (run --baseline to tell why): {errored[0]}"
        return Outcome(m, tests, "ERROR", seconds, detail, log)
    tail = output.strip().splitlines()[-1:] or [""]
    return Outcome(m, tests, "ERROR", seconds, f"pytest exit {code}: {tail[0]}", log)


def table(rows: list[Outcome]) -> str:
    lines: list[str] = []
    for r in rows:
        lines.append(f"{r.result:<8}  {r.seconds:>4.0f}s  {r.label}")
        lines.append(f"{'':<16}{r.detail}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated mutation ids")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--rev", default="HEAD", help="the commit to copy (default HEAD)")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="the shared virtualenv")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per mutation")
    parser.add_argument("--keep", action="store_true", help="keep the mutated copies")
    parser.add_argument(
        "--baseline", action="store_true", help="first run each selection on the unmutated copy"
    )
    parser.add_argument(
        "--each",
        action="store_true",
        help="run each listed test on its own: every one must catch its mutation",
    )
    args = parser.parse_args(argv)

    chosen = MUTATIONS
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        unknown = sorted(set(wanted) - {m.id for m in MUTATIONS})
        if unknown:
            parser.error(f"unknown mutation id(s): {', '.join(unknown)}")
        chosen = tuple(m for m in MUTATIONS if m.id in wanted)
    try:
        validate(chosen, args.rev)
    except Stale as exc:
        print(f"the mutation list is stale:\n{exc}", file=sys.stderr)
        return 2

    if args.list:
        for m in chosen:
            print(f"{m.id}\n  breaks: {m.breaks}\n  file:   {m.file}")
            for node in m.tests:
                print(f"  test:   {node}")
        return 0

    logs = Path(tempfile.mkdtemp(prefix="py_reactor-mutations-logs-"))
    print(f"{len(chosen)} mutation(s) of {args.rev}; logs in {logs}", flush=True)
    rows: list[Outcome] = []
    for m in chosen:
        selections = [(node,) for node in m.tests] if args.each else [m.tests]
        run = partial(
            check, m, selections, rev=args.rev, venv=args.venv, timeout=args.timeout,
            logs=logs, keep=args.keep,
        )  # fmt: skip
        if args.baseline:
            base = run(mutate=False)
            rows += base
            if any(r.result != "PASSED" for r in base):
                continue  # a selection failing unbroken says nothing about the breakage
        rows += run()
    print()
    print(table(rows))
    survived = [r for r in rows if r.result == "SURVIVED"]
    broken = [r for r in rows if r.result in ("ERROR", "TIMEOUT", "FAILED")]
    for r in survived + broken:
        print(f"\n{r.label}: {r.result}, see {r.log}")
    if survived:
        print(f"\n{len(survived)} mutation(s) survived: their tests do not guard what they claim")
        return 1
    return 2 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
