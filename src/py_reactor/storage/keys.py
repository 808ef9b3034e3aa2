"""Every Redis key name py_reactor uses: the one place that knows the layout.

The primitives never build key names (they call the typed ``Store`` methods with their own
key); ``storage.redis`` asks this module for the names a script touches and passes them in
``KEYS``. All the keys of one coordination key share a Redis Cluster hash tag, the user's key
within braces, so each script of a primitive works within one slot::

    py_reactor:lock:{<key>}:hold            hash  owner, count, token, waiting, by, seq,
                                                  level:<n>
    py_reactor:lock:{<key>}:queue           zset  "<waiter>|<by>|<owner>|<ttl_ms>|<wait_ms>"
                                                  by enqueue time (server us)
    py_reactor:lock:{<key>}:wake:<waiter>   list  the token a release hands the waiter
    py_reactor:lock:{<key>}:parked          list  ids of executions parked on the key
    py_reactor:semaphore:{<key>}:holders    zset  owner -> lease end (server ms)
    py_reactor:semaphore:{<key>}:counts     hash  owner -> nesting count
    py_reactor:semaphore:{<key>}:by         hash  owner -> by
    py_reactor:semaphore:{<key>}:queue|wake:<waiter>|parked   as for a lock

``by`` names the execution and the step a hold was taken for (JSON ``[execution id, step]``,
written by the acquire, or by the release that hands the key to a waiter); absent for a hold
taken outside an execution.
    py_reactor:period:{<key>}:done:<bucket>     string  the bucket's work is done
    py_reactor:period:{<key>}:claim:<bucket>    hash    owner, bucket, expire_at, count
    py_reactor:period:{<key>}:waiters           zset    waiter -> server ms it waits until
    py_reactor:period:{<key>}:wake:<waiter>     list    a release pushes '1'
    py_reactor:period:{<key>}:parked            list    ids of executions parked on the key
    py_reactor:rate_limit:{<key>}:<window s>:<window index>   string  calls admitted
    py_reactor:ordered_lock:{<key>}:state       hash  epoch, issued, done, failed
    py_reactor:ordered_lock:{<key>}:beats       hash  position -> last heartbeat (server ms)
    py_reactor:ordered_lock:{<key>}:wake:<epoch>:<number>   list  pushed when it is that turn
    py_reactor:ordered_lock:{<key>}:parked      list  ids of executions parked on the key

Every name ends in a suffix of its own after the tag, so no user key can name another key's
Redis key. A user key holding ``{``, ``}`` or ``%`` has them percent-encoded inside the tag
(``a{b`` -> ``{a%7Bb}``): a brace in the key could otherwise end the tag early or leave it
empty, and an empty tag would spread one key's names over several slots.

Execution records (``storage.executions``) are global, not per key; what a worker takes work
from is per *namespace* (an application: by default the reactor module's top-level package), so
a worker never sees another application's executions::

    py_reactor:exec:<id>       hash   one execution (its ``namespace`` field names its queues)
    py_reactor:exec:index      zset   id -> created (server ms)
    py_reactor:exec:leases     zset   id -> lease end (server ms)
    py_reactor:exec:expiring   zset   id -> when it expires (server ms): terminal, with retention
    py_reactor:due:<ns>        zset   id -> due (server ms)
    py_reactor:ready:<ns>      list   ids made due now; that namespace's dispatchers block on it
    py_reactor:namespaces      set    every namespace an execution was stored in
    py_reactor:async_unit:{<id>}:parked  list  readers parked until execution <id> ends

A script that makes an execution due finds its queues from its record (``_layout.lua``, made
from this module by :func:`lua_layout`): a release wakes executions parked on a key whatever
their application, each into its own namespace's queues. Those scripts write the record, the
due set and the ready list besides the key's own slot, so parking does not run on Redis Cluster
until the due set is sharded.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

__all__ = [
    "AWAITED",
    "EXPIRING",
    "INDEX",
    "LEASES",
    "NAMESPACE",
    "NAMESPACES",
    "LockKeys",
    "OrderedLockKeys",
    "PeriodKeys",
    "SemaphoreKeys",
    "due",
    "execution",
    "lock",
    "lua_layout",
    "ordered_lock",
    "ordered_wake",
    "parked",
    "pattern",
    "period",
    "period_claim",
    "period_marker",
    "rate_limit",
    "rate_limit_counter",
    "ready",
    "tag",
    "wake",
]

#: Every Redis key the library writes starts with this.
NAMESPACE = "py_reactor"

#: A namespace's parked executions by the time they are due (server ms), and the list its
#: dispatchers block on: these prefixes and the namespace (see :func:`due`, :func:`ready`).
DUE_PREFIX = f"{NAMESPACE}:due:"
READY_PREFIX = f"{NAMESPACE}:ready:"
#: Every namespace an execution was stored in (listings, metrics, the dashboard).
NAMESPACES = f"{NAMESPACE}:namespaces"
#: Terminal executions kept for a retention, by when they expire (listings drop them then).
EXPIRING = f"{NAMESPACE}:exec:expiring"
#: The "primitive" a reader of an async unit parks on; the key is the unit's execution id, and
#: that execution's end wakes its parked list.
AWAITED = "async_unit"
#: Every stored execution by creation time, and running executions by lease end.
INDEX = f"{NAMESPACE}:exec:index"
LEASES = f"{NAMESPACE}:exec:leases"

_ESCAPES = str.maketrans({"%": "%25", "{": "%7B", "}": "%7D"})


def tag(key: str) -> str:
    """``key`` as a Redis Cluster hash tag: ``{<key>}``, with ``%``, ``{`` and ``}`` encoded."""
    if "{" in key or "}" in key or "%" in key:
        key = key.translate(_ESCAPES)
    return "{" + key + "}"


@lru_cache(maxsize=4096)
def _base(primitive: str, key: str) -> str:
    return f"{NAMESPACE}:{primitive}:{tag(key)}"


class LockKeys(NamedTuple):
    """The keys of one lock; ``wake`` is the prefix of its waiters' wake lists."""

    hold: str
    queue: str
    parked: str
    wake: str


class SemaphoreKeys(NamedTuple):
    """The keys of one semaphore; ``wake`` is the prefix of its waiters' wake lists."""

    holders: str
    counts: str
    queue: str
    parked: str
    wake: str
    by: str


class PeriodKeys(NamedTuple):
    """The keys of one period: prefixes of the per-bucket markers and claims, the waiters set
    and the prefix of its waiters' wake lists."""

    done: str
    claim: str
    waiters: str
    wake: str


class OrderedLockKeys(NamedTuple):
    """The keys of one ordered lock; ``wake`` is the prefix of its positions' wake lists."""

    state: str
    beats: str
    parked: str
    wake: str


# Cached: a hot acquire/release pair asks for the same names twice. Bounded, since keys such
# as "invoice:<id>" are unbounded in number.
@lru_cache(maxsize=4096)
def lock(key: str) -> LockKeys:
    """The keys of lock ``key``."""
    base = _base("lock", key)
    return LockKeys(f"{base}:hold", f"{base}:queue", f"{base}:parked", f"{base}:wake:")


@lru_cache(maxsize=4096)
def semaphore(key: str) -> SemaphoreKeys:
    """The keys of semaphore ``key``."""
    base = _base("semaphore", key)
    return SemaphoreKeys(f"{base}:holders", f"{base}:counts", f"{base}:queue", f"{base}:parked",
                         f"{base}:wake:", f"{base}:by")  # fmt: skip


@lru_cache(maxsize=1024)
def period(key: str) -> PeriodKeys:
    """The keys of period ``key``."""
    base = _base("period", key)
    return PeriodKeys(f"{base}:done", f"{base}:claim", f"{base}:waiters", f"{base}:wake:")


def period_marker(key: str, bucket: str) -> str:
    """The marker of ``bucket`` of period ``key``: the bucket's work is done."""
    return f"{period(key).done}:{bucket}"


def period_claim(key: str, bucket: str) -> str:
    """The in-flight claim on ``bucket`` of period ``key`` (per bucket, so a run still busy
    with the last bucket never holds up the next one)."""
    return f"{period(key).claim}:{bucket}"


@lru_cache(maxsize=1024)
def rate_limit(key: str, windows: tuple[int, ...]) -> tuple[str, ...]:
    """The counter prefixes of rate limit ``key``, one per window (seconds); a counter is
    ``<prefix>:<floor(now / window)>``."""
    base = _base("rate_limit", key)
    return tuple(f"{base}:{seconds}" for seconds in windows)


def rate_limit_counter(key: str, window: int, index: int) -> str:
    """The counter of window ``index`` (``floor(now / window)``) of rate limit ``key``."""
    return f"{_base('rate_limit', key)}:{window}:{index}"


@lru_cache(maxsize=1024)
def ordered_lock(key: str) -> OrderedLockKeys:
    """The keys of ordered lock ``key``."""
    base = _base("ordered_lock", key)
    return OrderedLockKeys(f"{base}:state", f"{base}:beats", f"{base}:parked", f"{base}:wake:")


def ordered_wake(key: str, epoch: int, number: int) -> str:
    """The list the waiter of position ``number`` of ``epoch`` blocks on."""
    return f"{ordered_lock(key).wake}{epoch}:{number}"


def wake(primitive: str, key: str, waiter: str) -> str:
    """The list a release of ``key`` of ``primitive`` pushes to for ``waiter``."""
    return f"{_base(primitive, key)}:wake:{waiter}"


def parked(primitive: str, key: str) -> str:
    """The list of the executions parked on ``key`` of ``primitive``."""
    return f"{_base(primitive, key)}:parked"


_GLOB = str.maketrans({c: "\\" + c for c in "*?[]\\"})


def pattern(primitive: str, key: str) -> str:
    """A SCAN/KEYS pattern matching every key of ``key`` of ``primitive`` (tests, tools)."""
    return f"{_base(primitive, key).translate(_GLOB)}:*"


def execution(execution_id: str) -> str:
    """The hash of one execution."""
    return f"{NAMESPACE}:exec:{execution_id}"


#: The prefix of every execution record (scripts that find a record by an id they read).
EXECUTION_PREFIX = f"{NAMESPACE}:exec:"


def due(namespace: str) -> str:
    """The due set of ``namespace``: its parked and pending executions by when they are due."""
    return DUE_PREFIX + namespace


def ready(namespace: str) -> str:
    """The ready list of ``namespace``: ids made due now, which its dispatchers block on."""
    return READY_PREFIX + namespace


def lua_layout() -> str:
    """The Lua that scripts include as ``_layout``: the names of an execution's record and its
    namespace's queues, so a script that wakes an execution it knows only by id (a parked list
    holds ids) makes it due in the right application's queues."""
    return (
        f"local EXECUTION_PREFIX = '{EXECUTION_PREFIX}'\n"
        f"local DUE_PREFIX = '{DUE_PREFIX}'\n"
        f"local READY_PREFIX = '{READY_PREFIX}'\n"
        "-- queues_of(record): the due set and ready list of the stored execution `record`\n"
        "local function queues_of(record)\n"
        "  local namespace = redis.call('HGET', record, 'namespace') or ''\n"
        "  return DUE_PREFIX .. namespace, READY_PREFIX .. namespace\n"
        "end\n"
    )


def correlation(reactor: str, correlation_id: str) -> str:
    """The string naming the run of ``reactor`` paused with ``correlation_id`` (an interrupt)."""
    return f"{NAMESPACE}:interrupt:{tag(reactor)}:{tag(correlation_id)}"


def free_probe(
    primitive: str,
    key: str,
    limit: int | None,
    bucket: str | None = None,
    turn: str | None = None,
) -> tuple[str, str]:
    """``(key, how)`` the checkpoint script reads to tell whether ``key`` of ``primitive`` is
    free now: a lock's hold hash, a semaphore's holders (with its ``limit``), a period's claim
    on ``bucket``, an ordered lock's state for the position ``turn`` (``"<epoch>:<number>"``:
    its turn has come, or its batch ended); ``("", "")`` for a primitive it cannot read that
    way."""
    if primitive == "lock":
        return lock(key).hold, "lock"
    if primitive == "semaphore" and limit is not None:
        return semaphore(key).holders, f"semaphore:{limit}"
    if primitive == "period" and bucket:
        return period_claim(key, bucket), "period"
    if primitive == "ordered_lock" and turn:
        return ordered_lock(key).state, f"ordered:{turn}"
    return "", ""
