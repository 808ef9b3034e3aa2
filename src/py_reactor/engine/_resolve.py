"""Turn a step's declared sources into argument values, from the context."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from py_reactor.dsl.reactor import StepPlan
from py_reactor.dsl.sources import Input, Result
from py_reactor.engine.context import Context
from py_reactor.errors import ArgumentResolutionError

__all__ = ["resolve_arguments"]


def resolve_arguments(plan: StepPlan, context: Context, reactor: str) -> dict[str, Any]:
    """Read every argument of ``plan`` from ``context``.

    Raises:
        ArgumentResolutionError: a result has no such field, or a transform raised.
    """
    args: dict[str, Any] = {}
    for name, source in plan.arguments:
        transform = None
        if isinstance(source, Input):
            value = context.inputs[source.name]
            transform = source.transform
        elif isinstance(source, Result):
            value = context.results[source.step]
            if source.field is not None:
                value = _field(value, source.field, source.step, name, plan.name, reactor)
            transform = source.transform
        else:
            value = source.value
        if transform is not None:
            try:
                value = transform(value)
            except Exception as exc:
                raise ArgumentResolutionError(
                    f"step {plan.name!r} of {reactor}: the transform of argument {name!r} "
                    f"raised {type(exc).__name__}: {exc}",
                    reactor=reactor,
                    step=plan.name,
                ) from exc
        args[name] = value
    return args


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
