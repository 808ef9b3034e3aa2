"""Step-level coordination declarations: where they can go, what they record, what is refused.

The five decorators work on a ``Step`` subclass and on an inline step (above or below
``@step``), record the same declaration objects the reactor form builds, and are refused where
they would mean nothing (a ``step(SomeStepClass)`` or ``compose(SomeReactor)`` declaration, a
class that refuses coordination). A step that declares nothing costs no Redis call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from py_reactor import (
    Input,
    Reactor,
    Step,
    compose,
    step,
    with_lock,
    with_ordered_lock,
    with_period,
    with_rate_limit,
    with_semaphore,
)
from py_reactor.coordination.declarations import (
    LockDeclaration,
    OrderedLockDeclaration,
    PeriodDeclaration,
    RateLimitDeclaration,
    SemaphoreDeclaration,
)
from py_reactor.errors import DefinitionError
from py_reactor.storage import current_store
from tests.coordination._helpers import client_commands

ALL_FIVE = {"lock", "semaphore", "rate_limit", "period", "ordered_lock"}


def by_account(values: Mapping[str, Any]) -> str:
    """The key every declaration here uses: one per account."""
    return f"acct:{values['account_id']}"


def by_key(values: Mapping[str, Any]) -> str:
    """The key of the runnable steps here: their ``key`` argument."""
    return str(values["key"])


# -- the same five declarations, on a reactor, a Step class and inline steps -------------------


@with_lock(by_account, ttl=30, wait=5, auto_extend=False, rollback_wait=7)
@with_semaphore(by_account, limit=3, wait=2, lease=20, rollback_wait=4)
@with_rate_limit(by_account, limit=2, period="minute")
@with_period(by_account, every="hour", wait=9)
@with_ordered_lock(by_account, ttl=120, poison_pill_timeout=30, strict=False, wait=11)
class AllFiveStep(Step):
    account_id: int

    def run(self) -> int:
        return int(self.inputs.account_id)


class Plain(Step):
    account_id: int

    def run(self) -> int:
        return int(self.inputs.account_id)


@with_lock(by_account, ttl=30, wait=5, auto_extend=False)  # rollback_wait: steps only
@with_semaphore(by_account, limit=3, wait=2, lease=20)
@with_rate_limit(by_account, limit=2, period="minute")
@with_period(by_account, every="hour", wait=9)
@with_ordered_lock(by_account, ttl=120, poison_pill_timeout=30, strict=False, wait=11)
class AllFiveReactor(Reactor):
    account_id: int
    plain = step(Plain)


class InlineBelow(Reactor):
    """All five below ``@step``: recorded on the function, picked up by the declaration."""

    account_id: int

    @step(account_id=Input("account_id"))
    @with_lock(by_account, ttl=30, wait=5, auto_extend=False, rollback_wait=7)
    @with_semaphore(by_account, limit=3, wait=2, lease=20, rollback_wait=4)
    @with_rate_limit(by_account, limit=2, period="minute")
    @with_period(by_account, every="hour", wait=9)
    @with_ordered_lock(by_account, ttl=120, poison_pill_timeout=30, strict=False, wait=11)
    def work(account_id: int) -> int:
        return account_id


class InlineAbove(Reactor):
    """All five above ``@step``: attached to the StepDeclaration."""

    account_id: int

    @with_lock(by_account, ttl=30, wait=5, auto_extend=False, rollback_wait=7)
    @with_semaphore(by_account, limit=3, wait=2, lease=20, rollback_wait=4)
    @with_rate_limit(by_account, limit=2, period="minute")
    @with_period(by_account, every="hour", wait=9)
    @with_ordered_lock(by_account, ttl=120, poison_pill_timeout=30, strict=False, wait=11)
    @step(account_id=Input("account_id"))
    def work(account_id: int) -> int:
        return account_id


class InlineMixed(Reactor):
    """Some above ``@step``, some below: one mapping with all of them."""

    account_id: int

    @with_lock(by_account, ttl=30, wait=5, auto_extend=False, rollback_wait=7)
    @with_semaphore(by_account, limit=3, wait=2, lease=20, rollback_wait=4)
    @step(account_id=Input("account_id"))
    @with_rate_limit(by_account, limit=2, period="minute")
    @with_period(by_account, every="hour", wait=9)
    @with_ordered_lock(by_account, ttl=120, poison_pill_timeout=30, strict=False, wait=11)
    def work(account_id: int) -> int:
        return account_id

    @step(account_id=Input("account_id"))
    def bare(account_id: int) -> int:
        return account_id


# -- inheritance ------------------------------------------------------------------------------


@with_lock(by_account, wait=5)
class LockedStep(Step):
    account_id: int

    def run(self) -> int:
        return int(self.inputs.account_id)


class InheritsLock(LockedStep):
    pass


@with_semaphore(by_account, limit=2)
class AddsSemaphore(LockedStep):
    pass


@with_lock("replaced-key", ttl=5)
class ReplacesLock(LockedStep):
    pass


# -- running: a child reactor's own declarations, Redis calls -----------------------------------


class HeldKeys(Step):
    """Returns the execution's held-key registry as its body sees it."""

    key: str

    def run(self) -> list[str]:
        return list(self.context.held_keys)


@with_lock(by_key)
class LockedChild(Reactor):
    key: str
    seen = step(HeldKeys)
    returns = "seen"


class ComposesLockedChild(Reactor):
    key: str
    child = compose(LockedChild)
    returns = "child"


class Bare(Step):
    key: str

    def run(self) -> str:
        return f"ran {self.inputs.key}"


@with_lock(by_key)
class Coordinated(Bare):
    pass


class Uncoordinated(Reactor):
    key: str
    first = step(Bare)
    second = step(Bare)


class OneCoordinatedStep(Reactor):
    key: str
    first = step(Bare)
    second = step(Coordinated)


# -- tests ------------------------------------------------------------------------------------


def _expected() -> dict[str, Any]:
    """The five declarations every "all five" target above should hold, built explicitly."""
    return {
        "lock": LockDeclaration(by_account, ttl=30, wait=5, auto_extend=False, rollback_wait=7),
        "semaphore": SemaphoreDeclaration(by_account, limit=3, wait=2, lease=20, rollback_wait=4),
        "rate_limit": RateLimitDeclaration(by_account, limit=2, period="minute"),
        "period": PeriodDeclaration(by_account, every="hour", wait=9),
        "ordered_lock": OrderedLockDeclaration(
            by_account, ttl=120, poison_pill_timeout=30, strict=False, wait=11
        ),
    }


def _without_rollback_wait(declared: Any) -> dict[str, Any]:
    """``declared`` as the reactor form has it: ``rollback_wait`` is for steps only."""
    return {
        name: dataclasses.replace(d, rollback_wait=None) if hasattr(d, "rollback_wait") else d
        for name, d in declared.items()
    }


def test_a_step_class_holds_the_same_declarations_as_the_reactor_form() -> None:
    """All five on a Step subclass give exactly the declarations a reactor decorated alike has."""
    assert set(AllFiveStep.coordination) == ALL_FIVE
    assert _without_rollback_wait(AllFiveStep.coordination) == dict(AllFiveReactor.coordination)
    assert dict(AllFiveStep.coordination) == _expected()
    for name, declaration in AllFiveStep.coordination.items():
        assert type(declaration) is type(AllFiveReactor.coordination[name])
        assert declaration.key is by_account
    assert AllFiveStep.coordination["lock"].rollback_wait == 7
    assert AllFiveStep.coordination["semaphore"].rollback_wait == 4


@pytest.mark.parametrize("reactor", [InlineBelow, InlineAbove, InlineMixed])
def test_an_inline_step_holds_the_same_declarations_above_or_below_step(
    reactor: type[Reactor],
) -> None:
    """Declared below ``@step``, above it, or both, an inline step records all five alike."""
    declared = reactor.work.coordination  # type: ignore[attr-defined]
    assert set(declared) == ALL_FIVE
    assert _without_rollback_wait(declared) == dict(AllFiveReactor.coordination)
    assert dict(declared) == _expected()


def test_only_declared_keys_are_listed() -> None:
    """A step lists exactly what it declares: nothing for a bare step, one key for one primitive."""
    assert dict(Plain.coordination) == {}
    assert dict(InlineMixed.bare.coordination) == {}
    assert set(LockedStep.coordination) == {"lock"}
    assert dict(AllFiveReactor.plain.coordination) == {}
    assert set(AllFiveReactor.coordination) == ALL_FIVE  # the reactor form is unchanged


def test_a_class_step_declaration_reads_the_class_declarations() -> None:
    """``step(SomeStepClass)`` exposes the class's declarations, the very same objects."""

    class UsesLocked(Reactor):
        account_id: int
        charge = step(LockedStep)

    declared = UsesLocked.charge.coordination
    assert set(declared) == {"lock"}
    assert declared["lock"] is LockedStep.coordination["lock"]


def test_coordination_mappings_are_read_only() -> None:
    """Neither a Step class's nor an inline step's ``.coordination`` can be written into."""
    with pytest.raises(TypeError, match="does not support item assignment"):
        LockedStep.coordination["semaphore"] = object()  # type: ignore[index]
    with pytest.raises(TypeError, match="does not support item assignment"):
        InlineBelow.work.coordination["lock"] = object()  # type: ignore[index]
    with pytest.raises(TypeError, match="does not support item assignment"):
        Plain.coordination["lock"] = object()  # type: ignore[index]
    assert set(LockedStep.coordination) == {"lock"}
    assert set(InlineBelow.work.coordination) == ALL_FIVE
    assert dict(Plain.coordination) == {}
    assert dict(Step.coordination) == {}


def test_subclasses_inherit_and_redeclaring_replaces_without_touching_the_parent() -> None:
    """A subclass inherits; declaring more or redeclaring gives it its own mapping only."""
    parent_lock = LockedStep.coordination["lock"]
    assert InheritsLock.coordination["lock"] is parent_lock
    assert set(AddsSemaphore.coordination) == {"lock", "semaphore"}
    assert AddsSemaphore.coordination["lock"] is parent_lock
    replaced = ReplacesLock.coordination["lock"]
    assert isinstance(replaced, LockDeclaration)
    assert (replaced.key, replaced.ttl, replaced.wait) == ("replaced-key", 5, 0)
    assert set(ReplacesLock.coordination) == {"lock"}
    assert set(LockedStep.coordination) == {"lock"}
    assert LockedStep.coordination["lock"] is parent_lock
    assert parent_lock.key is by_account
    assert parent_lock.wait == 5


def test_the_same_primitive_twice_on_one_step_class_is_refused() -> None:
    """Two ``with_semaphore`` on one Step class: a DefinitionError naming the class."""
    with pytest.raises(DefinitionError) as caught:

        @with_semaphore("a", limit=1)
        @with_semaphore("b", limit=2)
        class TwiceSemaphore(Step):
            def run(self) -> None:
                return None

    message = str(caught.value)
    assert "TwiceSemaphore" in message
    assert "with_semaphore" in message
    assert "twice" in message


def _twice_below() -> None:
    class Below(Reactor):
        @step()
        @with_period("a", every="day")
        @with_period("b", every="hour")
        def twice() -> None:
            return None


def _twice_above() -> None:
    class Above(Reactor):
        @with_period("a", every="day")
        @with_period("b", every="hour")
        @step()
        def twice() -> None:
            return None


def _twice_both_sides() -> None:
    class Both(Reactor):
        @with_period("a", every="day")
        @step()
        @with_period("b", every="hour")
        def twice() -> None:
            return None


@pytest.mark.parametrize(
    "define", [_twice_below, _twice_above, _twice_both_sides], ids=["below", "above", "both"]
)
def test_the_same_primitive_twice_on_one_inline_step_is_refused(define: Callable[[], None]) -> None:
    """Two ``with_period`` on one inline step (below, above, or one each side) are refused."""
    with pytest.raises(DefinitionError) as caught:
        define()
    message = str(caught.value)
    assert "twice" in message
    assert "with_period" in message


BAD_OPTIONS: list[tuple[str, Callable[[], Any], str]] = [
    ("lock ttl=0", lambda: with_lock("k", ttl=0), "ttl"),
    ("lock wait=-1", lambda: with_lock("k", wait=-1), "wait"),
    ("lock rollback_wait=-1", lambda: with_lock("k", rollback_wait=-1), "rollback_wait"),
    ("lock key=''", lambda: with_lock(""), "key"),
    ("semaphore limit=0", lambda: with_semaphore("k", limit=0), "limit"),
    ("semaphore lease=0", lambda: with_semaphore("k", limit=1, lease=0), "lease"),
    (
        "semaphore rollback_wait=-1",
        lambda: with_semaphore("k", limit=1, rollback_wait=-1),
        "rollback_wait",
    ),
    ("rate limit=0", lambda: with_rate_limit("k", limit=0, period="minute"), "limit"),
    ("rate no period", lambda: with_rate_limit("k", limit=3), "period"),
    ("rate bad period", lambda: with_rate_limit("k", limit=3, period="fortnight"), "period"),
    ("rate fn without limit", lambda: with_rate_limit(lambda a: "x"), "limit"),
    ("period every", lambda: with_period("k", every="fortnight"), "every"),
    ("period every=0", lambda: with_period("k", every=0), "every"),
    ("ordered ppt=0", lambda: with_ordered_lock("k", poison_pill_timeout=0), "poison_pill_timeout"),
    ("ordered wait=-1", lambda: with_ordered_lock("k", wait=-1), "wait"),
    ("ordered strict", lambda: with_ordered_lock("k", strict="yes"), "strict"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(
    ("make", "option"), [(m, o) for _, m, o in BAD_OPTIONS], ids=[i for i, _, _ in BAD_OPTIONS]
)
def test_bad_options_are_refused_when_the_decorator_is_called(
    make: Callable[[], Any], option: str
) -> None:
    """A bad option fails at ``with_*(...)``, before any step exists, naming the option."""
    with pytest.raises(DefinitionError) as caught:
        make()
    message = str(caught.value)
    assert option in message
    assert "with_" in message


def test_good_rollback_waits_are_accepted() -> None:
    """The rollback waits refused above are accepted when valid (0 included), on a step class."""

    @with_lock("k", rollback_wait=0)
    @with_semaphore("k", limit=1, rollback_wait=2.5)
    class Cleaner(Step):
        def run(self) -> None:
            return None

    assert Cleaner.coordination["lock"].rollback_wait == 0
    assert Cleaner.coordination["semaphore"].rollback_wait == 2.5
    assert Cleaner.coordination["lock"].for_rollback().wait == 0
    assert LockedStep.coordination["lock"].for_rollback().wait == 60  # default: the ttl


def test_a_rate_limit_key_function_without_a_limit_is_refused() -> None:
    """A function key names no registered limit, so it needs ``limit=`` or ``limits=``."""
    with pytest.raises(DefinitionError) as caught:
        with_rate_limit(lambda a: "x")
    assert "limit" in str(caught.value)
    with_rate_limit(lambda a: "x", limit=1, period="minute")  # the same key with a limit: fine


@pytest.mark.parametrize(
    "decorator",
    [
        with_lock("k"),
        with_semaphore("k", limit=1),
        with_rate_limit("k", limit=1, period="minute"),
        with_period("k", every="day"),
        with_ordered_lock("k"),
    ],
    ids=["lock", "semaphore", "rate_limit", "period", "ordered_lock"],
)
def test_a_class_step_declaration_refuses_coordination_pointing_to_the_class(
    decorator: Callable[[Any], Any],
) -> None:
    """``with_*`` on ``step(SomeStepClass)`` is refused: declare it on the Step class."""
    with pytest.raises(DefinitionError) as caught:

        class Refused(Reactor):
            account_id: int
            charge = decorator(step(Plain))

    message = str(caught.value)
    assert "Plain" in message
    assert "Step class" in message
    assert "instead" in message
    assert dict(Plain.coordination) == {}


@pytest.mark.parametrize(
    "decorator", [with_lock("k"), with_semaphore("k", limit=1)], ids=["lock", "semaphore"]
)
def test_a_composed_child_declaration_refuses_coordination_pointing_to_the_class(
    decorator: Callable[[Any], Any],
) -> None:
    """``with_*`` on ``compose(SomeReactor)`` is refused: declare it on the child reactor."""
    with pytest.raises(DefinitionError) as caught:

        class Refused(Reactor):
            key: str
            child = decorator(compose(LockedChild))

    message = str(caught.value)
    assert "LockedChild" in message
    assert "reactor class" in message
    assert "instead" in message
    assert set(LockedChild.coordination) == {"lock"}


def test_a_composed_child_declares_nothing_its_own_run_takes_its_lock(key: str) -> None:
    """The ``compose`` declaration's ``.coordination`` is empty; the child's run takes its lock."""
    assert dict(ComposesLockedChild.child.coordination) == {}
    assert set(LockedChild.coordination) == {"lock"}
    outcome = ComposesLockedChild.run(key=key)
    assert outcome.is_success, outcome
    assert outcome.value == [f"lock:{key}"]  # held exactly once: by the child's own run
    assert outcome.context.held_keys == []


def test_a_step_that_declares_nothing_makes_no_redis_call(redis_url: str, key: str) -> None:
    """Steps without declarations send nothing to Redis; one coordinated step does (the twin)."""
    store = current_store()
    outcomes: list[Any] = []

    sent, _ = client_commands(
        redis_url, store, key, lambda: outcomes.append(Uncoordinated.run(key=key))
    )
    assert outcomes[0].is_success, outcomes[0]
    assert sent == []

    sent, calls = client_commands(
        redis_url, store, key, lambda: outcomes.append(OneCoordinatedStep.run(key=key))
    )
    assert outcomes[1].is_success, outcomes[1]
    assert any(key in command for command in sent), sent
    assert calls.get("evalsha", 0) + calls.get("eval", 0) >= 2  # acquire and release


REFUSAL = "interrupt steps pause inside their body; declare coordination on the reactor"


class Interruptish(Step):
    """Stands in for an interrupt step: it refuses step-level coordination."""

    __py_reactor_refuses_coordination__ = REFUSAL
    account_id: int

    def run(self) -> int:
        return int(self.inputs.account_id)


@pytest.mark.parametrize(
    "decorator",
    [
        with_lock("k"),
        with_semaphore("k", limit=1),
        with_rate_limit("k", limit=1, period="minute"),
        with_period("k", every="day"),
        with_ordered_lock("k"),
    ],
    ids=["lock", "semaphore", "rate_limit", "period", "ordered_lock"],
)
def test_a_class_that_refuses_coordination_gets_a_definition_error_with_its_reason(
    decorator: Callable[[Any], Any],
) -> None:
    """``__py_reactor_refuses_coordination__`` makes every ``with_*`` fail with that reason."""
    with pytest.raises(DefinitionError) as caught:
        decorator(Interruptish)
    message = str(caught.value)
    assert REFUSAL in message
    assert "Interruptish" in message
    assert dict(Interruptish.coordination) == {}


def test_a_class_that_refuses_coordination_still_runs_as_a_step() -> None:
    """The refusal hook only refuses declarations: the step itself works as usual."""
    outcome = Interruptish.invoke({"account_id": 3})
    assert outcome.is_success, outcome
    assert outcome.value == 3
