"""A context to and from JSON, with an explicit schema version. Never pickle.

Inputs, results, resume payloads and what middleware carries must be JSON-representable
(pydantic's rules: datetimes, decimals, UUIDs, dataclasses and models are turned into their JSON
form and come back as that form, not as the original type). The trace is diagnostics: what
cannot be encoded is kept as its ``repr``. Anything that does not parse, or has a schema version
this release does not read, is rejected.

Version 3 writes the library's bookkeeping as typed fields (``engine.state``); version 2 (the
previous release) kept it in one ``private`` dict, which is read into those fields, so that an
execution parked or paused before an upgrade resumes after it.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import PydanticSerializationError, to_jsonable_python

from py_reactor.coordination.holds import Ledger
from py_reactor.engine.context import Context, Status
from py_reactor.engine.state import (
    FanOutWindow,
    InterruptPause,
    UnitOrigin,
    UnitRef,
    UnitWait,
    from_legacy_private,
)
from py_reactor.errors import SerializationError

__all__ = [
    "SCHEMA_VERSION",
    "context_from_dict",
    "context_to_dict",
    "dumps_context",
    "loads_context",
]

#: The version written by this release. (2: the hold ledger; 3: typed bookkeeping fields.)
SCHEMA_VERSION = 3
#: The versions this release reads: its own, and 2 (its ``private`` dict read into the fields).
READABLE_VERSIONS = (2, 3)


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
    children: dict[str, _ContextPayload]
    holds: list[_HoldPayload] | None = None  # written with the root context only: one per tree
    attempts: dict[str, int] = Field(default_factory=dict)
    parks: int = 0
    step_parks: dict[str, int] = Field(default_factory=dict)  # absent from early version 2
    units: dict[str, UnitRef] = Field(default_factory=dict)
    unit_waits: dict[str, UnitWait] = Field(default_factory=dict)
    deferred: dict[str, str] = Field(default_factory=dict)
    unit_of: UnitOrigin | None = None
    interrupts: dict[str, InterruptPause] = Field(default_factory=dict)
    resumed: dict[str, Any] = Field(default_factory=dict)
    paused_at: str | None = None
    fan_out: dict[str, FanOutWindow] = Field(default_factory=dict)
    map_error: str | None = None
    retry_of: str | None = None
    carried: dict[str, Any] = Field(default_factory=dict)


def context_to_dict(context: Context) -> dict[str, Any]:
    """The JSON-ready form of ``context`` (without the schema version envelope).

    The hold ledger is written once, with ``context``; its children share it.

    Raises:
        SerializationError: an input, result, argument, resume payload or carried value is not
            representable.
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
        "children": {k: _body(v) for k, v in context.children.items()},
        "attempts": dict(context.attempts),
        "parks": context.parks,
        "step_parks": dict(context.step_parks),
        "units": to_jsonable_python(context.units),
        "unit_waits": to_jsonable_python(context.unit_waits),
        "deferred": dict(context.deferred),
        "unit_of": to_jsonable_python(context.unit_of),
        "interrupts": to_jsonable_python(context.interrupts),
        "resumed": _strict(context.resumed, "resume payloads", context),
        "paused_at": context.paused_at,
        "fan_out": to_jsonable_python(context.fan_out),
        "map_error": context.map_error,
        "retry_of": context.retry_of,
        "carried": _strict(context.carried, "data middleware carries", context),
    }


def context_from_dict(data: Any, *, version: int = SCHEMA_VERSION) -> Context:
    """Rebuild a context from :func:`context_to_dict`'s form (of schema ``version``).

    Raises:
        SerializationError: the data does not have the context's shape.
    """
    if version == 2:
        data = _from_v2(data)
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
    if type(version) is not int or version not in READABLE_VERSIONS:  # JSON true would equal 1
        raise SerializationError(
            f"context schema_version {version!r} is not supported; this py_reactor reads "
            f"versions {', '.join(map(str, READABLE_VERSIONS))}"
        )
    if "context" not in document:
        raise SerializationError(
            "not a serialized py_reactor context: the 'context' key is missing"
        )
    return context_from_dict(document["context"], version=version)


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
        children={k: _build(v, holds) for k, v in payload.children.items()},
        holds=holds,
        attempts=payload.attempts,
        parks=payload.parks,
        step_parks=payload.step_parks,
        units=payload.units,
        unit_waits=payload.unit_waits,
        deferred=payload.deferred,
        unit_of=payload.unit_of,
        interrupts=payload.interrupts,
        resumed=payload.resumed,
        paused_at=payload.paused_at,
        fan_out=payload.fan_out,
        map_error=payload.map_error,
        retry_of=payload.retry_of,
        carried=payload.carried,
    )


def _from_v2(data: Any) -> Any:
    """A version-2 context (and its children) in version 3's shape: its ``private`` dict read
    into the bookkeeping fields. Left as it is when it has no such dict (validation says why)."""
    if not isinstance(data, dict) or not isinstance(data.get("private"), dict):
        return data
    body = {k: v for k, v in data.items() if k != "private"}
    try:
        body.update(from_legacy_private(data["private"]))
    except (TypeError, KeyError, IndexError, AttributeError) as exc:
        raise SerializationError(
            f"not a valid py_reactor context (schema version 2): its private data: {exc!r}"
        ) from None
    if isinstance(body.get("children"), dict):
        body["children"] = {k: _from_v2(v) for k, v in body["children"].items()}
    return body
