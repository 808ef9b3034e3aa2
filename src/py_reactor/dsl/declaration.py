"""The object ``step(...)`` and ``compose(...)`` return: one step as a reactor declares it."""

from __future__ import annotations

import copy
import enum
import inspect
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from py_reactor.dsl.contracts import Contract
from py_reactor.dsl.retries import RETRY_ATTRIBUTE, RetryPolicy
from py_reactor.dsl.sources import Source
from py_reactor.errors import DefinitionError

if TYPE_CHECKING:
    from py_reactor.engine.results import Outcome

__all__ = [
    "BARE_ATTRIBUTE",
    "COORDINATION_ATTRIBUTE",
    "ORIGINAL_ATTRIBUTE",
    "REFUSES_COORDINATION",
    "HookHandle",
    "StepDeclaration",
    "StepKind",
    "bare_decorator",
]

Hook = Callable[..., Any]

_NONE: Mapping[str, Any] = MappingProxyType({})

#: Where ``with_lock`` & co. record declarations on a function that ``@step`` will wrap.
COORDINATION_ATTRIBUTE = "__py_reactor_coordination__"

#: On the wrapper ``with_*`` puts around a plain function: the function it wraps.
ORIGINAL_ATTRIBUTE = "__py_reactor_original__"

#: On what ``@with_lock`` without parentheses returned: (the function's name, the message).
BARE_ATTRIBUTE = "__py_reactor_bare__"

#: A class (e.g. an interrupt step) that sets this attribute to a reason refuses ``with_*``.
REFUSES_COORDINATION = "__py_reactor_refuses_coordination__"


def bare_decorator(value: object) -> tuple[str, str] | None:
    """``(function name, message)`` if ``value`` is a ``@with_x`` applied without parentheses.

    A decorator returned by ``with_lock(fn)`` where ``fn`` is a named ``def`` may be a key
    function (legitimate) or the function ``@with_lock`` was put on; callers decide by where
    they find it (e.g. bound under ``fn``'s own name in a class body, or passed to ``@step``).
    """
    bare: tuple[str, str] | None = getattr(value, BARE_ATTRIBUTE, None)
    return bare if isinstance(bare, tuple) else None


class StepKind(enum.Enum):
    """What a declaration runs."""

    CLASS = "class"  # a Step subclass
    INLINE = "inline"  # a plain function declared with @step
    REACTOR = "reactor"  # a child reactor, declared with compose()
    MAP = "map"  # a child reactor run once per element, declared with map_step()
    INTERRUPT = "interrupt"  # a pause until Reactor.resume(...) brings a payload: interrupt()

    # Members are singletons: hash by identity (C speed) where Enum hashes by name in Python;
    # the engine looks each step's kind up in a table on every step.
    __hash__ = object.__hash__


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
        declared_on: Any = None,
    ) -> None:
        """``declared_on``: where ``@retries`` / ``with_*`` placed below ``@step`` were recorded
        (the wrapper ``with_*`` put around ``target``); default ``target`` itself."""
        self.kind = kind
        self.target = target
        self.contract = contract
        self.accepts_extra = accepts_extra
        self.wiring: Mapping[str, Source] = MappingProxyType(dict(wiring or {}))
        self.wait_for = wait_for
        self.compensate_hook: Hook | None = None
        self.undo_hook: Hook | None = None
        self.name: str | None = None
        #: The reactor class the step is bound to (it runs ``invoke``), once bound.
        self.owner: Any = None
        #: An async unit (``async_step`` / ``async_reactor``): dispatched as its own execution.
        self.asynchronous = False
        #: A map step's elements (``source=``), ``"fail_fast"``/``"collect"``, and batch size.
        self.items: Any = None
        self.mode: str = "fail_fast"
        self.batch_size: int = 50
        self.fan_out: bool = False  # each element an execution of its own, in a worker
        if kind is StepKind.INLINE:
            carrier = target if declared_on is None else declared_on
            inherited = getattr(carrier, RETRY_ATTRIBUTE, None)
            if inherited is not None:
                self.__dict__[RETRY_ATTRIBUTE] = inherited
            declared = getattr(carrier, COORDINATION_ATTRIBUTE, None)
            if declared:
                self.__dict__["_coordination"] = MappingProxyType(dict(declared))

    def __set_name__(self, owner: type, name: str) -> None:
        if self.name is None:
            self.name = name
        if self.owner is None and hasattr(owner, "invoke_step"):
            self.owner = owner

    def rewired(self, wiring: Mapping[str, Source]) -> StepDeclaration:
        """A synchronous copy of this step (same target, hooks, retries and coordination)
        wired as ``wiring``, with nothing to wait for: how an async unit runs in its own job."""
        twin = copy.copy(self)
        twin.__dict__ = dict(self.__dict__)
        twin.wiring = MappingProxyType(dict(wiring))
        twin.wait_for = ()
        twin.asynchronous = False
        return twin

    # -- what the engine reads -------------------------------------------------------------

    @property
    def retry_policy(self) -> RetryPolicy | None:
        """The step's retry policy: declared on the inline step or on the step class."""
        own: RetryPolicy | None = self.__dict__.get(RETRY_ATTRIBUTE)
        if own is not None or self.kind in (StepKind.INLINE, StepKind.INTERRUPT):
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
        if self.kind in (StepKind.REACTOR, StepKind.MAP, StepKind.INTERRUPT):
            return _NONE
        target_coordination: Mapping[str, Any] = self.target.coordination
        return target_coordination

    @property
    def argument_names(self) -> list[str]:
        """The names of the arguments this step receives: its declared ones, plus the extra
        ones it is wired (a ``**kwargs`` inline step)."""
        fields = list(self.contract.fields)
        return fields + [name for name in self.wiring if name not in self.contract.fields]

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
            if self.kind is StepKind.CLASS:
                placed, where = f"step({self.label})", f"the Step class {self.label}"
            else:
                placed, where = f"compose({self.label})", f"the child reactor class {self.label}"
            raise DefinitionError(
                f"{decorator}(...) on {placed}: declare it on {where} instead, "
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

    def compensate(self, fn: Hook) -> HookHandle:
        """Attach ``fn(error, **arguments)``, run when this inline step itself fails.

        Returns a :class:`HookHandle` (callable like ``fn``) for the class body to bind.
        """
        self._check_hook("compensate", fn, self.compensate_hook)
        self.compensate_hook = fn
        return HookHandle(self, "compensate", fn)

    def undo(self, fn: Hook) -> HookHandle:
        """Attach ``fn(result, **arguments)``, run when a later step fails after this one.

        Returns a :class:`HookHandle` (callable like ``fn``) for the class body to bind.
        """
        self._check_hook("undo", fn, self.undo_hook)
        self.undo_hook = fn
        return HookHandle(self, "undo", fn)

    def _check_hook(self, what: str, fn: object, existing: Hook | None) -> None:
        if self.kind is not StepKind.INLINE:
            raise DefinitionError(
                f"@{self.label}.{what} attaches to inline steps only; "
                f"define {what}() on the step class {self.label} instead"
            )
        bare = bare_decorator(fn)
        if bare is not None:
            raise DefinitionError(bare[1])
        if isinstance(fn, StepDeclaration):
            raise DefinitionError(
                f"@{self.label}.{what} needs a plain function, got the step {fn.label!r}; "
                f"remove @step from the {what} function"
            )
        if not callable(fn):
            raise DefinitionError(f"@{self.label}.{what} needs a function, got {fn!r}")
        name = getattr(fn, "__qualname__", None) or repr(fn)
        declared = getattr(fn, COORDINATION_ATTRIBUTE, None)
        if declared:
            decorators = ", ".join(f"with_{primitive}" for primitive in declared)
            raise DefinitionError(
                f"@{self.label}.{what} on {name}: {decorators} is declared on the {what} "
                f"function, but rollback re-takes the step's own declarations (its lock and "
                f"semaphore) around its {what}; put the coordination on the step "
                f"{self.label} instead"
            )
        if getattr(fn, RETRY_ATTRIBUTE, None) is not None:
            raise DefinitionError(
                f"@{self.label}.{what} on {name}: @retries is declared on the {what} function, "
                f"but {_an(what)} is never retried (a failing one is reported on the outcome's "
                f"rollback_failures); put @retries on the step {self.label} if the step's "
                "work should be retried"
            )
        if existing is not None:
            raise DefinitionError(f"step {self.label!r} already has a {what} function")

    def check_hooks(self, where: str, **at: str) -> None:
        """Refuse a compensate/undo that cannot be called as ``fn(first, **arguments)``.

        Args:
            where: the reactor and step, for the message.
            at: ``reactor=``/``step=`` for the error.
        """
        names = self.argument_names
        for what, hook, first in (
            ("compensate", self.compensate_hook, "error"),
            ("undo", self.undo_hook, "result"),
        ):
            if hook is None:
                continue
            try:
                signature = inspect.signature(hook)
            except (TypeError, ValueError):
                continue
            try:
                signature.bind(None, **dict.fromkeys(names))
            except TypeError as exc:
                label = getattr(hook, "__qualname__", None) or repr(hook)
                call = ", ".join([first, *(f"{n}=..." for n in names)])
                receives = (
                    f"the {first} first, then the step's arguments by name ({', '.join(names)})"
                    ": take them, or **arguments"
                    if names
                    else f"only the {first}: the step has no arguments"
                )
                raise DefinitionError(
                    f"{where}: its {what} function {label}{signature} cannot be called as "
                    f"{what}({call}) ({exc}); it receives {receives}",
                    **at,
                ) from None

    # -- direct invocation -------------------------------------------------------------------

    def invoke(self, args: Mapping[str, Any] | None = None, *, context: Any = None) -> Outcome:
        """Run this step alone with ``args``, as ``Step.invoke`` does for step classes.

        Raises:
            TypeError: the step is not bound to a reactor class (``MyReactor.step.invoke``).
        """
        owner = self.owner
        if owner is None:
            raise TypeError(
                f"step {self.label!r} is not bound to a reactor: declare it in a Reactor "
                "subclass and call MyReactor.<step>.invoke(args)"
            )
        outcome: Outcome = owner.invoke_step(self, args, context=context)
        return outcome

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the inline function directly (plain Python; no validation, no engine)."""
        if self.kind is not StepKind.INLINE:
            raise TypeError(f"step {self.label!r} is not callable; use .invoke(args)")
        return self.target(*args, **kwargs)

    def __repr__(self) -> str:
        what = getattr(self.target, "__qualname__", repr(self.target))
        unit = " async" if self.asynchronous else ""
        return f"<StepDeclaration {self.label!r}{unit} {self.kind.value}={what}>"


class HookHandle:
    """What ``@<step>.compensate`` / ``@<step>.undo`` leave in the class body.

    Calling it calls the function. It is not a step (a reactor does not collect it), and a
    coordination decorator or ``@retries`` placed above it is refused: rollback re-takes the
    step's own lock and semaphore around its compensate and undo, and never retries them.
    """

    def __init__(self, step: StepDeclaration, kind: str, function: Hook) -> None:
        self.step = step
        self.kind = kind
        self.function = function
        self.__name__ = getattr(function, "__name__", kind)
        self.__qualname__ = getattr(function, "__qualname__", self.__name__)
        self.__doc__ = getattr(function, "__doc__", None)
        self.__wrapped__ = function
        setattr(
            self,
            REFUSES_COORDINATION,
            f"it is the {kind} function of step {step.label!r}, and rollback re-takes the "
            f"step's own declarations (its lock and semaphore) around its {kind}; put the "
            f"coordination on the step {step.label} instead",
        )

    def attach_retries(self, policy: RetryPolicy) -> None:
        """Refuse ``@retries`` above ``@<step>.compensate`` / ``@<step>.undo``."""
        raise DefinitionError(
            f"@retries on {self.__qualname__}: it is the {self.kind} function of step "
            f"{self.step.label!r}, and {_an(self.kind)} is never retried (a failing one is "
            f"reported on the outcome's rollback_failures); put @retries on the step "
            f"{self.step.label} if the step's work should be retried"
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly (plain Python)."""
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<HookHandle {self.kind} of step {self.step.label!r}: {self.__qualname__}>"


def _an(word: str) -> str:
    """``word`` with its indefinite article: "an undo", "a compensate"."""
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"
