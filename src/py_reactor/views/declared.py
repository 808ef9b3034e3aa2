"""What reactors declare (``.coordination``), for the pages and for limits the store cannot tell.

The store knows a semaphore's holders but not its ``limit``, and a rate limit's counts but
not its limits; the declarations know both. Only reactor classes this process has already
imported (registered by ``module:qualname``) are read: the dashboard never imports a module
named by the store (``py-reactor dashboard --import MODULE`` imports them up front).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from py_reactor.config import get_config
from py_reactor.coordination.scope import compute_key
from py_reactor.dsl.declaration import StepDeclaration, StepKind
from py_reactor.dsl.interrupt import options_of
from py_reactor.dsl.reactor import Reactor
from py_reactor.dsl.registry import lookup
from py_reactor.engine.resolve import resolve_arguments

__all__ = [
    "declaration",
    "describe",
    "interrupt_payload",
    "reactor_class",
    "semaphore_limit",
    "windows",
]

#: (reactor ``module:qualname``, step path or None) that took or waits on a key.
User = tuple[str, str | None]


def reactor_class(path: str) -> type[Reactor] | None:
    """The registered reactor class named ``module:qualname``, or None."""
    cls = lookup(path)
    return cls if isinstance(cls, type) and issubclass(cls, Reactor) else None


def declaration(reactor: str, step: str | None, primitive: str) -> Any:
    """The declaration of ``primitive`` on ``step`` of ``reactor`` (on the reactor itself when
    ``step`` is None; a dotted ``child.step`` walks composed children), or None."""
    cls = reactor_class(reactor)
    if cls is None:
        return None
    if step is None:
        return cls.coordination.get(primitive)
    *children, name = step.split(".")
    for child in children:
        plan = cls.__py_reactor_plan__.get(child)
        if plan is None or plan.declaration.kind is not StepKind.REACTOR:
            return None
        cls = plan.declaration.target
    plan = cls.__py_reactor_plan__.get(name)
    if plan is None:
        return None
    if plan.declaration.kind is StepKind.REACTOR:
        return plan.declaration.target.coordination.get(primitive)
    return plan.declaration.coordination.get(primitive)


def interrupt_payload(reactor: str, step: str | None) -> dict[str, Any]:
    """What a resume of ``reactor``'s run paused at the interrupt ``step`` (a dotted path
    through composed children and map elements, as ``waiting_on["step"]``) must carry, read
    from the class this process imported (never imported here):

    ``{"imported": False}`` when it is not imported; ``{"imported": True, "found": False}``
    when it has no interrupt there (the class changed since the run paused); else
    ``{"imported": True, "found": True, "model", "fields", "schema"}``: the payload model's
    name, its field names and its JSON Schema, all None for an interrupt without a model (any
    JSON object); ``schema`` is None when pydantic cannot express the model as JSON Schema.
    """
    cls = reactor_class(reactor)
    if cls is None:
        return {"imported": False}
    decl = _interrupt_at(cls, step or "")
    if decl is None:
        return {"imported": True, "found": False}
    model = options_of(decl).payload
    if model is None:
        return {"imported": True, "found": True, "model": None, "fields": None, "schema": None}
    schema: dict[str, Any] | None
    try:
        schema = model.model_json_schema()
    except Exception:  # a field type JSON Schema cannot express: the field names still help
        schema = None
    return {
        "imported": True,
        "found": True,
        "model": model.__qualname__,
        "fields": list(model.model_fields),
        "schema": schema,
    }


def _interrupt_at(cls: type[Reactor], path: str) -> StepDeclaration | None:
    """The interrupt declaration at the dotted ``path`` from ``cls`` (``"review"``,
    ``"child.review"``, ``"items[3].review"``), or None."""
    owner: type[Reactor] = cls
    parts = path.split(".") if path else []
    for i, part in enumerate(parts):
        plan = owner.__py_reactor_plan__.get(part.split("[", 1)[0])
        if plan is None:
            return None
        decl = plan.declaration
        if i == len(parts) - 1:
            return decl if decl.kind is StepKind.INTERRUPT else None
        if decl.kind not in (StepKind.REACTOR, StepKind.MAP):
            return None
        owner = decl.target
    return None


def semaphore_limit(users: Iterable[User]) -> int | None:
    """The ``limit`` the reactors using a semaphore declare (the first one found), or None."""
    for reactor, step in users:
        found = declaration(reactor, step, "semaphore")
        if found is not None:
            return int(found.limit)
    return None


def windows(key: str, users: Iterable[User]) -> dict[int, int]:
    """``{window seconds: limit}`` of rate limit ``key``: declared by its users, or registered
    by name with ``configure(rate_limits=...)``."""
    for reactor, step in users:
        found = declaration(reactor, step, "rate_limit")
        if found is None:
            continue
        try:
            return dict(found.make(key)._resolved())
        except Exception:  # a named limit no longer registered: try the next user
            continue

    return dict(get_config().rate_limits.get(key, ()))


def describe(reactor: type[Reactor]) -> dict[str, Any]:
    """A reactor's declared coordination, reactor level and per step, as JSON-ready data."""
    steps = []
    for name in reactor.__py_reactor_order__:
        plan = reactor.__py_reactor_plan__[name]
        decl = plan.declaration
        steps.append(
            {
                "step": name,
                "kind": decl.kind.value,
                "depends_on": list(plan.depends_on),
                "child": _path(decl.target) if decl.kind is StepKind.REACTOR else None,
                "asynchronous": decl.asynchronous,
                "coordination": _declarations(decl.coordination),
            }
        )
    return {
        "reactor": _path(reactor),
        "name": reactor.__qualname__,
        "doc": (reactor.__doc__ or "").strip() or None,
        "inputs": list(reactor.__py_reactor_contract__.fields),
        "returns": reactor.returns,
        "background": getattr(reactor, "__py_reactor_handoff__", None),
        "coordination": _declarations(reactor.coordination),
        "steps": steps,
    }


def _path(cls: Any) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _declarations(declared: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each declaration: its primitive, its key (a constant, or the function that computes
    it) and its options."""
    described = []
    for primitive, decl in declared.items():
        options = {
            f.name: _plain(getattr(decl, f.name))
            for f in (dataclasses.fields(decl) if dataclasses.is_dataclass(decl) else ())
            if f.name != "key"
        }
        described.append({"primitive": primitive, "key": _key(decl.key), "options": options})
    return described


def _key(key: str | Callable[..., Any]) -> str:
    if isinstance(key, str):
        return key
    name = getattr(key, "__qualname__", None) or repr(key)
    return f"computed by {name}"


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)


def attribute(context: Any, primitive: str, key: str) -> tuple[str, str | None] | None:
    """Which declaration of ``context``'s reactor names ``key`` of ``primitive``, given its
    inputs and results so far: ``("reactor", None)``, ``("step", name)``, or None (not
    declared: taken in a step body, or the class is not imported here).

    A running execution stores its ledger only at checkpoints, so the holds of the step it
    runs are found in the store first; this names their step. Key functions are called with
    what the engine passes them (the inputs, or the step's arguments read from the context).
    """
    cls = reactor_class(context.reactor)
    if cls is None:
        return None
    declared = cls.coordination.get(primitive)
    if declared is not None and _key_for(declared, dict(context.inputs)) == key:
        return "reactor", None

    for name in cls.__py_reactor_order__:
        plan = cls.__py_reactor_plan__[name]
        declared = plan.declaration.coordination.get(primitive)
        if declared is None:
            continue
        try:
            values: dict[str, Any] = resolve_arguments(plan, context, cls.__qualname__)
        except Exception:  # an argument from a step that has not run yet
            continue
        with contextlib.suppress(Exception):  # else the key function gets the raw arguments
            values = dict(plan.declaration.contract.validate(values))
        if _key_for(declared, values) == key:
            return "step", name
    return None


def _key_for(declared: Any, values: dict[str, Any]) -> str | None:

    try:
        return compute_key(declared, values, "dashboard")
    except Exception:
        return None
