"""The one scheduler: a run's work items started in order as they become ready, at most
``limit`` in flight, each settled as it ends, until everything ran or something stopped it.

Every multi-item walk of the engine is this loop; what differs is only how an item runs:

* **here**, in the scheduler's own thread, taking no slot: every step of a plain reactor
  (``limit`` 1), an async unit's dispatch or an interrupt in a ``@parallel`` one, every element
  of an in-place map step;
* as a **branch** on a thread of its own: a ``@parallel`` reactor's steps (``engine.walk``);
* as an **execution of its own**, dispatched to a worker: a fanned-out map step's elements
  (``engine.kinds.fan_out``), ``limit`` being its ``batch_size``.

The subclass says when an item is ready, whether it runs here, whether it may take a slot now,
how it starts, how the scheduler waits for the next items in flight to end, and what their end
means. Once ``stopping`` (a failure, a halt, a park...), nothing new starts; the items in flight
are still waited for and settled, so the walk ends with nothing running. Waiting may itself
answer that the walk cannot go on here (a fan-out parks on its oldest element in a worker):
:meth:`Scheduler.schedule` returns that answer, and the caller stops.
"""

from __future__ import annotations

from typing import Generic, TypeVar

__all__ = ["Scheduler"]

Item = TypeVar("Item")


class Scheduler(Generic[Item]):
    """The loop (see the module); subclasses give the hooks below."""

    limit: int = 1

    #: Every item runs here, in order, as soon as it is reached (a plain reactor, an in-place
    #: map): ``ready``, ``here`` and ``admit`` are not asked.
    all_here: bool = False

    #: Start nothing new (what is in flight still ends and is settled); set by ``settle`` (or
    #: ``launch``) when an item stops the walk.
    stopping: bool = False

    #: Items start strictly in order (a plain reactor's dependency order, a map's elements);
    #: otherwise any ready item may overtake one that waits for its dependencies or its slot.
    in_order: bool = True

    #: The items not started yet, in the order they are started when ready.
    pending: list[Item]

    # -- the hooks -------------------------------------------------------------------------

    def in_flight(self) -> int:
        """How many started items have not been settled yet."""
        raise NotImplementedError

    def ready(self, item: Item) -> bool:
        """Whether ``item`` may start now (what it depends on has ended)."""
        return True

    def here(self, item: Item) -> bool:
        """Whether ``item`` runs in the scheduler's thread, to its end, taking no slot."""
        return False

    def admit(self, item: Item) -> bool:
        """Whether ``item`` may take a free slot now (no item in flight excludes it)."""
        return True

    def run_here(self, item: Item) -> object:
        """Run ``item`` in this thread; what it answered."""
        raise NotImplementedError

    def launch(self, item: Item) -> None:
        """Start ``item`` elsewhere (a thread, a worker); it is in flight until it ends."""
        raise NotImplementedError

    def ended(self) -> list[tuple[Item, object]] | object:
        """Wait for items in flight to end: each ended one with what it answered, in the order
        they are to be settled; or an answer that stops the walk here (a park, a failure)."""
        raise NotImplementedError

    def settle(self, item: Item, answer: object) -> None:
        """Take in how ``item`` ended (go on, or make the walk ``stopping``)."""
        raise NotImplementedError

    # -- the loop --------------------------------------------------------------------------

    def schedule(self, pending: list[Item]) -> object | None:
        """Run ``pending`` until nothing is in flight and nothing more may start; None then, or
        the answer :meth:`ended` stopped on. What never started stays in ``self.pending``."""
        self.pending = pending
        while True:
            if not self.stopping:
                self._start()
            if not self.in_flight():
                return None
            ended = self.ended()
            if not isinstance(ended, list):
                return ended
            for item, answer in ended:
                self.settle(item, answer)

    def _start(self) -> None:
        """Start every ready item there is room for, in order; one that runs here may make
        more ready, so go round again until nothing starts. ``in_order``: the first item that
        cannot start holds back the ones after it."""
        pending = self.pending
        if self.all_here:  # the common case, kept lean: one settle per item
            for index, item in enumerate(pending):
                if self.stopping:
                    del pending[:index]
                    return
                self.settle(item, self.run_here(item))
            pending.clear()
            return
        if self.in_order:
            while pending and not self.stopping:
                item = pending[0]
                if not self.ready(item):
                    return
                if self.here(item):
                    del pending[0]
                    self.settle(item, self.run_here(item))
                    continue
                if self.in_flight() >= self.limit or not self.admit(item):
                    return
                del pending[0]
                self.launch(item)
            return
        progressed = True
        while progressed and pending:
            progressed = False
            for item in list(pending):
                if self.stopping:
                    return
                if not self.ready(item):
                    continue
                if self.here(item):
                    pending.remove(item)
                    self.settle(item, self.run_here(item))
                    progressed = True
                    continue
                if self.in_flight() >= self.limit or not self.admit(item):
                    continue
                pending.remove(item)
                self.launch(item)
                progressed = True
