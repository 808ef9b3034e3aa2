"""Executions pinned to a script: a reactor defined in ``__main__`` can only be run by a
process running that same script (a fork, a restart of it), never by another worker."""

from __future__ import annotations

import os
import socket
import sys

__all__ = ["foreign", "this_script"]


def this_script() -> str:
    """``host:pid:<path of the __main__ script>``: where a reactor of a ``__main__`` script
    was dispatched from. Only a process running the same script can import it."""
    main = sys.modules.get("__main__")
    path = os.path.abspath(getattr(main, "__file__", "") or "<interactive>")
    return f"{socket.gethostname()}:{os.getpid()}:{path}"


def foreign(pinned: str | None) -> str | None:
    """None if this process may run an execution pinned to ``pinned`` (not pinned, or the same
    script: a fork, a restart); else ``"alive"`` (leave it to its script) or ``"gone"``."""
    if not pinned:
        return None
    host, pid, path = [*pinned.split(":", 2), "", ""][:3]
    mine_host, _, mine_path = this_script().split(":", 2)
    if host == mine_host and path == mine_path:
        return None
    if host != mine_host:
        return "alive"  # another machine's script: it cannot be checked from here
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return "gone"
    except (PermissionError, ValueError):
        return "alive"
    return "alive"
