"""Contexts to and from JSON: dumps_context / loads_context, and resuming from the result."""

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from py_reactor import (
    Halt,
    Reactor,
    Result,
    Skipped,
    Status,
    Step,
    compose,
    dumps_context,
    loads_context,
    retries,
    step,
)
from py_reactor.engine import Context
from py_reactor.engine.executor import execute
from py_reactor.engine.state import BOOKKEEPING
from py_reactor.errors import SerializationError

#: What the steps of this module did, in order (cleared around every test).
LOG: list[Any] = []

#: Module-level switches read by steps; reset around every test.
FLAGS: dict[str, bool] = {}


@pytest.fixture(autouse=True)
def _clear() -> Iterator[None]:
    """Start every test with an empty log and default flags."""
    LOG.clear()
    FLAGS.clear()
    FLAGS["halt"] = True
    yield
    LOG.clear()
    FLAGS.clear()


# -- steps and reactors ------------------------------------------------------------------------


class Double(Step):
    n: int

    def run(self) -> Any:
        LOG.append(("double", self.inputs.n))
        return {"doubled": self.inputs.n * 2, "tags": ["a", "b"]}

    def undo(self, result: Any) -> Any:
        LOG.append(("undo double", result["doubled"]))


class AddOne(Step):
    x: int

    def run(self) -> Any:
        LOG.append(("add_one", self.inputs.x))
        return self.inputs.x + 1


class Label(Step):
    y: int

    def run(self) -> Any:
        LOG.append(("label", self.inputs.y))
        return f"value={self.inputs.y}"


class SkipMe(Step):
    def run(self) -> Any:
        return Skipped("default", reason="nothing to do")


@retries(max_attempts=2, backoff="fixed", base_delay=0)
class Boom(Step):
    def run(self) -> Any:
        raise RuntimeError("boom")

    def compensate(self, error: Any) -> Any:
        LOG.append("compensate boom")


class HaltOnce(Step):
    def run(self) -> Any:
        LOG.append("halt_once")
        if FLAGS["halt"]:
            return Halt("not yet")
        return "went on"


class Opaque(Step):
    def run(self) -> Any:
        return object()


class When(Step):
    def run(self) -> Any:
        return {
            "naive": datetime(2024, 1, 2, 3, 4, 5),
            "aware": datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
        }


class Child(Reactor):
    n: int

    double = step(Double)
    returns = "double"


class Chain(Reactor):
    n: int

    double = step(Double)
    add_one = step(AddOne, x=Result("double", "doubled"))
    label = step(Label, y=Result("add_one"))
    returns = "label"


class Composed(Reactor):
    n: int

    inner = compose(Child)
    skip = step(SkipMe)
    add_one = step(AddOne, x=Result("inner", "doubled"))
    returns = "add_one"


class FailsAfterWork(Reactor):
    n: int

    double = step(Double)
    boom = step(Boom, wait_for=["double"])


class HaltsMidway(Reactor):
    n: int

    double = step(Double)
    halt_once = step(HaltOnce, wait_for=["double"])
    add_one = step(AddOne, x=Result("double", "doubled"), wait_for=["halt_once"])
    returns = "add_one"


class HasOpaque(Reactor):
    opaque = step(Opaque)


class HasDatetime(Reactor):
    when = step(When)


# -- helpers -----------------------------------------------------------------------------------


def _fields(context: Context) -> dict[str, Any]:
    """Every field of ``context`` as plain data, children included."""
    return {
        "reactor": context.reactor,
        "execution_id": context.execution_id,
        "root_id": context.root_id,
        "parent_id": context.parent_id,
        "status": context.status,
        "inputs": context.inputs,
        "results": context.results,
        "arguments": context.arguments,
        "completed": context.completed,
        "trace": context.trace,
        **{name: getattr(context, name) for name in BOOKKEEPING},
        "children": {name: _fields(child) for name, child in context.children.items()},
    }


def _valid_document() -> dict[str, Any]:
    """A well-formed serialized context, as a parsed JSON object."""
    document: dict[str, Any] = json.loads(dumps_context(Chain.run(n=1).context))
    return document


# -- round trips -------------------------------------------------------------------------------


def test_completed_composed_run_round_trips_with_equal_fields() -> None:
    """A completed run's context (with a composed child) comes back with every field equal."""
    outcome = Composed.run(n=3)
    assert outcome.is_success, outcome
    original = outcome.context
    original.carried["acme.note"] = {"k": [1, 2]}
    original.retry_of = "r" * 32

    loaded = loads_context(dumps_context(original))

    assert isinstance(loaded, Context)
    assert loaded is not original
    assert _fields(loaded) == _fields(original)
    assert loaded.status is Status.COMPLETED
    child = loaded.children["inner"]
    assert child.root_id == loaded.execution_id
    assert child.parent_id == loaded.execution_id
    assert child.results == {"double": {"doubled": 6, "tags": ["a", "b"]}}
    assert [entry["type"] for entry in loaded.trace] == ["run", "skipped", "run"]


def test_failed_run_with_retries_and_rollback_round_trips_trace_types() -> None:
    """A failed run's trace (retry, failed, compensate, undo) and status survive the round trip."""
    outcome = FailsAfterWork.run(n=2)
    assert not outcome.is_success

    loaded = loads_context(dumps_context(outcome.context))

    assert _fields(loaded) == _fields(outcome.context)
    assert loaded.status is Status.FAILED
    assert [entry["type"] for entry in loaded.trace] == [
        "run",
        "retry",
        "failed",
        "compensate",
        "undo",
    ]


def test_dumps_writes_schema_version_3_envelope() -> None:
    """The JSON document is an object with schema_version 3 and the context under 'context'."""
    document = _valid_document()

    assert document["schema_version"] == 3
    assert set(document) == {"schema_version", "context"}
    assert document["context"]["status"] == "completed"
    assert document["context"]["results"]["label"] == "value=3"


def test_datetime_results_come_back_as_iso_strings() -> None:
    """Datetimes in results are written in ISO form and read back as those strings."""
    outcome = HasDatetime.run()
    assert outcome.is_success, outcome

    loaded = loads_context(dumps_context(outcome.context))

    value = loaded.results["when"]
    assert value["naive"] == "2024-01-02T03:04:05"
    assert isinstance(value["aware"], str)
    assert datetime.fromisoformat(value["aware"]) == datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_non_json_result_makes_dumps_raise_naming_the_step() -> None:
    """A result JSON cannot represent is refused on dumps, and the message names the step."""
    outcome = HasOpaque.run()
    assert outcome.is_success, outcome

    with pytest.raises(SerializationError, match="'opaque'"):
        dumps_context(outcome.context)


# -- refused payloads --------------------------------------------------------------------------


def test_loads_refuses_text_that_is_not_json() -> None:
    """Text that does not parse as JSON is refused, saying it must be JSON."""
    with pytest.raises(SerializationError, match="JSON"):
        loads_context('{"schema_version": 1, "context": ')


def test_loads_refuses_a_json_list() -> None:
    """A JSON array is not a serialized context; the message says an object is expected."""
    with pytest.raises(SerializationError, match="object"):
        loads_context(json.dumps([_valid_document()]))


def test_loads_refuses_a_missing_schema_version() -> None:
    """A document without schema_version is refused and the message mentions schema_version."""
    document = _valid_document()
    del document["schema_version"]

    with pytest.raises(SerializationError, match="schema_version"):
        loads_context(json.dumps(document))


@pytest.mark.parametrize("version", [1, 4])
def test_loads_refuses_another_schema_version(version: int) -> None:
    """Another schema_version (the older 1, a newer 4) is refused, naming the version found
    and the ones supported."""
    document = _valid_document()
    document["schema_version"] = version

    with pytest.raises(SerializationError, match=f"schema_version {version}") as info:
        loads_context(json.dumps(document))
    assert "2, 3" in str(info.value).split(f"schema_version {version}", 1)[1]


@pytest.mark.parametrize("version", [True, "1", None, [1]])
def test_loads_refuses_a_schema_version_that_is_not_an_integer(version: Any) -> None:
    """A schema_version that is not exactly an integer (true, "1", null, [1]) is refused."""
    document = _valid_document()
    document["schema_version"] = version

    with pytest.raises(SerializationError, match="schema_version"):
        loads_context(json.dumps(document))


def test_loads_refuses_a_context_missing_a_field() -> None:
    """A context without a required field is refused, naming the field."""
    document = _valid_document()
    del document["context"]["root_id"]

    with pytest.raises(SerializationError, match="root_id"):
        loads_context(json.dumps(document))


@pytest.mark.parametrize(
    ("field", "value"),
    [("results", []), ("completed", "double"), ("status", "exploded"), ("execution_id", 7)],
)
def test_loads_refuses_a_field_of_the_wrong_type(field: str, value: Any) -> None:
    """A context field of the wrong type is refused, naming the field."""
    document = _valid_document()
    document["context"][field] = value

    with pytest.raises(SerializationError, match=field):
        loads_context(json.dumps(document))


def test_loads_refuses_unknown_context_fields() -> None:
    """A context with a field this version does not know is refused, naming it."""
    document = _valid_document()
    document["context"]["surprise"] = 1

    with pytest.raises(SerializationError, match="surprise"):
        loads_context(json.dumps(document))


# -- resume ------------------------------------------------------------------------------------


def test_deserialized_context_resumes_only_the_remaining_steps() -> None:
    """execute() on a loaded context whose first step has a result runs only the other steps."""
    started = Context(
        reactor="tests.engine.test_serializer:Chain",
        inputs={"n": 5},
        status=Status.RUNNING,
        results={"double": {"doubled": 10, "tags": []}},
        arguments={"double": {"n": 5}},
        completed=["double"],
    )
    loaded = loads_context(dumps_context(started))

    outcome = execute(Chain, loaded)

    assert outcome.is_success, outcome
    assert outcome.value == "value=11"
    assert LOG == [("add_one", 10), ("label", 11)]
    assert outcome.context is loaded
    assert outcome.context.execution_id == started.execution_id
    assert outcome.context.completed == ["double", "add_one", "label"]
    assert [entry["step"] for entry in outcome.trace] == ["add_one", "label"]


def test_halted_run_resumes_from_its_serialized_context_in_a_fresh_loop() -> None:
    """A halted run, serialized and loaded, continues at the halting step without rerunning."""
    halted = HaltsMidway.run(n=4)
    assert halted.status == "halted"
    text = dumps_context(halted.context)
    LOG.clear()
    FLAGS["halt"] = False

    outcome = execute(HaltsMidway, loads_context(text))

    assert outcome.is_success, outcome
    assert outcome.status == "completed"
    assert outcome.value == 9
    assert LOG == ["halt_once", ("add_one", 8)]
    assert outcome.context.execution_id == halted.context.execution_id


def test_failure_of_a_resumed_step_still_rolls_back_restored_completed_steps() -> None:
    """After a resume, a failing step still undoes the completed steps restored from JSON."""
    started = Context(
        reactor="tests.engine.test_serializer:FailsAfterWork",
        inputs={"n": 6},
        status=Status.RUNNING,
        results={"double": {"doubled": 12, "tags": []}},
        arguments={"double": {"n": 6}},
        completed=["double"],
    )

    outcome = execute(FailsAfterWork, loads_context(dumps_context(started)))

    assert not outcome.is_success
    assert outcome.step_name == "boom"
    assert LOG == ["compensate boom", ("undo double", 12)]
    assert isinstance(outcome.error, RuntimeError)
