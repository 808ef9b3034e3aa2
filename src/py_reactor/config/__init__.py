"""Process-wide settings: ``configure()`` to change, ``get_config()`` to read, ``reset_config()``.

Settings are an immutable snapshot; a run reads the snapshot once when it starts, so changing
the configuration never affects a run already in progress.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from py_reactor.config.options import check_limits, check_namespace, check_retention
from py_reactor.config.urls import EXAMPLE, redact, url_problem
from py_reactor.errors import DefinitionError

if TYPE_CHECKING:  # the class lives above settings; only its shape is checked here
    from py_reactor.observability.middleware import Middleware

__all__ = ["UNCHANGED", "Config", "check_namespace", "configure", "get_config", "reset_config"]


class _Unchanged:
    """The default of the options for which None is a value of its own."""

    def __repr__(self) -> str:
        return "UNCHANGED"


#: ``configure(retention=UNCHANGED)``: leave the option as it is (None means "for ever").
UNCHANGED: Any = _Unchanged()


@dataclass(frozen=True, slots=True)
class Config:
    """The current settings.

    Attributes:
        middleware: receives lifecycle events, in this order (after-hooks too: events are
            delivered in the order they happen).
        redis_url: the Redis server holding coordination state; None uses the embedded server
            (one per machine and user, see ``docs/coordination.md``). ``repr`` shows it with
            its password masked.
        embedded_dir: the embedded server's folder; None uses ``PY_REACTOR_EMBEDDED_DIR`` or
            ``~/.cache/py_reactor/redis``.
        rate_limits: named rate limits for ``with_rate_limit("name")``, each as
            ``((window_seconds, limit), ...)``.
        worker: where background work runs: ``"threads"`` (a thread pool in the dispatching
            process, the default), ``"asyncio"`` (tasks on an event loop, see
            ``docs/asyncio.md``) or ``"celery"`` (Celery workers, see ``docs/workers.md``).
        celery_queue: the Celery queue py_reactor's jobs are sent to (``"py_reactor"``).
        celery_resend_after: seconds after which a job sent to Celery that no worker has
            claimed yet is sent again (a prefork worker can reserve a message behind a busy
            pool process; the copy that comes second runs nothing).
        worker_threads: the thread worker's pool size.
        worker_concurrency: how many executions the asyncio worker runs at once.
        park_max_attempts: parks on contention one step may make before it gets in (the
            count starts over once it does); the next contention fails it (``math.inf``: no
            cap); ordered-lock turns never count.
        park_delay, park_jitter: a parked execution is dispatched again after ``park_delay``
            plus up to ``park_jitter`` seconds at the latest (the release of the key it waits
            on wakes it at once: this timer is only the backstop).
        execution_lease: seconds a running execution's liveness lease lasts; its worker renews
            it, and the recovery loop re-dispatches an execution whose lease lapsed.
        async_wait_timeout: seconds a reader of an async unit's result waits for it in the
            caller before its step fails (``AsyncUnitTimeoutError``).
        async_park_timeout: seconds a reader in a worker may stay parked waiting for an async
            unit, in all, before its step fails.
        unimportable_grace: seconds a worker that cannot import an execution's reactor leaves
            it for another worker, counted from the first worker that could not; then it fails
            it, reporting every completed step as a rollback failure.
        namespace: the application the executions this process stores belong to (None: each
            reactor's module's top-level package); a worker serves it too.
        retention: seconds a terminal execution is kept after it ended (None: for ever).
    """

    middleware: tuple[Middleware, ...] = ()
    redis_url: str | None = field(default=None, repr=False)
    embedded_dir: str | None = None
    rate_limits: Mapping[str, tuple[tuple[int, int], ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    worker: str = "threads"
    worker_threads: int = 8
    worker_concurrency: int = 100
    celery_queue: str = "py_reactor"
    celery_resend_after: float = 5.0
    park_max_attempts: float = 20
    park_delay: float = 5.0
    park_jitter: float = 5.0
    execution_lease: float = 30.0
    async_wait_timeout: float = 30.0
    async_park_timeout: float = 3600.0
    unimportable_grace: float = 60.0
    namespace: str | None = None
    retention: float | None = None

    def __repr__(self) -> str:
        """The settings, with the password of ``redis_url`` masked."""
        url = None
        if self.redis_url is not None:
            url = redact(self.redis_url)
        return (
            f"Config(middleware={self.middleware!r}, redis_url={url!r}, "
            f"embedded_dir={self.embedded_dir!r}, rate_limits={dict(self.rate_limits)!r}, "
            f"worker={self.worker!r}, worker_threads={self.worker_threads}, "
            f"worker_concurrency={self.worker_concurrency}, "
            f"celery_queue={self.celery_queue!r}, celery_resend_after={self.celery_resend_after}, "
            f"park_max_attempts={self.park_max_attempts}, park_delay={self.park_delay}, "
            f"park_jitter={self.park_jitter}, execution_lease={self.execution_lease}, "
            f"async_wait_timeout={self.async_wait_timeout}, "
            f"async_park_timeout={self.async_park_timeout}, "
            f"unimportable_grace={self.unimportable_grace}, namespace={self.namespace!r}, "
            f"retention={self.retention})"
        )


_lock = threading.Lock()
_config = Config()


def configure(
    *,
    middleware: Iterable[Middleware] | None = None,
    redis_url: str | None = None,
    embedded_dir: str | None = None,
    rate_limits: Mapping[str, Mapping[str, int]] | None = None,
    worker: str | None = None,
    worker_threads: int | None = None,
    worker_concurrency: int | None = None,
    celery_queue: str | None = None,
    celery_resend_after: float | None = None,
    park_max_attempts: float | None = None,
    park_delay: float | None = None,
    park_jitter: float | None = None,
    execution_lease: float | None = None,
    async_wait_timeout: float | None = None,
    async_park_timeout: float | None = None,
    unimportable_grace: float | None = None,
    namespace: str | None = UNCHANGED,
    retention: float | timedelta | None = UNCHANGED,
) -> Config:
    """Change settings; options left out keep their value. Returns the new settings.

    Args:
        middleware: receives lifecycle events, in this order.
        redis_url: ``redis://host:port/db`` (or ``rediss://``, ``unix://``) of the Redis server
            that holds locks and limits for every process that must exclude each other.
        embedded_dir: the folder of the embedded server used when no ``redis_url`` is set.
        rate_limits: named limits, ``{"stripe": {"second": 3, "minute": 100}}``, for
            ``with_rate_limit("stripe")``; merged into those already registered.
        worker: ``"threads"`` (default): background work runs on a thread pool in this
            process; ``"asyncio"``: it runs as tasks on the event loop the asyncio worker was
            started on (``await py_reactor.workers.astart()``, or ``py-reactor worker --pool
            asyncio``); ``"celery"``: it is sent to Celery workers (``py-reactor worker``), which
            needs ``redis_url`` (the store is the broker too) and ``py_reactor[celery]``.
        worker_threads: the size of that pool (>= 1, default 8).
        worker_concurrency: how many executions the asyncio worker runs at once (>= 1,
            default 100).
        celery_queue: the Celery queue py_reactor's jobs go to (default ``"py_reactor"``).
        celery_resend_after: seconds after which a Celery job no worker has claimed is sent
            again (default 5; then twice as long after each send in a row that no claim
            followed, up to 32 times): a prefork worker may reserve a message behind a pool
            process busy with a long step, and the copy that comes second runs nothing.
        park_max_attempts: parks on contention one step may make before it gets in (default
            20; ``math.inf`` for no cap); the next contention fails it.
        park_delay: seconds after which a parked execution is dispatched again at the latest
            (default 5; the release of the key it waits on wakes it sooner).
        park_jitter: up to this many seconds are added to ``park_delay`` (default 5).
        execution_lease: seconds of a running execution's liveness lease (default 30).
        async_wait_timeout: seconds a step waits, in the caller, for an async unit whose
            result it reads (default 30); then it fails.
        async_park_timeout: seconds a step in a worker may stay parked, in all, waiting for an
            async unit whose result it reads (default 3600); then it fails.
        unimportable_grace: seconds an execution whose reactor a worker cannot import is left
            for another worker (default 60, counted from the first worker that could not);
            then it fails (``ReactorNotImportableError``), every completed step reported as a
            rollback failure.
        namespace: the application this process's executions belong to, and which its workers
            serve (default None: each reactor's module's top-level package, ``shop`` for
            ``shop.reactors``); ``@background(namespace=...)`` overrides it per reactor.
        retention: how long a completed, failed, halted or cancelled execution (and all that
            is stored for it) is kept after it ended, in seconds or a ``timedelta``; None
            (the default) keeps it for ever. Live executions never expire.

    Raises:
        TypeError: an option has the wrong type (the message names the option).
        ValueError: ``redis_url`` is not a usable ``redis://``, ``rediss://`` or ``unix://`` URL
            (bad scheme, no host or socket path, a port outside 1..65535, a database that is
            not a number); nothing is connected to.
        DefinitionError: a rate limit is malformed (the message names it).
    """
    global _config
    changes: dict[str, object] = {}
    if middleware is not None:
        changes["middleware"] = _check_middleware(middleware)
    if redis_url is not None:
        changes["redis_url"] = _check_redis_url(redis_url)
    if worker is not None:
        if worker not in ("threads", "asyncio", "celery"):
            raise ValueError(
                f"configure(worker=...) takes 'threads' (a thread pool in this process), "
                f"'asyncio' (tasks on an event loop) or 'celery' (Celery workers), got {worker!r}"
            )
        changes["worker"] = worker
    if celery_queue is not None:
        if not isinstance(celery_queue, str) or not celery_queue.strip():
            raise ValueError(
                f"configure(celery_queue=...) takes a queue name, got {celery_queue!r}"
            )
        changes["celery_queue"] = celery_queue
    for option, size in (
        ("worker_threads", worker_threads),
        ("worker_concurrency", worker_concurrency),
    ):
        if size is None:
            continue
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"configure({option}=...) takes a whole number >= 1, got {size!r}")
        changes[option] = size
    for option, value, least in (
        ("park_max_attempts", park_max_attempts, 0),
        ("park_delay", park_delay, 0),
        ("park_jitter", park_jitter, 0),
        ("execution_lease", execution_lease, 0.001),
        ("celery_resend_after", celery_resend_after, 0.001),
        ("async_wait_timeout", async_wait_timeout, 0),
        ("async_park_timeout", async_park_timeout, 0),
        ("unimportable_grace", unimportable_grace, 0),
    ):
        if value is None:
            continue
        if not isinstance(value, int | float) or isinstance(value, bool) or not value >= least:
            raise ValueError(f"configure({option}=...) takes a number >= {least:g}, got {value!r}")
        finite = ("execution_lease", "celery_resend_after", "unimportable_grace")
        if option in finite and value == float("inf"):
            raise ValueError(f"configure({option}=...) must be finite")
        changes[option] = value
    if namespace is not UNCHANGED:
        changes["namespace"] = (
            None if namespace is None else check_namespace(namespace, "configure(namespace=...)")
        )
    if retention is not UNCHANGED:
        changes["retention"] = check_retention(retention)
    if embedded_dir is not None:
        if not isinstance(embedded_dir, str) or not embedded_dir:
            raise TypeError(
                f"configure(embedded_dir=...) takes a folder path, got {embedded_dir!r}"
            )
        changes["embedded_dir"] = embedded_dir
    if rate_limits is not None:
        if not isinstance(rate_limits, Mapping):
            raise TypeError(
                f"configure(rate_limits=...) takes {{name: {{window: limit}}}}, got {rate_limits!r}"
            )
        named: dict[str, Any] = dict(_config.rate_limits)
        for name, limits in rate_limits.items():
            if not isinstance(name, str) or not name:
                raise DefinitionError(
                    f"configure(rate_limits=...): a name must be a non-empty str, got {name!r}"
                )
            named[name] = check_limits(f"configure(rate_limits={{{name!r}: ...}})", limits)
        changes["rate_limits"] = MappingProxyType(named)
    with _lock:
        _config = replace(_config, **changes)  # type: ignore[arg-type]
        return _config


@runtime_checkable
class _MiddlewareShape(Protocol):
    """What ``configure(middleware=...)`` checks: ``py_reactor.Middleware`` instances. The
    class lives with the events it receives (``observability``); settings only check its
    shape, so that they import nothing above ``errors``."""

    def on_reactor_started(self, event: Any) -> None:
        """A reactor run began."""


def _check_middleware(middleware: object) -> tuple[Middleware, ...]:
    """``middleware`` as a tuple of Middleware instances, or a TypeError naming the bad item."""
    if isinstance(middleware, _MiddlewareShape):
        name = type(middleware).__qualname__
        raise TypeError(
            f"configure(middleware=...) takes a list of py_reactor.Middleware instances, got a "
            f"single {name}; wrap it in a list: configure(middleware=[{name}()])"
        )
    if isinstance(middleware, (str, bytes)) or not isinstance(middleware, Iterable):
        raise TypeError(
            f"configure(middleware=...) takes a list of py_reactor.Middleware instances, got "
            f"{_kind(middleware)}; pass a list, e.g. configure(middleware=[MyMw()])"
        )
    items = tuple(middleware)
    for position, item in enumerate(items):
        if isinstance(item, type) and issubclass(item, _MiddlewareShape):
            raise TypeError(
                f"configure(middleware=...): item {position} is the class {item.__qualname__}, "
                f"not an instance; pass {item.__qualname__}() instead"
            )
        if not isinstance(item, _MiddlewareShape):
            raise TypeError(
                f"configure(middleware=...): item {position} is {_kind(item)}, "
                "not a py_reactor.Middleware; subclass Middleware and override the hooks you need"
            )
    return items


def _kind(value: object) -> str:
    """What ``value`` is, for messages: "an object", "a str", "None"."""
    if value is None:
        return "None"
    noun = type(value).__qualname__
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _check_redis_url(redis_url: object) -> str:
    """``redis_url`` if redis-py can use it; else a ValueError (TypeError if not a str)."""
    if not isinstance(redis_url, str):
        raise TypeError(
            f"configure(redis_url=...) takes a str URL like 'redis://localhost:6379/0', "
            f"got {_kind(redis_url)}"
        )
    problem = url_problem(redis_url)
    if problem is not None:
        raise ValueError(
            f"configure(redis_url=...) got {redact(redis_url)!r}: {problem}; "
            f"give a URL like {EXAMPLE}"
        )
    return redis_url


def get_config() -> Config:
    """The current settings (an immutable snapshot)."""
    return _config


def reset_config() -> None:
    """Go back to the defaults (used by tests)."""
    global _config
    with _lock:
        _config = Config()
    _forget_store()


def _forget_store() -> None:
    """Drop the cached store connection if the storage package was ever loaded."""

    storage = sys.modules.get("py_reactor.storage")
    if storage is not None:
        storage.forget_store()
