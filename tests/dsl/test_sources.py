"""Argument sources (Input, Result, Value) and the read-only ``self.inputs`` a step receives."""

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from py_reactor import Input, Reactor, Result, Step, Value, step
from py_reactor.errors import DefinitionError

# -- construction checks -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", None, 3])
def test_input_needs_a_non_empty_string_name(name: object) -> None:
    """Input with an empty or non-string name raises TypeError."""
    with pytest.raises(TypeError, match=r"Input needs a non-empty string name"):
        Input(name)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", None, 3])
def test_result_needs_a_non_empty_string_step(name: object) -> None:
    """Result with an empty or non-string step name raises TypeError."""
    with pytest.raises(TypeError, match=r"Result needs a non-empty string name"):
        Result(name)  # type: ignore[arg-type]


def test_result_field_must_be_a_non_empty_string() -> None:
    """Result with an empty field name raises TypeError naming the field."""
    with pytest.raises(TypeError, match=r"Result field needs a non-empty string name"):
        Result("charge", "")


@pytest.mark.parametrize("transform", [5, "upper", object()])
def test_input_transform_must_be_callable(transform: object) -> None:
    """Input with a non-callable transform raises TypeError."""
    with pytest.raises(TypeError, match=r"Input\(transform=\.\.\.\) must be callable"):
        Input("amount", transform=transform)  # type: ignore[arg-type]


@pytest.mark.parametrize("transform", [5, "upper", object()])
def test_result_transform_must_be_callable(transform: object) -> None:
    """Result with a non-callable transform raises TypeError."""
    with pytest.raises(TypeError, match=r"Result\(transform=\.\.\.\) must be callable"):
        Result("charge", "id", transform=transform)  # type: ignore[arg-type]


def test_sources_keep_what_they_were_given() -> None:
    """Sources expose their name, field, transform and constant as given."""
    upper = str.upper
    assert Input("who", upper).name == "who"
    assert Input("who", upper).transform is upper
    assert (Result("charge").step, Result("charge").field) == ("charge", None)
    assert Result("charge", "id", upper).field == "id"
    marker = object()
    assert Value(marker).value is marker
    assert Value(None).value is None


def test_sources_are_immutable_and_comparable() -> None:
    """Sources are frozen values: equal when built alike, and not assignable."""
    assert Input("a") == Input("a")
    assert Result("s", "f") == Result("s", "f")
    assert Value(1) == Value(1)
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'name'"):
        Input("a").name = "b"  # type: ignore[misc]


def test_transforms_are_applied_when_resolving() -> None:
    """Input and Result transforms are applied to the value the step receives."""

    class Shout(Reactor):
        who: str

        @step(who=Input("who", transform=str.upper))
        def greet(who: str) -> dict[str, str]:
            return {"text": f"hi {who}"}

        @step(text=Result("greet", "text", transform=lambda t: t + "!"))
        def finish(text: str) -> str:
            return text

        returns = "finish"

    assert Shout.run(who="ada").value == "hi ADA!"


def test_value_passes_any_constant_through() -> None:
    """Value(constant) gives the step that exact constant."""
    sentinel = ("a", 1)

    class Const(Reactor):
        @step(thing=Value(sentinel))
        def echo(thing: Any) -> Any:
            return thing

        returns = "echo"

    assert Const.run().value is sentinel


def test_bare_constant_is_not_a_source() -> None:
    """A bare constant as wiring is refused; only Input/Result/Value are sources."""

    def uses(thing: int) -> int:
        return thing

    with pytest.raises(DefinitionError, match=r"Value\(\.\.\.\)"):
        step(thing=1)(uses)


# -- self.inputs -------------------------------------------------------------------------------


class Capture(Step):
    """A step that records its ``self.inputs`` in ``Capture.seen``."""

    seen: ClassVar[list[Any]] = []
    amount: int
    note: str = "hello"

    def run(self) -> Any:
        Capture.seen.append(self.inputs)
        return None


@pytest.fixture(autouse=True)
def _fresh_capture() -> None:
    """Start every test with nothing captured."""
    Capture.seen.clear()


def _captured_inputs(**args: Any) -> Any:
    outcome = Capture.invoke(args)
    assert outcome.is_success is True
    assert len(Capture.seen) == 1
    return Capture.seen[0]


def test_inputs_read_by_attribute_and_by_key() -> None:
    """Validated inputs are readable as self.inputs.x and self.inputs["x"]."""
    inputs = _captured_inputs(amount="5")
    assert inputs.amount == 5
    assert inputs["amount"] == 5
    assert inputs.note == "hello"
    assert inputs["note"] == "hello"


def test_inputs_are_a_mapping_of_every_input() -> None:
    """self.inputs is a Mapping holding every validated input, defaults included."""
    inputs = _captured_inputs(amount=1, note="x")
    assert isinstance(inputs, Mapping)
    assert set(inputs) == {"amount", "note"}
    assert len(inputs) == 2
    assert inputs.get("amount") == 1
    assert "note" in inputs


def test_inputs_refuse_attribute_assignment() -> None:
    """Assigning self.inputs.x raises AttributeError and keeps the old value."""
    inputs = _captured_inputs(amount=1)
    with pytest.raises(AttributeError, match=r"read-only"):
        inputs.amount = 2
    with pytest.raises(AttributeError, match=r"read-only"):
        inputs.brand_new = 2
    assert inputs.amount == 1


def test_inputs_refuse_item_assignment_and_deletion() -> None:
    """Assigning or deleting self.inputs["x"] raises TypeError and keeps the value."""
    inputs = _captured_inputs(amount=1)
    with pytest.raises(TypeError, match="'Inputs' object does not support item assignment"):
        inputs["amount"] = 2
    with pytest.raises(TypeError, match=r"'Inputs' object does(n't| not) support item deletion"):
        del inputs["amount"]
    assert inputs["amount"] == 1


def test_unknown_input_attribute_lists_the_inputs() -> None:
    """Reading an unknown input raises AttributeError naming it and listing the real inputs."""
    inputs = _captured_inputs(amount=1)
    with pytest.raises(AttributeError, match=r"'amont'.*amount, note"):
        _ = inputs.amont


def test_unknown_input_key_raises_key_error() -> None:
    """Reading an unknown input by key raises KeyError."""
    inputs = _captured_inputs(amount=1)
    with pytest.raises(KeyError, match="'amont'"):
        _ = inputs["amont"]


def test_step_without_inputs_lists_none() -> None:
    """A step with no inputs gets an empty self.inputs whose error says there are none."""
    box: list[Any] = []

    class Empty(Step):
        def run(self) -> Any:
            box.append(self.inputs)
            return None

    assert Empty.invoke({}).is_success is True
    assert len(box[0]) == 0
    with pytest.raises(AttributeError, match=r"\(none\)"):
        _ = box[0].anything


def test_inputs_inside_a_reactor_run_are_read_only() -> None:
    """A step run by a reactor also gets read-only inputs resolved from the reactor."""

    class Orders(Reactor):
        amount: int
        capture = step(Capture)

    assert Orders.run(amount=3).is_success is True
    inputs = Capture.seen[0]
    assert (inputs.amount, inputs["note"]) == (3, "hello")
    with pytest.raises(AttributeError, match="step inputs are read-only"):
        inputs.amount = 4


def test_inputs_can_be_copied() -> None:
    """copy.copy and copy.deepcopy of self.inputs give an equal mapping."""
    inputs = _captured_inputs(amount=1)
    shallow = copy.copy(inputs)
    deep = copy.deepcopy(inputs)
    assert dict(shallow) == dict(inputs)
    assert dict(deep)["amount"] == 1


def test_input_named_like_a_mapping_method_is_readable_or_refused() -> None:
    """An input named like a Mapping method (items) is readable as an attribute, or refused."""
    box: list[Any] = []

    def define() -> type[Step]:
        class Basket(Step):
            items: list[int]

            def run(self) -> Any:
                box.append(self.inputs.items)
                return None

        return Basket

    refusal = None
    try:
        basket = define()
    except DefinitionError as exc:
        refusal = str(exc)
    if refusal is not None:
        assert "items" in refusal
        return
    assert basket.invoke({"items": [1, 2]}).is_success is True
    assert box == [[1, 2]]
