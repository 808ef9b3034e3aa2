"""What the assertion helpers share: finding the run they are asked about, and saying what
they found in a message a person can read (the trace shown briefly, one line per entry)."""

from __future__ import annotations

import difflib
import pprint
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from py_reactor.engine.context import Context
from py_reactor.engine.results import DispatchedResult, Outcome
from py_reactor.engine.serializer import loads_context
from py_reactor.errors import SerializationError
from py_reactor.runtime.execution import Execution, find
from py_reactor.states import TraceKind

if TYPE_CHECKING:
    from py_reactor.runtime.execution import Execution

__all__ = [
    "MISSING",
    "Subject",
    "Text",
    "diff",
    "fail",
    "format_trace",
    "matches",
    "short",
    "subject",
]


class _Missing:
    """The default of an option that was not given (None is a value some options check)."""

    def __repr__(self) -> str:
        return "<not given>"


MISSING: Any = _Missing()

#: What text options take: a substring to find, or a compiled pattern to search for.
Text = str | re.Pattern[str]

#: Trace lines a failure message shows at most (the last ones, where things went wrong).
TRACE_LINES = 25


@dataclass(slots=True)
class Subject:
    """The run an assertion is about, however it was given.

    Attributes:
        label: ``"Checkout (execution 3f2a...)"``, for messages.
        status: the outcome's status, or the stored execution's.
        trace: the run's trace.
        outcome: the terminal outcome (None while a dispatched run has not ended).
        execution: the stored execution, when the run was given by its record or id.
        context: the run's context (children included), when it could be read.
    """

    label: str
    status: str
    trace: list[dict[str, Any]]
    outcome: Outcome | None = None
    execution: Execution | None = None
    context: Context | None = None


def subject(value: object, helper: str) -> Subject:
    """The run ``value`` names: an outcome, a ``DispatchedResult`` (read from the store), an
    :class:`~py_reactor.Execution`, or an execution id.

    Raises:
        TypeError: ``value`` is none of these (a helper was given the wrong thing).
        AssertionError: no stored execution has that id.
    """

    if isinstance(value, Outcome) and not isinstance(value, DispatchedResult):
        context = value.context
        return Subject(
            _label(context.reactor, context.execution_id),
            value.status,
            list(value.trace),
            outcome=value,
            context=context,
        )
    if isinstance(value, DispatchedResult):
        return _find(value.execution_id, helper)
    if isinstance(value, Execution):
        return _from_execution(value)
    if isinstance(value, str):
        return _find(value, helper)
    raise TypeError(
        f"{helper}() takes an outcome (what Reactor.run returns), an Execution (find(id)) or "
        f"an execution id, got {type(value).__qualname__}: {short(value)}"
    )


def _find(execution_id: str, helper: str) -> Subject:

    execution = find(execution_id)
    if execution is None:
        raise AssertionError(
            f"{helper}(): no execution {execution_id!r} is stored in the configured store "
            "(is this test using the store the run was dispatched to?)"
        )
    return _from_execution(execution)


def _from_execution(execution: Execution) -> Subject:
    context = execution.outcome.context if execution.outcome is not None else None
    if context is None:
        context = _stored_context(execution.execution_id)
    return Subject(
        _label(execution.reactor, execution.execution_id),
        execution.status,
        list(execution.trace),
        outcome=execution.outcome,
        execution=execution,
        context=context,
    )


def _stored_context(execution_id: str) -> Context | None:
    from py_reactor.storage import current_store
    from py_reactor.storage.executions import ExecutionStore

    stored = ExecutionStore(current_store()).load(execution_id)
    if stored is None:
        return None
    try:
        return loads_context(stored.context)
    except SerializationError:
        return None


def _label(reactor: str, execution_id: str) -> str:
    return f"{reactor.rpartition(':')[2]} (execution {execution_id})"


def entries(found: Subject, step: str | None, kinds: tuple[TraceKind, ...]) -> list[dict[str, Any]]:
    """The trace entries of ``kinds`` for ``step``, oldest first.

    A dotted ``step`` (``"child.charge"``) names a step of a composed child: its entries are
    read from the child's own trace (parks of it are in the root trace under the dotted name).
    """
    found_entries = [e for e in found.trace if e.get("type") in kinds and e.get("step") == step]
    if step is not None and "." in step and found.context is not None:
        found_entries.extend(_child_entries(found.context, step, kinds))
    return found_entries


def _child_entries(
    context: Context, step: str, kinds: tuple[TraceKind, ...]
) -> Iterator[dict[str, Any]]:
    head, _, rest = step.partition(".")
    child = context.children.get(head)
    if child is None:
        return
    yield from (e for e in child.trace if e.get("type") in kinds and e.get("step") == rest)
    if "." in rest:
        yield from _child_entries(child, rest, kinds)


def all_steps(found: Subject) -> list[str]:
    """Every step the trace names, in order of first appearance (for "did you mean")."""
    seen: dict[str, None] = {}
    for entry in found.trace:
        name = entry.get("step")
        if isinstance(name, str):
            seen.setdefault(name, None)
    return list(seen)


def matches(text: object, expected: Text) -> bool:
    """Whether ``text`` contains the str ``expected`` or matches the compiled pattern."""
    rendered = "" if text is None else str(text)
    if isinstance(expected, re.Pattern):
        return expected.search(rendered) is not None
    return expected in rendered


def describe_text(expected: Text) -> str:
    """How a text option reads in a message."""
    if isinstance(expected, re.Pattern):
        return f"matching /{expected.pattern}/"
    return f"containing {expected!r}"


def short(value: object, width: int = 60) -> str:
    """``repr(value)``, cut to ``width`` characters."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def diff(expected: object, found: object) -> str:
    """Expected and found values, with a line diff when they do not fit on one line each."""
    left = pprint.pformat(expected, width=88, compact=True)
    right = pprint.pformat(found, width=88, compact=True)
    if "\n" not in left and "\n" not in right and len(left) + len(right) < 120:
        return f"  expected: {left}\n  found:    {right}"
    lines = difflib.ndiff(left.splitlines(), right.splitlines())
    return "  diff (- expected, + found):\n" + "\n".join(f"    {line}" for line in lines)


def format_trace(trace: list[dict[str, Any]], limit: int = TRACE_LINES) -> list[str]:
    """The trace as short numbered lines, the last ``limit`` of them."""
    if not trace:
        return ["    (empty: no step ran)"]
    lines = [f"    {n:>2}. {_entry(entry)}" for n, entry in enumerate(trace, start=1)]
    if len(lines) > limit:
        hidden = len(lines) - limit
        lines = [f"    ... {hidden} earlier entr{'y' if hidden == 1 else 'ies'}", *lines[-limit:]]
    return lines


def _entry(entry: dict[str, Any]) -> str:
    kind = str(entry.get("type", "?"))
    step = entry.get("step")
    where = "(reactor)" if step is None else str(step)
    details: list[str] = []
    if kind == TraceKind.RUN:
        details.append(
            f"attempt {entry.get('attempt', '?')}, returned {short(entry.get('result'), 40)}"
        )
    elif kind == TraceKind.RETRY:
        details.append(f"attempt {entry.get('attempt', '?')} failed: {_cut(entry.get('error'))}")
        details.append(f"again in {entry.get('delay', 0):g} s")
    elif kind == TraceKind.FAILED:
        details.append(f"attempt {entry.get('attempt', '?')}: {_cut(entry.get('error'))}")
        if entry.get("refused_by"):
            details.append(f"refused by {entry['refused_by']}")
    elif kind in (TraceKind.SKIPPED, TraceKind.HALTED):
        details.append(f"reason {entry.get('reason')!r}")
    elif kind in (TraceKind.COMPENSATE, TraceKind.UNDO):
        if entry.get("ok"):
            details.append("ok")
        else:
            details.append(f"{entry.get('reason')}: {_cut(entry.get('error'))}")
    elif kind == TraceKind.PARKED:
        details.append(
            f"on {entry.get('primitive')} {entry.get('key')!r}, park {entry.get('attempt')}"
        )
    elif kind == TraceKind.DISPATCHED:
        details.append(f"execution {entry.get('execution_id')}")
    key = entry.get("key") if kind != TraceKind.PARKED else None
    if key is not None:
        details.append(f"key {key!r}")
    return f"{kind:<10} {where}: {'; '.join(details)}" if details else f"{kind:<10} {where}"


def _cut(text: object, width: int = 70) -> str:
    rendered = str(text)
    return rendered if len(rendered) <= width else rendered[: width - 3] + "..."


def fail(found: Subject, summary: str, *details: str) -> NoReturn:
    """Raise the AssertionError: what was expected, what was found, and the trace."""
    __tracebackhide__ = True
    lines = [summary, *details, f"{found.label}, status {found.status!r}; trace:"]
    lines.extend(format_trace(found.trace))
    raise AssertionError("\n".join(lines))
