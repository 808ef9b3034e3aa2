"""Which application an execution belongs to, and which applications this process serves.

Every execution is stored in a *namespace*: ``@background(namespace=...)`` on its reactor, else
``configure(namespace=...)``, else the top-level package of the reactor's module (``shop`` for
``shop.reactors:Checkout``). Its due set, ready list and Celery queue are that namespace's, so
two applications sharing one store never run (or fail) each other's executions. Coordination
keys are not namespaced: a lock is shared by every application on the store, on purpose.

A worker serves the namespaces of the reactors its process has imported (what it can run),
``configure(namespace=...)``, and those named with :func:`serve` (``--namespace``).
"""

from __future__ import annotations

import threading

from py_reactor.config import check_namespace, get_config
from py_reactor.dsl.background import NAMESPACE_ATTRIBUTE
from py_reactor.dsl.reactor import Reactor
from py_reactor.dsl.registry import classes, count, lookup

__all__ = ["celery_queue", "namespace_of", "serve", "served"]

_extra: set[str] = set()
_lock = threading.Lock()
_cache: tuple[tuple[int, str | None, int], frozenset[str]] | None = None


def namespace_of(reactor: type[Reactor] | str) -> str:
    """The namespace of ``reactor`` (a class, or the ``module:qualname`` a record names)."""
    cls = lookup(reactor) if isinstance(reactor, str) else reactor
    if cls is not None:
        declared: str | None = getattr(cls, NAMESPACE_ATTRIBUTE, None)
        if declared:
            return declared
    configured = get_config().namespace
    if configured:
        return configured
    module = cls.__module__ if cls is not None else str(reactor).partition(":")[0]
    return module.partition(".")[0]


def serve(namespace: str) -> None:
    """Serve ``namespace`` in this process too (``py-reactor worker --namespace``).

    Raises:
        ValueError: not a namespace.
    """
    checked = check_namespace(namespace, "--namespace")
    with _lock:
        _extra.add(checked)


def served() -> frozenset[str]:
    """The namespaces this process's workers take executions from: those of every reactor it
    has imported, the configured one, and those added with :func:`serve`."""
    global _cache
    config = get_config()
    version = (count(), config.namespace, len(_extra))
    cached = _cache
    if cached is not None and cached[0] == version:  # the dispatch loop asks at every turn
        return cached[1]
    names = {
        namespace_of(cls) for cls in classes() if isinstance(cls, type) and issubclass(cls, Reactor)
    }
    if config.namespace:
        names.add(config.namespace)
    with _lock:
        names |= _extra
    result = frozenset(names)
    _cache = (version, result)
    return result


def celery_queue(namespace: str) -> str:
    """The Celery queue of ``namespace``'s jobs: ``<celery_queue>.<namespace>``
    (``py_reactor.shop``), so a Celery worker started for one application never receives
    another's jobs."""
    return f"{get_config().celery_queue}.{namespace}"
