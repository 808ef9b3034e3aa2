"""The object ``step(...)`` and ``compose(...)`` return: one step as a reactor declares it."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from py_reactor.dsl.contracts import Contract
from py_reactor.dsl.retries import RETRY_ATTRIBUTE, RetryPolicy
from py_reactor.dsl.sources import Source
from py_reactor.errors import DefinitionError

if TYPE_CHECKING:
    from py_reactor.engine.results import Outcome

__all__ = ["COORDINATION_ATTRIBUTE", "REFUSES_COORDINATION", "StepDeclaration", "StepKind"]

Hook = Callable[..., Any]

_NONE: Mapping[str, Any] = MappingProxyType({})

#: Where ``with_lock`` & co. record declarations on a function that ``@step`` will wrap.
COORDINATION_ATTRIBUTE = "__py_reactor_coordination__"

#: A class (e.g. an interrupt step) that sets this attribute to a reason refuses ``with_*``.
REFUSES_COORDINATION = "__py_reactor_refuses_coordination__"


class StepKind(enum.Enum):
    """What a declaration runs."""

    CLASS = "class"  # a Step subclass
    INLINE = "inline"  # a plain function declared with @step
    REACTOR = "reactor"  # a child reactor, declared with compose()


class StepDeclaration:
    """One step of a reactor: what runs, how its arguments are wired, what it waits for.

    The step's name is the attribute a reactor binds it to. For an inline step the declaration
    also carries the ``compensate`` / ``undo`` functions attached with ``@<step>.compensate`` and
    ``@<step>.undo``, and its own ``coordination`` and retry policy.
    """

    def __init__(
        self,
        kind: StepKind,
        target: Any,
        *,
        contract: Contract,
        accepts_extra: bool = False,
        wiring: Mapping[str, Source] | None = None,
        wait_for: tuple[str, ...] = (),
    ) -> None:
        self.kind = kind
        self.target = target
        self.contract = contract
        self.accepts_extra = accepts_extra
        self.wiring: Mapping[str, Source] = MappingProxyType(dict(wiring or {}))
        self.wait_for = wait_for
        self.compensate_hook: Hook | None = None
        self.undo_hook: Hook | None = None
        self.name: str | None = None
        self.hook_names: set[str] = set()  # names the compensate/undo functions were defined as
        if kind is StepKind.INLINE:
            inherited = getattr(target, RETRY_ATTRIBUTE, None)
            if inherited is not None:
                self.__dict__[RETRY_ATTRIBUTE] = inherited
            declared = getattr(target, COORDINATION_ATTRIBUTE, None)
            if declared:
                self.__dict__["_coordination"] = MappingProxyType(dict(declared))

    def __set_name__(self, owner: type, name: str) -> None:
        if self.name is None:
            self.name = name

    # -- what the engine reads -------------------------------------------------------------

    @property
    def retry_policy(self) -> RetryPolicy | None:
        """The step's retry policy: declared on the inline step or on the step class."""
        own: RetryPolicy | None = self.__dict__.get(RETRY_ATTRIBUTE)
        if own is not None or self.kind is StepKind.INLINE:
            return own
        policy: RetryPolicy | None = getattr(self.target, RETRY_ATTRIBUTE, None)
        return policy

    @property
    def coordination(self) -> Mapping[str, Any]:
        """The coordination this step declares: on the inline step, or on its Step class.

        Empty for a composed child reactor: its own declarations are taken by its own run.
        """
        if self.kind is StepKind.INLINE:
            declared: Mapping[str, Any] = self.__dict__.get("_coordination", _NONE)
            return declared
        if self.kind is StepKind.REACTOR:
            return _NONE
        target_coordination: Mapping[str, Any] = self.target.coordination
        return target_coordination

    @property
    def label(self) -> str:
        """A readable name for messages: the step name, else what it runs."""
        if self.name:
            return self.name
        return getattr(self.target, "__qualname__", repr(self.target))

    def attach_retries(self, policy: RetryPolicy) -> None:
        """Record ``@retries`` placed above ``@step``/``step(...)``; refuse a second policy."""
        if self.retry_policy is not None:
            where = "inline step" if self.kind is StepKind.INLINE else "step class"
            raise DefinitionError(
                f"step {self.label!r} already declares @retries on its {where}; "
                "declare the retry policy in one place only"
            )
        self.__dict__[RETRY_ATTRIBUTE] = policy

    def attach_coordination(self, decorator: str, declaration: Any) -> None:
        """Record ``with_*`` placed above ``@step``; refuse a primitive declared twice."""
        if self.kind is not StepKind.INLINE:
            where = (
                f"the Step class {self.label}"
                if self.kind is StepKind.CLASS
                else f"the child reactor class {self.label}"
            )
            raise DefinitionError(
                f"{decorator}(...) on step({self.label}): declare it on {where} instead, "
                "so every reactor using it gets the same coordination"
            )
        declared = dict(self.coordination)
        if declaration.primitive in declared:
            raise DefinitionError(
                f"step {self.label!r}: {decorator} is declared twice on this step; keep one",
                step=self.label,
            )
        declared[declaration.primitive] = declaration
        self.__dict__["_coordination"] = MappingProxyType(declared)

    # -- inline compensate / undo ----------------------------------------------------------

    def compensate(self, fn: Hook) -> StepDeclaration:
        """Attach ``fn(error, **arguments)``, run when this inline step itself fails."""
        self._check_hook("compensate", fn, self.compensate_hook)
        self.compensate_hook = fn
        self.hook_names.add(getattr(fn, "__name__", ""))
        return self

    def undo(self, fn: Hook) -> StepDeclaration:
        """Attach ``fn(result, **arguments)``, run when a later step fails after this one."""
        self._check_hook("undo", fn, self.undo_hook)
        self.undo_hook = fn
        self.hook_names.add(getattr(fn, "__name__", ""))
        return self

    def _check_hook(self, what: str, fn: object, existing: Hook | None) -> None:
        if self.kind is not StepKind.INLINE:
            raise DefinitionError(
                f"@{self.label}.{what} attaches to inline steps only; "
                f"define {what}() on the step class {self.label} instead"
            )
        if not callable(fn):
            raise DefinitionError(f"@{self.label}.{what} needs a function, got {fn!r}")
        if existing is not None:
            raise DefinitionError(f"step {self.label!r} already has a {what} function")

    # -- direct invocation -------------------------------------------------------------------

    def invoke(self, args: Mapping[str, Any] | None = None, *, context: Any = None) -> Outcome:
        """Run this step alone with ``args``, as ``Step.invoke`` does for step classes."""
        from py_reactor.engine.invoke import invoke_declaration

        return invoke_declaration(self, args, context=context)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the inline function directly (plain Python; no validation, no engine)."""
        if self.kind is not StepKind.INLINE:
            raise TypeError(f"step {self.label!r} is not callable; use .invoke(args)")
        return self.target(*args, **kwargs)

    def __repr__(self) -> str:
        what = getattr(self.target, "__qualname__", repr(self.target))
        return f"<StepDeclaration {self.label!r} {self.kind.value}={what}>"
