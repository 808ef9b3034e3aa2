"""A context to and from JSON, with an explicit schema version. Never pickle.

Inputs, results and private data must be JSON-representable (pydantic's rules: datetimes,
decimals, UUIDs, dataclasses and models are turned into their JSON form and come back as that
form, not as the original type). The trace is diagnostics: what cannot be encoded is kept as its
``repr``. Anything that does not parse, or has another schema version, is rejected.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import PydanticSerializationError, to_jsonable_python

from py_reactor.coordination.holds import Ledger
from py_reactor.engine.context import Context, Status
from py_reactor.errors import SerializationError

__all__ = [
    "SCHEMA_VERSION",
    "context_from_dict",
    "context_to_dict",
    "dumps_context",
    "loads_context",
]

#: The version written by this release; also the only one it reads. (2: the hold ledger.)
SCHEMA_VERSION = 2


class _HoldPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    id: str
    primitive: str
    key: str
    owner: str
    holder: str
    step: str | None
    entry: str
    state: str
    data: dict[str, Any]
    taken_at: Annotated[float, Field(strict=False)]


class _ContextPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    reactor: str
    execution_id: str
    root_id: str
    parent_id: str | None
    status: Annotated[Status, Field(strict=False)]
    inputs: dict[str, Any]
    results: dict[str, Any]
    arguments: dict[str, dict[str, Any]]
    completed: list[str]
    trace: list[dict[str, Any]]
    private: dict[str, Any]
    children: dict[str, _ContextPayload]
    holds: list[_HoldPayload] | None = None  # written with the root context only: one per tree
    attempts: dict[str, int] = Field(default_factory=dict)
    parks: int = 0
    step_parks: dict[str, int] = Field(default_factory=dict)


def context_to_dict(context: Context) -> dict[str, Any]:
    """The JSON-ready form of ``context`` (without the schema version envelope).

    The hold ledger is written once, with ``context``; its children share it.

    Raises:
        SerializationError: an input, result, argument or private value is not representable.
    """
    body = _body(context)
    body["holds"] = _strict(context.holds.to_list(), "the hold ledger", context)
    return body


def _body(context: Context) -> dict[str, Any]:
    return {
        "reactor": context.reactor,
        "execution_id": context.execution_id,
        "root_id": context.root_id,
        "parent_id": context.parent_id,
        "status": context.status.value,
        "inputs": _strict(context.inputs, "inputs", context),
        "results": {
            k: _strict(v, f"the result of step {k!r}", context) for k, v in context.results.items()
        },
        "arguments": {
            k: _strict(v, f"the arguments of step {k!r}", context)
            for k, v in context.arguments.items()
        },
        "completed": list(context.completed),
        "trace": to_jsonable_python(context.trace, fallback=repr),
        "private": _strict(context.private, "private data", context),
        "children": {k: _body(v) for k, v in context.children.items()},
        "attempts": dict(context.attempts),
        "parks": context.parks,
        "step_parks": dict(context.step_parks),
    }


def context_from_dict(data: Any) -> Context:
    """Rebuild a context from :func:`context_to_dict`'s form.

    Raises:
        SerializationError: the data does not have the context's shape.
    """
    try:
        payload = _ContextPayload.model_validate(data)
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in exc.errors()
        )
        raise SerializationError(f"not a valid py_reactor context: {problems}") from None
    holds = Ledger.from_list([h.model_dump() for h in payload.holds or []])
    return _build(payload, holds)


def dumps_context(context: Context) -> str:
    """``context`` as a JSON document carrying ``schema_version``."""
    body = context_to_dict(context)
    return json.dumps({"schema_version": SCHEMA_VERSION, "context": body}, separators=(",", ":"))


def loads_context(text: str | bytes) -> Context:
    """The context in a document written by :func:`dumps_context`.

    Raises:
        SerializationError: not JSON, not an envelope, another schema version, or a bad shape.
    """
    try:
        document = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"a serialized context must be JSON text: {exc}") from None
    if not isinstance(document, dict) or "schema_version" not in document:
        raise SerializationError(
            "not a serialized py_reactor context: expected an object with 'schema_version' "
            "and 'context'"
        )
    version = document["schema_version"]
    if type(version) is not int or version != SCHEMA_VERSION:  # JSON true would equal 1
        raise SerializationError(
            f"context schema_version {version!r} is not supported; this py_reactor reads "
            f"version {SCHEMA_VERSION}"
        )
    if "context" not in document:
        raise SerializationError(
            "not a serialized py_reactor context: the 'context' key is missing"
        )
    return context_from_dict(document["context"])


def _strict(value: Any, what: str, context: Context) -> Any:
    try:
        return to_jsonable_python(value)
    except PydanticSerializationError as exc:
        raise SerializationError(
            f"cannot serialize {what} of {context.reactor} (execution {context.execution_id}): "
            f"{exc}; return JSON-representable values (dicts, lists, str, numbers, "
            "pydantic models, dataclasses)"
        ) from None


def _build(payload: _ContextPayload, holds: Ledger) -> Context:
    return Context(
        reactor=payload.reactor,
        inputs=payload.inputs,
        execution_id=payload.execution_id,
        root_id=payload.root_id,
        parent_id=payload.parent_id,
        status=payload.status,
        results=payload.results,
        arguments=payload.arguments,
        completed=payload.completed,
        trace=payload.trace,
        private=payload.private,
        children={k: _build(v, holds) for k, v in payload.children.items()},
        holds=holds,
        attempts=payload.attempts,
        parks=payload.parks,
        step_parks=payload.step_parks,
    )
