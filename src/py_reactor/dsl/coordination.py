"""The five coordination decorators: ``with_lock``, ``with_semaphore``, ``with_rate_limit``,
``with_period`` and ``with_ordered_lock``.

Each checks its options (and the shape of its key function) when it is called, at import, and
records a declaration in the ``coordination`` mapping of what it decorates: a Reactor subclass
(the key function receives the reactor's inputs), a Step subclass or an inline ``@step``
function, above or below ``@step`` (the key function receives the step's resolved arguments).
A subclass inherits its parent's declarations and gets its own mapping when it declares more
(the parent's is never changed); declaring the same primitive twice on one class or step is
refused.

On a plain function that never becomes a step (a module-level helper), the decorator wraps
it: each call takes the declared primitives around the call (see ``_coordinated``). ``@step``
applied to such a wrapper unwraps it to the original function and takes its declarations.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, ParamSpec, TypeVar

from py_reactor.aio import call, run_coroutine
from py_reactor.coordination.declarations import (
    Declaration,
    KeySpec,
    LockDeclaration,
    OrderedLockDeclaration,
    PeriodDeclaration,
    RateLimitDeclaration,
    SemaphoreDeclaration,
)
from py_reactor.coordination.holds import Ledger
from py_reactor.coordination.owner import (
    bind_owner,
    new_owner,
    running_ledger,
    running_owner,
    unbind_owner,
)
from py_reactor.coordination.scope import Admission, Scope
from py_reactor.dsl._key_reads import names_read
from py_reactor.dsl.declaration import (
    BARE_ATTRIBUTE,
    COORDINATION_ATTRIBUTE,
    ORIGINAL_ATTRIBUTE,
    REFUSES_COORDINATION,
    StepDeclaration,
    StepKind,
)
from py_reactor.dsl.reactor import Reactor
from py_reactor.dsl.step import Step
from py_reactor.errors import CoordinationError, DefinitionError

__all__ = ["with_lock", "with_ordered_lock", "with_period", "with_rate_limit", "with_semaphore"]

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")

_OWN = "__py_reactor_declared__"

#: What each decorator needs besides the key, for the examples in messages.
_EXAMPLE_OPTIONS = {
    "with_lock": ", ...",
    "with_semaphore": ", limit=5",
    "with_rate_limit": ", limit=10, period='minute'",
    "with_period": ", every='day'",
    "with_ordered_lock": ", ...",
}


def _requires(*options: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Refuse a call missing a required option with a DefinitionError instead of a TypeError.

    The wrapped function keeps its signature (type checkers still require the option); at run
    time, ``@with_semaphore`` written without parentheses gets a message that says so.
    """

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def checked(*args: P.args, **kwargs: P.kwargs) -> R:
            missing = [option for option in options if option not in kwargs]
            if missing and (args or "key" in kwargs):
                key = args[0] if args else kwargs["key"]
                raise DefinitionError(_missing_option(fn.__name__, key, missing[0]))
            return fn(*args, **kwargs)

        return checked

    return wrap


def with_lock(
    key: KeySpec,
    *,
    ttl: float = 60,
    wait: float = 0,
    auto_extend: bool = True,
    rollback_wait: float | None = None,
) -> Callable[[T], T]:
    """Hold an exclusive lock on ``key`` while the reactor (or the one step) runs.

    On a reactor the key function receives the validated inputs; on a step (a ``Step``
    subclass or an inline ``@step`` function) it receives the step's resolved arguments, and
    only that step's work is serialized. On a plain function (not a step) every call holds the
    lock; the key function receives the call's arguments by name. See ``py_reactor.Lock``.

    Args:
        key: a constant str, or a function of the validated values returning the key.
        ttl: seconds a hold lives without extension; extended every ``ttl / 3`` while running.
        wait: seconds to wait for a busy lock before the run fails with LockAcquisitionError.
        auto_extend: keep extending the hold while the run lasts.
        rollback_wait: seconds a step's ``compensate``/``undo`` waits to re-take the lock
            (default: ``ttl``); if it cannot, the rollback failure is reported. On a reactor:
            how long its undo waits when a parent that composed it rolls it back (a reactor
            keeps its holds through its own rollback).
    """
    _check_key("with_lock", key)
    return _declarer(
        "with_lock",
        lambda: LockDeclaration(
            key, ttl=ttl, wait=wait, auto_extend=auto_extend, rollback_wait=rollback_wait
        ),
    )


@_requires("limit")
def with_semaphore(
    key: KeySpec,
    *,
    limit: int,
    wait: float = 0,
    lease: float = 60,
    rollback_wait: float | None = None,
) -> Callable[[T], T]:
    """Let at most ``limit`` runs (of the reactor, the one step, or a plain function) at once.

    Args:
        key: a constant str, or a function of the validated values returning the key.
        limit: concurrent runs allowed (>= 1).
        wait: seconds to wait for a slot before the run fails with SemaphoreAcquisitionError.
        lease: seconds a slot lives without renewal (renewed while the run lasts).
        rollback_wait: seconds a step's ``compensate``/``undo`` waits to re-take a slot
            (default: ``lease``); if it cannot, the rollback failure is reported. On a reactor:
            how long its undo waits when a parent that composed it rolls it back.
    """
    _check_key("with_semaphore", key)
    return _declarer(
        "with_semaphore",
        lambda: SemaphoreDeclaration(
            key, limit=limit, wait=wait, lease=lease, rollback_wait=rollback_wait
        ),
    )


def with_rate_limit(
    key: KeySpec,
    *,
    limit: int | None = None,
    period: str | int | None = None,
    limits: Mapping[str | int, int] | None = None,
    wait: float = 0,
) -> Callable[[T], T]:
    """Admit at most ``limit`` runs per ``period`` window (or every window of ``limits``).

    ``with_rate_limit("stripe")`` with neither ``limit`` nor ``limits`` uses the limit
    registered as ``configure(rate_limits={"stripe": {...}})``.

    Args:
        key: a constant str, or a function of the validated values (the reactor's inputs,
            or the step's arguments) returning the key.
        limit: runs admitted per window; needs ``period``.
        period: the window: ``"second"``, ``"minute"``, ``"hour"``, ``"day"``, ``"week"`` or
            seconds.
        limits: several windows at once, ``{"second": 3, "minute": 100}``.
        wait: seconds the run may wait for a window to reopen before failing with
            RateLimitExceededError (default 0: fail at once, with ``retry_after``).
    """
    _check_key("with_rate_limit", key)
    if limit is None and limits is None and not isinstance(key, str):
        raise DefinitionError(
            "with_rate_limit: without limit= or limits=, the key must be the name of a limit "
            "registered with configure(rate_limits=...), not a function"
            + _bare_hint("with_rate_limit", key)
        )
    return _declarer(
        "with_rate_limit",
        lambda: RateLimitDeclaration(key, limit=limit, period=period, limits=limits, wait=wait),
    )


@_requires("every")
def with_period(key: KeySpec, *, every: str | int, wait: float = 60) -> Callable[[T], T]:
    """Run at most once per ``every`` bucket.

    On a reactor, later runs in the bucket halt (reason "period"). On a step, later runs
    **skip the step** (``Skipped``, reason "period") and the rest of the workflow continues.
    On a plain function, later calls in the bucket return None without running it. The bucket
    is marked only when the work ends in a plain success (for a function: it returned).

    Args:
        key: a constant str, or a function of the validated values (the reactor's inputs,
            or the step's arguments) returning the key.
        every: ``"minute"``, ``"hour"``, ``"day"``, ``"week"``, ``"month"``, ``"year"`` (UTC
            calendar buckets) or a number of seconds.
        wait: seconds to wait for a concurrent run of the same bucket to finish.
    """
    _check_key("with_period", key)
    return _declarer("with_period", lambda: PeriodDeclaration(key, every=every, wait=wait))


def with_ordered_lock(
    key: KeySpec,
    *,
    ttl: float = 86400,
    poison_pill_timeout: float = 600,
    strict: bool = True,
    wait: float | None = None,
) -> Callable[[T], T]:
    """Run executions with the same ``key`` one at a time, in the order they started.

    On a step, the position is taken when an execution first **arrives at the step** (its
    key reads the step's arguments), so executions pass the step in the order they reached
    it, not the order they started. The two coincide only when the step is the reactor's
    first. In strict mode a failure makes later positions skip the step (``Skipped``, reason
    "ordered_lock") while the rest of their workflow continues. On a plain function, calls
    run in the order they were made; a call skipped in strict mode returns None.

    Args:
        key: a constant str, or a function of the validated values (the reactor's inputs,
            or the step's arguments) returning the key.
        ttl: seconds the sequence's bookkeeping lives.
        poison_pill_timeout: seconds after which a position that stopped heartbeating (its
            process died, its step or reactor was interrupted, or its run stayed parked on
            something else) is skipped so the ones behind it can go. A run whose position was
            skipped so, or whose batch ended meanwhile, does not wait for a turn that will
            never come: the step is skipped, a reactor halts (reason
            "ordered_lock_stale_batch").
        strict: after a failure, later positions of the same sequence stop without running
            (a reactor halts, a step is skipped; reason "ordered_lock") until the sequence
            drains.
        wait: seconds to wait for this position's turn. None (the default): a reactor waits
            as long as it takes; a step run in the calling process does not wait (out of turn
            it fails at once with OrderedLockWaitError, and its position is given up so the
            line goes on). In a worker nothing waits: the execution parks until its turn.
    """
    _check_key("with_ordered_lock", key)
    return _declarer(
        "with_ordered_lock",
        lambda: OrderedLockDeclaration(
            key, ttl=ttl, poison_pill_timeout=poison_pill_timeout, strict=strict, wait=wait
        ),
    )


# -- the key, checked when with_*(...) is called ----------------------------------------------


def _check_key(name: str, key: object) -> None:
    """Refuse a key that is no key: a class or a step (bare ``@with_x``), or the wrong arity."""
    if isinstance(key, type | StepDeclaration):
        raise DefinitionError(_bare_message(name, key))
    if isinstance(key, str) or not callable(key):
        return  # _checked says what a key must be
    try:
        signature = inspect.signature(key)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(MappingProxyType({}))
    except TypeError:
        raise DefinitionError(
            f"{name}(key=...): the key function {_shown(key, signature)} cannot be called with "
            "exactly one positional argument; a key function receives one read-only mapping of "
            "the values, e.g. lambda args: f\"acct:{args['account_id']}\"" + _bare_hint(name, key)
        ) from None


def _shown(key: object, signature: inspect.Signature) -> str:
    """``lambda a, b: ...`` for a lambda, ``name(a, b)`` for a def."""
    if getattr(key, "__name__", None) == "<lambda>":
        return f"`lambda {str(signature)[1:-1]}: ...`".replace("lambda : ", "lambda: ")
    return f"{_label(key)}{signature}"


def _may_be_bare(key: object) -> bool:
    """Whether ``key`` may be the function a ``@with_x`` without parentheses was put on."""
    return inspect.isfunction(key) and key.__name__ != "<lambda>"


def _bare_hint(name: str, key: object) -> str:
    if not _may_be_bare(key):
        return ""
    return (
        f". If you wrote @{name} without parentheses above {_label(key)}, "
        f"use `@{name}(key, ...)`, e.g. @{name}('some-key'{_EXAMPLE_OPTIONS[name]})"
    )


def _bare_message(name: str, target: object) -> str:
    options = _EXAMPLE_OPTIONS[name]
    return (
        f"@{name} was applied without a key (used without parentheses) on {_label(target)}: "
        f"{name} needs a key first; use `@{name}(key, ...)`, e.g. @{name}('some-key'{options}) "
        f"or @{name}(lambda args: ...{options})"
    )


def _missing_option(name: str, key: object, option: str) -> str:
    if isinstance(key, type | StepDeclaration):
        return _bare_message(name, key)
    return (
        f"{name}(...) needs {option}=..., e.g. {name}('some-key'{_EXAMPLE_OPTIONS[name]})"
        + _bare_hint(name, key)
    )


def _checked(name: str, build: Callable[[], Declaration]) -> Declaration:
    try:
        decl = build()
    except DefinitionError as exc:
        raise DefinitionError(f"{name}: {exc.message}") from None
    key = decl.key
    if not callable(key) and not (isinstance(key, str) and key):
        raise DefinitionError(
            f"{name}: key must be a non-empty str or a function of the inputs, got {key!r}"
        )
    return decl


# -- the decorator ------------------------------------------------------------------------------


def _declarer(name: str, build: Callable[[], Declaration]) -> Callable[[T], T]:
    """Build (and so check) the declaration now; return the decorator that records it."""
    decl = _checked(name, build)

    def decorate(*args: Any, **kwargs: Any) -> Any:
        if len(args) != 1 or kwargs:
            if _may_be_bare(decl.key):
                raise DefinitionError(_bare_message(name, decl.key))
            raise DefinitionError(
                f"{name}(...) is a decorator: put it above a Reactor subclass, a Step subclass "
                "or a function"
            )
        return _apply(name, decl, args[0])

    decorate.__name__ = decorate.__qualname__ = name
    setattr(decorate, "__py_reactor_decorator__", name)  # noqa: B010
    if _may_be_bare(decl.key):
        function_name = getattr(decl.key, "__name__", "")
        setattr(decorate, BARE_ATTRIBUTE, (function_name, _bare_message(name, decl.key)))
    return decorate


def _apply(name: str, decl: Declaration, target: Any) -> Any:
    refusal = getattr(target, REFUSES_COORDINATION, None)
    if refusal:
        raise DefinitionError(f"{name}(...) on {_label(target)}: {refusal}")
    if isinstance(target, type) and issubclass(target, Reactor | Step):
        where = _label(target)
        if issubclass(target, Reactor):
            receives, at = "the reactor's inputs", {"reactor": where}
        else:
            receives, at = "the step's inputs", {"step": where}
        fields = list(target.__py_reactor_contract__.fields)
        _check_key_shape(name, decl, fields, where)
        _check_key_names(name, decl, fields, where, receives, at)
        _attach(name, target, decl)
        return target
    if isinstance(target, StepDeclaration):
        if target.kind is StepKind.INLINE:
            names = target.argument_names
            _check_key_shape(name, decl, names, target.label)
            _check_key_names(
                name, decl, names, target.label, "the step's arguments", {"step": target.label}
            )
        target.attach_coordination(name, decl)  # refuses a class step or compose()
        return target
    if isinstance(target, staticmethod | classmethod):
        return type(target)(_coordinated(name, decl, target.__func__))
    if callable(target) and not isinstance(target, type):
        return _coordinated(name, decl, target)
    if _may_be_bare(decl.key):
        raise DefinitionError(_bare_message(name, decl.key))
    raise DefinitionError(
        f"{name}(...) decorates a Reactor subclass, a Step subclass, an inline step function "
        f"or a plain function, got {target!r}"
    )


#: Parameter names that read as "the mapping of values", not as one of the values.
_MAPPING_NAMES = frozenset({"args", "arguments", "inputs", "values", "mapping", "kwargs"})


def _check_key_shape(name: str, decl: Declaration, names: Iterable[str], where: str) -> None:
    """Refuse ``lambda account_id: ...``: a key function receives one mapping of all values."""
    key = decl.key
    if isinstance(key, str):
        return
    try:
        parameters = list(inspect.signature(key).parameters.values())
    except (TypeError, ValueError):
        return
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) != 1:
        return
    param = positional[0].name
    if param in set(names) and param not in _MAPPING_NAMES:
        raise DefinitionError(
            f"{name}(...) on {where}: the key function's parameter is named {param!r}, like "
            f"the value {param!r}, but it receives one read-only mapping of all the values; "
            f'write lambda args: f"...{{args[{param!r}]}}" (if {param!r} is meant as that '
            "mapping, name the parameter args)"
        )


def _check_key_names(
    name: str,
    decl: Declaration,
    names: Iterable[str] | None,
    where: str,
    receives: str,
    at: Mapping[str, str],
) -> None:
    """Refuse a key function reading ``args["x"]`` (or ``args.get("x")``) that is never there.

    ``names`` is what the mapping will hold (None: not known, nothing is checked). The reads
    are found in the key function's source; when it cannot be read, nothing is checked.
    """
    key = decl.key
    if names is None or isinstance(key, str):
        return
    known = list(names)
    for read in names_read(key):
        if read in known:
            continue
        if known:
            close = difflib.get_close_matches(read, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else "read one of those names"
            what = f"{receives}: {', '.join(known)}; {hint}"
        else:
            what = f"an empty mapping: {where} has no {receives.rpartition(' ')[2]}"
        raise DefinitionError(
            f"{name}(...) on {where}: the key function reads {read!r}, but it receives {what}",
            **at,
        )


def _parameters(fn: Any) -> list[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


def _attach(name: str, cls: type[Reactor] | type[Step], decl: Declaration) -> None:
    own: tuple[str, ...] = cls.__dict__.get(_OWN, ())
    if decl.primitive in own:
        kind = "reactor" if issubclass(cls, Reactor) else "step"
        raise DefinitionError(
            f"{cls.__qualname__}: {name} is declared twice on this class; keep one",
            **{kind: cls.__qualname__},
        )
    declared: dict[str, Any] = dict(cls.coordination)
    declared[decl.primitive] = decl
    cls.coordination = MappingProxyType(declared)
    setattr(cls, _OWN, (*own, decl.primitive))


# -- a plain function ---------------------------------------------------------------------------


def _coordinated(name: str, decl: Declaration, fn: Any) -> Any:
    """``fn`` wrapped so that every call takes ``decl`` (and what ``fn`` already declares).

    ``@step`` unwraps the wrapper to the original function (``ORIGINAL_ATTRIBUTE``) and takes
    its declarations from ``COORDINATION_ATTRIBUTE``; a later ``with_*`` builds a new wrapper
    around the same original, so a wrapper is never changed once returned.
    """
    label = _label(fn)
    if inspect.isasyncgenfunction(fn):
        raise DefinitionError(
            f"{name}(...) on {label}: it is an async generator function, which returns before "
            "its body runs, so nothing would be protected; decorate a function that does the work"
        )
    if inspect.isgeneratorfunction(fn):
        raise DefinitionError(
            f"{name}(...) on {label}: it is a generator function, which returns before its "
            "body runs, so nothing would be protected; decorate a function that does the work"
        )
    original = getattr(fn, ORIGINAL_ATTRIBUTE, fn)
    declared: dict[str, Declaration] = dict(getattr(fn, COORDINATION_ATTRIBUTE, None) or {})
    if decl.primitive in declared:
        raise DefinitionError(f"{label}: {name} is declared twice on this function; keep one")
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        raise DefinitionError(
            f"{name}(...) cannot read the signature of {fn!r}, so its key function could not "
            "receive the call's arguments; decorate a def function, a Step subclass or a "
            "Reactor subclass"
        ) from None
    parameters = list(signature.parameters.values())
    _check_key_shape(name, decl, [p.name for p in parameters], label)
    if not any(p.kind is p.VAR_KEYWORD for p in parameters):
        names = [p.name for p in parameters]
        _check_key_names(name, decl, names, label, "the function's arguments", {})
    declared[decl.primitive] = decl
    declarations = MappingProxyType(declared)

    coordinated: Callable[..., Any]
    if inspect.iscoroutinefunction(original):

        @functools.wraps(fn)
        async def coordinated(*args: Any, **kwargs: Any) -> Any:
            # the same scope, taken and released with every wait awaited on the loop
            return await call(_call, original, signature, declarations, label, args, kwargs)

    else:

        @functools.wraps(fn)
        def coordinated(*args: Any, **kwargs: Any) -> Any:
            return _call(original, signature, declarations, label, args, kwargs)

    coordinated.__dict__[COORDINATION_ATTRIBUTE] = declared
    coordinated.__dict__[ORIGINAL_ATTRIBUTE] = original
    return coordinated


def _call(
    fn: Callable[..., Any],
    signature: inspect.Signature,
    declarations: Mapping[str, Declaration],
    label: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Call ``fn`` inside its declared coordination; see ``_coordinated``.

    Holds belong to the running execution (a helper called from a locked step re-enters its
    hold); outside one, the call is its own owner for its duration. A period already done in
    its bucket, or a strict ordered lock short-circuited by an earlier failure (or a position
    that left the sequence), returns None without calling ``fn``.

    Raises:
        CoordinationError: contention after ``wait`` (LockAcquisitionError, ...), a full rate
            limit, a key function that failed, or an unreachable store; ``fn`` did not run.
    """
    bound = signature.bind(*args, **kwargs)  # a TypeError, as calling fn itself would raise
    bound.apply_defaults()
    values: dict[str, Any] = {}
    for param_name, value in bound.arguments.items():
        if signature.parameters[param_name].kind is inspect.Parameter.VAR_KEYWORD:
            values.update(value)  # by name, as an inline step with **kwargs receives them
        else:
            values[param_name] = value
    token = bind_owner(new_owner()) if running_owner() is None else None
    try:
        try:
            scope = Scope(
                declarations, values, reactor=label, ledger=_ledger(), holder=f"call:{new_owner()}"
            )
            admission = scope.acquire()
        except CoordinationError as exc:
            _relocate(exc, label)
            raise
        if admission is not Admission.PROCEED:
            scope.exit(succeeded=False, failed=False)
            return None
        returned = False
        try:
            result = fn(*args, **kwargs)
            if inspect.iscoroutine(result):  # an async function's body runs inside the scope
                result = run_coroutine(result)
            returned = True
        finally:
            scope.exit(succeeded=returned, failed=not returned)
        return result
    finally:
        if token is not None:
            unbind_owner(token)


def _ledger() -> Ledger:
    """Where one call records its holds: the running execution's ledger, if any.

    So a period claim or an ordered turn the execution already holds on the same key is
    re-entered, and the execution lists the call's holds while the call runs; outside an
    execution, a ledger of the call's own.
    """
    ledger = running_ledger()
    return Ledger() if ledger is None else ledger


def _relocate(exc: CoordinationError, label: str) -> None:
    """Say ``label()`` where the scope said ``reactor <label>``: this is a function call."""
    old = f"reactor {label}"
    if exc.message.startswith(old):
        text = f"{label}(){exc.message[len(old) :]}"
        exc.message = text.replace("the reactor has no inputs", "the function takes no arguments")
        exc.args = (exc.message,)


def _label(target: object) -> str:
    if isinstance(target, StepDeclaration):
        return target.label
    return str(getattr(target, "__qualname__", None) or getattr(target, "name", None) or target)
