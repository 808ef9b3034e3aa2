"""Coordination declarations: introspection, inheritance, and what is refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from py_reactor import (
    Lock,
    Reactor,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
    with_rate_limit,
    with_semaphore,
)
from py_reactor.coordination.declarations import (
    LockDeclaration,
    PeriodDeclaration,
    RateLimitDeclaration,
    SemaphoreDeclaration,
)
from py_reactor.errors import DefinitionError
from tests.engine.coordination._helpers import (
    _REGISTERED,
    BEHAVIOUR,
    FourPrimitives,
    Guarded,
    Locked,
    LockedWait,
    MinuteTighter,
    Probe,
    Registered,
    by_key,
    ordered_reactors,
)


class Plain(Reactor):
    key: str
    probe = step(Probe)
    returns = "probe"


class LockedSub(Locked):
    pass


@with_semaphore(lambda inputs: f"{inputs['key']}-sub", limit=2)
class LockedSubWithSemaphore(Locked):
    pass


@with_lock("replaced-key", ttl=5)
class LockedSubRedeclared(Locked):
    pass


def test_coordination_lists_exactly_the_declared_primitives() -> None:
    """``Reactor.coordination`` maps each declared primitive to its declaration, and no more."""
    assert dict(Plain.coordination) == {}
    assert set(Locked.coordination) == {"lock"}
    assert set(Guarded.coordination) == {"lock", "semaphore"}
    assert set(FourPrimitives.coordination) == {"lock", "semaphore", "period", "rate_limit"}
    lock = FourPrimitives.coordination["lock"]
    assert isinstance(lock, LockDeclaration)
    assert lock.key is by_key
    assert (lock.ttl, lock.wait, lock.auto_extend) == (60, 0, True)
    semaphore = FourPrimitives.coordination["semaphore"]
    assert isinstance(semaphore, SemaphoreDeclaration)
    assert semaphore.limit == 1
    period = FourPrimitives.coordination["period"]
    assert isinstance(period, PeriodDeclaration)
    assert period.every == "day"
    rate = FourPrimitives.coordination["rate_limit"]
    assert isinstance(rate, RateLimitDeclaration)
    assert (rate.limit, rate.period) == (5, "minute")
    waiting = LockedWait.coordination["lock"]
    assert waiting.wait == 0.3
    assert MinuteTighter.coordination["rate_limit"].limits == {"minute": 2, "hour": 3}
    assert Registered.coordination["rate_limit"].key == _REGISTERED


def test_all_five_primitives_are_introspectable_together() -> None:
    """A reactor declaring all five primitives lists all five, ordered lock options included."""
    decl = ordered_reactors()["all"].coordination
    assert set(decl) == {"lock", "semaphore", "rate_limit", "period", "ordered_lock"}
    ordered = decl["ordered_lock"]
    assert (ordered.ttl, ordered.poison_pill_timeout, ordered.strict) == (120, 30, False)
    assert ordered.key is by_key


def test_coordination_mapping_is_read_only() -> None:
    """Nobody can change a reactor's declarations by writing into ``.coordination``."""
    with pytest.raises(TypeError, match="does not support item assignment"):
        Locked.coordination["semaphore"] = object()  # type: ignore[index]
    assert set(Locked.coordination) == {"lock"}


def test_subclasses_inherit_and_extend_without_touching_the_parent() -> None:
    """A subclass inherits its parent's declarations; declaring more gives it its own mapping."""
    assert LockedSub.coordination["lock"] is Locked.coordination["lock"]
    assert set(LockedSubWithSemaphore.coordination) == {"lock", "semaphore"}
    assert LockedSubWithSemaphore.coordination["lock"] is Locked.coordination["lock"]
    assert set(Locked.coordination) == {"lock"}
    assert LockedSubRedeclared.coordination["lock"].key == "replaced-key"
    assert LockedSubRedeclared.coordination["lock"].ttl == 5
    assert Locked.coordination["lock"].key is by_key


def test_an_inherited_lock_is_taken_when_the_subclass_runs(key: str) -> None:
    """A subclass without decorators of its own still runs under its parent's lock."""
    seen: list[Any] = []
    BEHAVIOUR[key] = lambda probe: seen.append(Lock(key).state().owner) or "ok"
    outcome = LockedSub.run(key=key)
    assert outcome.is_success, outcome
    assert seen == [outcome.context.root_id]


def test_declaring_the_same_primitive_twice_on_one_class_is_refused() -> None:
    """Two ``with_lock`` on one class is a definition error naming the class and the decorator."""
    with pytest.raises(DefinitionError) as caught:

        @with_lock("a")
        @with_lock("b")
        class Twice(Reactor):
            key: str
            probe = step(Probe)

    message = str(caught.value)
    assert "with_lock" in message
    assert "Twice" in message
    assert "twice" in message


BAD_OPTIONS: list[tuple[str, Callable[[], Any], str]] = [
    ("lock ttl=0", lambda: with_lock("k", ttl=0), "ttl"),
    ("lock ttl=-1", lambda: with_lock("k", ttl=-1), "ttl"),
    ("lock wait=-1", lambda: with_lock("k", wait=-1), "wait"),
    ("lock auto_extend", lambda: with_lock("k", auto_extend="yes"), "auto_extend"),  # type: ignore[arg-type]
    ("lock key=''", lambda: with_lock(""), "key"),
    ("lock key=None", lambda: with_lock(None), "key"),  # type: ignore[arg-type]
    ("semaphore limit=0", lambda: with_semaphore("k", limit=0), "limit"),
    ("semaphore wait=-1", lambda: with_semaphore("k", limit=2, wait=-1), "wait"),
    ("semaphore key=''", lambda: with_semaphore("", limit=2), "key"),
    ("rate limit=0", lambda: with_rate_limit("k", limit=0, period="minute"), "limit"),
    ("rate limit no period", lambda: with_rate_limit("k", limit=3), "period"),
    ("rate period", lambda: with_rate_limit("k", limit=3, period="fortnight"), "period"),
    ("rate limits", lambda: with_rate_limit("k", limits={"fortnight": 1}), "limits"),
    ("rate limits value", lambda: with_rate_limit("k", limits={"minute": 0}), "limits"),
    ("rate fn without limit", lambda: with_rate_limit(lambda i: "x"), "limit"),
    ("rate key=None", lambda: with_rate_limit(None, limit=1, period="minute"), "key"),  # type: ignore[arg-type]
    ("period every", lambda: with_period("k", every="fortnight"), "every"),
    ("period every=0", lambda: with_period("k", every=0), "every"),
    ("period key=''", lambda: with_period("", every="day"), "key"),
    ("ordered ppt=0", lambda: with_ordered_lock("k", poison_pill_timeout=0), "poison_pill_timeout"),
    ("ordered strict", lambda: with_ordered_lock("k", strict="yes"), "strict"),  # type: ignore[arg-type]
    ("ordered ttl=0", lambda: with_ordered_lock("k", ttl=0), "ttl"),
    ("ordered key=None", lambda: with_ordered_lock(None), "key"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(
    ("make", "option"), [(m, o) for _, m, o in BAD_OPTIONS], ids=[i for i, _, _ in BAD_OPTIONS]
)
def test_bad_options_are_refused_when_the_decorator_is_called(
    make: Callable[[], Any], option: str
) -> None:
    """A bad option fails when ``with_*(...)`` is called, with a message naming the option."""
    with pytest.raises(DefinitionError) as caught:
        make()
    assert option in str(caught.value)
    assert "with_" in str(caught.value)


def _declared(decorator: Callable[[Any], Any]) -> Any:
    """The one declaration ``decorator`` records on a fresh subclass of ``Plain``."""

    class Target(Plain):
        pass

    (declaration,) = decorator(Target).coordination.values()
    return declaration


def test_good_options_are_accepted() -> None:
    """The options the refusals are tested against are accepted when valid, and stored."""
    lock = _declared(with_lock("k", ttl=0.5, wait=0, auto_extend=False))
    assert (lock.key, lock.ttl, lock.wait, lock.auto_extend) == ("k", 0.5, 0, False)
    semaphore = _declared(with_semaphore("k", limit=1, wait=0))
    assert (semaphore.limit, semaphore.wait) == (1, 0)
    rate = _declared(with_rate_limit("k", limit=1, period=30))
    assert (rate.limit, rate.period, rate.limits) == (1, 30, None)
    both = _declared(with_rate_limit("k", limits={"second": 3, "minute": 100}))
    assert (both.limit, both.limits) == (None, {"second": 3, "minute": 100})
    named = _declared(with_rate_limit("registered-name"))
    assert (named.key, named.limit, named.limits) == ("registered-name", None, None)
    assert _declared(with_period("k", every=90)).every == 90
    ordered = _declared(with_ordered_lock("k", ttl=10, poison_pill_timeout=1, strict=False))
    assert (ordered.ttl, ordered.poison_pill_timeout, ordered.strict) == (10, 1, False)
