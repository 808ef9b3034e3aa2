"""The reactor park_wake.py measures (module level: a worker imports reactors by name)."""

from __future__ import annotations

from py_reactor import Reactor, background, step, with_lock


@background
class Charge(Reactor):
    key: str

    @step
    @with_lock(lambda args: args["key"], ttl=30)
    def charge(key: str) -> str:
        return "charged"

    returns = "charge"
