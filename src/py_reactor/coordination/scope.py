"""Take an execution's declared primitives in the fixed order; release them in reverse.

One mechanism for reactor-level and step-level declarations. The order::

    1. ordered lock  wait for this position's turn (nothing else is held while waiting)
    2. period        fast check: already done in this bucket -> stop before taking anything
    3. lock          exclusive, re-entrant by owner
    4. semaphore     one of N slots
    5. period        claim, re-checked under the lock: exactly one run per bucket is due
    6. rate limit    last, so a slot is never spent on a run that then waits or stops

Every key is computed before anything is taken, so a key function that fails takes nothing.
Release runs in reverse on every outcome; the period is marked only on a plain success.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from py_reactor.coordination.declarations import ORDER, Declaration
from py_reactor.errors import CoordinationError, CoordinationKeyError

__all__ = ["Admission", "Scope", "compute_key"]

logger = logging.getLogger("py_reactor")

#: ``emit(event_name, key, **fields)``: how a scope reports acquisitions to the engine.
Emit = Callable[..., None]


class Admission(enum.Enum):
    """What entering a scope decided."""

    PROCEED = "proceed"  # everything taken: run the work
    PERIOD_DONE = "period"  # already done in this period's bucket: do not run
    ORDERED_SHORT_CIRCUIT = "ordered_lock"  # strict ordered lock after an earlier failure


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
        reactor: the reactor's name; ``step`` the step's (None: reactor-level), for errors.
        private: the execution's private dict: ``held_keys`` (registry of held keys, one entry
            per hold, ``<primitive>:<key>``) and ``ordered_position``
            (``ordered_position:<step>`` at step level), reused when the execution comes back
            to the same gate. At reactor level
            ``rate_limited`` makes sure an execution is charged once; a step is charged on
            every attempt of its work.
        emit: reports acquisitions and releases (``lock.acquired``...) to middleware.
    """

    __slots__ = (
        "_charged",
        "_held",
        "_keys",
        "_primitives",
        "_slot",
        "_taking",
        "declarations",
        "emit",
        "private",
        "reactor",
        "step",
        "where",
    )

    def __init__(
        self,
        declarations: Mapping[str, Declaration],
        values: Mapping[str, Any],
        *,
        reactor: str,
        step: str | None = None,
        private: dict[str, Any],
        emit: Emit | None = None,
    ) -> None:
        self.declarations = declarations
        self.reactor = reactor
        self.step = step
        self.where = f"reactor {reactor}" if step is None else f"reactor {reactor}, step {step!r}"
        self.private = private
        self.emit = emit
        self._slot = "ordered_position" if step is None else f"ordered_position:{step}"
        self._charged = "rate_limited" if step is None else None
        self._keys: dict[str, str] = {}
        for name in ORDER:
            if name in declarations:
                try:
                    self._keys[name] = compute_key(declarations[name], values, self.where)
                except CoordinationError as exc:
                    self._locate(exc)
                    raise
        self._primitives = {name: declarations[name].make(key) for name, key in self._keys.items()}
        self._held: list[tuple[str, Any]] = []
        self._taking: str | None = None  # the primitive being taken, to locate store errors

    @property
    def keys(self) -> Mapping[str, str]:
        """The key of each declared primitive."""
        return MappingProxyType(self._keys)

    def enter(self) -> Admission:
        """Take everything in order; on any error, release what was taken and re-raise.

        Raises:
            CoordinationError: contention, a refused rate limit, or an unreachable store.
        """
        try:
            return self._enter()
        except CoordinationError as exc:
            self.exit(succeeded=False, failed=True)
            self._locate(exc)
            raise
        except BaseException:
            self.exit(succeeded=False, failed=True)
            raise

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

    def _enter(self) -> Admission:
        prims = self._primitives
        ordered = prims.get("ordered_lock")
        if ordered is not None and not self._holding("ordered_lock"):
            self._taking = "ordered_lock"
            position = self._position(ordered)
            try:
                turn = ordered.wait_turn(position)
            except BaseException:
                self.private.pop(self._slot, None)
                with contextlib.suppress(Exception):  # else it is skipped after the poison pill
                    ordered.abandon(position)  # so later positions need not wait for it
                raise
            self._note("ordered_lock", turn)
            if turn.short_circuit:
                return Admission.ORDERED_SHORT_CIRCUIT
        period = prims.get("period")
        if period is not None and self._holding("period"):
            period = None  # an enclosing run of this execution holds the claim: re-entrant
        if period is not None:
            self._taking = "period"
            if period.is_done():
                return Admission.PERIOD_DONE
        lock = prims.get("lock")
        if lock is not None:
            hold = self._take("lock", lock)
            self._report("lock.acquired", "lock", fencing_token=hold.fencing_token)
        semaphore = prims.get("semaphore")
        if semaphore is not None:
            self._take("semaphore", semaphore)
            self._report("semaphore.acquired", "semaphore")
        if period is not None:
            self._taking = "period"
            claim = period.claim()
            if not claim.due:
                return Admission.PERIOD_DONE
            self._note("period", claim)
        rate = prims.get("rate_limit")
        if rate is not None and not (self._charged and self.private.get(self._charged)):
            self._taking = "rate_limit"
            rate.acquire()
            if self._charged:
                self.private[self._charged] = True
        return Admission.PROCEED

    def _position(self, ordered: Any) -> Any:
        from py_reactor.coordination.ordered_lock import Position

        saved = self.private.get(self._slot)
        if saved is not None:
            return Position(**saved)
        position = ordered.take_position()
        self.private[self._slot] = {
            "key": position.key,
            "epoch": position.epoch,
            "number": position.number,
        }
        return position

    def _take(self, name: str, primitive: Any) -> Any:
        self._taking = name
        try:
            hold = primitive.acquire()
        except CoordinationError as exc:
            if exc.primitive == name:
                self._report(f"{name}.acquisition_failed", name, error=exc)
            raise
        self._note(name, hold)
        return hold

    def _holding(self, name: str) -> bool:
        """Whether this execution tree already holds ``name`` on this scope's key."""
        return self._entry(name) in self.private.get("held_keys", ())

    def _entry(self, name: str) -> str:
        """How a hold of ``name`` is listed in ``held_keys``: ``lock:<key>``, ...

        A period entry also names its bucket size (``period:<key>@day``): a nested run
        re-enters an enclosing claim only for the same period, never a daily one inside an
        hourly one.
        """
        if name == "period":
            return f"period:{self._keys[name]}@{self._primitives[name].every}"
        return f"{name}:{self._keys[name]}"

    def _note(self, name: str, hold: Any) -> None:
        """Remember ``hold`` for release, and list it in the execution's held-key registry."""
        self._held.append((name, hold))
        self.private.setdefault("held_keys", []).append(self._entry(name))

    def exit(self, *, succeeded: bool, failed: bool) -> None:
        """Release every hold in reverse order.

        Args:
            succeeded: the work ended in a plain success: mark the period.
            failed: the work failed: a strict ordered lock short-circuits later positions.

        A release that fails (store unreachable) is logged; the hold then lapses by its ttl. An
        interrupt (KeyboardInterrupt) during one release is re-raised after the others.
        """
        interrupted: BaseException | None = None
        while self._held:
            name, hold = self._held.pop()
            held = self.private.get("held_keys", [])
            entry = self._entry(name)
            if entry in held:
                held.remove(entry)  # one occurrence: an enclosing hold of the same key stays
            try:
                if name == "period":
                    hold.release(mark=succeeded)
                elif name == "ordered_lock":
                    hold.release(failed=failed)
                    self.private.pop(self._slot, None)
                else:
                    hold.release()
                    self._report(f"{name}.released", name, lost=hold.lost)
            except Exception:
                logger.exception(
                    "py_reactor: releasing %s %r for %s failed; it lapses by its ttl",
                    name,
                    self._keys.get(name),
                    self.where,
                )
            except BaseException as exc:
                interrupted = interrupted or exc
        if interrupted is not None:
            raise interrupted

    def refresh(self) -> bool:
        """Extend the lock and semaphore held now; False if one of them was already lost."""
        alive = True
        for name, hold in self._held:
            if name in ("lock", "semaphore"):
                alive = hold.extend() and alive
        return alive

    def _report(self, event: str, name: str, **fields: Any) -> None:
        if self.emit is not None:
            self.emit(event, self._keys[name], **fields)
