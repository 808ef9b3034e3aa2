"""What a key function reads from its mapping, found in its source: ``m["x"]``, ``m.get("x")``.

Used to refuse, when a class is defined, a key function that reads a name the step (or the
reactor) never receives. Only constant string reads of the function's own parameter count,
and anything uncertain (no source, a source that does not parse, several candidate lambdas,
a rebound parameter) reads as "nothing known", so the check never refuses a correct key.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

__all__ = ["names_read"]


def names_read(key: Callable[..., Any]) -> list[str]:
    """The constant names ``key`` reads from its mapping: ``m["x"]``, ``m.get("x")``.

    Found by parsing the key's source; empty when the source cannot be read or parsed, when
    the function cannot be found in it unambiguously, or when its parameter is rebound.
    """
    node = _function_node(key)
    if node is None:
        return []
    arguments = [*node.args.posonlyargs, *node.args.args]
    if not arguments:
        return []
    param = arguments[0].arg
    body: list[ast.AST] = [node.body] if isinstance(node, ast.Lambda) else list(node.body)
    reads: list[str] = []
    for statement in body:
        for sub in ast.walk(statement):
            if _rebinds(sub, param):
                return []
            read = _constant_read(sub, param)
            if read is not None and read not in reads:
                reads.append(read)
    return reads


def _function_node(key: Callable[..., Any]) -> ast.Lambda | ast.FunctionDef | None:
    code = getattr(key, "__code__", None)
    if code is None:
        return None
    try:
        lines, start = inspect.getsourcelines(key)
    except (OSError, TypeError):
        return None
    text = "".join(lines)
    parsed = _parse(text)
    if parsed is None:
        return None
    tree, shift = parsed
    if key.__name__ != "<lambda>":
        defs = [
            n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == key.__name__
        ]
        return defs[0] if len(defs) == 1 else None
    lambdas = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda)]
    if len(lambdas) > 1 and shift is not None:  # several on these lines: the one holding the code
        at = next(
            ((line, col) for line, _, col, end in code.co_positions() if col and end and end > col),
            None,
        )
        if at is not None:
            line, col = at[0] - start + 1 + shift, at[1]
            lambdas = [n for n in lambdas if _spans(n, line, col)]
    return lambdas[0] if len(lambdas) == 1 else None


def _parse(text: str) -> tuple[ast.Module, int | None] | None:
    """``text`` parsed, with the line shift of the wrapping (None: columns moved by dedent)."""
    attempts: list[tuple[str, int | None]] = []
    if text[:1].isspace():
        attempts.append(("if 1:\n" + text, 1))
    else:
        attempts.append((text, 0))
    dedented = textwrap.dedent(text).strip()
    attempts += [(dedented, None), (dedented.rstrip(",)"), None)]
    for source, shift in attempts:
        try:
            return ast.parse(source), shift
        except SyntaxError:
            continue
    return None


def _spans(node: ast.AST, line: int, col: int) -> bool:
    start = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
    end = (getattr(node, "end_lineno", None) or 0, getattr(node, "end_col_offset", None) or 0)
    return start <= (line, col) <= end


def _rebinds(node: ast.AST, param: str) -> bool:
    if isinstance(node, ast.Name) and node.id == param and not isinstance(node.ctx, ast.Load):
        return True
    if isinstance(node, ast.Lambda | ast.FunctionDef | ast.AsyncFunctionDef):
        return any(a.arg == param for a in ast.walk(node.args) if isinstance(a, ast.arg))
    return False


def _constant_read(node: ast.AST, param: str) -> str | None:
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == param
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
    ):
        return node.slice.value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == param
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return node.args[0].value
    return None
