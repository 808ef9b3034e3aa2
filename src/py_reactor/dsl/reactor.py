"""``Reactor``: a workflow class whose annotations are its inputs and whose attributes are steps.

Everything that can be checked without running is checked when the class is defined: unknown
steps and inputs, unwired required arguments, cycles, reserved names. The result is a plan the
engine walks: each step's argument sources, its dependencies, and one deterministic order.
A reactor with ``async_step`` units (declared in ``dsl.units``) also gets, when defined, the
one-step reactor each unit runs as in its worker: built here, as part of defining the reactor.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from py_reactor.dsl._graph import find_cycle, topological_order
from py_reactor.dsl.contracts import Contract, contract_from_class
from py_reactor.dsl.declaration import (
    COORDINATION_ATTRIBUTE,
    HookHandle,
    StepDeclaration,
    StepKind,
    bare_decorator,
)
from py_reactor.dsl.registry import register
from py_reactor.dsl.sources import Element, Input, Result, Source
from py_reactor.errors import DefinitionError

if TYPE_CHECKING:
    from py_reactor.engine.results import Outcome

__all__ = [
    "ITEMS",
    "REACTOR_RESERVED",
    "UNIT_ATTRIBUTE",
    "Reactor",
    "StepPlan",
    "build_unit_reactors",
]

#: The argument a map step's elements arrive in (its ``source``), beside the child's inputs.
ITEMS = "__items__"

#: On the reactor an ``async_step`` runs as: ``(declaring reactor, step name)``.
UNIT_ATTRIBUTE = "__py_reactor_unit_of__"

#: Names a reactor may not use for a step or an input.
REACTOR_RESERVED = frozenset({"returns", "coordination", "run"})


@dataclass(frozen=True, slots=True)
class StepPlan:
    """One step as a specific reactor runs it: name, sources of its arguments, dependencies."""

    name: str
    declaration: StepDeclaration
    arguments: tuple[tuple[str, Source], ...]
    depends_on: tuple[str, ...]
    #: the async units among ``depends_on``: the step waits for each to end before it runs.
    units: tuple[str, ...] = ()


class Reactor:
    """A workflow: subclass it, annotate inputs, bind steps, name what it ``returns``.

    ``MyReactor.run(**inputs)`` validates the inputs, runs the steps in dependency order and
    returns an outcome; when a step fails, completed steps are rolled back newest first.
    """

    returns: ClassVar[str | None] = None
    coordination: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    __py_reactor_reactor__: ClassVar[bool] = True
    __py_reactor_name__: ClassVar[str]
    __py_reactor_contract__: ClassVar[Contract]
    __py_reactor_plan__: ClassVar[Mapping[str, StepPlan]]
    __py_reactor_order__: ClassVar[tuple[str, ...]]
    #: The reactor each ``async_step`` runs as in its worker, by step name.
    __py_reactor_units__: ClassVar[Mapping[str, type[Reactor]]] = MappingProxyType({})

    def __init_subclass__(cls, *, verbs: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if verbs:  # py_reactor.Reactor: the verbs (run, resume, ...) over this declaring base
            return
        cls.__py_reactor_name__ = cls.__qualname__
        steps = _collect_steps(cls)
        _check_returns(cls)
        contract = _input_contract(cls, steps)
        cls.__py_reactor_contract__ = contract
        plan = {name: _plan_step(cls, name, decl, contract, steps) for name, decl in steps.items()}
        cls.__py_reactor_order__ = _order(cls, plan)
        cls.__py_reactor_plan__ = MappingProxyType(plan)
        if cls.returns is not None and cls.returns not in plan:
            raise DefinitionError(
                f"{cls.__qualname__}.returns names {cls.returns!r}, which is not a step; "
                + (f"steps are: {', '.join(plan)}" if plan else "it has no steps"),
                reactor=cls.__qualname__,
            )
        register(cls)
        if any(d.asynchronous for d in steps.values()):
            build_unit_reactors(cls)

    @classmethod
    def invoke_step(
        cls, declaration: StepDeclaration, args: Mapping[str, Any] | None, *, context: Any = None
    ) -> Outcome:
        """Run ``declaration`` (one of this reactor's inline steps) alone: what
        ``MyReactor.step.invoke(args)`` does. The engine's half lives on ``py_reactor.Reactor``;
        a class that only declares cannot run anything."""
        raise TypeError(
            f"{cls.__qualname__} only declares a workflow; subclass py_reactor.Reactor to run it"
        )


def _check_returns(cls: type[Reactor]) -> None:
    """Refuse ``returns`` that is not one step name: the run's value is one step's value."""
    returns = cls.returns
    if returns is None or isinstance(returns, str):
        return
    example = (
        f"returns = {returns[0]!r}"
        if isinstance(returns, list | tuple) and returns and isinstance(returns[0], str)
        else "returns = 'step_name'"
    )
    raise DefinitionError(
        f"{cls.__qualname__}.returns is {returns!r}, but returns takes one step name (a str) "
        f"or None: the run's value is that one step's value; write {example} (to return "
        "several values, add a step that combines them)",
        reactor=cls.__qualname__,
    )


def _collect_steps(cls: type) -> dict[str, StepDeclaration]:
    steps: dict[str, StepDeclaration] = {}
    for klass in reversed(cls.__mro__):
        seen: set[int] = set()
        for attr, value in vars(klass).items():
            if isinstance(value, StepDeclaration):
                if id(value) in seen:
                    first = next(n for n, d in steps.items() if d is value)
                    raise DefinitionError(
                        f"{cls.__qualname__}: one step declaration is bound to both {first!r} "
                        f"and {attr!r}; call step(...) once for each step",
                        reactor=cls.__qualname__,
                        step=attr,
                    )
                seen.add(id(value))
                steps[attr] = value
            elif attr in steps and klass is cls:
                del steps[attr]  # a subclass replaced an inherited step with something else
            elif klass is cls and (bare := bare_decorator(value)) is not None and bare[0] == attr:
                raise DefinitionError(
                    f"{cls.__qualname__}.{attr}: {bare[1]}", reactor=cls.__qualname__, step=attr
                )
            elif klass is cls and callable(value) and getattr(value, COORDINATION_ATTRIBUTE, None):
                raise DefinitionError(
                    f"{cls.__qualname__}.{attr} declares coordination but is not a step; "
                    "did you forget @step above it?",
                    reactor=cls.__qualname__,
                    step=attr,
                )
    for attr, value in vars(cls).items():
        if isinstance(value, HookHandle) and not any(d is value.step for d in steps.values()):
            raise DefinitionError(
                f"{cls.__qualname__}.{attr} is the {value.kind} function attached with "
                f"@{value.step.label}.{value.kind}, but {cls.__qualname__} has no such step. "
                f"A hook function named like its step replaces the step in the class body: "
                f"name it differently (e.g. _{value.kind}_{attr}); and a hook attaches only "
                "to a step of its own reactor",
                reactor=cls.__qualname__,
                step=attr,
            )
    for name in steps:
        if name in REACTOR_RESERVED:
            raise DefinitionError(
                f"{cls.__qualname__}: a step cannot be named {name!r} "
                f"(reserved on reactors: {', '.join(sorted(REACTOR_RESERVED))})",
                reactor=cls.__qualname__,
                step=name,
            )
    return steps


def _input_contract(cls: type, steps: Mapping[str, StepDeclaration]) -> Contract:
    declared: dict[str, None] = {}
    for klass in reversed(cls.__mro__):
        if isinstance(klass, type) and issubclass(klass, Reactor) and klass is not Reactor:
            declared.update(dict.fromkeys(inspect.get_annotations(klass)))
    for name in declared:
        if name in REACTOR_RESERVED:
            raise DefinitionError(
                f"{cls.__qualname__}: {name!r} is reserved on reactors and cannot be an input",
                reactor=cls.__qualname__,
            )
        if name in steps:
            raise DefinitionError(
                f"{cls.__qualname__}: {name!r} is both an input and a step; rename one of them",
                reactor=cls.__qualname__,
                step=name,
            )
    exclude = set(Reactor.__annotations__) | set(steps)
    return contract_from_class(cls, exclude=exclude, owner=cls.__qualname__)


def _plan_step(
    cls: type,
    name: str,
    decl: StepDeclaration,
    inputs: Contract,
    steps: Mapping[str, StepDeclaration],
) -> StepPlan:
    where = f"{cls.__qualname__}, step {name!r}"
    at = {"reactor": cls.__qualname__, "step": name}
    fields = decl.contract.fields
    for arg in decl.wiring:
        if arg not in fields and not decl.accepts_extra:
            declared = f"it declares: {', '.join(fields)}" if fields else "it declares none"
            raise DefinitionError(
                f"{where}: wires argument {arg!r}, which {_what(decl)} does not declare "
                f"({declared})",
                **at,
            )
    arguments: list[tuple[str, Source]] = list(decl.wiring.items())
    for arg, required in fields.items():
        if arg in decl.wiring:
            continue
        if arg in inputs.fields:
            arguments.append((arg, Input(arg)))
        elif required:
            raise DefinitionError(
                f"{where}: required argument {arg!r} is not wired and {cls.__qualname__} has no "
                f"input named {arg!r}; wire it with {arg}=Input(...), Result(...) or Value(...)",
                **at,
            )
    if decl.kind is StepKind.INLINE:
        decl.check_hooks(where, **at)
    for arg, source in arguments:
        if isinstance(source, Element) and (decl.kind is not StepKind.MAP or source.step != name):
            raise DefinitionError(
                f"{where}: argument {arg!r} reads Element({source.step!r}); Element names the "
                "current element of a map_step, inside that map_step's own wiring"
                + (f" (this one is {name!r})" if decl.kind is StepKind.MAP else ""),
                **at,
            )
    items = getattr(decl, "items", None)
    if decl.kind is StepKind.MAP and isinstance(items, Input | Result):
        arguments.append((ITEMS, items))
    depends_on: list[str] = []
    for arg, source in arguments:
        if isinstance(source, Input) and source.name not in inputs.fields:
            raise DefinitionError(
                f"{where}: argument {arg!r} reads Input({source.name!r}), but "
                f"{cls.__qualname__} has no such input ("
                + (f"inputs: {_names(inputs.fields)})" if inputs.fields else "it has no inputs)"),
                **at,
            )
        if isinstance(source, Result):
            if source.step not in steps:
                raise DefinitionError(
                    f"{where}: argument {arg!r} reads Result({source.step!r}), but there is no "
                    f"step named {source.step!r} (steps: {', '.join(steps)})",
                    **at,
                )
            depends_on.append(source.step)
    for other in decl.wait_for:
        if other not in steps:
            raise DefinitionError(
                f"{where}: wait_for names {other!r}, which is not a step (steps: {_names(steps)})",
                **at,
            )
        depends_on.append(other)
    after = tuple(dict.fromkeys(depends_on))
    units = tuple(other for other in after if steps[other].asynchronous)
    return StepPlan(name, decl, tuple(arguments), after, units)


def _names(names: Mapping[str, Any]) -> str:
    return ", ".join(names) or "(none)"


def _what(decl: StepDeclaration) -> str:
    if decl.kind is StepKind.CLASS:
        return f"step class {decl.target.__qualname__}"
    if decl.kind in (StepKind.REACTOR, StepKind.MAP):
        return f"reactor {decl.target.__qualname__}"
    return f"inline step {decl.target.__qualname__}"


def _order(cls: type, plan: Mapping[str, StepPlan]) -> tuple[str, ...]:
    names = list(plan)
    depends_on = {name: p.depends_on for name, p in plan.items()}
    order = topological_order(names, depends_on)
    if order is None:
        cycle = find_cycle(names, depends_on)
        raise DefinitionError(
            f"{cls.__qualname__}: steps depend on each other in a cycle: "
            f"{' -> '.join(cycle)} (each arrow reads 'depends on')",
            reactor=cls.__qualname__,
        )
    return tuple(order)


def build_unit_reactors(cls: type[Reactor]) -> None:
    """Build and register the reactor each ``async_step`` of ``cls`` runs as, in its worker.

    It has one input per argument the step is wired in ``cls`` (values arrive resolved, and
    the step validates them against its own contract) and one step: the declared one, under
    the same name, with the same hooks, retries and coordination.

    Raises:
        DefinitionError: ``cls`` is defined inside a function (a worker could not find it), or
            the step has an argument named like itself.
    """
    plan = cls.__py_reactor_plan__
    units = [name for name, p in plan.items() if p.declaration.asynchronous]
    if not units:
        return
    where = cls.__qualname__
    if "<locals>" in where:
        raise DefinitionError(
            f"{where}: its async unit {units[0]!r} cannot be dispatched, as the reactor is "
            "defined inside a function (a worker imports reactors by module:qualname); define "
            "it at module level",
            reactor=where,
            step=units[0],
        )
    built: dict[str, type[Reactor]] = {}
    for name in units:
        declaration = plan[name].declaration
        if declaration.kind is StepKind.REACTOR:
            built[name] = declaration.target  # the child reactor is the unit
            continue
        arguments = [arg for arg, _source in plan[name].arguments]
        if name in arguments:
            raise DefinitionError(
                f"{where}, step {name!r}: an async step cannot take an argument named like "
                f"itself ({name!r}); rename the step or the argument",
                reactor=where,
                step=name,
            )
        namespace: dict[str, Any] = {
            "__module__": cls.__module__,
            "__qualname__": f"{where}.{name}",
            "__annotations__": dict.fromkeys(arguments, Any),
            "__doc__": f"The async step {name!r} of {where}, as its worker runs it.",
            name: declaration.rewired({arg: Input(arg) for arg in arguments}),
            "returns": name,
            UNIT_ATTRIBUTE: (cls, name),
        }
        unit: type[Reactor] = type(f"{cls.__name__}.{name}", (Reactor,), namespace)
        unit.__py_reactor_name__ = cls.__py_reactor_name__  # errors name the declaring reactor
        register(unit)
        built[name] = unit
    cls.__py_reactor_units__ = MappingProxyType(built)
