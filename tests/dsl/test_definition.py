"""What a reactor or step declaration refuses, or accepts, when its class is defined."""

import re
import sys
import textwrap
import types
from typing import Annotated, Any

import pytest
from pydantic import Field

from py_reactor import Failure, Input, Reactor, Result, Step, Value, step
from py_reactor.errors import DefinitionError, InputValidationError


class Noop(Step):
    """A step with no inputs that returns a marker."""

    def run(self) -> Any:
        return "noop"


class Amount(Step):
    """A step that requires ``amount``."""

    amount: int

    def run(self) -> Any:
        return self.inputs.amount


class Boom(Step):
    """A step that always fails."""

    def run(self) -> Any:
        return Failure("boom")


class WithDefault(Step):
    """A step with a required and an optional input."""

    amount: int
    currency: str = "EUR"

    def run(self) -> Any:
        return (self.inputs.amount, self.inputs.currency)


def _ran(outcome: Any) -> list[str]:
    return [entry["step"] for entry in outcome.trace if entry["type"] == "run"]


# -- cycles ----------------------------------------------------------------------------------


def test_two_step_cycle_is_refused_showing_the_path() -> None:
    """Two steps that depend on each other are refused with the cycle written as a path."""
    with pytest.raises(DefinitionError, match=re.escape("a -> b -> a")) as info:

        class Loop(Reactor):
            a = step(Noop, wait_for=["b"])
            b = step(Noop, wait_for=["a"])

    assert "Loop" in str(info.value)


def test_cycle_through_result_wiring_is_refused() -> None:
    """A cycle made of Result wiring and wait_for is refused with the whole path."""
    with pytest.raises(DefinitionError, match=re.escape("a -> c -> b -> a")):

        class Loop(Reactor):
            a = step(Amount, amount=Result("c"))
            b = step(Noop, wait_for="a")
            c = step(Amount, amount=Result("b"), wait_for=["b"])


def test_step_waiting_for_itself_is_a_cycle() -> None:
    """A step that waits for itself is refused as the cycle ``a -> a``."""
    with pytest.raises(DefinitionError, match=re.escape("a -> a")):

        class Loop(Reactor):
            a = step(Noop, wait_for="a")


# -- unknown targets ---------------------------------------------------------------------------


def test_result_of_unknown_step_is_refused() -> None:
    """Reading Result of a step that does not exist is refused naming reactor, step and target."""
    with pytest.raises(DefinitionError, match=r"Orders.*'pay'.*Result\('missing'\)"):

        class Orders(Reactor):
            pay = step(Amount, amount=Result("missing"))


def test_wait_for_unknown_step_is_refused() -> None:
    """Waiting for a step that does not exist is refused naming the step and the unknown name."""
    with pytest.raises(DefinitionError, match=r"Orders.*'pay'.*wait_for.*'ghost'"):

        class Orders(Reactor):
            pay = step(Noop, wait_for=["ghost"])


def test_returns_unknown_step_is_refused() -> None:
    """``returns`` naming a step that does not exist is refused and lists the real steps."""
    with pytest.raises(DefinitionError, match=r"Orders\.returns.*'ghost'.*steps are: pay"):

        class Orders(Reactor):
            pay = step(Noop)
            returns = "ghost"


def test_input_source_naming_unknown_reactor_input_is_refused() -> None:
    """Input("x") for an x the reactor does not declare is refused naming it."""
    with pytest.raises(DefinitionError, match=r"Orders.*'pay'.*Input\('total'\)"):

        class Orders(Reactor):
            amount: int
            pay = step(Amount, amount=Input("total"))


# -- wiring and unwired arguments --------------------------------------------------------------


def test_wiring_an_argument_the_step_class_does_not_declare_is_refused() -> None:
    """Wiring an argument a Step class does not declare is refused naming step, class and arg."""
    with pytest.raises(DefinitionError, match=r"Orders.*'pay'.*'bogus'.*Amount") as info:

        class Orders(Reactor):
            amount: int
            pay = step(Amount, bogus=Value(1))

    assert "amount" in str(info.value)  # what it does declare


def test_wiring_an_argument_the_inline_function_does_not_take_is_refused() -> None:
    """Wiring an argument an inline function has no parameter for is refused naming it."""
    with pytest.raises(DefinitionError, match=r"Orders.*'pay'.*'bogus'"):

        class Orders(Reactor):
            @step(bogus=Value(1))
            def pay(amount: int = 1) -> int:
                return amount


def test_inline_function_with_var_keyword_accepts_extra_wiring() -> None:
    """An inline function taking **kwargs may be wired any argument and receives it."""

    class Orders(Reactor):
        @step(extra=Value(5))
        def pay(**kwargs: Any) -> Any:
            return dict(kwargs)

        returns = "pay"

    assert Orders.run().value == {"extra": 5}


def test_unwired_required_argument_is_refused_naming_reactor_step_and_input() -> None:
    """A required step input that is neither wired nor a reactor input is refused at definition."""
    with pytest.raises(DefinitionError) as info:

        class Checkout(Reactor):
            total: int
            charge = step(Amount)

    message = str(info.value)
    assert "Checkout" in message
    assert "'charge'" in message
    assert "'amount'" in message


def test_unwired_required_inline_argument_is_refused() -> None:
    """An inline step's required parameter that nothing provides is refused naming it."""
    with pytest.raises(DefinitionError, match=r"Checkout.*'charge'.*'amount'"):

        class Checkout(Reactor):
            @step()
            def charge(amount: int) -> int:
                return amount


def test_unwired_argument_with_default_uses_the_default() -> None:
    """An optional step input that is not a reactor input is accepted and keeps its default."""

    class Checkout(Reactor):
        amount: int
        charge = step(WithDefault)
        returns = "charge"

    arguments = dict(Checkout.__py_reactor_plan__["charge"].arguments)
    assert set(arguments) == {"amount"}
    assert Checkout.run(amount=3).value == (3, "EUR")


def test_unwired_argument_resolves_from_same_named_reactor_input() -> None:
    """An unwired step input (even an optional one) reads the reactor input of the same name."""

    class Checkout(Reactor):
        amount: int
        currency: str
        charge = step(WithDefault)
        returns = "charge"

    assert Checkout.run(amount=3, currency="USD").value == (3, "USD")


def test_explicit_wiring_wins_over_same_named_reactor_input() -> None:
    """An explicitly wired argument is not overridden by a reactor input of the same name."""

    class Checkout(Reactor):
        amount: int
        charge = step(Amount, amount=Value(99))
        returns = "charge"

    assert Checkout.run(amount=3).value == 99


@pytest.mark.parametrize("bad", [5, "amount", None, Noop])
def test_non_source_wiring_value_is_refused_pointing_to_value(bad: object) -> None:
    """A wiring value that is not Input/Result/Value is refused, suggesting Value(...)."""
    with pytest.raises(DefinitionError, match=r"'amount'.*Value\(\.\.\.\)"):
        step(Amount, amount=bad)


def test_wait_for_is_not_a_wiring_name() -> None:
    """``wait_for`` is taken as the dependency list, never as a wired argument."""

    class Orders(Reactor):
        first = step(Noop)
        second = step(Noop, wait_for="first")

    plan = Orders.__py_reactor_plan__["second"]
    assert plan.arguments == ()
    assert plan.depends_on == ("first",)


# -- reserved names ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["returns", "coordination", "run"])
def test_reserved_name_cannot_be_a_reactor_step(name: str) -> None:
    """A reactor step named returns/coordination/run is refused naming the reserved name."""
    with pytest.raises(DefinitionError, match=rf"Bad.*'{name}'.*reserved"):
        type("Bad", (Reactor,), {name: step(Noop)})


@pytest.mark.parametrize("name", ["returns", "coordination", "run"])
def test_reserved_name_cannot_be_a_reactor_input(name: str) -> None:
    """A reactor input named returns/coordination/run is refused naming the reserved name."""
    with pytest.raises(DefinitionError, match=rf"Bad.*'{name}'.*reserved"):
        type("Bad", (Reactor,), {"__annotations__": {name: int}})


@pytest.mark.parametrize(
    "name", ["inputs", "run", "guard", "compensate", "undo", "invoke", "coordination"]
)
def test_reserved_name_cannot_be_a_step_input(name: str) -> None:
    """A Step input named like the Step API is refused naming the class and the input."""
    with pytest.raises(DefinitionError, match=rf"BadStep.*'{name}'"):
        type("BadStep", (Step,), {"__annotations__": {name: int}, "run": lambda self: None})


def test_input_with_the_same_name_as_a_step_is_refused() -> None:
    """A reactor input and a step sharing a name are refused naming that name."""
    with pytest.raises(DefinitionError, match=r"Orders.*'pay'.*both an input and a step"):

        class Orders(Reactor):
            pay: int
            pay = step(Noop)


def test_step_shadowing_an_inherited_input_is_refused() -> None:
    """A subclass step with the name of an inherited reactor input is refused, not dropped."""

    class Base(Reactor):
        pay: int
        audit = step(Noop)

    with pytest.raises(DefinitionError, match=r"'pay'"):

        class Sub(Base):
            pay = step(Noop)


# -- what step() accepts -----------------------------------------------------------------------


def test_step_class_without_run_is_refused_by_step() -> None:
    """step() on a Step subclass that does not define run() is refused naming the class."""

    class Lazy(Step):
        amount: int

    with pytest.raises(DefinitionError, match=r"Lazy must define run\(\)"):
        step(Lazy)


def test_step_class_inheriting_run_is_accepted() -> None:
    """A Step subclass whose run() comes from a parent step class is accepted."""

    class Child(Noop):
        pass

    class Orders(Reactor):
        only = step(Child)
        returns = "only"

    assert Orders.run().value == "noop"


def test_non_step_class_is_refused_by_step() -> None:
    """step() on a class that is not a Step subclass is refused naming it."""

    class NotAStep:
        def run(self) -> int:
            return 1

    with pytest.raises(DefinitionError, match=r"NotAStep is not a Step subclass"):
        step(NotAStep)


def test_reactor_class_is_refused_by_step_pointing_to_compose() -> None:
    """step() on a Reactor subclass is refused, suggesting compose()."""

    class Child(Reactor):
        only = step(Noop)

    with pytest.raises(DefinitionError, match=r"Child.*compose\(\)"):
        step(Child)


def test_non_callable_target_is_refused_by_step() -> None:
    """step() on something that is neither a Step class nor a function is refused."""
    with pytest.raises(DefinitionError, match=r"42"):
        step(42)  # type: ignore[call-overload]


def test_step_applied_twice_is_refused() -> None:
    """Applying @step to something that is already a step is refused."""
    with pytest.raises(DefinitionError, match=r"already a step"):

        @step()
        @step()
        def twice() -> None:
            return None


def test_step_returns_a_declaration_not_the_function() -> None:
    """@step replaces the function with a declaration whose target is the function."""

    def pay() -> int:
        return 1

    declared = step()(pay)
    assert declared is not pay
    assert declared.target is pay


# -- step names --------------------------------------------------------------------------------


def test_step_name_is_the_attribute_it_is_bound_to() -> None:
    """A step is named after its reactor attribute, which is what failures report."""

    class Orders(Reactor):
        first = step(Noop)
        charge_card = step(Boom, wait_for="first")

    assert Orders.__py_reactor_order__ == ("first", "charge_card")
    outcome = Orders.run()
    assert outcome.step_name == "charge_card"


def test_step_name_is_the_attribute_when_built_with_type() -> None:
    """A reactor built with type(name, bases, ns) names steps after their namespace keys."""
    namespace = {
        "__annotations__": {"amount": int},
        "first": step(Noop),
        "charge_card": step(Boom, wait_for="first"),
    }
    built = type("Built", (Reactor,), namespace)

    assert set(built.__py_reactor_plan__) == {"first", "charge_card"}
    assert built.__py_reactor_plan__["charge_card"].name == "charge_card"
    outcome = built.run(amount=1)
    assert outcome.is_success is False
    assert outcome.step_name == "charge_card"


def test_inline_step_name_is_the_function_attribute() -> None:
    """An inline step's name is the name its function is bound to in the reactor body."""

    class Orders(Reactor):
        @step()
        def send_mail() -> Any:
            return Failure("smtp down")

    assert tuple(Orders.__py_reactor_plan__) == ("send_mail",)
    assert Orders.run().step_name == "send_mail"


def test_inline_hook_alias_is_not_a_second_step() -> None:
    """Attaching undo under another attribute name does not create a second step."""

    class Orders(Reactor):
        @step()
        def pay() -> int:
            return 1

        @pay.undo
        def _undo_pay(result: Any) -> None:
            return None

    assert Orders.__py_reactor_order__ == ("pay",)


# -- inheritance -------------------------------------------------------------------------------


def test_subclass_inherits_steps() -> None:
    """A reactor subclass runs the steps its parent declares, plus its own after them."""

    class Base(Reactor):
        a = step(Noop)
        b = step(Noop)

    class Sub(Base):
        c = step(Noop)

    assert Sub.__py_reactor_order__ == ("a", "b", "c")
    assert _ran(Sub.run()) == ["a", "b", "c"]
    assert Base.__py_reactor_order__ == ("a", "b")


def test_subclass_redeclaring_a_step_replaces_it() -> None:
    """Redeclaring an inherited step name replaces that step in the subclass only."""

    class Base(Reactor):
        a = step(Noop)
        b = step(Noop)
        c = step(Noop)

    class Sub(Base):
        b = step(Boom)

    assert Sub.__py_reactor_plan__["b"].declaration.target is Boom
    assert Sub.__py_reactor_order__ == ("a", "b", "c")
    failed = Sub.run()
    assert failed.is_success is False
    assert failed.step_name == "b"
    assert Base.run().is_success is True


def test_subclass_replacing_a_step_with_a_plain_value_removes_it() -> None:
    """Rebinding an inherited step name to a non-step removes that step from the subclass."""

    class Base(Reactor):
        a = step(Noop)
        b = step(Noop)

    class Sub(Base):
        b = None

    assert Sub.__py_reactor_order__ == ("a",)


def test_subclass_inherits_inputs() -> None:
    """A reactor subclass validates its parent's inputs as well as its own."""

    class Base(Reactor):
        amount: int
        pay = step(Amount)

    class Sub(Base):
        note: str = "-"
        returns = "pay"

    assert Sub.run(amount=4).value == 4
    assert Sub.run().is_success is False


# -- order -------------------------------------------------------------------------------------


def test_order_is_topological_with_ties_in_declaration_order() -> None:
    """Steps run after what they depend on; among ready steps the earlier declared goes first."""

    class Flow(Reactor):
        d = step(Noop, wait_for=["c"])
        c = step(Noop)
        b = step(Noop, wait_for=["a"])
        a = step(Noop)
        e = step(Noop)

    assert Flow.__py_reactor_order__ == ("c", "d", "a", "b", "e")
    assert _ran(Flow.run()) == ["c", "d", "a", "b", "e"]


def test_order_is_the_same_for_identical_definitions() -> None:
    """Defining the same reactor twice gives the same order both times."""

    def build() -> type[Reactor]:
        class Flow(Reactor):
            z = step(Noop)
            y = step(Noop, wait_for="z")
            x = step(Noop)
            w = step(Noop, wait_for=["x", "z"])
            v = step(Noop, wait_for=["w", "y"])

        return Flow

    first, second = build(), build()
    assert first.__py_reactor_order__ == second.__py_reactor_order__ == ("z", "y", "x", "w", "v")


def test_plan_records_dependencies_from_results_and_wait_for() -> None:
    """A step's plan lists Result sources and wait_for names as dependencies, once each."""

    class Flow(Reactor):
        a = step(Noop)
        b = step(Noop)
        c = step(Amount, amount=Result("a"), wait_for=["b", "a"])

    assert Flow.__py_reactor_plan__["c"].depends_on == ("a", "b")


# -- input contracts ---------------------------------------------------------------------------


def test_reactor_inputs_come_from_annotations_with_defaults() -> None:
    """Annotated reactor inputs are validated; class values are defaults; Field limits apply."""

    class Pay(Reactor):
        account_id: int
        amount: Annotated[int, Field(ge=1)]
        note: str = "none"

        @step()
        def echo(account_id: int, amount: int, note: str) -> Any:
            return (account_id, amount, note)

        returns = "echo"

    assert Pay.run(account_id="7", amount=2).value == (7, 2, "none")
    assert Pay.run(account_id=7, amount=2, note="x").value == (7, 2, "x")

    bad = Pay.run(account_id=7, amount=0)
    assert bad.is_success is False
    assert bad.step_name is None
    assert isinstance(bad.error, InputValidationError)
    assert [e["field"] for e in bad.validation_errors] == ["amount"]

    missing = Pay.run(amount=1)
    assert [e["field"] for e in missing.validation_errors] == ["account_id"]


def test_step_class_contract_from_annotations_with_field_limits() -> None:
    """A Step class validates its annotated inputs, Field limits and defaults included."""

    class Charge(Step):
        amount: Annotated[int, Field(ge=1)]
        currency: str = "EUR"

        def run(self) -> Any:
            return (self.inputs.amount, self.inputs.currency)

    assert Charge.invoke({"amount": 3}).value == (3, "EUR")
    refused = Charge.invoke({"amount": 0})
    assert refused.is_success is False
    assert [e["field"] for e in refused.validation_errors] == ["amount"]


def test_inline_contract_from_parameters_with_annotated_limits() -> None:
    """An inline step validates its parameters' annotations, Field limits included."""

    class Pay(Reactor):
        amount: int

        @step()
        def charge(amount: Annotated[int, Field(ge=1)]) -> int:
            return amount

        returns = "charge"

    assert Pay.run(amount=2).value == 2
    refused = Pay.run(amount=0)
    assert refused.is_success is False
    assert refused.step_name == "charge"
    assert [e["field"] for e in refused.validation_errors] == ["amount"]


_PYDANTIC_NAMES = ("json", "model_id", "model_config", "schema", "copy", "dict", "model_fields")


def test_reactor_inputs_named_like_basemodel_attributes_work() -> None:
    """Reactor inputs called json, model_id, schema, ... validate and reach the step."""
    annotations = dict.fromkeys(_PYDANTIC_NAMES, int)
    collect = type(
        "Collect", (Step,), {"__annotations__": annotations, "run": lambda self: dict(self.inputs)}
    )
    namespace = {"__annotations__": annotations, "collect": step(collect), "returns": "collect"}
    built = type("Models", (Reactor,), namespace)

    values = {name: i for i, name in enumerate(_PYDANTIC_NAMES)}
    assert built.run(**values).value == values
    refused = built.run(**{**values, "json": "not a number"})
    assert [e["field"] for e in refused.validation_errors] == ["json"]


def test_step_inputs_named_like_basemodel_attributes_work() -> None:
    """Step inputs called json and model_id validate and are readable from self.inputs."""

    class Models(Step):
        json: int
        model_id: str
        schema: bool = False

        def run(self) -> Any:
            return (self.inputs.json, self.inputs["model_id"], self.inputs.schema)

    assert Models.invoke({"json": "3", "model_id": "m-1"}).value == (3, "m-1", False)


_FUTURE_MODULE = '''
from __future__ import annotations

from typing import Annotated

from pydantic import Field

from py_reactor import Reactor, Step, step


class Money:
    """A module-level type used in string annotations."""

    def __init__(self, cents):
        self.cents = cents


class Charge(Step):
    money: Money
    count: Annotated[int, Field(ge=1)] = 1

    def run(self):
        return self.inputs.money.cents * self.inputs.count


class Pay(Reactor):
    money: Money
    count: int

    charge = step(Charge)

    @step()
    def label(money: Money) -> str:
        return f"{money.cents}c"

    returns = "charge"
'''


def test_future_annotations_with_module_level_type_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``from __future__ import annotations``, module-level types resolve everywhere."""
    module = types.ModuleType("py_reactor_future_sample")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(textwrap.dedent(_FUTURE_MODULE), "<future sample>", "exec"), module.__dict__)

    outcome = module.Pay.run(money=module.Money(5), count=3)
    assert outcome.is_success is True
    assert outcome.value == 15
    assert outcome.results["label"] == "5c"
    refused = module.Pay.run(money=5, count=1)
    assert [e["field"] for e in refused.validation_errors] == ["money"]


def test_future_annotations_with_function_local_type_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A string annotation naming a function-local type is refused, advising module level."""
    source = textwrap.dedent(
        """
        from __future__ import annotations

        from py_reactor import Step


        def define():
            class Local:
                pass

            class Uses(Step):
                thing: Local

                def run(self):
                    return None

            return Uses
        """
    )
    module = types.ModuleType("py_reactor_future_local")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(source, "<future local>", "exec"), module.__dict__)

    with pytest.raises(DefinitionError, match=r"Uses.*'Local'.*module level"):
        module.define()


def test_definition_errors_carry_reactor_and_step_attributes() -> None:
    """A refused wiring names its reactor and step as attributes, not only in the message."""
    with pytest.raises(DefinitionError) as caught:

        class Carrier(Reactor):
            a = step(Noop, wait_for="nowhere")

    assert caught.value.reactor.endswith("Carrier")  # the qualname, as in messages
    assert caught.value.step == "a"


def test_one_declaration_bound_to_two_names_is_refused() -> None:
    """Binding the same step(...) object to two attributes is refused, naming both."""
    shared = step(Noop)
    with pytest.raises(DefinitionError, match=r"bound to both 'first' and 'second'"):

        class Twice(Reactor):
            first = shared
            second = shared


def test_hook_function_names_are_not_extra_steps() -> None:
    """`@x.undo def _undo` binds the declaration under the hook's name without a second step."""

    class Hooked(Reactor):
        @step
        def x() -> int:
            return 1

        @x.undo
        def _undo(result: int) -> None:
            return None

        @x.compensate
        def _comp(error: object) -> None:
            return None

    assert Hooked.__py_reactor_order__ == ("x",)


def test_bad_wiring_in_the_decorator_form_names_the_function() -> None:
    """``@step(x=42)`` above a function is refused with a message naming that function."""
    with pytest.raises(DefinitionError, match=r"@step\(\.\.\.\) on \S*charge_card: argument 'x'"):

        @step(x=42)
        def charge_card(x: int) -> int:
            return x
