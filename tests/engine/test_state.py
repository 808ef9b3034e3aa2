"""The typed bookkeeping of a context (engine.state): its JSON form, the version-2 documents of
the previous release read into it, and the deprecated ``Context.private`` view of it."""

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from py_reactor import Reactor, Result, Status, dumps_context, loads_context, step
from py_reactor.dsl.interrupt import interrupt
from py_reactor.engine import Context
from py_reactor.engine.executor import execute
from py_reactor.engine.state import (
    BOOKKEEPING,
    FanOutStop,
    FanOutWindow,
    InterruptPause,
    UnitOrigin,
    UnitRef,
    UnitWait,
)
from py_reactor.engine.walk import _fork, _merge_books
from py_reactor.errors import SerializationError

#: A paused run of ``Review`` written by the previous release's ``dumps_context`` (schema 2),
#: its ``private`` dict holding what units, waits, fan-out windows, a retry and the OpenTelemetry
#: middleware write there (a child holds a unit's origin, deferred inputs and map error), and
#: without ``step_parks`` (which that release began to write without a version bump).
V2_DOCUMENT = Path(__file__).parent / "data" / "context_v2.json"


class Review(Reactor):
    n: int

    @step()
    def first(n: int) -> int:
        return n + 1

    review = interrupt(wait_for="first")

    @step(approval=Result("review"), first=Result("first"))
    def after(approval: dict[str, Any], first: int) -> str:
        return f"{first}:{approval['ok']}"

    returns = "after"


def _v2() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(V2_DOCUMENT.read_text())
    return document


def test_a_version_2_document_loads_into_the_typed_fields() -> None:
    """Every key of a version-2 ``private`` dict lands in its typed field; what middleware wrote
    lands in ``carried`` (the OpenTelemetry keys under their ``otel.`` names)."""
    document = _v2()
    assert document["schema_version"] == 2
    assert "step_parks" not in document["context"]

    context = loads_context(json.dumps(document))

    assert context.status is Status.PAUSED
    assert context.units == {
        "notify": UnitRef(id="u" * 32, kind="step"),
        "audit": UnitRef(id="a" * 32, kind="reactor"),
    }
    assert context.unit_waits == {"notify": UnitWait(since=1700000000.5, parks=2)}
    pause = context.interrupts["review"]
    assert isinstance(pause, InterruptPause)
    assert (pause.correlation_id, pause.deadline) == (None, None)
    assert pause.at == document["context"]["private"]["interrupts"]["review"]["at"]
    assert context.paused_at == "review"
    assert context.resumed == {}
    assert context.fan_out == {
        "ship": FanOutWindow(
            count=4,
            sent=3,
            low=2,
            failed={1: "boom"},
            rollback_failures=[
                {
                    "step": "ship[1].pack",
                    "kind": "compensate",
                    "key": None,
                    "reason": "raised",
                    "message": "nope",
                }
            ],
        ),
        "halted": FanOutWindow(
            count=2, sent=1, low=1, stop=FanOutStop(index=0, how="halted", reason="enough")
        ),
    }
    assert context.retry_of == "r" * 32
    assert context.carried == {
        "otel.trace_context": document["context"]["private"]["trace_context"],
        "otel.trace_park": document["context"]["private"]["trace_park"],
        "acme": {"tenant": "t1"},
    }
    assert context.step_parks == {}
    assert (context.unit_of, context.deferred, context.map_error) == (None, {}, None)
    unit = context.children["ship[3]"]
    assert unit.unit_of == UnitOrigin(
        reactor="tests.engine.test_state:Review",
        step="ship",
        execution=context.execution_id,
        element=3,
    )
    assert unit.deferred == {"n": "u" * 32}
    assert unit.map_error == "ValueError: bad element"
    assert unit.units == {}
    assert unit.carried == {}


def test_a_run_paused_by_the_previous_release_resumes() -> None:
    """A run stored paused as version 2 resumes after the upgrade: the payload completes the
    interrupt step and the run goes on from there, without running ``first`` again."""
    context = loads_context(V2_DOCUMENT.read_text())
    context.resumed["review"] = {"ok": True}
    context.paused_at = None

    outcome = execute(Review, context)

    assert outcome.is_success, outcome
    assert outcome.value == "2:True"
    assert context.interrupts == {}
    assert context.resumed == {}
    assert [entry["type"] for entry in context.trace][-2:] == ["resumed", "run"]


def test_a_version_2_document_reads_back_as_version_3_with_the_same_fields() -> None:
    """Loaded from version 2 and written again, the document is version 3, has no ``private``
    key, and loads back with every bookkeeping field equal."""
    loaded = loads_context(V2_DOCUMENT.read_text())

    text = dumps_context(loaded)
    document = json.loads(text)
    again = loads_context(text)

    assert document["schema_version"] == 3
    assert "private" not in document["context"]
    assert document["context"]["fan_out"]["ship"]["failed"] == {"1": "boom"}
    for context, back in ((loaded, again), (loaded.children["ship[3]"], again.children["ship[3]"])):
        for name in BOOKKEEPING:
            assert getattr(back, name) == getattr(context, name), name


def test_the_deprecated_private_view_gives_the_version_2_shape() -> None:
    """``Context.private`` warns, and gives the bookkeeping in the shape the previous release
    kept (what middleware carries at the top level, under its current keys)."""
    document = _v2()
    context = loads_context(json.dumps(document))
    expected = copy.deepcopy(document["context"]["private"])
    expected["otel.trace_context"] = expected.pop("trace_context")
    expected["otel.trace_park"] = expected.pop("trace_park")

    with pytest.warns(DeprecationWarning, match=r"context\.units"):
        private = context.private
    with pytest.warns(DeprecationWarning, match="deprecated"):
        child = context.children["ship[3]"].private

    assert private == expected
    assert child == document["context"]["children"]["ship[3]"]["private"]
    private["async_units"]["notify"]["id"] = "changed"  # a copy: the context is untouched
    assert context.units["notify"].id == "u" * 32


@pytest.mark.parametrize(
    "private",
    [
        {"async_waits": {"notify": 5}},
        {"async_units": {"notify": {"id": "x"}}},
        {"map_fan_out": {"ship": {"count": 1, "surprise": 2}}},
        {"interrupts": {"review": {"correlation_id": None}}},
    ],
)
def test_a_version_2_document_with_malformed_private_data_is_refused(
    private: dict[str, Any],
) -> None:
    """Bookkeeping of the wrong shape in a version-2 document is refused, not half-read."""
    document = _v2()
    document["context"]["private"] = private

    with pytest.raises(SerializationError, match="not a valid py_reactor context"):
        loads_context(json.dumps(document))


def test_a_version_3_document_with_a_private_dict_is_refused() -> None:
    """Version 3 has no ``private`` key: a document that mixes the two versions is refused."""
    document = json.loads(dumps_context(loads_context(V2_DOCUMENT.read_text())))
    document["context"]["private"] = {}

    with pytest.raises(SerializationError, match="private"):
        loads_context(json.dumps(document))


def test_bookkeeping_names_every_field_beyond_the_core_ones() -> None:
    """``BOOKKEEPING`` (what a parallel branch copies and merges) lists every field of
    ``Context`` that is not one of the execution's core ones: a new field cannot be forgotten."""
    core = {
        "reactor", "inputs", "execution_id", "root_id", "parent_id", "status", "results",
        "arguments", "completed", "trace", "children", "holds", "attempts", "parks",
        "step_parks",
    }  # fmt: skip
    fields = {f.name for f in dataclasses.fields(Context)}

    assert set(BOOKKEEPING) == fields - core
    assert len(BOOKKEEPING) == len(set(BOOKKEEPING))


def test_parallel_branches_merge_their_bookkeeping_entry_by_entry() -> None:
    """Two branches forked from one context each change the bookkeeping: each one's new
    entries (units, waits, windows, interrupts, carried data) are merged into the execution's
    context, an entry a branch dropped is dropped, a changed scalar replaced, an untouched one
    kept; and a branch never writes into the context it was forked from."""
    main = Context(reactor="r", inputs={})
    main.units["old"] = UnitRef(id="o", kind="step")
    main.unit_waits["old"] = UnitWait(since=1.0, parks=1)
    main.carried["acme"] = {"a": 1}
    main.map_error = "kept"
    first, first_base = _fork(main, "a")
    second, second_base = _fork(main, "b")

    first.units["a"] = UnitRef(id="ua", kind="step")
    first.unit_waits.pop("old")
    first.fan_out["a"] = FanOutWindow(count=2, sent=1)
    first.carried["acme"]["first"] = 1
    first.paused_at = "a"
    second.units["b"] = UnitRef(id="ub", kind="reactor")
    second.interrupts["b"] = InterruptPause(correlation_id="c", deadline=None, at=2.0)
    second.unit_waits["b"] = UnitWait(since=3.0, parks=0)
    second.carried["acme"]["second"] = 2
    second.units["old"].id = "changed in the branch"  # its own copy
    assert main.units["old"].id == "o"

    _merge_books(main, first_base.books, first)
    _merge_books(main, second_base.books, second)

    assert set(main.units) == {"old", "a", "b"}
    assert main.units["old"].id == "changed in the branch"
    assert main.unit_waits == {"b": UnitWait(since=3.0, parks=0)}
    assert main.fan_out == {"a": FanOutWindow(count=2, sent=1)}
    assert set(main.interrupts) == {"b"}
    assert main.carried == {"acme": {"a": 1, "first": 1, "second": 2}}
    assert main.paused_at == "a"
    assert main.map_error == "kept"
