"""The typed bookkeeping an execution's context carries for the library's own features.

Each feature that stops a run and brings it back keeps what it needs for the resume here, as a
field of ``Context`` of one of these types (they replace the free-form ``private`` dict of
schema version 2): dispatched async units and the waits on them, a unit's origin and deferred
inputs, interrupts reached and resumes brought, fanned-out map windows, a collected map
element's error, the execution a retry retries, and the data middleware carries across a
hand-off (``carried``, the one untyped field: its keys belong to the middleware).

Every type is a plain dataclass whose JSON form is its fields (``engine.serializer`` writes and
reads it). ``__pydantic_config__`` tells the serializer how to read one back: its JSON form
(``{"0": ...}`` is the int key 0), no unknown field.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ConfigDict

# typing.TypedDict cannot be read back by pydantic before Python 3.12 (a fan-out window keeps
# its elements' rollback failures), so the typing_extensions one (pydantic's own dependency).
from typing_extensions import TypedDict

__all__ = [
    "BOOKKEEPING",
    "FanOutStop",
    "FanOutWindow",
    "InterruptPause",
    "RollbackFailure",
    "UnitOrigin",
    "UnitRef",
    "UnitWait",
]

#: How the serializer reads these types back from JSON.
_FROM_JSON = ConfigDict(strict=False, extra="forbid")

#: The ``Context`` fields of library bookkeeping: a parallel branch copies them, and merges what
#: it changed back into the execution's context (``engine.scheduler``).
BOOKKEEPING = (
    "units",
    "unit_waits",
    "deferred",
    "unit_of",
    "interrupts",
    "resumed",
    "paused_at",
    "fan_out",
    "map_error",
    "retry_of",
    "carried",
)


class RollbackFailure(TypedDict):
    """A compensate or undo that did not succeed during rollback."""

    step: str
    kind: str  # "compensate" | "undo"
    key: str | None  # the coordination key involved, if any
    reason: str  # "returned_failure" | "raised" | "coordination_unavailable"
    message: str


@dataclass(slots=True)
class UnitRef:
    """An async unit a run dispatched: its execution, and whether it runs a step or a reactor
    (a reactor's context becomes the step's child once read, so rollback undoes its steps)."""

    __pydantic_config__ = _FROM_JSON

    id: str
    kind: Literal["step", "reactor"]


@dataclass(slots=True)
class UnitWait:
    """A worker run's wait on one async unit (or fan-out element), kept across its parks so
    that ``async_park_timeout`` counts from the first wait."""

    __pydantic_config__ = _FROM_JSON

    since: float  # the first wait, wall clock
    parks: int


@dataclass(slots=True)
class UnitOrigin:
    """Where a unit (or a fanned-out map element) was dispatched from: its deferred inputs are
    read from that reactor's wiring, and its dispatch span belongs to that run's trace."""

    __pydantic_config__ = _FROM_JSON

    reactor: str  # module:qualname of the dispatching reactor
    step: str
    execution: str  # the dispatching execution's id
    element: int | None = None  # a fanned-out map element's index


@dataclass(slots=True)
class InterruptPause:
    """An interrupt step the run reached: its correlation id (reserved while paused), its
    deadline (None: no timeout) and when it was reached (wall clock)."""

    __pydantic_config__ = _FROM_JSON

    correlation_id: str | None
    deadline: float | None
    at: float


@dataclass(slots=True)
class FanOutStop:
    """Why a fanned-out map dispatches no more elements: element ``index`` failed, halted (its
    ``reason``) or could not be dispatched (``error``)."""

    __pydantic_config__ = _FROM_JSON

    index: int
    how: Literal["failed", "halted", "refused"]
    reason: str | None = None
    error: str | None = None


@dataclass(slots=True)
class FanOutWindow:
    """A fanned-out map step in progress: elements ``[0, sent)`` were dispatched (index order),
    those below ``low`` have ended. Kept across parks, dropped when the step ends."""

    __pydantic_config__ = _FROM_JSON

    count: int
    sent: int = 0
    low: int = 0
    failed: dict[int, str] = field(default_factory=dict)  # error text by element index
    stop: FanOutStop | None = None
    rollback_failures: list[RollbackFailure] = field(default_factory=list)  # the elements' own


def legacy_private(
    *,
    units: dict[str, UnitRef],
    unit_waits: dict[str, UnitWait],
    deferred: dict[str, str],
    unit_of: UnitOrigin | None,
    interrupts: dict[str, InterruptPause],
    resumed: dict[str, Any],
    paused_at: str | None,
    fan_out: dict[str, FanOutWindow],
    map_error: str | None,
    retry_of: str | None,
    carried: dict[str, Any],
) -> dict[str, Any]:
    """The bookkeeping in the shape of schema version 2's ``private`` dict (a copy)."""
    private: dict[str, Any] = {}
    if units:
        private["async_units"] = {n: {"id": u.id, "kind": u.kind} for n, u in units.items()}
    if unit_waits:
        private["async_waits"] = {n: [w.since, w.parks] for n, w in unit_waits.items()}
    if deferred:
        private["deferred_inputs"] = dict(deferred)
    if unit_of is not None:
        origin: dict[str, Any] = {
            "reactor": unit_of.reactor,
            "step": unit_of.step,
            "execution": unit_of.execution,
        }
        if unit_of.element is not None:
            origin["element"] = unit_of.element
        private["unit_of"] = origin
    if interrupts:
        private["interrupts"] = {
            path: {"correlation_id": p.correlation_id, "deadline": p.deadline, "at": p.at}
            for path, p in interrupts.items()
        }
    if resumed:
        private["resume"] = dict(resumed)
    if paused_at is not None:
        private["paused_at"] = paused_at
    if fan_out:
        private["map_fan_out"] = {step: _legacy_window(w) for step, w in fan_out.items()}
    if map_error is not None:
        private["map_error"] = map_error
    if retry_of is not None:
        private["retry_of"] = retry_of
    private.update(carried)
    return copy.deepcopy(private)


def _legacy_window(window: FanOutWindow) -> dict[str, Any]:
    stop: dict[str, Any] | None = None
    if window.stop is not None:
        stop = {"index": window.stop.index, "how": window.stop.how}
        if window.stop.reason is not None:
            stop["reason"] = window.stop.reason
        if window.stop.error is not None:
            stop["error"] = window.stop.error
    shape: dict[str, Any] = {
        "count": window.count,
        "sent": window.sent,
        "low": window.low,
        "failed": {str(i): text for i, text in window.failed.items()},
        "stop": stop,
    }
    if window.rollback_failures:
        shape["rollback_failures"] = [dict(f) for f in window.rollback_failures]
    return shape


def from_legacy_private(private: dict[str, Any]) -> dict[str, Any]:
    """Schema version 2's ``private`` dict as the JSON form of the bookkeeping fields (what
    ``legacy_private`` gives, read back): each known key to its field; every other key (data a
    middleware stored) to ``carried``, except the OpenTelemetry keys, renamed ``otel.*``."""
    fields: dict[str, Any] = {}
    carried: dict[str, Any] = {}
    for key, value in private.items():
        name = _V2_FIELDS.get(key)
        if name is None:
            carried[_V2_CARRIED.get(key, key)] = value
        elif name == "unit_waits":
            fields[name] = {n: {"since": w[0], "parks": w[1]} for n, w in value.items()}
        else:
            fields[name] = value
    fields["carried"] = carried
    return fields


#: The keys of schema version 2's ``private`` dict, by the field that replaces each.
_V2_FIELDS = {
    "async_units": "units",
    "async_waits": "unit_waits",
    "deferred_inputs": "deferred",
    "unit_of": "unit_of",
    "interrupts": "interrupts",
    "resume": "resumed",
    "paused_at": "paused_at",
    "map_fan_out": "fan_out",
    "map_error": "map_error",
    "retry_of": "retry_of",
}
#: Version 2's keys of the OpenTelemetry middleware, by their namespaced ``carried`` key.
_V2_CARRIED = {"trace_context": "otel.trace_context", "trace_park": "otel.trace_park"}
