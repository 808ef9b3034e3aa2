"""Shared fixtures: every test starts from py_reactor's default settings."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from py_reactor.testing import reset
from tests._overlap import OverlapRecorder
from tests._redis import PrivateRedis


@pytest.fixture(autouse=True)
def _default_settings() -> Iterator[None]:
    """Restore default settings (middleware, ...) before and after each test."""
    reset()
    yield
    reset()


@pytest.fixture(autouse=True, scope="module")
def _no_worker_left_behind() -> Iterator[None]:
    """Stop the thread worker a module started, once it is done: its dispatcher would go on
    asking the store for work (commands other modules count, a stopped server restarted)."""
    yield
    from py_reactor import workers

    workers.stop(wait=True)


@pytest.fixture(scope="session")
def private_redis() -> Iterator[PrivateRedis]:
    """A redis-server started for this test session on a free port; stopped at the end."""
    server = PrivateRedis()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_url(private_redis: PrivateRedis) -> str:
    """The URL of the session's private redis-server."""
    return private_redis.url


@pytest.fixture
def raw(private_redis: PrivateRedis) -> Iterator[redis.Redis]:
    """A plain client of the session's private redis-server (strings decoded), to read what
    only Redis shows; closed after the test."""
    client = private_redis.client()
    yield client
    client.close()


@pytest.fixture
def overlap(redis_url: str, key: str) -> OverlapRecorder:
    """A Redis-backed overlap recorder of this test's own (who was inside, and with whom)."""
    return OverlapRecorder(redis_url, f"{key}-rec")


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    """The project built as a wheel, once per session (the packaging tests read it)."""
    folder = tmp_path_factory.mktemp("wheel")
    root = Path(__file__).resolve().parent.parent
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(folder)]
    build = subprocess.run(
        [*command, str(root)], capture_output=True, text=True, timeout=180, check=False
    )
    assert build.returncode == 0, build.stdout + build.stderr
    [built] = folder.glob("py_reactor-*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def pytest_configure(config: pytest.Config) -> None:
    """Point the embedded default at a private folder, for this process and its children."""
    if "PY_REACTOR_TEST_EMBEDDED_DIR" not in os.environ:
        folder = tempfile.mkdtemp(prefix="pyr-emb-")
        os.environ["PY_REACTOR_TEST_EMBEDDED_DIR"] = folder
        os.environ["PY_REACTOR_EMBEDDED_DIR"] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the private embedded server this run started, and remove its folder."""
    from py_reactor import workers
    from py_reactor.storage.embedded import stop_embedded

    workers.stop()  # its dispatcher would otherwise go on asking for the store being removed

    folder = os.environ.pop("PY_REACTOR_TEST_EMBEDDED_DIR", None)
    if folder is not None:
        stop_embedded(folder)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def embedded_folder() -> str:
    """The private folder of the embedded server this test run uses (never the user's own)."""
    return os.environ["PY_REACTOR_EMBEDDED_DIR"]


@pytest.fixture
def key() -> str:
    """A coordination key no other test uses (tests never flush the server)."""
    return f"test-{uuid.uuid4().hex[:12]}"
