"""The one scheduler (engine.scheduler), driven by a lane of its own: what every walk relies on.

A reactor's steps, a ``@parallel`` reactor's branches, a map's elements in place and a
fanned-out map's dispatched elements are this loop with different hooks; the behaviour each
of them shows end to end (tests/engine/test_parallel.py, test_map.py,
tests/runtime/test_map_fan_out.py) rests on the rules checked here, one by one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from py_reactor.engine.scheduler import Scheduler


@dataclass
class Lane(Scheduler[int]):
    """Items launched "elsewhere" and ended in launch order, one per ``ended`` call; an item
    in ``stop_on`` stops the walk when settled; one in ``here_items`` runs in place; ``park_at``:
    waiting while this many are in flight answers a park instead."""

    limit: int = 2
    in_order: bool = True
    stop_on: set[int] = field(default_factory=set)
    here_items: set[int] = field(default_factory=set)
    not_ready: set[int] = field(default_factory=set)
    park_at: int | None = None
    flight: list[int] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    most: int = 0

    def in_flight(self) -> int:
        return len(self.flight)

    def ready(self, item: int) -> bool:
        return item not in self.not_ready

    def here(self, item: int) -> bool:
        return item in self.here_items

    def run_here(self, item: int) -> object:
        self.log.append(f"here {item}")
        return item

    def launch(self, item: int) -> None:
        self.flight.append(item)
        self.most = max(self.most, len(self.flight))
        self.log.append(f"launch {item}")

    def ended(self) -> list[tuple[int, object]] | object:
        if self.park_at is not None and len(self.flight) >= self.park_at:
            return "parked"
        return [(self.flight.pop(0), "done")]

    def settle(self, item: int, answer: object) -> None:
        self.log.append(f"settle {item}")
        if item in self.stop_on:
            self.stopping = True


def test_items_start_in_order_and_never_more_than_the_limit_are_in_flight() -> None:
    lane = Lane(limit=2)
    assert lane.schedule(list(range(5))) is None
    assert lane.most == 2
    launched = [entry for entry in lane.log if entry.startswith("launch")]
    assert launched == [f"launch {i}" for i in range(5)]
    assert lane.log[:3] == ["launch 0", "launch 1", "settle 0"]  # full: the oldest ends first
    assert lane.pending == []


def test_once_stopping_nothing_new_starts_and_what_is_in_flight_is_still_settled() -> None:
    lane = Lane(limit=3, stop_on={1})
    assert lane.schedule(list(range(6))) is None
    assert lane.log == [
        "launch 0", "launch 1", "launch 2",
        "settle 0", "launch 3",  # room again, not stopping yet
        "settle 1",  # stops the walk: 2 and 3 are in flight and end, nothing else starts
        "settle 2", "settle 3",
    ]  # fmt: skip
    assert lane.pending == [4, 5]


def test_an_answer_that_is_not_a_list_of_ended_items_stops_the_walk_where_it_is() -> None:
    lane = Lane(limit=2, park_at=2)
    assert lane.schedule(list(range(4))) == "parked"
    assert lane.flight == [0, 1]  # still in flight: the caller keeps them (a fan-out's window)
    assert lane.pending == [2, 3]


def test_items_that_run_here_take_no_slot_and_settle_at_once() -> None:
    lane = Lane(limit=1, here_items={1, 2})
    lane.schedule(list(range(4)))
    assert lane.log[:4] == ["launch 0", "here 1", "settle 1", "here 2"]
    assert lane.most == 1


def test_in_order_the_first_item_that_cannot_start_holds_back_the_rest() -> None:
    held = Lane(limit=4, not_ready={1})
    held.schedule(list(range(3)))
    assert [e for e in held.log if e.startswith("launch")] == ["launch 0"]
    assert held.pending == [1, 2]
    overtaken = Lane(limit=4, not_ready={1}, in_order=False)
    overtaken.schedule(list(range(3)))
    assert [e for e in overtaken.log if e.startswith("launch")] == ["launch 0", "launch 2"]
    assert overtaken.pending == [1]


def test_a_walk_of_items_that_all_run_here_settles_each_and_stops_at_the_first_stop() -> None:
    lane = Lane(stop_on={2})
    lane.all_here = True
    assert lane.schedule(list(range(5))) is None
    assert lane.log == ["here 0", "settle 0", "here 1", "settle 1", "here 2", "settle 2"]
    assert lane.pending == [3, 4]
