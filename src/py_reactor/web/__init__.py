"""The dashboard: executions, their traces and holds, live coordination state, and actions.

``py_reactor.web.app(...)`` builds a Starlette ASGI app (JSON API under ``/api``, HTML pages at
``/``, ``/executions/{id}``, ``/coordination`` and ``/reactors/{path}``, Prometheus metrics at
``/metrics``); ``py-reactor
dashboard`` serves it with uvicorn (``py_reactor.web.cli``). Both need the ``web`` extra.
Starlette is imported on first use of ``app``, so ``import py_reactor`` (and the command line,
which registers the ``dashboard`` command) never imports it; see ``docs/operations.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from py_reactor.web._app import app

__all__ = ["app"]


def __getattr__(name: str) -> Any:
    if name != "app":
        raise AttributeError(f"module 'py_reactor.web' has no attribute {name!r}")
    try:
        from py_reactor.web._app import app
    except ImportError as exc:
        if exc.name not in ("starlette", "jinja2", "anyio"):
            raise
        raise ImportError(
            f"the py_reactor dashboard needs the 'web' extra ({exc.name} is not installed): "
            "pip install -e '.[web]' in your py_reactor checkout"
        ) from exc
    return app
