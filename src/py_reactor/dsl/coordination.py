"""The five coordination decorators: ``with_lock``, ``with_semaphore``, ``with_rate_limit``,
``with_period`` and ``with_ordered_lock``.

Each checks its options when it is called (at import) and records a declaration in the
``coordination`` mapping of what it decorates: a Reactor subclass (the key function receives
the reactor's inputs), a Step subclass or an inline ``@step`` function, above or below ``@step``
(the key function receives the step's resolved arguments). A subclass inherits its parent's
declarations and gets its own mapping when it declares more (the parent's is never changed);
declaring the same primitive twice on one class or step is refused.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from py_reactor.coordination.declarations import (
    Declaration,
    KeySpec,
    LockDeclaration,
    OrderedLockDeclaration,
    PeriodDeclaration,
    RateLimitDeclaration,
    SemaphoreDeclaration,
)
from py_reactor.dsl.declaration import (
    COORDINATION_ATTRIBUTE,
    REFUSES_COORDINATION,
    StepDeclaration,
)
from py_reactor.dsl.reactor import Reactor
from py_reactor.dsl.step import Step
from py_reactor.errors import DefinitionError

__all__ = ["with_lock", "with_ordered_lock", "with_period", "with_rate_limit", "with_semaphore"]

T = TypeVar("T")

_OWN = "__py_reactor_declared__"


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
    only that step's work is serialized. See ``py_reactor.Lock``.

    Args:
        key: a constant str, or a function of the validated values returning the key.
        ttl: seconds a hold lives without extension; extended every ``ttl / 3`` while running.
        wait: seconds to wait for a busy lock before the run fails with LockAcquisitionError.
        auto_extend: keep extending the hold while the run lasts.
        rollback_wait: steps only: seconds the step's ``compensate``/``undo`` waits to re-take
            the lock (default: ``ttl``); if it cannot, the rollback failure is reported.
    """
    return _declarer(
        "with_lock",
        lambda: LockDeclaration(
            key, ttl=ttl, wait=wait, auto_extend=auto_extend, rollback_wait=rollback_wait
        ),
    )


def with_semaphore(
    key: KeySpec,
    *,
    limit: int,
    wait: float = 0,
    lease: float = 60,
    rollback_wait: float | None = None,
) -> Callable[[T], T]:
    """Let at most ``limit`` runs (of the reactor, or of the one step) with ``key`` at once.

    Args:
        key: a constant str, or a function of the validated values returning the key.
        limit: concurrent runs allowed (>= 1).
        wait: seconds to wait for a slot before the run fails with SemaphoreAcquisitionError.
        lease: seconds a slot lives without renewal (renewed while the run lasts).
        rollback_wait: steps only: seconds the step's ``compensate``/``undo`` waits to re-take
            a slot (default: ``lease``); if it cannot, the rollback failure is reported.
    """
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
    if limit is None and limits is None and not isinstance(key, str):
        raise DefinitionError(
            "with_rate_limit: without limit= or limits=, the key must be the name of a limit "
            "registered with configure(rate_limits=...), not a function"
        )
    return _declarer(
        "with_rate_limit",
        lambda: RateLimitDeclaration(key, limit=limit, period=period, limits=limits, wait=wait),
    )


def with_period(key: KeySpec, *, every: str | int, wait: float = 60) -> Callable[[T], T]:
    """Run at most once per ``every`` bucket.

    On a reactor, later runs in the bucket halt (reason "period"). On a step, later runs
    **skip the step** (``Skipped``, reason "period") and the rest of the workflow continues.
    The bucket is marked only when the work ends in a plain success.

    Args:
        key: a constant str, or a function of the validated values (the reactor's inputs,
            or the step's arguments) returning the key.
        every: ``"minute"``, ``"hour"``, ``"day"``, ``"week"``, ``"month"``, ``"year"`` (UTC
            calendar buckets) or a number of seconds.
        wait: seconds to wait for a concurrent run of the same bucket to finish.
    """
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
    "ordered_lock") while the rest of their workflow continues.

    Args:
        key: a constant str, or a function of the validated values (the reactor's inputs,
            or the step's arguments) returning the key.
        ttl: seconds the sequence's bookkeeping lives.
        poison_pill_timeout: seconds after which a position that stopped heartbeating (its
            process died) is skipped so the ones behind it can go.
        strict: after a failure, later positions of the same sequence stop without running
            (a reactor halts, a step is skipped; reason "ordered_lock") until the sequence
            drains.
        wait: seconds to wait for this position's turn (None: as long as it takes).
    """
    return _declarer(
        "with_ordered_lock",
        lambda: OrderedLockDeclaration(
            key, ttl=ttl, poison_pill_timeout=poison_pill_timeout, strict=strict, wait=wait
        ),
    )


def _declarer(name: str, build: Callable[[], Declaration]) -> Callable[[T], T]:
    """Build (and so check) the declaration now; return the decorator that records it."""
    decl = _checked(name, build)

    def decorate(target: T) -> T:
        refusal = getattr(target, REFUSES_COORDINATION, None)
        if refusal:
            raise DefinitionError(f"{name}(...) on {_label(target)}: {refusal}")
        if isinstance(target, type) and issubclass(target, Reactor | Step):
            if issubclass(target, Reactor) and getattr(decl, "rollback_wait", None) is not None:
                raise DefinitionError(
                    f"{name}(rollback_wait=...) on reactor {_label(target)}: rollback_wait is "
                    "for steps; a reactor keeps its holds through its own rollback",
                    reactor=_label(target),
                )
            _check_key_shape(name, decl, target.__py_reactor_contract__.fields, _label(target))
            _attach(name, target, decl)
            return target
        if isinstance(target, StepDeclaration):
            _check_key_shape(name, decl, target.contract.fields, target.label)
            target.attach_coordination(name, decl)
            return target
        if callable(target) and not isinstance(target, type):
            _check_key_shape(name, decl, _parameters(target), _label(target))
            _attach_to_function(name, target, decl)
            return target
        raise DefinitionError(
            f"{name}(...) decorates a Reactor subclass, a Step subclass or an inline step "
            f"function, got {target!r}"
        )

    decorate.__py_reactor_decorator__ = name  # type: ignore[attr-defined]
    return decorate


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


def _parameters(fn: Any) -> list[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


def _checked(name: str, build: Callable[[], Declaration]) -> Declaration:
    try:
        decl = build()
    except DefinitionError as exc:
        raise DefinitionError(f"{name}: {exc.message}") from None
    key = decl.key
    if isinstance(key, type | StepDeclaration):
        raise DefinitionError(
            f"{name} needs a key: write @{name}('some-key', ...) or "
            f"@{name}(lambda args: ..., ...); it was applied without one to {_label(key)}"
        )
    if not callable(key) and not (isinstance(key, str) and key):
        raise DefinitionError(
            f"{name}: key must be a non-empty str or a function of the inputs, got {key!r}"
        )
    return decl


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


def _attach_to_function(name: str, fn: Any, decl: Declaration) -> None:
    """Record ``decl`` on a function that ``@step`` will turn into an inline step."""
    declared: dict[str, Declaration] = dict(getattr(fn, COORDINATION_ATTRIBUTE, {}))
    if decl.primitive in declared:
        raise DefinitionError(
            f"{_label(fn)}: {name} is declared twice on this step; keep one", step=_label(fn)
        )
    declared[decl.primitive] = decl
    try:
        setattr(fn, COORDINATION_ATTRIBUTE, declared)
    except (AttributeError, TypeError):
        raise DefinitionError(
            f"{name}(...) cannot record a declaration on {fn!r}; decorate a def function, "
            "a Step subclass or a Reactor subclass"
        ) from None


def _label(target: object) -> str:
    return str(getattr(target, "__qualname__", None) or getattr(target, "name", None) or target)
