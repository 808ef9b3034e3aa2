"""The operator's commands of ``py-reactor`` (executions, holds, embedded) and what every command
shares: the store options, ``--import``, and one-line errors.

An operator without a browser lists, inspects, cancels, undoes, retries and resumes stored
executions from a shell. The reads are the dashboard's own views (``py_reactor.views``), so
``executions list``, ``executions show`` and ``holds --json`` print what ``/api/executions``,
``/api/executions/{id}`` and ``/api/holds`` answer, without the ``web`` extra. The actions
call the public API (``py_reactor.api``); ``holds release`` calls ``runtime.holds``, which frees
a stale hold as its holder's release would. ``py_reactor.cli`` builds the parser and reports
errors.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from py_reactor import api
from py_reactor.config import configure, get_config
from py_reactor.config.urls import redact
from py_reactor.errors import ReactorError
from py_reactor.runtime.holds import describe_holds, force_release, holds_to_free
from py_reactor.runtime.namespaces import serve, served
from py_reactor.states import Status
from py_reactor.storage import current_store
from py_reactor.storage.embedded import embedded_dir, stop_embedded
from py_reactor.storage.inspect import Inspector
from py_reactor.views.coordination import coordination
from py_reactor.views.executions import STATUSES, execution_detail, list_executions
from py_reactor.views.records import to_json

__all__ = [
    "CommandError",
    "add_imports",
    "add_namespaces",
    "add_operator_commands",
    "add_store_option",
    "import_modules",
    "one_line",
    "reach_store",
    "serve_namespaces",
    "settle",
    "use_store",
    "use_worker",
]

#: The environment variable a command reads when it is given no ``--redis-url``.
REDIS_URL_ENV = "PY_REACTOR_REDIS_URL"
#: The most ``executions list`` shows at once (the dashboard's API caps a page the same way).
MOST = 500

Handler = Callable[[argparse.Namespace], int]
T = TypeVar("T")


class CommandError(Exception):
    """A command refused its input; the message says what was wrong and what to do."""


# -- what every command shares ----------------------------------------------------------------


def add_store_option(command: argparse.ArgumentParser, *, needed: str = "") -> None:
    """Add ``--redis-url`` to ``command`` (``needed``: why it cannot do without a server)."""
    fallback = needed or "else the embedded server"
    command.add_argument(
        "--redis-url",
        metavar="URL",
        help=f"the store, like redis://host:6379/0 (default: ${REDIS_URL_ENV}, {fallback})",
    )


def add_imports(command: argparse.ArgumentParser, what: str) -> None:
    """Add the repeatable ``--import MODULE`` to ``command``."""
    command.add_argument(
        "--import",
        dest="modules",
        action="append",
        default=[],
        metavar="MODULE",
        help=f"a module that defines {what} (repeatable; the current folder is on the path)",
    )


def add_namespaces(command: argparse.ArgumentParser) -> None:
    """Add the repeatable ``--namespace NAME`` to a command that serves executions."""
    command.add_argument(
        "--namespace",
        dest="namespaces",
        action="append",
        default=[],
        metavar="NAME",
        help="serve this namespace too (repeatable; by default the namespaces of the imported "
        "reactors: their modules' top-level packages)",
    )


def serve_namespaces(args: argparse.Namespace) -> list[str]:
    """Serve the ``--namespace`` names too; every namespace this process serves now.

    Raises:
        CommandError: a name is not a namespace, or there is nothing to serve.
    """
    for name in args.namespaces:
        try:
            serve(name)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
    namespaces = sorted(served())
    if not namespaces:
        raise CommandError(
            "serves no namespace: name your reactor modules with --import MODULE (a worker "
            "serves the namespaces of the reactors it imported), or a namespace with "
            "--namespace NAME"
        )
    return namespaces


def redis_url(args: argparse.Namespace) -> tuple[str | None, str]:
    """The URL a command uses and where it came from: ``--redis-url``, else the environment
    variable, else None (the embedded server)."""
    if args.redis_url:
        return args.redis_url, "--redis-url"
    from_env = os.environ.get(REDIS_URL_ENV)
    if from_env:
        return from_env, REDIS_URL_ENV
    return None, ""


def use_store(args: argparse.Namespace) -> str | None:
    """Configure py_reactor for the command's store; its URL (None: the embedded server).

    Raises:
        CommandError: the URL is not usable; the message names where it came from.
    """
    url, source = redis_url(args)
    if url is not None:
        try:
            configure(redis_url=url)
        except (TypeError, ValueError) as exc:
            raise CommandError(f"{source}: {exc}") from None
    return url


def reach_store() -> None:
    """Ask the configured store one cheap question, so that a store that is down is one error
    here rather than a worker thread's warnings and a failure later.

    Raises:
        StoreUnavailableError, or redis-py's error: the store cannot be reached.
    """
    store = current_store()
    try:
        Inspector(store).execution_count()
    except Exception as exc:
        error = store.read_error(exc, "py-reactor's first read")
        if error is None:
            raise
        raise error from None


def import_modules(modules: Sequence[str]) -> None:
    """Import the ``--import`` modules (their reactors register themselves).

    Raises:
        CommandError: a module cannot be imported; the message says which and why.
    """
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise CommandError(
                f"cannot import {module!r} ({type(exc).__name__}: {exc}); run py-reactor from "
                "the folder that holds the package, or fix the module name"
            ) from None


def one_line(exc: BaseException) -> str:
    """``exc`` as one line: its message, with the class name when the message alone is not
    an explanation (an unexpected error); a raw redis-py error says which store failed."""
    text = " ".join(str(exc).split())
    if type(exc).__module__.partition(".")[0] == "redis":  # a raw read error of the store's
        url = get_config().redis_url
        where = f"at {redact(url)}" if url else "(the embedded server)"
        return (
            f"the store {where} cannot be reached ({type(exc).__name__}: {text}); check that "
            f"Redis runs there, or fix --redis-url / ${REDIS_URL_ENV}"
        )
    expected = (CommandError, ReactorError, LookupError, ValueError, TypeError)
    if isinstance(exc, expected) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def settle(execution_ids: Sequence[str], wait: float) -> None:
    """Wait up to ``wait`` seconds for ``execution_ids`` to leave pending and running: the
    thread worker runs them in this process, which must not exit under them."""
    deadline = time.monotonic() + wait
    for execution_id in execution_ids:
        while time.monotonic() < deadline:
            found = api.find(execution_id)
            if found is None or found.status not in (Status.PENDING, Status.RUNNING):
                break
            time.sleep(0.05)


# -- parser -------------------------------------------------------------------------------------


def add_operator_commands(commands: Any) -> None:
    """Add ``executions``, ``holds`` and ``embedded`` to the ``py-reactor`` subcommands."""
    executions = commands.add_parser(
        "executions",
        help="list, show, cancel, undo, retry or resume stored executions",
        description="List, show, cancel, undo, retry or resume stored executions.",
    )
    actions = executions.add_subparsers(dest="action", required=True, metavar="ACTION")

    listing = _sub(actions, "list", _list, "the newest executions first, filtered")
    listing.add_argument("--reactor", help="only this reactor: module:qualname or class name")
    listing.add_argument(
        "--namespace", help="only this application's (by default a reactor module's package)"
    )
    listing.add_argument(
        "--status",
        choices=[str(status) for status in Status],
        metavar="STATUS",
        help=f"only this status: {', '.join(Status)}",
    )
    listing.add_argument(
        "--limit",
        type=_count,
        default=50,
        metavar="N",
        help=f"how many to show (default 50, at most {MOST})",
    )

    show = _sub(actions, "show", _show, "one execution: status, steps, trace, holds")
    show.add_argument("execution_id", metavar="ID", help="the execution's id")

    cancel = _sub(actions, "cancel", _cancel, "stop a run that waits or failed, no rollback")
    cancel.add_argument("execution_id", metavar="ID", help="the execution's id")
    cancel.add_argument("--reason", help="why, stored in its outcome")

    undo = _sub(actions, "undo", _undo, "roll a run that is not running back, then cancel it")
    undo.add_argument("execution_id", metavar="ID", help="the execution's id")
    add_imports(undo, "its reactor, if its module is not importable by name from here")

    retry = _sub(actions, "retry", _retry, "start a new run with an ended run's inputs")
    retry.add_argument("execution_id", metavar="ID", help="the execution's id")
    _running_options(retry)

    resume = _sub(actions, "resume", _resume, "resume a run paused at an interrupt")
    resume.add_argument("execution_id", metavar="ID", help="the execution's id")
    resume.add_argument(
        "--payload",
        required=True,
        metavar="JSON",
        help="the interrupt's payload as JSON, e.g. '{\"approved\": true}'",
    )
    _running_options(resume)

    holds = commands.add_parser(
        "holds",
        help="every live hold: locks, semaphores, ordered locks, periods; or free a stale one",
        description="Every live hold on the store, as the dashboard's /api/holds shows it. "
        "With the action release, an operator frees a stale hold.",
    )
    add_store_option(holds)
    holds.add_argument("--json", action="store_true", help="print JSON (as /api/holds)")
    holds.set_defaults(handler=_holds)
    # Optional: `py-reactor holds` alone lists, as it always did.
    release = holds.add_subparsers(dest="action", metavar="ACTION").add_parser(
        "release",
        help="free a stale hold as its holder's own release would (and wake the parked)",
        description="Free the hold on KEY whose holder is gone, as the holder's own release "
        "would: the key goes to the oldest queued waiter, or the executions parked on it are "
        "woken. Without --force, say what would be freed and free nothing. A lock frees every "
        "level of its owner; a semaphore the slot of every holder (or of --owner); a period "
        "every claim in flight, its bucket not marked done; an ordered lock passes its current "
        "turn on, not as a failure (as the poison pill would). The release is logged.",
    )
    release.add_argument("key", metavar="KEY", help="the key, as py-reactor holds lists it")
    release.add_argument(
        "--primitive",
        required=True,
        metavar="P",
        help="lock, semaphore, period or ordered_lock (a rate limit has no holder to free)",
    )
    release.add_argument(
        "--owner",
        metavar="OWNER",
        help="free only this owner's hold (an execution id names that run's holds); default "
        "every holder of the key; not for an ordered lock",
    )
    release.add_argument(
        "--force",
        action="store_true",
        help="free it; without it, the command only says what it would free",
    )
    release.add_argument(  # SUPPRESS: `holds --redis-url URL release ...` keeps the URL given
        "--redis-url",
        default=argparse.SUPPRESS,
        metavar="URL",
        help=f"the store, like redis://host:6379/0 (default: ${REDIS_URL_ENV}, "
        "else the embedded server)",
    )
    release.set_defaults(handler=_release)

    embedded = commands.add_parser(
        "embedded",
        help="the embedded Redis server of this user: status or stop",
        description="Whether the embedded Redis server (the default store) runs, or stop it.",
    )
    which = embedded.add_subparsers(dest="action", required=True, metavar="ACTION")
    for name, handler, text in (
        ("status", _embedded_status, "whether it runs, its folder, socket and pid"),
        ("stop", _embedded_stop, "stop it (every process using it loses its store)"),
    ):
        parser = which.add_parser(name, help=text, description=text[0].upper() + text[1:] + ".")
        parser.add_argument(
            "--dir",
            metavar="FOLDER",
            help="its folder (default: $PY_REACTOR_EMBEDDED_DIR, else ~/.cache/py_reactor/redis)",
        )
        parser.set_defaults(handler=handler)


def _sub(actions: Any, name: str, handler: Handler, text: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = actions.add_parser(
        name, help=text, description=text[0].upper() + text[1:] + "."
    )
    add_store_option(parser)
    if name in ("list", "show"):
        parser.add_argument("--json", action="store_true", help="print JSON (as /api/executions)")
    parser.set_defaults(handler=handler)
    return parser


def _running_options(parser: argparse.ArgumentParser) -> None:
    add_imports(parser, "its reactor, if its module is not importable by name from here")
    parser.add_argument(
        "--worker",
        choices=("threads", "celery"),
        default="threads",
        help="run the new work here (threads, the default) or send it to Celery workers",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="with threads: seconds to let it run before exiting (default 30)",
    )


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MOST:
        raise argparse.ArgumentTypeError(f"{value} is not between 1 and {MOST}")
    return value


# -- executions ---------------------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    use_store(args)
    reach_store()  # a store that is down: one line naming it, as the dashboard's 503 does
    if args.status and args.status not in STATUSES:
        statuses = ", ".join(STATUSES)
        raise CommandError(f"--status {args.status!r} is not a status; use one of {statuses}")
    listing = list_executions(
        current_store(),
        reactor=args.reactor or None,
        status=args.status or None,
        namespace=args.namespace or None,
        limit=args.limit,
    )
    if args.json:
        _print_json(listing)
        return 0
    items = listing["items"]
    if not items:
        filtered = args.reactor or args.status or args.namespace
        print("no executions match" if filtered else "no executions stored")
        return 0
    rows = [
        [
            item["execution_id"],
            item["namespace"],
            item["reactor_name"],
            str(item["status"]),
            item["step"] or "",
            str(item["parks"]),
            _when(item["updated_at"]),
            _short(item["problem"] or item["error"] or item["reason"] or ""),
        ]
        for item in items
    ]
    headers = ["ID", "NAMESPACE", "REACTOR", "STATUS", "STEP", "PARKS", "UPDATED (UTC)", "NOTE"]
    print(table(headers, rows))
    more = "; more with a larger --limit" if listing["next_cursor"] is not None else ""
    print(f"{len(items)} shown, {listing['total']} stored{more}")
    return 0


def _show(args: argparse.Namespace) -> int:
    use_store(args)
    reach_store()  # a store that is down: one line naming it, as the dashboard's 503 does
    if "/" in args.execution_id or not args.execution_id.strip():
        raise CommandError(
            f"{args.execution_id!r} is not an execution id; `py-reactor executions list` shows them"
        )
    detail = execution_detail(current_store(), args.execution_id)
    if detail is None:
        raise CommandError(
            f"the store has no execution {args.execution_id!r}; "
            "`py-reactor executions list` shows what it has"
        )
    if args.json:
        _print_json(detail)
        return 0
    waiting = detail["waiting_on"]
    fields = [
        ("execution", detail["execution_id"]),
        ("reactor", detail["reactor"]),
        ("status", str(detail["status"])),
        ("created", _when(detail["created_at"])),
        ("updated", _when(detail["updated_at"])),
        ("parks", str(detail["parks"])),
        ("step", detail["step"]),
        ("waiting on", _waiting(waiting)),
        ("error", detail["error"]),
        ("reason", detail["reason"]),
        ("problem", detail["problem"]),
        ("retry of", detail["retry_of"]),
        ("retried by", detail["retried_by"]),
        ("inputs", _compact(detail["inputs"])),
        ("results of", ", ".join(detail["results"]) or "none"),
        ("actions", ", ".join(detail["actions"]) or "none"),
    ]
    print(table([], [[f"{name}:", str(value)] for name, value in fields if value is not None]))
    trace = [
        [
            str(entry.get("type", "")),
            str(entry.get("step") or ""),
            _when(entry.get("started_at")),
            _seconds(entry.get("started_at"), entry.get("finished_at")),
            _short(_trace_note(entry)),
        ]
        for entry in detail["trace"]
    ]
    print("\ntrace:" if trace else "\ntrace: empty")
    if trace:
        print(table(["TYPE", "STEP", "STARTED (UTC)", "TOOK", "NOTE"], trace))
    print("\nholds:\n" + _hold_table(detail["holds"]) if detail["holds"] else "\nholds: none")
    return 0


def _cancel(args: argparse.Namespace) -> int:
    use_store(args)
    found = _act(lambda: api.cancel(args.execution_id, args.reason))
    print(f"cancelled {found.execution_id}: status {found.status}")
    return 0


def _undo(args: argparse.Namespace) -> int:
    use_store(args)
    import_modules(args.modules)
    found = _act(lambda: api.undo(args.execution_id))
    failures = getattr(found.outcome, "rollback_failures", None) or []
    note = f", {len(failures)} step(s) could not be undone" if failures else ""
    print(f"undone {found.execution_id}: status {found.status}{note}")
    return 0


def _retry(args: argparse.Namespace) -> int:
    _ready_to_run(args)
    outcome = _act(lambda: api.retry(args.execution_id))
    new_id = str(outcome.execution_id)
    return _report(args, f"retried {args.execution_id} as {new_id}", new_id)


def _resume(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except ValueError as exc:
        raise CommandError(f"--payload is not JSON ({exc}): give it like '{{\"a\": 1}}'") from None
    _ready_to_run(args)
    # Handed to a worker as the dashboard's resume is, whatever the interrupt's resume= says.
    _act(lambda: api.resume(args.execution_id, payload, mode="background"))
    return _report(args, f"resumed {args.execution_id}", args.execution_id)


def _ready_to_run(args: argparse.Namespace) -> None:
    use_worker(args.worker, use_store(args))
    import_modules(args.modules)


def use_worker(worker: str, url: str | None) -> None:
    """Configure where new work runs (``--worker``).

    Raises:
        CommandError: Celery without a Redis URL (the embedded server is no broker).
    """
    if worker == "celery" and url is None:
        raise CommandError(
            f"--worker celery needs --redis-url URL or ${REDIS_URL_ENV}: Celery workers share "
            "a Redis server"
        )
    configure(worker=worker)


def _report(args: argparse.Namespace, done: str, execution_id: str) -> int:
    if args.worker == "threads":
        settle([execution_id], args.wait)
    found = api.find(execution_id)
    status = "unknown" if found is None else str(found.status)
    print(f"{done}: status {status}")
    if args.worker == "threads" and status in (Status.PENDING, Status.RUNNING):
        print(
            f"still {status} after --wait {args.wait:g} s; a worker or `py-reactor sweep` "
            "picks it up once this process's lease lapses",
            file=sys.stderr,
        )
    return 0


def _act(action: Callable[[], T]) -> T:
    """Run an API call, its refusals turned into one-line CommandErrors."""
    try:
        return action()
    except (LookupError, ReactorError) as exc:
        raise CommandError(one_line(exc)) from None


# -- holds and the embedded server --------------------------------------------------------------


def _holds(args: argparse.Namespace) -> int:
    use_store(args)
    reach_store()  # a store that is down: one line naming it, as the dashboard's 503 does
    state = coordination(current_store())
    if args.json:
        _print_json(state)
        return 0
    print(_hold_table(state["holds"]) if state["holds"] else "no live holds")
    return 0


def _release(args: argparse.Namespace) -> int:
    use_store(args)
    reach_store()  # a store that is down: one line naming it
    if args.primitive == "ordered_lock" and args.owner is not None:
        raise CommandError(
            "--owner: an ordered lock's positions have no owner in the store; leave --owner "
            "out to free the current turn"
        )
    if not args.force:
        found = _act(lambda: holds_to_free(args.primitive, args.key, owner=args.owner))
        which = "them, or --owner OWNER to free one" if len(found) > 1 else "it"
        raise CommandError(f"would free {describe_holds(found)}; add --force to free {which}")
    released = _act(lambda: force_release(args.primitive, args.key, owner=args.owner))
    print(f"freed {released.describe()}")
    return 0


def _hold_table(holds: list[dict[str, Any]]) -> str:
    rows = [
        [
            str(hold.get("primitive", "")),
            str(hold.get("key", "")),
            str(hold.get("state", "")),
            str(hold.get("execution_id") or hold.get("owner") or ""),
            str(hold.get("reactor") or "").rpartition(":")[2],
            str(hold.get("step") or ""),
            "" if hold.get("ttl_left") is None else f"{hold['ttl_left']:.1f}s",
            "yes" if hold.get("live", True) else "no (lapsed)",
        ]
        for hold in holds
    ]
    headers = ["PRIMITIVE", "KEY", "STATE", "EXECUTION", "REACTOR", "STEP", "TTL LEFT", "LIVE"]
    return table(headers, rows)


def _embedded_status(args: argparse.Namespace) -> int:
    folder = embedded_dir(args.dir)
    socket = folder / "redis.sock"
    pid_file = folder / "redis.pid"
    pid = pid_file.read_text().strip() if pid_file.exists() else ""
    running = socket.exists() and pid.isdigit() and _alive(int(pid))
    fields = [
        ("embedded", "running" if running else "not running"),
        ("folder", str(folder)),
        ("socket", str(socket) if running else "-"),
        ("pid", pid if running else "-"),
    ]
    print(table([], [[f"{name}:", value] for name, value in fields]))
    return 0


def _embedded_stop(args: argparse.Namespace) -> int:
    folder = embedded_dir(args.dir)
    stopped = stop_embedded(str(folder))
    print(
        f"stopped the embedded Redis in {folder}"
        if stopped
        else f"no embedded Redis runs in {folder}: nothing to stop"
    )
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- output -------------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Rows as aligned plain-text columns (with a header line when ``headers`` is given)."""
    lines = [list(headers), *map(list, rows)] if headers else [list(row) for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))] if lines else []
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _print_json(value: Any) -> None:
    print(to_json(value, indent=2))


def _when(seconds: float | None) -> str:
    if not seconds:
        return ""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _seconds(started: float | None, finished: float | None) -> str:
    if started is None or finished is None:
        return ""
    return f"{finished - started:.3f}s"


def _waiting(waiting: dict[str, Any] | None) -> str | None:
    if not waiting:
        return None
    text = str(waiting.get("primitive") or "")
    if waiting.get("key") is not None:
        text += f" {waiting['key']!r}"
    if waiting.get("until"):
        text += f", next attempt at {_when(waiting['until'])} UTC"
    return text


def _trace_note(entry: dict[str, Any]) -> str:
    if entry.get("error"):
        return str(entry["error"])
    if entry.get("key"):
        return f"{entry.get('primitive', '')} {entry['key']!r}"
    return ""


def _compact(value: Any) -> str:
    return _short(json.dumps(value, sort_keys=True, default=str), 100)


def _short(text: str, most: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= most else text[: most - 3] + "..."
