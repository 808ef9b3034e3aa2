"""Store URLs: what is wrong with one, and how to show one without its password.

Every place that shows a store URL (errors, logs, reprs) passes it through :func:`redact`, and
every message taken from redis-py through :func:`scrub`. Checking a URL never opens a
connection. This module imports neither ``redis`` nor the rest of the storage package, so the
settings can use it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, unquote, unquote_plus, urlsplit

__all__ = ["EXAMPLE", "MASK", "SCHEMES", "redact", "scrub", "secrets_of", "url_problem"]

#: What a password is replaced with.
MASK = "***"

#: The schemes redis-py (and so py_reactor) can connect with.
SCHEMES = ("redis", "rediss", "unix")

#: Good URLs, for messages that refuse a bad one.
EXAMPLE = (
    "'redis://localhost:6379/0' (or 'redis://user:password@host:6379/0', "
    "'rediss://host:6380/0', 'unix:///path/to/redis.sock?db=0')"
)

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)(.*)$", re.DOTALL)
_QUERY_PASSWORD = re.compile(r"([?&]password=)([^&#]*)", re.IGNORECASE)
_DB = re.compile(r"^[0-9]+$")


def redact(url: str) -> str:
    """``url`` with its password masked: ``redis://user:***@host/0``, ``...?password=***``.

    Works on any text, parsable or not. Everything up to the last ``@`` is taken as the user
    and password, so a password holding an unencoded ``@``, ``/``, ``?`` or ``#`` is masked
    whole: a URL may be masked too much (an ``@`` in its query), never too little.
    """
    match = _SCHEME.match(url)
    if match is not None:
        prefix, rest = match.groups()
        if "@" in rest:
            userinfo, _, after = rest.rpartition("@")
            user, colon, _ = userinfo.partition(":")
            if colon:
                rest = f"{user}:{MASK}@{after}"
        url = prefix + rest
    return _QUERY_PASSWORD.sub(lambda found: found.group(1) + MASK, url)


def secrets_of(url: str) -> tuple[str, ...]:
    """The passwords ``url`` carries, as written and decoded, longest first, for :func:`scrub`."""
    found: set[str] = set()
    match = _SCHEME.match(url)
    if match is not None and "@" in match.group(2):
        userinfo = match.group(2).rpartition("@")[0]
        _, colon, password = userinfo.partition(":")
        if colon:
            found.add(password)
    found.update(raw for _, raw in _QUERY_PASSWORD.findall(url))
    found.update([unquote(secret) for secret in found] + [unquote_plus(secret) for secret in found])
    return tuple(sorted((secret for secret in found if secret), key=len, reverse=True))


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` (say, a redis-py message) with every one of ``secrets`` replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text


def url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a store URL, or None when redis-py can use it.

    Checks the scheme (``redis``, ``rediss``, ``unix``), the host (``redis``/``rediss``) or the
    socket path (``unix``), the port (1..65535 when given) and the database (a number, from the
    path or ``?db=``). Opens no connection. The answer never quotes a part of the URL that may
    hold a password; show the URL itself with :func:`redact`.
    """
    if not url:
        return "it is empty"
    match = _SCHEME.match(url)
    if match is None:
        return "it has no scheme (it must start with redis://, rediss:// or unix://)"
    scheme = match.group(1)[:-3]
    if scheme not in SCHEMES:
        return f"the scheme {scheme!r} is not one of redis, rediss, unix (lower case)"
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unclosed [IPv6 address
        return f"it cannot be parsed ({exc})"
    try:
        port = parts.port
    except ValueError:
        return "the port (after the host) is not a number in 1..65535"
    if scheme == "unix":
        if parts.path in ("", "/"):
            return "it names no socket path (like unix:///path/to/redis.sock)"
    else:
        if not parts.hostname:
            return "it names no host (like redis://localhost:6379/0)"
        if port == 0:
            return "the port (after the host) is not a number in 1..65535"
        path = unquote(parts.path).strip("/")
        if path and not _DB.match(path):
            return "the database (the path after the host) is not a number like /0"
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == "db" and not _DB.match(value):
            return "the database (?db=) is not a number like ?db=0"
    return None
