"""The five coordination primitives, usable on their own or declared on reactors.

``Lock``, ``Semaphore``, ``RateLimit``, ``Period`` and ``OrderedLock`` each talk to a store (the
protocol in ``coordination.store``; Redis in ``py_reactor.storage``) with one Lua call per
acquire and per release. ``Scope`` takes a set of declarations in the fixed order.
"""

from py_reactor.coordination.lock import Lock, LockHold, LockState
from py_reactor.coordination.ordered_lock import OrderedLock, OrderedLockState, Position, Turn
from py_reactor.coordination.period import Period, PeriodClaim
from py_reactor.coordination.rate_limit import RateLimit
from py_reactor.coordination.semaphore import Semaphore, SemaphoreHold, SemaphoreState

__all__ = [
    "Lock",
    "LockHold",
    "LockState",
    "OrderedLock",
    "OrderedLockState",
    "Period",
    "PeriodClaim",
    "Position",
    "RateLimit",
    "Semaphore",
    "SemaphoreHold",
    "SemaphoreState",
    "Turn",
]
