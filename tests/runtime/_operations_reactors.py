"""Module-level reactors for the operations tests (cancel, undo, retry)."""

from __future__ import annotations

from typing import Any

from py_reactor import Reactor, Result, background, step, with_lock

#: What the steps did, by test key.
LOG: dict[str, list[str]] = {}


def log(key: str, what: str) -> None:
    LOG.setdefault(key, []).append(what)


@background
@with_lock(lambda i: f"{i['key']}:reactor", ttl=30)
class ParksAtStep(Reactor):
    """Holds ``<key>:reactor`` for the whole run; its step waits on ``<key>:step``."""

    key: str

    @step
    @with_lock(lambda a: f"{a['key']}:step", ttl=30)
    def blocked(key: str) -> str:
        log(key, "blocked ran")
        return "ran"


class Three(Reactor):
    key: str
    fail: bool = False

    @step
    def a(key: str) -> str:
        log(key, "a")
        return "a"

    @a.undo
    def _undo_a(result: Any, key: str) -> None:
        log(key, "undo a")

    @step(x=Result("a"))
    def b(key: str, x: str) -> str:
        log(key, "b")
        return "b"

    @b.undo
    def _undo_b(result: Any, key: str, **_: Any) -> None:
        log(key, "undo b")

    @step(x=Result("b"))
    def c(key: str, x: str, fail: bool) -> str:
        log(key, "c")
        if fail:
            raise RuntimeError("c failed")
        return "c"

    returns = "c"


@background
class BgThree(Three):
    pass


class _Undoable(Reactor):
    """Two steps with an undo each, then ``blocked``, which waits on ``<key>:step`` (and
    raises SystemExit inside it when ``abort``)."""

    key: str
    abort: bool = False

    @step
    def a(key: str) -> str:
        log(key, "a")
        return "a"

    @a.undo
    def _undo_a(result: Any, key: str) -> None:
        log(key, "undo a")

    @step(x=Result("a"))
    def b(key: str, x: str) -> str:
        log(key, "b")
        return "b"

    @b.undo
    def _undo_b(result: Any, key: str, **_: Any) -> None:
        log(key, "undo b")

    @step(x=Result("b"))
    @with_lock(lambda a: f"{a['key']}:step", ttl=30)
    def blocked(key: str, x: str, abort: bool) -> str:
        log(key, "blocked ran")
        if abort:
            raise SystemExit(3)
        return "ran"

    returns = "blocked"


@background
@with_lock(lambda i: f"{i['key']}:reactor", ttl=30)
class ParksAfterTwo(_Undoable):
    """Holds ``<key>:reactor`` for the whole run, across its park at ``blocked``."""


@background(after="a")
class PendsAfterOne(_Undoable):
    """``a`` runs in the caller; the rest is a worker's."""
