"""Input contracts: pydantic models built from annotations, and the validation around them."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Annotated, Any, ClassVar

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from py_reactor.errors import DefinitionError, InputValidationError

__all__ = ["Contract", "contract_from_class", "contract_from_function"]

_MODEL_CONFIG = ConfigDict(arbitrary_types_allowed=True, frozen=True, extra="forbid")


class Contract:
    """The validated shape of a reactor's or a step's inputs.

    ``fields`` maps each input name to whether it is required. ``validate`` returns the validated
    values as a plain dict; a contract with no fields skips pydantic entirely, so steps that
    declare nothing pay nothing.
    """

    __slots__ = ("_pairs", "extra", "fields", "model", "owner")

    def __init__(self, owner: str, model: type[BaseModel] | None, *, extra: bool = False) -> None:
        self.owner = owner
        self.model = model
        self.extra = extra  # a function's **kwargs: undeclared values pass through unvalidated
        # The model's attributes are f0, f1, ... aliased to the real names, so that an input may
        # be called anything (``json``, ``model_id``) without clashing with BaseModel's own API.
        items = [] if model is None else list(model.model_fields.items())
        self.fields: Mapping[str, bool] = MappingProxyType(
            {str(f.alias): f.is_required() for _, f in items}
        )
        self._pairs = tuple((attr, str(f.alias)) for attr, f in items)

    def validate(
        self, values: Mapping[str, Any], *, reactor: str | None = None, step: str | None = None
    ) -> dict[str, Any]:
        """Validate ``values``; raise :class:`InputValidationError` listing every bad field."""
        if self.extra:
            declared = {k: v for k, v in values.items() if k in self.fields}
            passed = {k: v for k, v in values.items() if k not in self.fields}
            return {
                **Contract(self.owner, self.model).validate(declared, reactor=reactor, step=step),
                **passed,
            }
        if self.model is None:
            if values:
                raise _unexpected(self.owner, values, reactor=reactor, step=step)
            return {}
        try:
            instance = self.model.model_validate(values)
        except pydantic.ValidationError as exc:
            raise _validation_error(self.owner, exc, reactor=reactor, step=step) from None
        return {name: getattr(instance, attr) for attr, name in self._pairs}


def contract_from_class(cls: type, *, exclude: set[str], owner: str) -> Contract:
    """Build a contract from the annotations of ``cls`` (and its bases), minus ``exclude``."""
    hints = _type_hints(cls, owner)
    fields: dict[str, Any] = {}
    for name, hint in hints.items():
        if name in exclude or name.startswith("_") or typing.get_origin(hint) is ClassVar:
            continue
        default = _class_default(cls, name)
        fields[name] = (hint, default)
    return _build(owner, fields)


def contract_from_function(fn: Callable[..., Any], *, owner: str) -> tuple[Contract, bool]:
    """Build a contract from a function's parameters; also say whether it takes ``**kwargs``."""
    hints = _type_hints(fn, owner)
    fields: dict[str, Any] = {}
    var_keyword = False
    for param in inspect.signature(fn).parameters.values():
        if param.kind is param.VAR_KEYWORD:
            var_keyword = True
            continue
        if param.kind in (param.VAR_POSITIONAL, param.POSITIONAL_ONLY):
            raise DefinitionError(
                f"{owner}: inline step parameters are passed by name; "
                f"{fn.__qualname__} has a positional-only or *args parameter {param.name!r}"
            )
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints.get(param.name, Any), default)
    return _build(owner, fields, extra=var_keyword), var_keyword


def _type_hints(obj: Any, owner: str) -> dict[str, Any]:
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except NameError as exc:
        raise DefinitionError(
            f"{owner}: cannot resolve the annotation {exc.name!r}. With "
            "'from __future__ import annotations', annotations are strings resolved from the "
            "module's globals, so names local to a function cannot be used; move the type to "
            "module level."
        ) from exc


def _class_default(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return ...


def _build(owner: str, fields: dict[str, Any], *, extra: bool = False) -> Contract:
    if not fields:
        return Contract(owner, None, extra=extra)
    model_name = "".join(ch if ch.isalnum() else "_" for ch in owner) + "Inputs"
    aliased: dict[str, Any] = {
        f"f{i}": (Annotated[hint, Field(alias=name)], default)
        for i, (name, (hint, default)) in enumerate(fields.items())
    }
    try:
        model = pydantic.create_model(model_name, __config__=_MODEL_CONFIG, **aliased)
    except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError, TypeError) as exc:
        raise DefinitionError(f"{owner}: its input contract is not valid: {exc}") from exc
    return Contract(owner, model, extra=extra)


def _where(owner: str, reactor: str | None, step: str | None) -> str:
    if reactor and step:
        return f"step {step!r} of {reactor}"
    if reactor:
        return reactor
    return owner


def _validation_error(
    owner: str, exc: pydantic.ValidationError, *, reactor: str | None, step: str | None
) -> InputValidationError:
    errors = []
    for err in exc.errors(include_url=False):
        field = ".".join(str(p) for p in err["loc"]) or "<inputs>"
        errors.append(
            {"field": field, "message": err["msg"], "type": err["type"], "input": err.get("input")}
        )
    details = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
    message = f"invalid inputs for {_where(owner, reactor, step)}: {details}"
    return InputValidationError(message, errors=errors, reactor=reactor, step=step)


def _unexpected(
    owner: str, values: Mapping[str, Any], *, reactor: str | None, step: str | None
) -> InputValidationError:
    errors = [
        {
            "field": k,
            "message": "Extra inputs are not permitted",
            "type": "extra_forbidden",
            "input": v,
        }
        for k, v in values.items()
    ]
    names = ", ".join(map(repr, values))
    message = f"invalid inputs for {_where(owner, reactor, step)}: it takes no inputs, got {names}"
    return InputValidationError(message, errors=errors, reactor=reactor, step=step)
