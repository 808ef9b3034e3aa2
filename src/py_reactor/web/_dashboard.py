"""One dashboard app's state and rendering: where it reads, who may act, its templates.

Shared by the routes of ``_app`` and the actions of ``_actions``.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from py_reactor.storage.redis import RedisStore
from py_reactor.views import executions as _executions
from py_reactor.views.records import to_json
from py_reactor.web._csrf import COOKIE, FIELD, Tokens

__all__ = ["JSON", "Auth", "Dashboard", "set_cookie"]

#: ``app(auth=...)``: given the request, whether it may act (retry, undo, cancel).
Auth = Callable[[Request], bool]


class JSON(JSONResponse):
    """JSON that never fails on a value it cannot encode (shown as its ``repr``)."""

    def render(self, content: Any) -> bytes:
        return to_json(content).encode("utf-8")


class Dashboard:
    """The state of one app: where it reads, who may act, its templates and CSRF secret."""

    def __init__(
        self,
        redis_url: str | None,
        auth: Auth | None,
        csrf_secret: str | bytes | None,
        refresh: float,
        page_size: int,
        title: str,
    ) -> None:
        self.redis_url = redis_url
        self.auth = auth
        self.tokens = Tokens(csrf_secret)
        self.refresh = refresh
        self.page_size = page_size
        self.title = title
        self._own_store: RedisStore | None = None
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("py_reactor.web", "templates"),
            autoescape=jinja2.select_autoescape(default=True),
            undefined=jinja2.ChainableUndefined,
        )
        self.env.filters.update(
            ts=_timestamp,
            duration=_duration,
            pretty=_pretty,
            short=_short,
            q=quote,
            rollback_keys=_rollback_keys,
        )

    def store(self) -> RedisStore:
        """The store to show: ``redis_url``'s, else the one py_reactor is configured for."""
        if self.redis_url is None:
            from py_reactor.storage import current_store

            return current_store()
        if self._own_store is None:
            self._own_store = RedisStore.from_url(self.redis_url)
        return self._own_store

    def may_act(self, request: Request) -> bool:
        """Whether ``request`` may retry, undo or cancel (never without an ``auth`` hook)."""
        if self.auth is None:
            return False
        allowed = self.auth(request)
        if inspect.isawaitable(allowed):  # pragma: no cover - documented as a plain callable
            raise TypeError("app(auth=...) must return a bool, not an awaitable")
        return bool(allowed)

    # -- rendering ------------------------------------------------------------------------

    def page(
        self, request: Request, template: str, status_code: int = 200, **values: Any
    ) -> HTMLResponse:
        """``template`` rendered with the request's CSRF token (set as a cookie if new)."""
        token, new = self.tokens.for_request(request)
        html = self.env.get_template(template).render(
            request=request,
            title=self.title,
            csrf_token=token,
            csrf_field=FIELD,
            can_act=self.may_act(request),
            read_only=self.auth is None,
            refresh_ms=int(self.refresh * 1000),
            statuses=_executions.STATUSES,
            now=time.time(),
            **values,
        )
        response = HTMLResponse(html, status_code=status_code)
        if new:
            set_cookie(response, token, request)
        return response


def set_cookie(response: Response, token: str, request: Request) -> None:
    response.set_cookie(
        COOKIE,
        token,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )


# -- template filters ---------------------------------------------------------------------------


def _timestamp(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return datetime.fromtimestamp(float(seconds), UTC).strftime("%Y-%m-%d %H:%M:%S") + "Z"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    value = float(seconds)
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value < 1:
        return f"{sign}{value * 1000:.0f} ms"
    if value < 120:
        return f"{sign}{value:.1f} s"
    if value < 7200:
        return f"{sign}{value / 60:.0f} min"
    return f"{sign}{value / 3600:.1f} h"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=repr, sort_keys=False)


def _short(value: Any, length: int = 12) -> str:
    text = str(value)
    return text if len(text) <= length else text[:length] + "…"


def _rollback_keys(entry: dict[str, Any], trace: list[dict[str, Any]]) -> dict[str, str]:
    """The keys a compensate or undo entry ran under, ``{primitive: key}``: the lock and
    semaphore its step's own entries record under ``coordination`` (a rollback re-takes
    those, computed from the same arguments), else the one key the entry records itself
    (under ``"key"``: the entry does not say which primitive's)."""
    step = entry.get("step")
    keys: dict[str, str] = {}
    for other in trace:
        ran = other.get("coordination")
        if other.get("step") == step and isinstance(ran, dict):
            keys.update({p: str(ran[p]) for p in ("lock", "semaphore") if ran.get(p)})
    recorded = entry.get("key")
    if recorded and str(recorded) not in keys.values():
        keys["key"] = str(recorded)
    return keys
