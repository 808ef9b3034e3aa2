"""Lifecycle events and the middleware that receives them."""

from py_reactor.observability import events
from py_reactor.observability.middleware import HOOKS, Middleware

__all__ = ["HOOKS", "Middleware", "events"]
