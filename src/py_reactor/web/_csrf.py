"""CSRF protection for the dashboard's actions: a signed double-submit token.

A page sets a cookie holding ``<nonce>.<signature>`` (HMAC-SHA256 of the nonce with the app's
secret) and puts the same token in every action form (and in a ``<meta>`` tag for scripts).
A POST is accepted only when the token it submits (form field ``csrf_token`` or header
``X-CSRF-Token``) equals the cookie and carries a valid signature, and when its ``Origin``
(if the browser sends one) is the dashboard's own. Another site can make the browser send
the cookie but can neither read it nor forge a signed token, so it cannot submit a match.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from starlette.requests import Request

__all__ = ["COOKIE", "FIELD", "HEADER", "Tokens"]

COOKIE = "py_reactor_csrf"
FIELD = "csrf_token"
HEADER = "x-csrf-token"


class Tokens:
    """Issues and checks the tokens of one dashboard app (one secret)."""

    def __init__(self, secret: str | bytes | None = None) -> None:
        if secret is None:
            secret = secrets.token_bytes(32)
        self._secret = secret.encode() if isinstance(secret, str) else bytes(secret)

    def _sign(self, nonce: str) -> str:
        return hmac.new(self._secret, nonce.encode(), hashlib.sha256).hexdigest()

    def valid(self, token: str | None) -> bool:
        """Whether ``token`` is one this app signed."""
        if not token or token.count(".") != 1:
            return False
        nonce, signature = token.split(".")
        return bool(nonce) and hmac.compare_digest(signature, self._sign(nonce))

    def for_request(self, request: Request) -> tuple[str, bool]:
        """The request's token (its cookie's, if valid) and whether it is new (set the cookie)."""
        current = request.cookies.get(COOKIE)
        if self.valid(current):
            return str(current), False
        return self.issue(), True

    def issue(self) -> str:
        """A new token signed by this app."""
        nonce = secrets.token_urlsafe(24)
        return f"{nonce}.{self._sign(nonce)}"

    def refusal(self, request: Request, submitted: str | None) -> str | None:
        """Why the POST ``request`` (submitting ``submitted``) is refused, or None."""
        origin = request.headers.get("origin")
        if origin and origin != "null":
            host = request.headers.get("host", "")
            if urlsplit(origin).netloc != host:
                return f"the request comes from another origin ({origin}), not from {host}"
        cookie = request.cookies.get(COOKIE)
        if not cookie:
            return (
                f"the request has no {COOKIE} cookie; load a dashboard page first (or GET "
                "/api/csrf) and send its token back"
            )
        if not submitted:
            return f"the request sends no CSRF token (form field {FIELD!r} or header X-CSRF-Token)"
        if not hmac.compare_digest(cookie, submitted) or not self.valid(submitted):
            return "the CSRF token does not match the cookie; reload the page and try again"
        return None
