"""``app(...)``: the dashboard as a Starlette ASGI app: its routes, pages and JSON API.

Every handler is a plain function that Starlette's thread pool runs: the store is read with
redis-py's blocking client, and an action (``undo``, a ``retry`` of a reactor that runs in the
caller) can run steps. The actions themselves are in ``_actions``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from importlib import resources
from typing import Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from py_reactor.config import configure, get_config
from py_reactor.errors import StoreUnavailableError
from py_reactor.states import Status
from py_reactor.views import coordination as _coordination
from py_reactor.views import declared as _declared
from py_reactor.views import executions as _executions
from py_reactor.web import _actions, _metrics
from py_reactor.web._csrf import FIELD
from py_reactor.web._dashboard import JSON, Auth, Dashboard, set_cookie

__all__ = ["app"]

_STATIC = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}


def app(
    *,
    redis_url: str | None = None,
    auth: Auth | None = None,
    csrf_secret: str | bytes | None = None,
    refresh: float = 2.0,
    page_size: int = 50,
    title: str = "py_reactor",
    debug: bool = False,
) -> Starlette:
    """The dashboard, as an ASGI application (Starlette).

    Args:
        redis_url: the store to show. Given, the dashboard reads that server and py_reactor
            is configured for it (``configure(redis_url=...)``), so the actions act on the
            store the pages show; omitted, it shows the store py_reactor is configured for.
        auth: called with each request (``starlette.requests.Request``); True lets it retry,
            undo and cancel. Without it the dashboard is read only: no buttons, and every
            POST is refused with 403.
        csrf_secret: signs the CSRF tokens; give the same one to every process serving the
            dashboard (default: random per app, fine for one process).
        refresh: seconds between the live view's refreshes.
        page_size: executions per page.
        title: shown in the header and the browser tab.
        debug: Starlette's debug tracebacks.

    Returns:
        A Starlette app: mount it in FastAPI (``app.mount("/reactors", dashboard)``), Django
        (an ASGI router) or serve it with any ASGI server.
    """
    if redis_url is not None:
        configure(redis_url=redis_url)
    if not refresh > 0:
        raise ValueError(f"app(refresh=...) takes a number of seconds > 0, got {refresh!r}")
    if page_size < 1:
        raise ValueError(f"app(page_size=...) takes a whole number >= 1, got {page_size!r}")
    dash = Dashboard(redis_url, auth, csrf_secret, refresh, page_size, title)
    metrics = _metrics.Metrics(dash.store)  # this app's own registry: apps never clash

    def _metrics_scrape(dash: Dashboard, request: Request) -> Response:
        return metrics.response(request)

    routes = [
        Route("/", _endpoint(dash, _executions_page), name="executions"),
        Route("/executions/{execution_id}", _endpoint(dash, _execution_page), name="execution"),
        Route("/coordination", _endpoint(dash, _coordination_page), name="coordination"),
        Route("/reactors/{path:path}", _endpoint(dash, _reactor_page), name="reactor"),
        Route(
            "/executions/{execution_id}/{action}",
            _endpoint(dash, _actions.form_action),
            methods=["POST"],
        ),
        Route("/static/{name}", _static, name="static"),
        Route("/api/executions", _endpoint(dash, _api_executions)),
        Route("/api/executions/{execution_id}", _endpoint(dash, _api_execution)),
        Route(
            "/api/executions/{execution_id}/{action}",
            _endpoint(dash, _actions.api_action),
            methods=["POST"],
        ),
        Route("/api/holds", _endpoint(dash, _api_holds)),
        Route("/api/parked", _endpoint(dash, _api_parked)),
        Route("/api/reactors/{path:path}", _endpoint(dash, _api_reactor)),
        Route("/api/csrf", _endpoint(dash, _api_csrf)),
        # Prometheus text format, read like the API: without auth (see _metrics).
        Route("/metrics", _endpoint(dash, _metrics_scrape), name="metrics"),
    ]
    return Starlette(debug=debug, routes=routes)


def _endpoint(dash: Dashboard, handler: Callable[[Dashboard, Request], Response]) -> Any:
    """An endpoint running ``handler`` in the thread pool (the body of a POST read first);
    a store that cannot be reached becomes a 503 that says so."""

    def call(request: Request) -> Response:
        try:
            return handler(dash, request)
        except StoreUnavailableError as exc:
            error = exc
        except Exception as exc:
            # A redis-py error of the dashboard's own reads, as the store reports its own.
            found = dash.store().read_error(exc, "a read of the dashboard")
            if found is None:
                raise
            error = found
        if request.url.path.startswith("/api/") or _wants_fragment(request):
            return JSON({"error": str(error)}, status_code=503)
        return dash.page(request, "error.html", 503, heading="Store unavailable", message=error)

    async def endpoint(request: Request) -> Response:
        if request.method == "POST":
            request.state.body = await request.body()
        return await run_in_threadpool(call, request)

    endpoint.__name__ = handler.__name__.lstrip("_")
    return endpoint


def _wants_fragment(request: Request) -> bool:
    return request.query_params.get("fragment") == "1"


def _static(request: Request) -> Response:
    name = request.path_params["name"]
    media = _STATIC.get(name)
    if media is None:
        return Response("not found", status_code=404, media_type="text/plain")
    text = (resources.files("py_reactor.web") / "static" / name).read_text("utf-8")
    return Response(text, media_type=media, headers={"cache-control": "no-cache"})


# -- queries ------------------------------------------------------------------------------------


class _BadQuery(ValueError):
    """A query parameter that cannot be used; the message says which and why."""


def _listing(dash: Dashboard, request: Request) -> dict[str, Any]:
    params = request.query_params
    status = params.get("status") or None
    if status is not None and status not in _executions.STATUSES:
        statuses = ", ".join(_executions.STATUSES)
        raise _BadQuery(f"status={status!r} is not a status; use one of {statuses}")
    limit = _whole(params.get("limit"), "limit", dash.page_size)
    cursor = _whole(params.get("cursor", params.get("offset")), "cursor", 0, least=0)
    return _executions.list_executions(
        dash.store(),
        reactor=params.get("reactor") or None,
        status=status,
        namespace=params.get("namespace") or None,
        limit=min(limit, 500),
        cursor=cursor,
    )


def _whole(text: str | None, name: str, default: int, least: int = 1) -> int:
    if text in (None, ""):
        return default
    try:
        value = int(text)
    except ValueError:
        raise _BadQuery(f"{name}={text!r} is not a whole number") from None
    if value < least:
        raise _BadQuery(f"{name}={text!r} must be >= {least}")
    return value


def _page_links(request: Request, listing: dict[str, Any]) -> dict[str, str | None]:
    base = {k: v for k, v in request.query_params.items() if k not in ("cursor", "fragment")}
    following = listing["next_cursor"]
    return {
        "next": None if following is None else "?" + urlencode({**base, "cursor": following}),
        "first": "?" + urlencode(base) if listing["filters"]["cursor"] else None,
    }


# -- pages --------------------------------------------------------------------------------------


def _executions_page(dash: Dashboard, request: Request) -> Response:
    try:
        listing = _listing(dash, request)
    except _BadQuery as exc:
        return dash.page(request, "error.html", 400, heading="Bad filter", message=exc)
    fragment = _wants_fragment(request)
    live_query = urlencode({**request.query_params, "fragment": "1"})
    return dash.page(
        request,
        "_executions.html" if fragment else "executions.html",
        listing=listing,
        links=_page_links(request, listing),
        live_url=f"{request.url.path}?{live_query}",
    )


def _execution_page(dash: Dashboard, request: Request) -> Response:
    execution_id = request.path_params["execution_id"]
    detail = _executions.execution_detail(dash.store(), execution_id)
    if detail is None:
        return dash.page(
            request,
            "error.html",
            404,
            heading="Unknown execution",
            message=f"the store has no execution {execution_id!r}",
        )
    reactor = _declared.reactor_class(detail["reactor"])
    paused = detail["status"] == Status.PAUSED and detail["waiting_on"]
    cap = get_config().park_max_attempts
    return dash.page(
        request,
        "_execution.html" if _wants_fragment(request) else "execution.html",
        ex=detail,
        known_reactor=reactor is not None,
        module=detail["reactor"].partition(":")[0],
        payload=_declared.interrupt_payload(detail["reactor"], detail["waiting_on"].get("step"))
        if paused
        else None,
        park_cap=int(cap) if math.isfinite(cap) else None,
        notice=request.query_params.get("done"),
        live_url=f"{request.url.path}?fragment=1",
    )


def _coordination_page(dash: Dashboard, request: Request) -> Response:
    store = dash.store()
    state = _coordination.coordination(store)
    waiting = _executions.parked(store)["parked"]
    failed = _executions.list_executions(store, status=Status.FAILED, limit=10)["items"]
    return dash.page(
        request,
        "_coordination.html" if _wants_fragment(request) else "coordination.html",
        state=state,
        parked=waiting,
        failed=failed,
        live_url=f"{request.url.path}?fragment=1",
    )


def _reactor_page(dash: Dashboard, request: Request) -> Response:
    path = request.path_params["path"]
    reactor = _declared.reactor_class(path)
    if reactor is None:
        return dash.page(
            request,
            "error.html",
            404,
            heading="Unknown reactor",
            message=(
                f"no reactor {path!r} is imported in this process; start the dashboard with "
                "--import MODULE (or import the module in the application that mounts it)"
            ),
        )
    recent = _executions.list_executions(dash.store(), reactor=path, limit=10)["items"]
    return dash.page(request, "reactor.html", reactor=_declared.describe(reactor), recent=recent)


# -- API ----------------------------------------------------------------------------------------


def _api_executions(dash: Dashboard, request: Request) -> Response:
    try:
        return JSON(_listing(dash, request))
    except _BadQuery as exc:
        return JSON({"error": str(exc)}, status_code=400)


def _api_execution(dash: Dashboard, request: Request) -> Response:
    execution_id = request.path_params["execution_id"]
    detail = _executions.execution_detail(dash.store(), execution_id)
    if detail is None:
        return JSON({"error": f"the store has no execution {execution_id!r}"}, status_code=404)
    return JSON(detail)


def _api_holds(dash: Dashboard, request: Request) -> Response:
    return JSON(_coordination.coordination(dash.store()))


def _api_parked(dash: Dashboard, request: Request) -> Response:
    return JSON(_executions.parked(dash.store()))


def _api_reactor(dash: Dashboard, request: Request) -> Response:
    path = request.path_params["path"]
    reactor = _declared.reactor_class(path)
    if reactor is None:
        return JSON({"error": f"no reactor {path!r} is imported here"}, status_code=404)
    return JSON(_declared.describe(reactor))


def _api_csrf(dash: Dashboard, request: Request) -> Response:
    token, new = dash.tokens.for_request(request)
    response = JSON({"token": token, "header": "X-CSRF-Token", "field": FIELD})
    if new:
        set_cookie(response, token, request)
    return response
