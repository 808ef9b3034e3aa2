"""``Step`` (a class with ``run`` and optional ``guard``/``compensate``/``undo``) and ``step()``."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, overload

from py_reactor.dsl.contracts import Contract, contract_from_class, contract_from_function
from py_reactor.dsl.declaration import (
    COORDINATION_ATTRIBUTE,
    ORIGINAL_ATTRIBUTE,
    StepDeclaration,
    StepKind,
    bare_decorator,
)
from py_reactor.dsl.inputs import Inputs
from py_reactor.dsl.registry import register
from py_reactor.dsl.sources import Element, Input, Result, Source, Value
from py_reactor.errors import DefinitionError

if TYPE_CHECKING:
    pass

__all__ = ["STEP_RESERVED", "Step", "step"]

#: Names a Step subclass may not use for inputs: they are the step's own API.
STEP_RESERVED = frozenset(
    {"inputs", "run", "guard", "compensate", "undo", "invoke", "coordination"}
)


class Step:
    """A unit of work with an input contract.

    Subclass it, annotate its inputs (validated by pydantic before anything runs), and define
    ``run``; optionally ``guard`` (a precondition checked after validation, before ``run``),
    ``compensate(error)`` (this step failed after its work started) and ``undo(result)`` (this
    step succeeded and a later one failed). Each returns a signal (``Success``, ``Failure``,
    ``Halt``, ``Skipped``) or a plain value, or raises.
    """

    inputs: Inputs
    context: Any
    coordination: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    __py_reactor_contract__: ClassVar[Contract]

    def __init_subclass__(cls, *, verbs: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if verbs:  # py_reactor.Step: adds invoke() over this declaring base
            return
        own = inspect.get_annotations(cls)
        clash = sorted(STEP_RESERVED & set(own))
        if clash:
            raise DefinitionError(
                f"step class {cls.__qualname__} declares input {clash[0]!r}, a name the Step API "
                f"uses ({', '.join(sorted(STEP_RESERVED))}); rename the input"
            )
        for attr, value in vars(cls).items():
            bare = bare_decorator(value)
            if bare is not None and bare[0] == attr:
                raise DefinitionError(f"step class {cls.__qualname__}: {bare[1]}")
            declared = getattr(value, COORDINATION_ATTRIBUTE, None)
            if declared and callable(value):
                raise DefinitionError(
                    f"step class {cls.__qualname__}: "
                    f"{', '.join('with_' + p for p in declared)} is declared on its method "
                    f"{attr}(); put it on the class itself"
                )
        exclude = set(Step.__annotations__)
        cls.__py_reactor_contract__ = contract_from_class(
            cls, exclude=exclude, owner=f"step class {cls.__qualname__}"
        )
        register(cls)

    def __init__(self, inputs: Mapping[str, Any], context: Any = None) -> None:
        self.inputs = inputs if isinstance(inputs, Inputs) else Inputs(inputs)
        self.context = context

    def run(self) -> Any:
        """Do the step's work; return a signal or a value, or raise."""
        raise NotImplementedError(f"{type(self).__qualname__} must define run()")

    def guard(self) -> Any:
        """Return ``Failure``/``Skipped``/``Halt`` (or raise) to refuse; default: allow."""
        return None

    def compensate(self, error: Any) -> Any:
        """Clean up after this step's own failure (its work had started). Default: nothing."""
        return None

    def undo(self, result: Any) -> Any:
        """Reverse this step's completed work because a later step failed. Default: nothing."""
        return None


def declare_class_step(
    cls: type[Step], wiring: Mapping[str, Source] | None = None, wait_for: tuple[str, ...] = ()
) -> StepDeclaration:
    """A declaration that runs the Step subclass ``cls``."""
    if cls.run is Step.run:
        raise DefinitionError(f"step class {cls.__qualname__} must define run()")
    return StepDeclaration(
        StepKind.CLASS,
        cls,
        contract=cls.__py_reactor_contract__,
        wiring=wiring,
        wait_for=wait_for,
    )


def declare_inline_step(
    fn: Callable[..., Any], wiring: Mapping[str, Source], wait_for: tuple[str, ...]
) -> StepDeclaration:
    """A declaration that runs the plain function ``fn`` with its arguments as keywords.

    When ``fn`` is the wrapper a ``with_*`` put around a plain function, the step runs the
    original function and takes the wrapper's declarations (the engine takes them, once).
    """
    carrier = fn
    fn = getattr(fn, ORIGINAL_ATTRIBUTE, fn)
    contract, accepts_extra = contract_from_function(fn, owner=f"inline step {fn.__qualname__}")
    declaration = StepDeclaration(
        StepKind.INLINE,
        fn,
        contract=contract,
        accepts_extra=accepts_extra,
        wiring=wiring,
        wait_for=wait_for,
        declared_on=carrier,
    )
    declaration.__doc__ = fn.__doc__
    return declaration


def normalize_wiring(owner: str, wiring: Mapping[str, Any]) -> dict[str, Source]:
    """Check that every wired argument names a source; ``wait_for`` is not an argument."""
    sources: dict[str, Source] = {}
    for name, source in wiring.items():
        if not isinstance(source, Input | Result | Value | Element):
            raise DefinitionError(
                f"{owner}: argument {name!r} must be wired to Input(...), Result(...) or "
                f"Value(...), got {source!r}; wrap constants in Value(...)"
            )
        sources[name] = source
    return sources


def normalize_wait_for(owner: str, wait_for: Iterable[str] | str | None) -> tuple[str, ...]:
    """``wait_for`` as a tuple of step names."""
    if wait_for is None:
        return ()
    names = (wait_for,) if isinstance(wait_for, str) else tuple(wait_for)
    for name in names:
        if not isinstance(name, str) or not name:
            raise DefinitionError(f"{owner}: wait_for takes step names, got {name!r}")
    return names


@overload
def step(
    target: type[Step] | Callable[..., Any],
    /,
    *,
    wait_for: Iterable[str] | str | None = ...,
    **wiring: Any,
) -> StepDeclaration: ...


@overload
def step(
    *, wait_for: Iterable[str] | str | None = ..., **wiring: Any
) -> Callable[[Callable[..., Any]], StepDeclaration]: ...


def step(
    target: type[Step] | Callable[..., Any] | None = None,
    /,
    *,
    wait_for: Iterable[str] | str | None = None,
    **wiring: Any,
) -> StepDeclaration | Callable[[Callable[..., Any]], StepDeclaration]:
    """Declare a step of a reactor.

    ``name = step(SomeStep, arg=Input("x"), wait_for=["other"])`` runs a ``Step`` subclass;
    ``@step(arg=Result("other"))`` above a function in the reactor body declares an inline step.
    Arguments not wired explicitly resolve from the reactor input of the same name.

    Raises:
        DefinitionError: a wiring value is not a source, or ``target`` is not a step.
    """
    if target is None:
        # The decorator form: check the wiring once the function is known, so the message can
        # name it. A value that is not even a function still gets a clear message below.
        def decorate(fn: Any) -> StepDeclaration:
            _refuse_bare(fn)
            label = getattr(fn, "__qualname__", None)
            where = "@step(...)" if label is None else f"@step(...) on {label}"
            return _build(
                fn, where, normalize_wiring(where, wiring), normalize_wait_for(where, wait_for)
            )

        return decorate
    _refuse_bare(target)
    owner = f"step({getattr(target, '__qualname__', target)!r})"
    return _build(
        target, owner, normalize_wiring(owner, wiring), normalize_wait_for(owner, wait_for)
    )


def _refuse_bare(fn: object) -> None:
    """Refuse ``@step`` above ``@with_lock`` written without parentheses, saying so."""
    bare = bare_decorator(fn)
    if bare is not None:
        raise DefinitionError(bare[1])
    if getattr(fn, "__py_reactor_decorator__", None) is not None:
        raise DefinitionError(
            f"@step above {fn!r}: that is the decorator itself, not a function; put it above "
            "the step's def"
        )


def _build(
    fn: Any, owner: str, sources: dict[str, Source], waits: tuple[str, ...]
) -> StepDeclaration:
    """The declaration for ``fn`` (a Step subclass or a function) with checked wiring."""
    if isinstance(fn, StepDeclaration):
        raise DefinitionError(f"{owner}: {fn!r} is already a step; apply @step once")
    if isinstance(fn, type):
        if issubclass(fn, Step):
            return declare_class_step(fn, sources, waits)
        raise DefinitionError(
            f"{owner}: {fn.__qualname__} is not a Step subclass; use compose() for a reactor"
            if getattr(fn, "__py_reactor_reactor__", False)
            else f"{owner}: {fn.__qualname__} is not a Step subclass or a function"
        )
    if callable(fn):
        return declare_inline_step(fn, sources, waits)
    raise DefinitionError(f"{owner}: expected a Step subclass or a function, got {fn!r}")
