"""Turn a step's declared sources into argument values, from the context."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from py_reactor.dsl.reactor import StepPlan
from py_reactor.dsl.sources import Element, Input, Result
from py_reactor.engine.context import Context
from py_reactor.errors import ArgumentResolutionError

__all__ = ["read_source", "resolve_arguments"]


def resolve_arguments(plan: StepPlan, context: Context, reactor: str) -> dict[str, Any]:
    """Read every argument of ``plan`` from ``context``.

    Raises:
        ArgumentResolutionError: a result has no such field, or a transform raised.
    """
    args: dict[str, Any] = {}
    for name, source in plan.arguments:
        if isinstance(source, Element):
            args[name] = source  # a map step reads it per element
            continue
        if isinstance(source, Input):
            value = context.inputs[source.name]
        elif isinstance(source, Result):
            value = context.results[source.step]
        else:
            args[name] = source.value
            continue
        args[name] = read_source(source, value, name, plan.name, reactor)
    return args


def read_source(
    source: Input | Result | Element, value: Any, arg: str, step: str, reactor: str
) -> Any:
    """What argument ``arg`` of ``step`` receives from ``source``, given the input or result
    ``value`` it reads: the result's field, if named, then the transform, if any.

    Raises:
        ArgumentResolutionError: the result has no such field, or the transform raised.
    """
    if isinstance(source, Result | Element) and source.field is not None:
        value = _field(value, source.field, source.step, arg, step, reactor)
    transform = source.transform
    if transform is None:
        return value
    try:
        return transform(value)
    except Exception as exc:
        raise ArgumentResolutionError(
            f"step {step!r} of {reactor}: the transform of argument {arg!r} "
            f"raised {type(exc).__name__}: {exc}",
            reactor=reactor,
            step=step,
        ) from exc


def _field(value: Any, field: str, from_step: str, arg: str, step: str, reactor: str) -> Any:
    if isinstance(value, Mapping):
        if field in value:
            return value[field]
    elif hasattr(value, field):
        return getattr(value, field)
    raise ArgumentResolutionError(
        f"step {step!r} of {reactor}: argument {arg!r} reads field {field!r} of the result of "
        f"step {from_step!r}, but that result ({type(value).__name__}) has no such field",
        reactor=reactor,
        step=step,
    )
