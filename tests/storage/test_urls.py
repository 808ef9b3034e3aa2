"""Store URLs: checked where they are given, and never shown with their password."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import redis

from py_reactor import Middleware, Reactor, configure, step, with_lock
from py_reactor.config import get_config
from py_reactor.config.urls import redact, scrub, secrets_of
from py_reactor.coordination import Lock
from py_reactor.engine.results import FailureResult, Outcome
from py_reactor.errors import StoreUnavailableError
from py_reactor.storage import current_store
from py_reactor.storage.redis import RedisStore
from tests._redis import PrivateRedis, free_port

SECRET = "s3cret"


@pytest.fixture(scope="module")
def password_redis() -> Iterator[PrivateRedis]:
    """A redis-server with ``requirepass right``, for this module only."""
    server = PrivateRedis(password="right")
    yield server
    server.stop()


def _guarded(key: str, ran: list[str]) -> type[Reactor]:
    @with_lock(key)
    class Guarded(Reactor):
        @step()
        def work() -> str:
            ran.append("work")
            return "done"

    return Guarded


def _texts(outcome: Outcome, caplog: pytest.LogCaptureFixture) -> list[str]:
    """Everything a user or a log could show about the run and the store."""
    texts = [repr(outcome), repr(get_config()), str(get_config())]
    if isinstance(outcome, FailureResult):
        error = outcome.error
        texts += [str(error), repr(error), outcome.message, outcome.backtrace or ""]
        if isinstance(error, StoreUnavailableError):
            texts.append(error.message)
    for record in caplog.records:
        texts.append(record.getMessage())
        if record.exc_info:
            texts.append(logging.Formatter().formatException(record.exc_info))
    try:
        store = current_store()
    except StoreUnavailableError as exc:
        texts.append(str(exc))
    else:
        texts += [repr(store), store.description]
    return texts


# -- no credentials in messages ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("template", "shown"),
    [
        ("redis://user:s3cret@127.0.0.1:{port}/0", "redis://user:***@127.0.0.1:{port}/0"),
        ("redis://:s3cret@127.0.0.1:{port}/0", "redis://:***@127.0.0.1:{port}/0"),
        ("rediss://user:s3cret@127.0.0.1:{port}/0", "rediss://user:***@127.0.0.1:{port}/0"),
        ("redis://127.0.0.1:{port}/0?password=s3cret", "redis://127.0.0.1:{port}/0?password=***"),
        ("unix://:s3cret@/tmp/pyr-no-such-{port}.sock?db=0", "unix://:***@/tmp/pyr-no-such-"),
    ],
)
def test_a_password_never_shows_when_the_store_is_unreachable(
    template: str, shown: str, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An unreachable store's failure, messages, logs and reprs show the URL, password masked."""
    port = free_port()
    configure(redis_url=template.format(port=port))
    ran: list[str] = []
    with caplog.at_level(logging.DEBUG, logger="py_reactor"):
        outcome = _guarded(key, ran).run()
    assert isinstance(outcome, FailureResult)
    assert isinstance(outcome.error, StoreUnavailableError)
    assert shown.format(port=port) in str(outcome.error)
    assert ran == []
    for text in _texts(outcome, caplog):
        assert SECRET not in text


def test_the_config_repr_masks_the_password() -> None:
    """``repr(get_config())`` shows the store URL with its password masked."""
    configure(redis_url="redis://user:s3cret@localhost:6379/0")
    assert "redis://user:***@localhost:6379/0" in repr(get_config())
    assert SECRET not in repr(get_config())
    assert SECRET not in str(get_config())
    assert get_config().redis_url == "redis://user:s3cret@localhost:6379/0"


def test_a_store_built_from_a_url_masks_its_password() -> None:
    """``RedisStore.from_url`` describes (and reprs) the server without its password."""
    store = RedisStore.from_url("redis://user:s3cret@localhost:6379/0")
    try:
        assert store.description == "redis://user:***@localhost:6379/0"
        assert SECRET not in repr(store)
        assert SECRET not in str(store.unavailable(OSError(f"echo {SECRET}")))
        assert SECRET not in str(store.refused("EVALSHA", redis.ResponseError(SECRET)))
    finally:
        store.client.close()


def test_a_wrong_password_fails_the_run_with_store_unavailable(
    password_redis: PrivateRedis, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A server that refuses the password gives a failure outcome, never a redis-py exception."""
    configure(redis_url=f"redis://:wr0ngpw@127.0.0.1:{password_redis.port}/0")
    ran: list[str] = []
    with caplog.at_level(logging.DEBUG, logger="py_reactor"):
        outcome = _guarded(key, ran).run()
    assert isinstance(outcome, FailureResult)
    assert isinstance(outcome.error, StoreUnavailableError)
    assert "password" in str(outcome.error)
    assert ran == []
    for text in _texts(outcome, caplog):
        assert "wr0ngpw" not in text
    with pytest.raises(StoreUnavailableError):
        Lock(key, wait=0).acquire()


def test_an_unknown_user_fails_the_run_with_store_unavailable(
    private_redis: PrivateRedis, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The session's server refusing a user/password pair gives a failure outcome."""
    configure(redis_url=f"redis://nobody:wr0ngpw@127.0.0.1:{private_redis.port}/0")
    ran: list[str] = []
    with caplog.at_level(logging.DEBUG, logger="py_reactor"):
        outcome = _guarded(key, ran).run()
    assert isinstance(outcome, FailureResult)
    assert isinstance(outcome.error, StoreUnavailableError)
    assert "redis://nobody:***@" in str(outcome.error)
    assert ran == []
    for text in _texts(outcome, caplog):
        assert "wr0ngpw" not in text


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://user:s3cret@host:6379/0", "redis://user:***@host:6379/0"),
        ("redis://:s3cret@host", "redis://:***@host"),
        ("rediss://user:s3cret@host:6380/1", "rediss://user:***@host:6380/1"),
        ("unix://:s3cret@/tmp/r.sock?db=0", "unix://:***@/tmp/r.sock?db=0"),
        ("redis://host/0?password=s3cret", "redis://host/0?password=***"),
        ("redis://host/0?db=1&password=s3cret&x=1", "redis://host/0?db=1&password=***&x=1"),
        ("redis://user@host/0", "redis://user@host/0"),
        ("redis://host:6379/0", "redis://host:6379/0"),
        ("redis://user:s3@cret@host/0", "redis://user:***@host/0"),
        ("redis://user:s3/cret@host/0", "redis://user:***@host/0"),
        ("redis://user:s3?cret@host/0", "redis://user:***@host/0"),
        ("http://u:s3cret@[::1", "http://u:***@[::1"),
    ],
)
def test_redact_masks_every_password(url: str, shown: str) -> None:
    """``redact`` masks the password of the userinfo and of a ``password=`` query parameter."""
    assert redact(url) == shown


def test_scrub_masks_the_password_in_any_text() -> None:
    """``scrub`` removes a URL's password (as given and decoded) from a message."""
    url = "redis://user:p%40ss@host/0"
    assert scrub("auth p@ss failed for redis://user:p%40ss@host/0", secrets_of(url)) == (
        "auth *** failed for redis://user:***@host/0"
    )
    assert scrub("nothing to hide", secrets_of("redis://host/0")) == "nothing to hide"


# -- a bad URL is refused where it is given ----------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "",
        "nonsense",
        "localhost:6379",
        "http://x",
        "REDIS://host/0",
        "redis://host:notaport/0",
        "redis://host:70000/0",
        "redis://host:0/0",
        "redis:///0",
        "redis://:pw@/0",
        "redis://host:6379/notadb",
        "redis://host:6379/-1",
        "redis://host:6379/0/1",
        "redis://host/0?db=x",
        "rediss://",
        "unix://",
        "unix:///tmp/r.sock?db=one",
        "redis://[::1/0",
    ],
)
def test_a_bad_redis_url_is_refused_naming_the_option(value: str) -> None:
    """``configure(redis_url=...)`` refuses a bad URL with a ValueError naming the option."""
    with pytest.raises(ValueError, match=r"configure\(redis_url=\.\.\.\)") as caught:
        configure(redis_url=value)
    assert "redis://localhost:6379/0" in str(caught.value)  # a good example
    assert repr(redact(value)) in str(caught.value)
    assert get_config().redis_url is None


def test_a_refused_url_is_shown_with_its_password_masked() -> None:
    """The message of a refused URL masks the password it carries."""
    with pytest.raises(ValueError, match="redis_url") as caught:
        configure(redis_url="http://user:s3cret@host/0")
    assert "http://user:***@host/0" in str(caught.value)
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize("value", [6379, b"redis://localhost", ["redis://localhost"]])
def test_a_redis_url_that_is_not_a_str_is_a_type_error(value: object) -> None:
    """A non-str ``redis_url`` stays a TypeError naming the option."""
    with pytest.raises(TypeError, match="redis_url"):
        configure(redis_url=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    [
        "redis://localhost",
        "redis://h:6379/2",
        "redis://h:6379/",
        "redis://user:pw@h:6379/0",
        "redis://[::1]:6379/0",
        "redis://h/0?db=3",
        "rediss://h",
        "unix:///tmp/r.sock",
        "unix:///tmp/r.sock?db=1",
        "unix://:pw@/tmp/r.sock?db=0",
    ],
)
def test_a_good_redis_url_is_accepted(value: str) -> None:
    """Good ``redis://``, ``rediss://`` and ``unix://`` URLs are taken as given."""
    assert configure(redis_url=value).redis_url == value


# -- a store that cannot be used is a failure outcome ------------------------------------------


def test_a_database_the_server_lacks_fails_the_run(redis_url: str, key: str) -> None:
    """A db index beyond the server's databases (SELECT refused) is a failure outcome."""
    configure(redis_url=redis_url.rsplit("/", 1)[0] + "/99999")
    ran: list[str] = []
    outcome = _guarded(key, ran).run()
    assert isinstance(outcome, FailureResult)
    assert isinstance(outcome.error, StoreUnavailableError)
    assert "/99999" in str(outcome.error)
    assert ran == []


def test_a_url_the_client_cannot_use_fails_the_run(redis_url: str, key: str) -> None:
    """A URL that passes ``configure`` but that redis-py refuses is a failure outcome."""
    configure(redis_url=redis_url.replace("://", "://user:s3cret@") + "?socket_timeout=abc")
    ran: list[str] = []
    outcome = _guarded(key, ran).run()
    assert isinstance(outcome, FailureResult)
    assert isinstance(outcome.error, StoreUnavailableError)
    assert "socket_timeout" in str(outcome.error)
    assert "redis_url" in str(outcome.error)
    assert SECRET not in str(outcome.error)
    assert ran == []
    with pytest.raises(StoreUnavailableError, match="socket_timeout"):
        current_store()


# -- configure(middleware=...) -----------------------------------------------------------------


class _Quiet(Middleware):
    pass


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([object()], "item 0 is an object, not a py_reactor.Middleware"),
        ([_Quiet(), "logger"], "item 1 is a str, not a py_reactor.Middleware"),
        ((_Quiet(), 3), "item 1 is an int, not a py_reactor.Middleware"),
        ([_Quiet], "item 0 is the class _Quiet, not an instance"),
    ],
)
def test_a_non_middleware_item_is_named_by_position_and_type(value: object, message: str) -> None:
    """The message names the offending item, its position and type, and what to do."""
    with pytest.raises(TypeError, match=r"configure\(middleware=\.\.\.\)") as caught:
        configure(middleware=value)  # type: ignore[arg-type]
    assert message in str(caught.value)
    assert "subclass" in str(caught.value) or "_Quiet()" in str(caught.value)
    assert get_config().middleware == ()


def test_a_single_middleware_must_be_wrapped_in_a_list() -> None:
    """``configure(middleware=Mw())`` says to pass a list."""
    with pytest.raises(TypeError, match=r"configure\(middleware=\.\.\.\)") as caught:
        configure(middleware=_Quiet())  # type: ignore[arg-type]
    assert "wrap it in a list" in str(caught.value)
    assert "[_Quiet()]" in str(caught.value)


def test_a_non_iterable_middleware_value_is_named() -> None:
    """``configure(middleware=object())`` names the type and asks for a list."""
    with pytest.raises(TypeError, match=r"configure\(middleware=\.\.\.\)") as caught:
        configure(middleware=object())  # type: ignore[arg-type]
    assert "an object" in str(caught.value)
    assert "list" in str(caught.value)


def test_an_embedded_folder_that_cannot_be_made_fails_the_run(key: str) -> None:
    """An embedded folder that cannot be created is a failure outcome naming the folder."""
    configure(embedded_dir="/proc/pyr-no-such-folder")
    ran: list[str] = []
    outcome = _guarded(key, ran).run()
    assert isinstance(outcome, FailureResult)
    assert isinstance(outcome.error, StoreUnavailableError)
    assert "/proc/pyr-no-such-folder" in str(outcome.error)
    assert "embedded_dir" in str(outcome.error)
    assert ran == []
