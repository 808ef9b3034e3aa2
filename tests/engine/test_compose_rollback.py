"""A composed child's own coordination and failure as its parent sees them: the child's
reactor-level lock is re-taken around its undo (FR-024), and a failed child is reported on the
parent's outcome as ``outcome.child`` (naming the inner step), in place and from the store.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from py_reactor import Lock, Reactor, background, compose, configure, step, with_lock
from py_reactor.engine.context import running_context
from py_reactor.storage import current_store

#: What the steps of this module saw, by test key.
SEEN: dict[str, list[Any]] = {}


@pytest.fixture(autouse=True)
def _store(redis_url: str) -> Iterator[None]:
    configure(redis_url=redis_url)
    yield
    SEEN.clear()


@with_lock(lambda i: i["key"], ttl=10, rollback_wait=0.3)
class LockedChild(Reactor):
    key: str

    @step
    def write(key: str) -> str:
        return "written"

    @write.undo
    def _unwrite(result: Any, key: str) -> None:
        context = running_context()
        owner = current_store().lock_state(key).owner
        SEEN.setdefault(key, []).append(("undo", owner, context.root_id if context else None))


class Parent(Reactor):
    key: str
    hold_elsewhere: bool = False

    child = compose(LockedChild)

    @step(wait_for=["child"])
    def explode(key: str, hold_elsewhere: bool) -> None:
        if hold_elsewhere:
            _hold_from_another_owner(key)
        raise RuntimeError("explode")


def _hold_from_another_owner(key: str) -> None:
    """Take ``key`` from another thread (another owner) until the test lets go."""
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with Lock(key, ttl=10, wait=5):
            taken.set()
            done.wait(10)

    threading.Thread(target=hold, daemon=True).start()
    assert taken.wait(5)
    SEEN.setdefault(key, []).append(("release", done))


def test_the_childs_reactor_level_lock_is_held_around_its_undo(key: str) -> None:
    outcome = Parent.run(key=key)
    assert outcome.status == "failed"
    assert outcome.step_name == "explode"
    ((what, owner, root),) = SEEN[key]
    assert what == "undo"
    assert owner is not None  # without re-taking it, the key was free during the undo
    assert owner == root
    assert current_store().lock_state(key).owner is None  # and given back after it


def test_an_undo_whose_child_lock_is_busy_is_reported_not_run(key: str) -> None:
    outcome = Parent.run(key=key, hold_elsewhere=True)
    try:
        assert outcome.status == "failed"
        assert [e[0] for e in SEEN[key]] == ["release"]  # the undo did not run unprotected
        (failure,) = outcome.rollback_failures
        assert failure["step"] == "child"
        assert failure["kind"] == "undo"
        assert failure["reason"] == "coordination_unavailable"
        assert failure["key"] == key
        assert "LockedChild" in failure["message"]
    finally:
        for entry in SEEN.get(key, []):
            if entry[0] == "release":
                entry[1].set()


class FailingChild(Reactor):
    key: str

    @step
    def a(key: str) -> str:
        return "a"

    @step(wait_for=["a"])
    def b(key: str) -> None:
        raise ValueError("inner b failed")


class ComposesFailure(Reactor):
    key: str

    child = compose(FailingChild)


@background
class BgComposesFailure(ComposesFailure):
    pass


def test_a_failed_childs_inner_step_is_named_on_the_parents_outcome(key: str) -> None:
    outcome = ComposesFailure.run(key=key)
    assert outcome.status == "failed"
    assert outcome.step_name == "child"
    assert outcome.child is not None
    assert outcome.child.step_name == "b"
    assert "inner b failed" in str(outcome.child.error)


def test_the_inner_step_survives_storage(key: str) -> None:
    done = BgComposesFailure.run(key=key).wait(timeout=20)
    assert done.status == "failed"
    assert done.step_name == "child"
    assert done.child is not None
    assert done.child.step_name == "b"
    assert done.child.exception_class == "ValueError"
