"""What an execution holds, as data: hold records in a ledger that travels with the context.

A hold used to live in a Python frame (a ``with`` block around the work). An execution that
parks in a worker, or is picked up by another process after a crash, has no frame, so every
hold is also written down as a :class:`HoldRecord` — primitive, key, owner, the step that took
it, and what the primitive needs to extend, adopt or release it later (a fencing token, a
bucket, an ordered position). The records of one execution tree share one :class:`Ledger`;
the serializer stores it with the root context, so a context loaded elsewhere still knows what
it holds.

The live side (the hold object a primitive returned, which the extender keeps alive) stays in
this process, in a registry keyed by record id; another process rebuilds it from the record.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from py_reactor.aio import in_bridge, sleep
from py_reactor.coordination.owner import new_owner, related

__all__ = ["CHARGED", "HELD", "WAITING", "HoldRecord", "Ledger", "live"]

#: ``HoldRecord.state``: the key is held (listed in ``held_keys``).
HELD = "held"
#: An ordered-lock position taken whose turn has not come yet (kept across parks).
WAITING = "waiting"
#: A rate limit this scope was charged for (nothing to release; never charged again).
CHARGED = "charged"


@dataclass(slots=True, eq=False)
class HoldRecord:
    """One thing an execution holds (or was charged for), as plain JSON-ready data.

    Attributes:
        primitive: ``"lock"``, ``"semaphore"``, ``"period"``, ``"ordered_lock"`` or
            ``"rate_limit"``.
        key: the user's key.
        owner: who holds it in the store (the execution's root id).
        holder: which scope took it: ``"<execution id>:<step>"`` (``":"`` + empty for the
            reactor itself), so a scope built again after a park finds its own records.
        step: the step that took it, None for the reactor's own coordination.
        entry: how it is listed in ``held_keys`` (``"lock:<key>"``, ``"period:<key>@day"``).
        state: ``HELD``, ``WAITING`` or ``CHARGED``.
        data: what the primitive needs to extend, adopt or release it (token, bucket, ...),
            and ``ttl``, the seconds it lives without being extended.
        taken_at: wall-clock time it was taken (for people: expiry runs on the server clock).
        id: unique per record; names the live hold object of this process.
    """

    primitive: str
    key: str
    owner: str
    holder: str
    step: str | None
    entry: str
    state: str = HELD
    data: dict[str, Any] = field(default_factory=dict)
    taken_at: float = field(default_factory=time.time)
    id: str = field(default_factory=new_owner)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form."""
        return {
            "id": self.id,
            "primitive": self.primitive,
            "key": self.key,
            "owner": self.owner,
            "holder": self.holder,
            "step": self.step,
            "entry": self.entry,
            "state": self.state,
            "data": dict(self.data),
            "taken_at": self.taken_at,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HoldRecord:
        """Rebuild a record written by :meth:`to_dict`."""
        return cls(
            primitive=data["primitive"],
            key=data["key"],
            owner=data["owner"],
            holder=data["holder"],
            step=data["step"],
            entry=data["entry"],
            state=data["state"],
            data=dict(data["data"]),
            taken_at=float(data["taken_at"]),
            id=data["id"],
        )

    def __repr__(self) -> str:
        where = "reactor" if self.step is None else f"step {self.step!r}"
        return f"<HoldRecord {self.primitive} {self.key!r} {self.state} by {where}>"


class Ledger:
    """The hold records of one execution tree, oldest first.

    Shared by reference by every context of the tree in this process (a composed child, a
    nested run, the branches of a ``@parallel`` reactor); written once, with the root context,
    when the context is serialized. Safe to use from several threads at once: every read and
    write goes through one lock, and iteration walks a snapshot, so a checkpoint can serialize
    it while branches add and remove records.

    It also keeps, in this process only, the *turns* of parallel branches that re-enter an
    enclosing hold (the reactor's lock, under the root id) on one entry: one line of descent at
    a time, so that two sibling branches never share an exclusive hold through their ancestor.
    """

    __slots__ = ("_changed", "_guard", "_turns", "records")

    def __init__(self, records: list[HoldRecord] | None = None) -> None:
        self.records: list[HoldRecord] = list(records or [])
        self._guard = threading.RLock()
        self._changed = threading.Condition(self._guard)
        self._turns: dict[str, dict[str, int]] = {}  # entry -> {branch owner: nesting}

    def add(self, record: HoldRecord) -> HoldRecord:
        """Append ``record`` (it is the newest)."""
        with self._guard:
            self.records.append(record)
        return record

    def remove(self, record: HoldRecord) -> None:
        """Drop ``record`` if present."""
        with self._guard:
            if record in self.records:
                self.records.remove(record)

    def of(self, holder: str) -> list[HoldRecord]:
        """The records ``holder`` took, oldest first."""
        return [r for r in self if r.holder == holder]

    def find(self, holder: str, primitive: str) -> HoldRecord | None:
        """The record of ``primitive`` that ``holder`` took, if any."""
        for record in self:
            if record.holder == holder and record.primitive == primitive:
                return record
        return None

    def holds(self, entry: str) -> bool:
        """Whether some scope of the tree holds ``entry`` right now."""
        return any(r.entry == entry and r.state == HELD for r in self)

    @property
    def held_keys(self) -> list[str]:
        """``held_keys``: one entry per held record, oldest first."""
        return [r.entry for r in self if r.state == HELD]

    def take_turn(self, entry: str, taker: str, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until no branch unrelated to ``taker`` (a sibling's)
        has a turn on ``entry``, then take one (nested turns of one line are counted).

        False if a sibling kept its turn for the whole wait.
        """
        turns = self._turns

        def free() -> bool:
            return all(related(other, taker) for other in turns.get(entry, ()))

        def take() -> bool:
            mine = turns.setdefault(entry, {})
            mine[taker] = mine.get(taker, 0) + 1
            return True

        if in_bridge():  # siblings are tasks of this thread's loop: look again between awaits
            deadline = time.monotonic() + max(timeout, 0.0)
            while True:
                with self._guard:
                    if free():
                        return take()
                if time.monotonic() >= deadline:
                    return False
                sleep(_TURN_POLL)
        with self._changed:
            if not self._changed.wait_for(free, timeout=max(timeout, 0.0)):
                return False
            return take()

    def end_turn(self, entry: str, taker: str) -> None:
        """Give back one turn ``taker`` took on ``entry`` (a no-op if it has none)."""
        with self._changed:
            mine = self._turns.get(entry)
            if not mine or taker not in mine:
                return
            mine[taker] -= 1
            if mine[taker] <= 0:
                del mine[taker]
            if not mine:
                del self._turns[entry]
            self._changed.notify_all()

    def to_list(self) -> list[dict[str, Any]]:
        """The JSON-ready form of every record."""
        with self._guard:
            return [r.to_dict() for r in self.records]

    @classmethod
    def from_list(cls, items: list[dict[str, Any]]) -> Ledger:
        """Rebuild a ledger written by :meth:`to_list`."""
        return cls([HoldRecord.from_dict(item) for item in items])

    def __iter__(self) -> Iterator[HoldRecord]:
        with self._guard:
            return iter(list(self.records))

    def __len__(self) -> int:
        with self._guard:
            return len(self.records)

    def __repr__(self) -> str:
        return f"<Ledger {self.held_keys}>"


#: Seconds between two looks at a turn a sibling task holds (on an event loop, a task cannot
#: block on the condition the sibling notifies: it would block the loop the sibling runs on).
_TURN_POLL = 0.005


class _Live:
    """The live hold objects of this process, by record id (a forked child starts empty)."""

    def __init__(self) -> None:
        self._objects: dict[str, Any] = {}
        self._pid = os.getpid()

    def _mine(self) -> dict[str, Any]:
        if self._pid != os.getpid():
            self._objects = {}
            self._pid = os.getpid()
        return self._objects

    def put(self, record: HoldRecord, hold: Any) -> None:
        self._mine()[record.id] = hold

    def get(self, record: HoldRecord) -> Any:
        return self._mine().get(record.id)

    def pop(self, record: HoldRecord) -> Any:
        return self._mine().pop(record.id, None)


#: The live hold objects of this process, by record id.
live = _Live()
