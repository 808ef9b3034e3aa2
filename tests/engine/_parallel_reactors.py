"""Reactors of the parallel-walk tests, and what their steps do and record.

Every step reads a ``key`` input (unique per test) and calls ``act(key, name)``: it records
``("run", name)`` in ``EVENTS[key]`` and does what ``HOOKS[key]`` says for it (wait for an
event, fail, halt...). Undo and compensate record ``("undo", name)`` / ``("compensate", name)``.
``build`` makes a reactor of inline steps from a dependency shape, for tests that need many.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from py_reactor import (
    Lock,
    Reactor,
    Result,
    Step,
    async_step,
    compose,
    interrupt,
    map_step,
    parallel,
    retries,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
)
from py_reactor.dsl.declaration import StepDeclaration
from py_reactor.dsl.sources import Element, Input

#: test key -> what happened, in order: ("run" | "undo" | "compensate", step).
EVENTS: dict[str, list[tuple[str, str]]] = {}
#: test key -> what a step body does: called with the step's name; a non-None return is the
#: step's return value (a signal, say).
HOOKS: dict[str, Callable[[str], Any]] = {}

_guard = threading.Lock()


def note(key: str, kind: str, name: str) -> None:
    """Record that ``kind`` happened to step ``name`` in the test ``key``."""
    with _guard:
        EVENTS.setdefault(key, []).append((kind, name))


def events(key: str, kind: str) -> list[str]:
    """The steps ``kind`` happened to in the test ``key``, in order."""
    with _guard:
        return [name for k, name in EVENTS.get(key, []) if k == kind]


def act(key: str, name: str, value: Any = None) -> Any:
    """What every step body does: record the run, do the test's hook, return a value."""
    note(key, "run", name)
    hook = HOOKS.get(key)
    out = None if hook is None else hook(name)
    return (f"{name}-value" if value is None else value) if out is None else out


def _signature(params: Sequence[str]) -> inspect.Signature:
    return inspect.Signature([inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY) for p in params])


def inline(name: str, deps: Sequence[str] = (), **wiring: Any) -> StepDeclaration:
    """An inline step ``name`` that reads each of ``deps``'s results (as ``d_<dep>``) and
    records its run, undo and compensate."""
    sources = {f"d_{dep}": Result(dep) for dep in deps} | wiring

    def run(**kwargs: Any) -> Any:
        return act(kwargs["key"], name)

    run.__signature__ = _signature(["key", *sources])  # type: ignore[attr-defined]
    run.__name__ = run.__qualname__ = name
    decl: StepDeclaration = step(run, **sources)

    @decl.undo
    def _undo(result: Any, **kwargs: Any) -> None:
        note(kwargs["key"], "undo", name)

    @decl.compensate
    def _compensate(error: Any, **kwargs: Any) -> None:
        note(kwargs["key"], "compensate", name)

    return decl


def build(
    name: str,
    shape: Mapping[str, Sequence[str]],
    *,
    max_branches: int | None = 8,
    decorate: Mapping[str, Callable[[Any], Any]] | None = None,
    returns: str | None = None,
    reactor_decorators: Sequence[Callable[[Any], Any]] = (),
) -> type[Reactor]:
    """A reactor of inline steps: ``shape`` maps each step to the steps it reads (in
    declaration order); ``decorate`` wraps a step's declaration (``with_lock(...)``, say).
    ``max_branches=None``: sequential."""
    namespace: dict[str, Any] = {"__annotations__": {"key": str}, "__module__": __name__}
    for step_name, deps in shape.items():
        decl: Any = inline(step_name, deps)
        wrap = (decorate or {}).get(step_name)
        namespace[step_name] = decl if wrap is None else wrap(decl)
    if returns is not None:
        namespace["returns"] = returns
    cls: Any = type(name, (Reactor,), namespace)
    for decorator in reactor_decorators:
        cls = decorator(cls)
    if max_branches is not None:
        cls = parallel(max_branches=max_branches)(cls)
    return cls  # type: ignore[no-any-return]


def by_key(suffix: str) -> Callable[[Mapping[str, Any]], str]:
    """A key function: the ``key`` argument (or input) plus ``suffix``."""
    return lambda values: f"{values['key']}{suffix}"


# -- explicit reactors ---------------------------------------------------------------------


@with_lock(by_key(":inner"), wait=10)
class Inner(Step):
    """Locks ``<key>:inner``; invoked from step bodies (nested work the scheduler cannot see)."""

    key: str

    def run(self) -> Any:
        return act(self.inputs.key, "inner", Lock(f"{self.inputs.key}:inner").state().count)


@with_lock(by_key(":inner"), wait=10)
class Outer(Step):
    """Locks ``<key>:inner`` and invokes ``Inner`` (the same key) from its body."""

    key: str

    def run(self) -> Any:
        nested = Inner.invoke({"key": self.inputs.key}, context=self.context)
        act(self.inputs.key, "outer")
        return {"status": nested.status, "count": nested.value}


@parallel
class NestedInvoke(Reactor):
    """A locked step re-entering its own key through a nested invoke, beside a sibling."""

    key: str

    outer = step(Outer)
    sibling = inline("sibling")
    returns = "outer"


@with_lock(by_key(":reactor"), wait=10)
@parallel
class ReactorLocked(Reactor):
    """The reactor holds ``<key>:reactor``; its steps declare the same key."""

    key: str

    first = with_lock(by_key(":reactor"), wait=10)(inline("first"))
    second = with_lock(by_key(":reactor"), wait=10)(inline("second"))
    third = inline("third")


class Child(Reactor):
    """Composed inside a branch, or run once per element of a map."""

    key: str
    item: int = 0

    @step
    def double(key: str, item: int) -> int:
        act(key, f"double[{item}]")
        return item * 2

    @double.undo
    def _undo_double(result: int, key: str, item: int) -> None:
        note(key, "undo", f"double[{item}]")

    returns = "double"


#: test key -> attempts ``Flaky`` made.
FLAKY: dict[str, int] = {}


@retries(max_attempts=3, base_delay=0)
class Flaky(Step):
    """Fails its first two attempts (per test key), then succeeds."""

    key: str

    def run(self) -> Any:
        count = FLAKY[self.inputs.key] = FLAKY.get(self.inputs.key, 0) + 1
        act(self.inputs.key, "flaky")
        if count < 3:
            raise ConnectionError(f"attempt {count}")
        return count


def features(max_branches: int | None) -> type[Reactor]:
    """Retries, a composed child, a map step and a plain step, side by side."""
    namespace: dict[str, Any] = {
        "__annotations__": {"key": str, "items": list[int]},
        "__module__": __name__,
        "flaky": step(Flaky),
        "child": compose(Child, item=Input("key", transform=len)),
        "mapped": map_step(Child, source=Input("items"), item=Element("mapped")),
        "plain": inline("plain"),
        "join": inline("join", ["flaky", "child", "mapped", "plain"]),
        "returns": "join",
    }
    cls: Any = type("Features" if max_branches else "SequentialFeatures", (Reactor,), namespace)
    return cls if max_branches is None else parallel(max_branches=max_branches)(cls)  # type: ignore[no-any-return]


@with_lock(by_key(":inner"), wait=10)
def critical(key: str, what: Callable[[], Any]) -> Any:
    """A decorated helper (not a step): nested work on ``<key>:inner`` from a step body."""
    return what()


@with_lock(by_key(":reactor"), wait=10)
def critical_of_reactor(key: str, what: Callable[[], Any]) -> Any:
    """A decorated helper on the key ``ReactorLocked`` holds for the whole run."""
    return what()


@with_ordered_lock(by_key(":ordered"), wait=10)
def in_order(key: str, what: Callable[[], Any]) -> Any:
    """A decorated helper taking an ordered turn on ``<key>:ordered`` (re-entered by ledger)."""
    return what()


@with_period(by_key(":period"), every="hour", wait=10)
def once_an_hour(key: str, what: Callable[[], Any]) -> Any:
    """A decorated helper claiming the hour's bucket of ``<key>:period``; None once done."""
    return what()


@parallel
class WithUnit(Reactor):
    """An async unit dispatched from the scheduler, read by one branch, beside another."""

    key: str

    @async_step
    def fetch(key: str) -> str:
        act(key, "fetch")
        return "fetched"

    use = inline("use", ["fetch"])
    other = inline("other")
    returns = "use"


@parallel
class UnitBesideHolder(Reactor):
    """``unit`` (an async step) locks the key ``holder`` holds while it runs."""

    key: str

    holder = with_lock(by_key(":unit"), wait=10)(inline("holder"))
    gate = inline("gate")

    @async_step(wait_for="gate")
    @with_lock(by_key(":unit"), wait=10)
    def unit(key: str) -> str:
        act(key, "unit")
        return "unit-done"

    after_gate = inline("after_gate", ["gate"])
    reader = inline("reader", ["unit"])
    returns = "reader"


@parallel
class Reviewed(Reactor):
    """An interrupt (reached by the scheduler) beside a running branch."""

    key: str

    slow = inline("slow")
    review = interrupt(payload=None)
    pay = inline("pay", ["review", "slow"])
    returns = "pay"
