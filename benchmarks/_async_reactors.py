"""What async_units.py runs: reactors with async units, and their plain @background baselines.

Module level, so a worker finds each of them (and each ``async_step``'s one-step reactor,
``Parent.<step>``) by ``module:qualname``: the Celery workers import this module
(``py-reactor worker --import benchmarks._async_reactors``); the thread worker runs in the
benchmark's own process, which imports it too.

Every unit body and every baseline step body does the same trivial work: it RPUSHes
``"<i> <time.time()>"`` to ``bench:stamp:<key>`` (the store's own client) and returns ``i``.

- ``Reach``: one ``async_step`` (``unit``), read by ``returns``: its ``run()`` dispatches the
  unit and waits for it to end.
- ``Plain``: the baseline, a ``@background`` reactor of the same one step, run synchronously
  nowhere: all of it runs in a worker.
- ``Fan``: ``FAN`` (100) ``async_step`` units ``u000 .. u099``, generated at module level with
  ``type()``, and a final step ``total`` (a ``Step`` with one input per unit, wired to each
  unit's ``Result``) that sums them; ``returns = "total"``. ``run()`` dispatches the units from
  the caller and ``total`` waits for them there.
- ``BackgroundFan``: the same reactor under ``@background``: the parent runs in a worker,
  dispatches its units from there, and ``total`` waits for them there (a 0.2 s grace, then it
  parks until a unit's end wakes it).
"""

from __future__ import annotations

import time
from typing import Any

from py_reactor import Reactor, Result, Step, Value, async_step, background, step
from py_reactor.storage import current_store

FAN = 100
UNITS = tuple(f"u{i:03d}" for i in range(FAN))


def client() -> Any:
    return current_store().client


def work(key: str, i: int) -> int:
    """The body of every unit and of every baseline step."""
    client().rpush(f"bench:stamp:{key}", f"{i} {time.time()!r}")
    return i


# -- 1: one async unit, and the plain background step it is compared with ----------------------


class Reach(Reactor):
    key: str
    i: int = 0

    unit = async_step(work)

    returns = "unit"


@background
class Plain(Reactor):
    key: str
    i: int = 0

    @step
    def first(key: str, i: int) -> int:
        return work(key, i)

    returns = "first"


# -- 2: a fan of FAN async units, and a final step that reads them all ---------------------------


def _total(self: Step) -> int:
    return sum(self.inputs[name] for name in UNITS)


Collect: type[Step] = type(
    "Collect",
    (Step,),
    {
        "__module__": __name__,
        "__qualname__": "Collect",
        "__annotations__": dict.fromkeys(UNITS, int),
        "__doc__": f"Reads the {FAN} units of Fan and sums them.",
        "run": _total,
    },
)


def _fan(qualname: str) -> type[Reactor]:
    """A reactor of FAN async units and the step that reads them all (new declarations each
    time: every reactor owns its own)."""
    namespace: dict[str, Any] = {
        "__module__": __name__,
        "__qualname__": qualname,
        "__annotations__": {"key": str},
        "__doc__": f"{FAN} async units u000..u{FAN - 1:03d}, then total reads them all.",
    }
    for i, name in enumerate(UNITS):
        namespace[name] = async_step(work, i=Value(i))
    reads: dict[str, Any] = {name: Result(name) for name in UNITS}
    namespace["total"] = step(Collect, **reads)
    namespace["returns"] = "total"
    return type(qualname, (Reactor,), namespace)


#: run() dispatches the units from the caller, and ``total`` waits for them there.
Fan = _fan("Fan")
#: The same, the whole run in a worker: ``total`` waits there (a short grace, then it parks).
BackgroundFan = background(_fan("BackgroundFan"))
