"""py_reactor on Celery: ``app`` (the default Celery app, configured from
``PY_REACTOR_REDIS_URL``: ``celery -A py_reactor.workers.celery worker``) and ``install(app)``
(register py_reactor's task and dispatcher on an application's own Celery app).

Importing this module makes no app and changes no setting: ``app`` is made on first access.
"""

from __future__ import annotations

from typing import Any

from py_reactor.transport.celery import default_app, install

__all__ = ["app", "install"]  # noqa: F822 - app: made on first access (__getattr__)


def __getattr__(name: str) -> Any:
    """``app``: the default app, made on first access."""
    if name == "app":
        return default_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
