"""Helpers for testing code that uses py_reactor: assertion helpers, the pieces behind the
pytest plugin's fixtures, and ``reset``. See ``docs/testing.md``.

The assertions are plain functions raising ``AssertionError`` with a message that says what
was expected, what was found, and shows the run's trace; they work in any test runner. The
fixtures (``reactor_store``, ``reactor_worker``, ``hold_lock``) come from the pytest plugin,
``py_reactor.testing.plugin``, which pytest loads on its own once py_reactor is installed.
"""

from py_reactor.config import reset_config
from py_reactor.testing._describe import format_trace
from py_reactor.testing._fixtures import IsolatedStore, LockHolder, ReactorWorker, drain
from py_reactor.testing._keys import (
    SemaphoreSnapshot,
    assert_locked,
    assert_ordered_lock,
    assert_period_marked,
    assert_rate_limit_count,
    assert_semaphore,
    assert_unlocked,
)
from py_reactor.testing._outcomes import (
    assert_contended_at,
    assert_failed_at,
    assert_halted,
    assert_parked_at,
    assert_paused_at,
    assert_ran,
    assert_retried,
    assert_rollback_failure,
    assert_skipped_at,
    assert_succeeded,
    assert_validation_error,
)
from py_reactor.testing._server import RedisServer

__all__ = [
    "IsolatedStore",
    "LockHolder",
    "ReactorWorker",
    "RedisServer",
    "SemaphoreSnapshot",
    "assert_contended_at",
    "assert_failed_at",
    "assert_halted",
    "assert_locked",
    "assert_ordered_lock",
    "assert_parked_at",
    "assert_paused_at",
    "assert_period_marked",
    "assert_ran",
    "assert_rate_limit_count",
    "assert_retried",
    "assert_rollback_failure",
    "assert_semaphore",
    "assert_skipped_at",
    "assert_succeeded",
    "assert_unlocked",
    "assert_validation_error",
    "drain",
    "format_trace",
    "reset",
]


def reset() -> None:
    """Restore py_reactor's process-wide settings to their defaults (call between tests)."""
    reset_config()
