"""Take an execution's declared primitives in the fixed order; release them in reverse.

One mechanism for reactor-level and step-level declarations, driven through the gate protocol
(``coordination.gates``) with no branch per primitive. What a scope takes is written to the
execution's ledger (``coordination.holds``) as it is taken, so a scope built again later — after
a park, or in another process — finds and adopts its own holds (except the lock and semaphore
levels of a runner presumed dead, which a recovered run re-enters beside: see
``Scope._adoptable``). The order::

    1. ordered lock  wait for this position's turn (nothing else is held while waiting)
    2. period        fast check: already done in this bucket -> stop before taking anything
    3. lock          exclusive, re-entrant by owner
    4. semaphore     one of N slots
    5. period        claim, re-checked under the lock: exactly one run per bucket is due
    6. rate limit    last, so a slot is never spent on a run that then waits or stops

Every key is computed before anything is taken, so a key function that fails takes nothing.
Release runs in reverse on every outcome; the period is marked only on a plain success.

Re-entrancy follows owners (``coordination.owner``). A scope re-enters what an *enclosing*
scope of the tree holds: one whose owner is this thread's owner or an ancestor of it (the
reactor's own holds, under the root id, seen from a ``@parallel`` branch working as
``"<root id>/<step>"``) — never a sibling branch's. A lock or semaphore slot held by an ancestor
is re-entered in the store *as that ancestor* (its nesting count goes up), and sibling branches
take turns on it in this process (``Ledger.take_turn``), so they still exclude each other.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from py_reactor.coordination.declarations import ORDER, Declaration
from py_reactor.coordination.gates import Answer, Busy, Entered, Gate, gate_for
from py_reactor.coordination.holds import HELD, WAITING, HoldRecord, Ledger
from py_reactor.coordination.owner import (
    HeldBy,
    bind_held_by,
    encloses,
    owning,
    running_owner,
    unbind_held_by,
)
from py_reactor.errors import CoordinationError, CoordinationKeyError

__all__ = ["STAGES", "Admission", "Scope", "compute_key"]

logger = logging.getLogger("py_reactor")

#: ``emit(event_name, key, **fields)``: how a scope reports acquisitions to the engine.
Emit = Callable[..., None]

#: ``HoldRecord.data`` of a hold re-entered through an ancestor's: the branch owner inside it.
TAKER = "taker"

#: The fixed order as (primitive, stage): ``check`` looks before anything is taken, ``enter``
#: takes. The period is looked at early (stop before taking anything) and claimed under the
#: lock and semaphore (exactly one run per bucket is due).
STAGES = (
    ("ordered_lock", "enter"),
    ("period", "check"),
    ("lock", "enter"),
    ("semaphore", "enter"),
    ("period", "enter"),
    ("rate_limit", "enter"),
)


class Admission(enum.Enum):
    """What entering a scope decided."""

    PROCEED = "proceed"  # everything taken: run the work
    PERIOD_DONE = "period"  # already done in this period's bucket: do not run
    ORDERED_SHORT_CIRCUIT = "ordered_lock"  # strict ordered lock after an earlier failure
    ORDERED_STALE_BATCH = "ordered_lock_stale_batch"  # the position left the sequence meanwhile


def compute_key(decl: Declaration, values: Mapping[str, Any], where: str) -> str:
    """The key ``decl`` names for ``values``.

    Raises:
        CoordinationKeyError: the key function raised, or returned None or an empty key.
    """
    spec = decl.key
    if isinstance(spec, str):
        return spec
    try:
        key = spec(MappingProxyType(dict(values)))
    except Exception as exc:
        names = ", ".join(map(repr, sorted(values)))
        nothing = "the step has no arguments" if ", step " in where else "the reactor has no inputs"
        received = f"a mapping of {names}" if names else f"an empty mapping: {nothing}"
        raise CoordinationKeyError(
            f"{where}: the {decl.primitive} key function raised {type(exc).__name__}: {exc} "
            f"(it receives {received}); nothing was taken and no work ran",
            primitive=decl.primitive,
        ) from exc
    if key is None or key == "" or (not isinstance(key, str | int)) or isinstance(key, bool):
        raise CoordinationKeyError(
            f"{where}: the {decl.primitive} key function returned {key!r}; a key must be a "
            "non-empty str (or an int); nothing was taken and no work ran",
            primitive=decl.primitive,
        )
    return str(key)


class Scope:
    """The holds one execution (or one step) takes for one run of its work.

    Args:
        declarations: ``{"lock": LockDeclaration, ...}`` as found on ``.coordination``.
        values: what key functions receive (validated inputs or resolved arguments).
        reactor: the reactor's name; ``step`` the step's (None: reactor-level), for errors
            and for the records' ``step``.
        ledger: the execution tree's hold records; what this scope takes is added to it, and
            a scope built again with the same ``holder`` adopts what it finds there.
        holder: names this scope in the ledger: ``"<execution id>:<step>"``.
        emit: reports acquisitions and releases (``lock.acquired``...) to middleware.
        wait: overrides every declaration's ``wait`` (0: answer busy at once, as a worker that
            parks instead of waiting does).
        by: the execution and step the holds are taken for, written with each lock and
            semaphore hold in the store (None: not named, a call outside the engine).
    """

    __slots__ = (
        "_gates",
        "_keys",
        "_taking",
        "by",
        "declarations",
        "emit",
        "holder",
        "ledger",
        "reactor",
        "recovered",
        "step",
        "wait",
        "where",
    )

    def __init__(
        self,
        declarations: Mapping[str, Declaration],
        values: Mapping[str, Any],
        *,
        reactor: str,
        step: str | None = None,
        ledger: Ledger,
        holder: str,
        emit: Emit | None = None,
        wait: float | None = None,
        recovered: bool = False,
        by: HeldBy | None = None,
    ) -> None:
        self.declarations = declarations
        self.by = by
        self.recovered = recovered  # the run resumes a dead runner's: see _adoptable
        self.reactor = reactor
        self.step = step
        self.where = f"reactor {reactor}" if step is None else f"reactor {reactor}, step {step!r}"
        self.ledger = ledger
        self.holder = holder
        self.emit = emit
        self.wait = wait
        self._keys: dict[str, str] = {}
        for name in ORDER:
            if name in declarations:
                try:
                    self._keys[name] = compute_key(declarations[name], values, self.where)
                except CoordinationError as exc:
                    self._locate(exc)
                    raise
        self._gates: dict[str, Gate] = {
            name: gate_for(declarations[name].make(key)) for name, key in self._keys.items()
        }
        self._taking: str | None = None  # the primitive being taken, to locate store errors

    @property
    def keys(self) -> Mapping[str, str]:
        """The key of each declared primitive."""
        return MappingProxyType(self._keys)

    @property
    def gates(self) -> Mapping[str, Gate]:
        """The gate of each declared primitive."""
        return MappingProxyType(self._gates)

    def records(self) -> list[HoldRecord]:
        """What this scope holds now (its records in the ledger), oldest first."""
        return [r for r in self.ledger.of(self.holder) if r.primitive in self._gates]

    def enter(self, *, parking: bool = False) -> Admission | Busy:
        """Take everything in order, adopting what this scope already holds.

        Contention is an answer, not an error: a :class:`Busy` whose ``error`` is the typed
        error (LockAcquisitionError, ...) named with this scope's reactor, step and key. What
        was taken is then released (as a failure); with ``parking`` what the scope keeps across
        a park (its ordered position) stays. The caller decides what busy means: wait, park, or
        fail.

        Raises:
            CoordinationError: the store is unreachable (StoreUnavailableError), taken things
                released as above.
        """
        named = None if self.by is None else bind_held_by(self.by)
        try:
            answer = self._enter()
            if isinstance(answer, Busy):
                self._give_back(parking)
                self._locate(answer.error)
            return answer
        except CoordinationError as exc:
            self._give_back(parking)
            self._locate(exc)
            raise
        except BaseException:
            self._give_back(parking)
            raise
        finally:
            if named is not None:
                unbind_held_by(named)

    def acquire(self) -> Admission:
        """:meth:`enter` for a caller that has nothing to park (a decorated function, a
        rollback re-taking its step's lock): busy ends the call with the typed error.

        Raises:
            CoordinationError: contention after ``wait`` (LockAcquisitionError, ...), or an
                unreachable store.
        """
        answer = self.enter()
        if isinstance(answer, Busy):
            raise answer.error
        return answer

    def _give_back(self, parking: bool) -> None:
        if parking:
            self.park()
        else:
            self.exit(succeeded=False, failed=True)

    def _locate(self, exc: CoordinationError) -> CoordinationError:
        """``exc`` with this scope's reactor and step filled in and named in its message."""
        if exc.primitive is None and self._taking is not None:
            exc.primitive = self._taking  # a store error: say which primitive it interrupted
        if exc.key is None and exc.primitive in self._keys:
            exc.key = self._keys[exc.primitive]
        if exc.reactor is None:
            exc.reactor = self.reactor
            exc.step = self.step
            if not exc.message.startswith(self.where):
                exc.message = f"{self.where}: {exc.message}"
                exc.args = (exc.message,)
        return exc

    def _enclosing(self, gate: Gate, owner: str | None) -> HoldRecord | None:
        """The hold of an enclosing scope of the tree on ``gate``'s entry, if any: held, taken
        by another scope, and owned by ``owner`` (this thread's) or an ancestor of it. With no
        owner bound, any such hold of the tree counts (as it always did)."""
        for record in self.ledger:
            if (
                record.entry == gate.entry
                and record.state == HELD
                and record.holder != self.holder
                and (owner is None or encloses(record.owner, owner))
            ):
                return record
        return None

    def _enclosed(self, gate: Gate, owner: str | None) -> bool:
        """Whether an enclosing scope of the tree holds ``gate``'s entry (re-entered by ledger)."""
        return gate.by_ledger and self._enclosing(gate, owner) is not None

    def _enter(self) -> Admission | Busy:
        passed: set[str] = set()  # re-entered through an enclosing hold: nothing to take
        owner = running_owner()
        for name, stage in STAGES:
            gate = self._gates.get(name)
            if gate is None or name in passed:
                continue
            self._taking = name
            if self._enclosed(gate, owner):
                passed.add(name)
                continue
            mine = self.ledger.find(self.holder, name)
            if stage == "check":
                skip = None if mine is not None else gate.check()
                if skip is not None:
                    return Admission(skip.reason)
                continue
            held_before = mine is not None and mine.state == HELD
            answer, taker = self._take(gate, name, self._adoptable(gate, mine), owner)
            record = answer.record
            if record is not mine:
                if mine is not None:  # it lapsed meanwhile: the gate's answer replaces it
                    self.ledger.remove(mine)
                if record is not None:
                    record.holder, record.step = self.holder, self.step
                    if taker is not None:
                        record.data[TAKER] = taker
                    self.ledger.add(record)
            if isinstance(answer, Busy):
                self._report(f"{name}.acquisition_failed", name, error=answer.error)
                return answer
            if not isinstance(answer, Entered):
                if record is not None and record.state == HELD and not held_before:
                    self._report(f"{name}.acquired", name)  # taken, to be passed on unused
                return Admission(answer.reason)
            if answer.fresh:
                self._report(f"{name}.acquired", name, **answer.fields)
        return Admission.PROCEED

    def _take(
        self, gate: Gate, name: str, mine: HoldRecord | None, owner: str | None
    ) -> tuple[Answer, str | None]:
        """Enter ``gate`` (adopting ``mine``); and the branch owner that holds a turn on it,
        when the hold is an ancestor's, re-entered as that ancestor.

        A lock or semaphore slot an ancestor holds cannot be taken under this branch's own
        owner (the store would make the branch wait for its own reactor), so it is re-entered
        under the ancestor's; a sibling that re-entered it first is waited for in this process,
        up to the gate's wait (at least its ttl: a sibling is this execution's own work).
        """
        wait = self._wait(name)
        ancestor = None
        if gate.exclusive and owner is not None:
            if mine is not None and mine.data.get(TAKER) == owner:
                ancestor = mine.owner  # adopted after a park: it was re-entered the same way
            else:
                enclosing = self._enclosing(gate, owner)
                if enclosing is not None and enclosing.owner != owner:
                    ancestor = enclosing.owner
        if ancestor is None or owner is None:
            return gate.enter(mine, owner=None, wait=wait), None
        exclusive = getattr(gate.p, "limit", 1) == 1  # a wider semaphore is shared anyway
        if exclusive and not self.ledger.take_turn(gate.entry, owner, _turn_wait(gate, wait)):
            return Busy(_sibling_busy(gate, owner)), None
        try:
            with owning(ancestor):
                answer = gate.enter(mine, owner=None, wait=wait)
        except BaseException:
            if exclusive:
                self.ledger.end_turn(gate.entry, owner)
            raise
        if not isinstance(answer, Entered):
            if exclusive:
                self.ledger.end_turn(gate.entry, owner)
            return answer, None
        return answer, (owner if exclusive else None)

    def _adoptable(self, gate: Gate, mine: HoldRecord | None) -> HoldRecord | None:
        """``mine``, unless this run resumes one whose runner was presumed dead (``recovered``)
        and ``gate`` keeps others out: that runner may still be alive (stopped, stalled) and
        inside, and it releases its level when it wakes. So the recovered run re-enters the
        execution's hold with a level of its own instead of adopting that runner's, and never
        gives that runner's level back early: it lapses with its own ttl, and its release, if
        it comes, frees only itself (the store releases and extends one level at a time)."""
        return None if self.recovered and gate.exclusive else mine

    def _wait(self, name: str) -> float | None:
        if self.wait is not None:
            return self.wait
        return getattr(self.declarations[name], "wait", None)

    def exit(self, *, succeeded: bool, failed: bool) -> None:
        """Release every hold of this scope in reverse order.

        Args:
            succeeded: the work ended in a plain success: mark the period.
            failed: the work failed: a strict ordered lock short-circuits later positions.

        A release that fails (store unreachable) is logged; the hold then lapses by its ttl. An
        interrupt (KeyboardInterrupt) during one release is re-raised after the others.
        """
        self._release(self.records(), succeeded=succeeded, failed=failed)

    def park(self) -> None:
        """Give back what this scope took, except what it keeps across a park (its ordered
        position), so that a parked execution blocks nobody on this scope's other keys."""
        given = [r for r in self.records() if not self._gates[r.primitive].kept_across_park]
        self._release(given, succeeded=False, failed=False)
        for record in self.records():
            self._gates[record.primitive].detach(record)
            self._end_turn(record)

    def detach(self) -> None:
        """Keep every hold of this scope in the ledger but stop extending it here (a park of
        work nested inside this scope: the ttl covers the gap, and a lapsed hold is taken
        again on resume)."""
        for record in self.records():
            self._gates[record.primitive].detach(record)
            self._end_turn(record)

    def hand_over(self) -> None:
        """This runner lost its execution to another (it was presumed dead and the execution
        was claimed again): give back its own levels of what keeps others out (a lock's, a
        semaphore's: the claimant re-entered beside them, see ``recovered``), and leave the
        rest — an ordered turn, a period claim — in place: they are the execution's, which
        the claimant carries now. Passing the turn on or giving up the claim here would let
        another execution in while the claimant is inside."""
        own = [r for r in self.records() if self._gates[r.primitive].exclusive]
        self._release(own, succeeded=False, failed=False)
        self.detach()

    def _end_turn(self, record: HoldRecord) -> None:
        """Give back the branch's turn on a hold it re-entered through an ancestor's (nothing
        of this branch runs inside it any more; adopting it again takes the turn again)."""
        taker = record.data.get(TAKER)
        if taker is not None:
            self.ledger.end_turn(record.entry, taker)

    def _release(self, records: list[HoldRecord], *, succeeded: bool, failed: bool) -> None:
        interrupted: BaseException | None = None
        for record in reversed(records):
            self.ledger.remove(record)
            name = record.primitive
            try:
                lost = self._gates[name].exit(record, succeeded=succeeded, failed=failed)
                if record.state != WAITING:  # a place in line was never reported taken
                    self._report(f"{name}.released", name, lost=lost)
            except Exception:
                logger.exception(
                    "py_reactor: releasing %s %r for %s failed; it lapses by its ttl",
                    name,
                    record.key,
                    self.where,
                )
            except BaseException as exc:
                interrupted = interrupted or exc
            finally:
                self._end_turn(record)  # a sibling waiting for the turn goes on once it is out
        if interrupted is not None:
            raise interrupted

    def refresh(self) -> bool:
        """Extend the exclusive holds (lock, semaphore) held now; False if one was lost."""
        alive = True
        for record in self.records():
            gate = self._gates[record.primitive]
            if gate.exclusive:
                alive = gate.extend(record) and alive
        return alive

    def _report(self, event: str, name: str, **fields: Any) -> None:
        if self.emit is not None:
            self.emit(event, self._keys[name], **fields)


def _turn_wait(gate: Gate, wait: float | None) -> float:
    """How long a branch waits for a sibling's turn on an ancestor's hold: the gate's wait, at
    least the hold's ttl (the sibling is this execution's own work, soon done)."""
    ttl = getattr(gate.p, "ttl", None) or getattr(gate.p, "lease", None) or 60.0
    return max(float(wait or 0.0), float(ttl))


def _sibling_busy(gate: Gate, owner: str) -> CoordinationError:
    """The contention error of a branch whose sibling kept its turn on an ancestor's hold."""
    busy: type[CoordinationError] = getattr(gate, "busy", CoordinationError)
    return busy(
        f"the {gate.primitive} {gate.key!r} is held by this execution's reactor and a sibling "
        f"branch kept its turn inside it for longer than the {gate.primitive}'s ttl "
        f"(branch {owner})",
        primitive=gate.primitive,
        key=gate.key,
    )
