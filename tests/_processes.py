"""Child interpreters for tests that need a second process (a worker, a dispatcher, a runner
to stop with SIGSTOP or kill): ``module.entry(*args)`` in a new interpreter that imports the
very ``py_reactor`` and ``tests`` this process did.

Celery worker processes have their own harness (``tests/transport/_harness.py``); this one is
for the thread worker and plain entry points.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import py_reactor

__all__ = ["CHILD_PATH", "child", "stderr_of"]

#: The folders a child process needs on its path: this checkout (for ``tests``) and the very
#: ``py_reactor`` this process imported (so children run the same code as the test).
CHILD_PATH = os.pathsep.join(
    [str(Path(__file__).resolve().parents[1]), str(Path(py_reactor.__file__).resolve().parents[1])]
)


def child(module: str, entry: str, *args: str) -> subprocess.Popen[bytes]:
    """Start ``module.entry(*args)`` in a new interpreter (stdout dropped, stderr kept for
    :func:`stderr_of`)."""
    code = f"import sys; from {module} import {entry}; {entry}(*sys.argv[1:])"
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env={**os.environ, "PYTHONPATH": CHILD_PATH},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def stderr_of(process: subprocess.Popen[bytes]) -> str:
    """What a finished child wrote to stderr (for assertion messages)."""
    _, err = process.communicate(timeout=10)
    return err.decode(errors="replace")
