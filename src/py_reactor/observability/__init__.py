"""Lifecycle events and the middleware that receives them: structured logs, OpenTelemetry.

``OpenTelemetryMiddleware`` is imported on first access (it needs ``py_reactor[otel]``), so
that importing py_reactor never imports OpenTelemetry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from py_reactor.observability import events
from py_reactor.observability.logs import LoggingMiddleware
from py_reactor.observability.middleware import HOOKS, Middleware

if TYPE_CHECKING:
    from py_reactor.observability.otel import OpenTelemetryMiddleware

__all__ = ["HOOKS", "LoggingMiddleware", "Middleware", "OpenTelemetryMiddleware", "events"]


def __getattr__(name: str) -> Any:
    if name == "OpenTelemetryMiddleware":
        from py_reactor.observability.otel import OpenTelemetryMiddleware

        return OpenTelemetryMiddleware
    raise AttributeError(f"module 'py_reactor.observability' has no attribute {name!r}")
