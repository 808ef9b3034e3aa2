"""DESIGN.md §3: statuses and trace-entry kinds are enums used as such, no bare strings.

The source is scanned with ``ast`` for a string equal to a :class:`Status` or the value of a
:class:`TraceKind` where it stands for one: a comparison, a collection of them, a dict keyed by
statuses, a ``"type"`` / ``"status"`` / ``"kind"`` dict entry, a ``status=`` / ``kind=`` /
``type=`` argument, an assignment to ``status``; and every trace entry written names its kind by
the enum. (A status passed by position to the execution store is typed ``Status``: mypy refuses
a bare string there.) Docstrings, messages and names that merely read like a status (an action
called ``"retry"``, a hold state ``"waiting"``, a ``"parked"`` field of the dashboard's JSON)
are not in those positions. What is legitimately a string there is allow-listed below with the
reason; a stale entry fails too, so the list never claims more than is true.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from py_reactor.states import Status, TraceKind

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "py_reactor"
#: Not scanned: the engine (its strings are replaced when it is reshaped) and the enums' home.
SKIPPED = ("states.py",)

STATUSES = frozenset(s.value for s in Status)
KINDS = frozenset(k.value for k in TraceKind)
VOCABULARY = STATUSES | KINDS
#: Dict keys and keyword names whose value is a status or a trace kind.
FIELDS = frozenset({"status", "type", "kind"})
#: Names that hold a trace entry's type when compared (``kind == TraceKind.RUN``).
KIND_NAMES = frozenset({"kind", "type"})

#: ``(file, enclosing function, string)``: a vocabulary string that is not one, and why.
ALLOWED: dict[tuple[str, str, str], str] = {
    # the OpenTelemetry middleware's span kinds are named after the rollback steps they time
    ("observability/otel.py", "on_compensation_completed", "compensate"): "span kind",
    ("observability/otel.py", "on_compensation_failed", "compensate"): "span kind",
    ("observability/otel.py", "on_undo_completed", "undo"): "span kind",
    ("observability/otel.py", "on_undo_failed", "undo"): "span kind",
    # how a fan-out window stopped (failed | halted | refused): the window's own field
    ("engine/kinds/fan_out.py", "_finish", "failed"): "fan-out stop",
    ("engine/kinds/fan_out.py", "_finish", "halted"): "fan-out stop",
    # an outcome handed to a worker: what the caller sees, not a stored Status
    ("engine/results.py", "<module>", "dispatched"): "outcome status",
    ("engine/results.py", "<module>", "parked"): "slot name",
}


def _const(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _names_type(node: ast.AST) -> bool:
    """Whether ``node`` reads a trace entry's type: ``e["type"]``, ``e.get("type")``, ``kind``."""
    if isinstance(node, ast.Subscript):
        return _const(node.slice) in FIELDS
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr == "get" and bool(node.args) and _const(node.args[0]) in FIELDS
    if isinstance(node, ast.Name):
        return node.id in KIND_NAMES
    if isinstance(node, ast.Attribute):
        return node.attr in KIND_NAMES
    return False


def _values(node: ast.AST) -> Iterator[ast.Constant]:
    """The string constants ``node`` stands for: itself, an ``a if c else b``'s branches."""
    if isinstance(node, ast.IfExp):
        yield from _values(node.body)
        yield from _values(node.orelse)
    elif _const(node) is not None:
        assert isinstance(node, ast.Constant)
        yield node


def _bare(tree: ast.AST) -> Iterator[tuple[ast.Constant, str]]:
    """Each vocabulary string in a position where it stands for a status or a trace kind."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            reads_type = any(_names_type(o) for o in operands)
            for operand in operands:
                items = operand.elts if isinstance(operand, ast.Tuple | ast.List | ast.Set) else []
                for c in [*_values(operand), *(v for i in items for v in _values(i))]:
                    if c.value in STATUSES or (reads_type and c.value in KINDS):
                        yield c, "compared"
        elif isinstance(node, ast.Tuple | ast.List | ast.Set):
            found = [_const(e) for e in node.elts]
            if found and all(v in VOCABULARY for v in found):
                for e in node.elts:
                    assert isinstance(e, ast.Constant)
                    yield e, "a collection of them"
        elif isinstance(node, ast.Dict):
            keys = [_const(k) for k in node.keys]
            if len(keys) > 1 and all(k in STATUSES for k in keys):  # something per status
                for key in node.keys:
                    assert isinstance(key, ast.Constant)
                    yield key, "a dict keyed by them"
            for key, value in zip(node.keys, node.values, strict=True):
                if _const(key) in FIELDS:
                    yield from ((c, f"dict entry {_const(key)!r}") for c in _values(value))
        elif isinstance(node, ast.keyword) and node.arg in FIELDS:
            yield from ((c, f"{node.arg}= argument") for c in _values(node.value))
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None and any(_is_status_target(t) for t in targets):
                yield from ((c, "assigned to a status") for c in _values(node.value))


def _is_status_target(target: ast.AST) -> bool:
    if isinstance(target, ast.Name):
        return target.id == "status"
    if isinstance(target, ast.Attribute):
        return target.attr == "status"
    if isinstance(target, ast.Subscript):
        return _const(target.slice) in FIELDS
    return False


def _functions(tree: ast.AST) -> dict[int, str]:
    """The innermost function (or class) around each line."""
    around: dict[int, str] = {}
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for node in sorted(nodes, key=lambda n: n.lineno):  # inner ones, later, overwrite
        for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
            around[line] = node.name
    return around


def findings(source: str, name: str = "<source>") -> list[tuple[str, str, str, int, str]]:
    """``(file, function, string, line, why)`` for each bare status or trace kind in ``source``."""
    tree = ast.parse(source)
    around = _functions(tree)
    found = {
        (name, around.get(c.lineno, "<module>"), c.value, c.lineno, why)
        for c, why in _bare(tree)
        if c.value in VOCABULARY
    }
    return sorted(found)


def _scanned() -> Iterator[tuple[str, str]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if not name.startswith(SKIPPED):
            yield name, path.read_text(encoding="utf-8")


def test_no_bare_status_or_trace_kind() -> None:
    """Every status and trace kind is written with its enum."""
    bare = [
        f"{file}:{line} ({function}): {value!r}, {why}"
        for name, source in _scanned()
        for file, function, value, line, why in findings(source, name)
        if (file, function, value) not in ALLOWED
    ]
    assert bare == [], "use Status / TraceKind (py_reactor.states):\n" + "\n".join(bare)


def test_allow_list_is_not_stale() -> None:
    """Each allowed string is still there: the list shrinks as the code does."""
    present = {
        (file, function, value)
        for name, source in _scanned()
        for file, function, value, _, _ in findings(source, name)
    }
    assert set(ALLOWED) - present == set()


@pytest.mark.parametrize(
    "line",
    [
        'if stored.status == "waiting": pass',
        'if found.status not in ("pending", "running"): pass',
        'ok = record.status != "paused"',
        'CANCELLABLE = ("pending", "waiting")',
        'runs = entries(found, step, ("run",))',
        'x = [e for e in trace if e.get("type") == "parked"]',
        'x = [e for e in trace if e["type"] in ("compensate", "undo")]',
        'if kind == "dispatched": pass',
        'entry = {"type": "cancelled", "step": None}',
        'outcome = {"status": "failed", "error": message}',
        'failure = {"step": name, "kind": "undo"}',
        'store.checkpoint(execution_id, epoch, text, status="running")',
        'status = "running" if inline else "pending"',
        'context.status = "cancelled"',
        'entry["type"] = "run"',
        'hint = {"running": "wait", "waiting": "cancel it"}.get(now, "")',
    ],
)
def test_a_bare_string_is_found(line: str) -> None:
    """The scan finds a status or trace kind written as a bare string in each position."""
    assert findings(line), line


@pytest.mark.parametrize(
    "source",
    [
        'def f():\n    """Status ``"waiting"``: its trace ends with a ``"paused"`` entry."""\n',
        'if action == "retry": pass',  # an action's name, not a trace kind
        'HELD, WAITING = "held", "waiting"',  # a hold state
        'view = {"parked": ids, "failed": count}',  # JSON fields of the dashboard
        'print(f"status {status}")',
        'if entry.get("type") == TraceKind.RUN: pass',
        "if status in (Status.PENDING, Status.RUNNING): pass",
    ],
)
def test_what_is_not_a_status_is_left_alone(source: str) -> None:
    """Docstrings, messages and names that read like a status are not findings."""
    assert findings(source) == []


def _written_kinds(tree: ast.AST) -> Iterator[ast.expr]:
    """What a module writes as a trace entry's type: the first argument of ``run.record(...)``
    and the ``"type"`` of ``trace.append({...})``."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        if node.func.attr == "record" and node.args:
            yield node.args[0]
        receiver = ast.unparse(node.func.value)
        if (
            node.func.attr == "append"
            and (receiver == "trace" or receiver.endswith(".trace"))
            and node.args
            and isinstance(node.args[0], ast.Dict)
        ):
            entry = node.args[0]
            for key, value in zip(entry.keys, entry.values, strict=True):
                if _const(key) == "type":
                    yield value


def test_every_trace_entry_the_library_writes_names_its_kind_by_the_enum() -> None:
    """``run.record(TraceKind.RUN, ...)``, ``{"type": TraceKind.PARKED.value, ...}``: never a
    bare string, so every kind written is a TraceKind member a reader can compare with."""
    written = [
        (path.relative_to(PACKAGE).as_posix(), node)
        for path in PACKAGE.rglob("*.py")
        for node in _written_kinds(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert len(written) > 10, "the scan found few trace entries written: the pattern is stale"
    bare = [
        f"{file}:{node.lineno}"
        for file, node in written
        if "TraceKind." not in ast.unparse(node) and not isinstance(node, ast.Name)
    ]
    assert bare == [], f"write the trace kind with TraceKind: {bare}"


def test_enums_read_and_write_as_their_strings() -> None:
    """Trace entries stay dicts users read with plain strings; JSON holds the plain value."""
    assert TraceKind.RUN == "run"
    assert Status.WAITING == "waiting"
    assert json.dumps({"type": TraceKind.PARKED, "status": Status.FAILED}) == (
        '{"type": "parked", "status": "failed"}'
    )
    assert f"{TraceKind.UNDO}" == "undo"
    assert str(Status.PAUSED) == "paused"
