"""The dashboard's actions: retry, undo, cancel and resume (with a JSON payload, handed to a
worker), refused without auth or a valid CSRF token.

Each calls the operation of ``py_reactor.workers`` by name, once the request has passed the
auth hook and the CSRF check; the operation's own refusal (a status it does not accept)
becomes a 409 with its message. The dashboard never imports a module because the store names
it: resume, undo and retry (which run the reactor's code) are refused with a 409 when its class
is not imported in this process, and cancel uses the class only if it is.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from py_reactor import api
from py_reactor.config import get_config
from py_reactor.errors import ReactorError
from py_reactor.runtime import operations
from py_reactor.storage.inspect import Inspector
from py_reactor.views import declared as _declared
from py_reactor.views import executions as _executions
from py_reactor.web._csrf import FIELD, HEADER
from py_reactor.web._dashboard import JSON, Dashboard

__all__ = ["api_action", "form_action"]

#: The actions that run the reactor's code, so need its class imported here (cancel runs
#: none: without the class it stops the run all the same, its holds lapsing by their ttl).
NEEDS_CLASS = frozenset({"resume", "undo", "retry"})


class _Refused(Exception):
    """An action refused before it ran: the HTTP status and why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _act(
    dash: Dashboard, request: Request, submitted: str | None, payload: str | None = None
) -> tuple[str, str | None]:
    """Check the request, then run the action; ``(execution id to show, what happened)``."""
    if dash.auth is None:
        raise _Refused(
            403, "the dashboard is read only: the application passes app(auth=...) to allow actions"
        )
    if not dash.may_act(request):
        raise _Refused(403, "not allowed: the dashboard's auth hook refused this request")
    why = dash.tokens.refusal(request, submitted)
    if why is not None:
        raise _Refused(403, f"CSRF check failed: {why}")
    action = request.path_params["action"]
    execution_id = request.path_params["execution_id"]
    if action not in _executions.ACTIONS:
        raise _Refused(
            404, f"no action {action!r}; the actions are {', '.join(_executions.ACTIONS)}"
        )
    if dash.redis_url is not None and get_config().redis_url != dash.redis_url:
        raise _Refused(
            409,
            "py_reactor is configured for another store than the one this dashboard shows; "
            "call configure(redis_url=...) with the dashboard's redis_url",
        )
    if action in NEEDS_CLASS:
        _refuse_unimported(dash, execution_id, action)
    operation = getattr(api, action)
    result: Any
    try:
        if action == "resume":  # always in a worker: a web request does not run the workflow
            result = api.resume(execution_id, _payload(payload), mode="background")
        elif action == "cancel":  # the class if imported here, never an import on the store's word
            result = operations.cancel(execution_id, import_reactor=False)
        else:
            result = operation(execution_id)
    except LookupError as exc:
        raise _Refused(404, str(exc)) from None
    except (ReactorError, ValueError) as exc:
        raise _Refused(409, str(exc)) from None
    if action == "retry":
        new_id = getattr(result, "execution_id", None)
        return (new_id or execution_id), "retry"
    return execution_id, action


def _refuse_unimported(dash: Dashboard, execution_id: str, action: str) -> None:
    """Refuse ``action`` when the reactor the record names is not imported in this process.

    The operation would import its module by the name the store gives (``Reactor.resume`` and
    the command line may: their user chose the store and the code), and the dashboard never
    imports a module because the store names it.

    Raises:
        _Refused: 409, naming the reactor and how to import it.
    """
    [head] = Inspector(dash.store()).heads([execution_id])
    reactor = head.reactor
    if reactor is None or _declared.reactor_class(reactor) is not None:
        return  # an unknown id: the operation says so
    module = reactor.partition(":")[0]
    raise _Refused(
        409,
        f"cannot {action} execution {execution_id}: its reactor {reactor} is not imported in "
        "the dashboard's process, and the dashboard never imports a module the store names; "
        f"start it with py-reactor dashboard --import {module} (or import {module} in the "
        "application that mounts it)",
    )


def _payload(text: str | None) -> Any:
    """The resume payload a request carries, parsed from JSON.

    Raises:
        _Refused: 400, it is missing or not JSON.
    """
    if text is None or not text.strip():
        raise _Refused(400, "resume needs a payload: a JSON object for the interrupt step")
    try:
        return json.loads(text)
    except ValueError as exc:
        raise _Refused(400, f"the resume payload is not JSON: {exc}") from None


def form_action(dash: Dashboard, request: Request) -> Response:
    form = parse_qs(_body(request))
    fields = form.get(FIELD) or []
    submitted = (fields[0] if fields else None) or request.headers.get(HEADER)
    execution_id = request.path_params["execution_id"]
    payload = next(iter(form.get("payload") or []), None)
    try:
        shown, done = _act(dash, request, submitted, payload)
    except _Refused as exc:
        return dash.page(
            request, "error.html", exc.status, heading="Action refused", message=exc,
            back=f"/executions/{quote(execution_id)}",
        )  # fmt: skip
    query = urlencode({"done": done, **({"from": execution_id} if shown != execution_id else {})})
    prefix = request.scope.get("root_path", "")  # mounted under a path: stay under it
    return RedirectResponse(f"{prefix}/executions/{quote(shown)}?{query}", status_code=303)


def api_action(dash: Dashboard, request: Request) -> Response:
    """``POST /api/executions/{id}/{action}``; a resume's body is ``{"payload": {...}}``."""
    payload = None
    if request.path_params.get("action") == "resume":
        body = _body(request)
        try:
            parsed = json.loads(body) if body.strip() else {}
        except ValueError as exc:
            return JSON({"error": f"the request body is not JSON: {exc}"}, status_code=400)
        if not isinstance(parsed, dict) or "payload" not in parsed:
            return JSON(
                {"error": 'resume takes a JSON body {"payload": {...}}: the interrupt\'s payload'},
                status_code=400,
            )
        payload = json.dumps(parsed["payload"])
    try:
        shown, done = _act(dash, request, request.headers.get(HEADER), payload)
    except _Refused as exc:
        return JSON({"error": str(exc)}, status_code=exc.status)
    detail = _executions.execution_detail(dash.store(), shown)
    return JSON({"done": done, "execution_id": shown, "execution": detail})


def _body(request: Request) -> str:
    """The request body as text (the endpoint read it before the handler ran)."""
    raw: bytes = getattr(request.state, "body", b"")
    return raw.decode("utf-8", "replace")
