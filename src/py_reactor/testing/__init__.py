"""Helpers for testing code that uses py_reactor."""

from py_reactor.config import reset_config

__all__ = ["reset"]


def reset() -> None:
    """Restore py_reactor's process-wide settings to their defaults (call between tests)."""
    reset_config()
