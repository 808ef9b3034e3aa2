"""Async units: steps that run as executions of their own, in a worker, while the run goes on.

Publishing a photo takes two slow pieces of work that need not hold the run up:

1. the thumbnail, an ``async_step``, and the caption review, an ``async_reactor`` (a whole
   child reactor), are dispatched to the thread worker as executions of their own. The
   parent goes on at once: its ``tag`` step runs in the caller while they work. ``publish``
   reads both results, so it waits for them, and gets their values;
2. editing a photo takes a reactor-level lock on it, and its async unit declares the same
   lock. The unit would run under an owner of its own and wait for that lock while the run
   waited for the unit, so the hand-off deadlock guard refuses to dispatch it: the step fails
   with ``HandoffRefusedError``, before anything is enqueued, and the earlier step is undone.

Everything runs in this process, on the embedded Redis (no server to install).

Run it with ``python examples/async_units.py``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from py_reactor import (
    FailureResult,
    Middleware,
    Reactor,
    Result,
    Step,
    async_reactor,
    async_step,
    configure,
    find,
    step,
    with_lock,
)
from py_reactor.errors import HandoffRefusedError
from py_reactor.observability import events as ev

CALLER = threading.get_ident()
STARTED = time.monotonic()


def where() -> str:
    """Where this code runs, and when, since the script started."""
    place = "caller" if threading.get_ident() == CALLER else "worker"
    return f"{place}, at {time.monotonic() - STARTED:.1f}s"


def photo_key(args: Mapping[str, Any]) -> str:
    return f"async-example:photo:{args['photo_id']}"


# --- 1. two units dispatched, one reader -----------------------------------------------------


@with_lock(photo_key)  # taken in the worker, under the unit's own owner
class RenderThumbnail(Step):
    """The slow one: resize the photo."""

    photo_id: int

    def run(self) -> str:
        time.sleep(0.5)
        print(f"     thumbnail rendered ({where()})")
        return f"thumb-{self.inputs.photo_id}.png"

    def undo(self, result: str) -> None:
        print(f"     undo: delete {result}")


class ReviewCaption(Reactor):
    """A child reactor of its own: run whole, as one async unit."""

    caption: str

    @step
    def spell_check(caption: str) -> str:
        time.sleep(0.3)
        print(f"     caption spell-checked ({where()})")
        return caption.strip().capitalize()

    @step(text=Result("spell_check"))
    def moderate(text: str) -> str:
        return f"approved: {text!r}"

    returns = "moderate"


class PublishPhoto(Reactor):
    photo_id: int
    caption: str

    thumbnail = async_step(RenderThumbnail)
    review = async_reactor(ReviewCaption)

    @step
    def tag(photo_id: int) -> list[str]:
        print(f"     tagged while the units work ({where()})")
        return ["beach", "sunset"]

    @step(thumb=Result("thumbnail"), verdict=Result("review"), tags=Result("tag"))
    def publish(thumb: str, verdict: str, tags: list[str]) -> str:
        print(f"     publish read both units ({where()})")
        return f"{thumb} published, {verdict}, tags {tags}"

    returns = "publish"


# --- 2. the deadlock guard ---------------------------------------------------------------------


class Backup(Step):
    photo_id: int

    def run(self) -> str:
        return f"backup-{self.inputs.photo_id}"

    def undo(self, result: str) -> None:
        print(f"     undo: drop {result}")


@with_lock(photo_key)  # the whole run holds the photo ...
class EditPhoto(Reactor):
    photo_id: int

    backup = step(Backup)
    # ... and the unit, under an owner of its own, would wait for the same lock
    thumbnail = async_step(RenderThumbnail, wait_for="backup")

    returns = "thumbnail"


class ShowDispatches(Middleware):
    def on_unit_dispatched(self, event: ev.UnitDispatched) -> None:
        print(f"     {event.name}: {event.step} -> execution {event.unit_execution_id[:8]}")


def main() -> None:
    configure(middleware=[ShowDispatches()])

    print("== 1. Two async units dispatched; the run goes on; publish reads their values")
    outcome = PublishPhoto.run(photo_id=7, caption="  sunset at the beach ")
    print(f"  => {outcome.status}: {outcome.value}")
    print(f"     trace: {[(entry['type'], entry['step']) for entry in outcome.trace]}")
    for name, unit in outcome.context.units.items():
        execution = find(unit.id)
        assert execution is not None
        print(f"     unit {name!r} ({unit.kind}): {execution.reactor}, {execution.status}")

    print("\n== 2. A unit that wants a lock its own run holds: the dispatch is refused")
    refused = EditPhoto.run(photo_id=8)
    assert isinstance(refused, FailureResult)
    error = refused.error
    assert isinstance(error, HandoffRefusedError)
    print(f"  => {refused.status} at step {refused.step_name!r}: {type(error).__name__}")
    print(f"     {error.primitive} {error.key!r}, held by {error.holder}")
    print(f"     dispatched: {dict(refused.context.units)} (nothing enqueued)")
    print(f"     trace: {[(entry['type'], entry['step']) for entry in refused.trace]}")
    print(f"     message: {error}")


if __name__ == "__main__":
    main()
