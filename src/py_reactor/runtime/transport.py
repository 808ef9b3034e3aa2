"""What the runtime needs of a transport: how new work reaches a worker.

The runtime never chooses one: the caller (``py_reactor.api``, or a transport driving its own
jobs) passes it in, so the runtime imports no transport and no optional extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from py_reactor.dsl.reactor import Reactor
    from py_reactor.engine.context import Context

__all__ = ["Transport"]


class Transport(Protocol):
    """Moves executions to workers: the thread worker of this process, or Celery."""

    def dispatch(self, reactor: type[Reactor], context: Context) -> None:
        """Store ``context`` as a new execution of ``reactor`` (an id stored already is left
        as it is) and make it due for a worker.

        Raises:
            ReactorError: it could not be stored or sent (nothing was enqueued).
        """

    def serve_here(self) -> None:
        """Make sure due work is picked up even if this process dispatches nothing more (a
        pause's timeout, a resume handed to a worker): the thread worker starts here; Celery
        workers serve elsewhere, so nothing happens."""
