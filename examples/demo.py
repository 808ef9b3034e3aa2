"""The py_reactor demo: book a trip as a saga, in this process, with no server.

Six scenes show what the engine does:

1. success, after the payment gateway times out once and the charge is retried;
2. a declined card: the step fails and the completed bookings are rolled back, newest first;
3. invalid inputs: refused before anything runs, with every offending field named;
4. two agents book for the same traveller at the same moment: a lock keyed on the traveller
   makes the second wait for the first. The lock lives in the embedded Redis that py_reactor
   starts by itself (no server to install), so it would hold across processes too;
5. two travellers share one company card: a lock on the *charge step alone*, keyed on the
   card, serializes the two charges while both trips reserve flights and hotels at once;
6. a trip booked in the background: flight and hotel are reserved in the caller, the charge
   goes to a worker thread, finds the card busy and *parks* (no thread waits, nothing fails);
   the moment the card is released, the release wakes it and the trip completes.

In parts 4 and 5 the lines about one lock are printed in fencing-token order (see ``Narrator``):
each holder's "released" comes before the next holder's "taken", as it happened.

Its scenes are numbered 1-6; ``py-reactor demo``, which ``scripts/demo.sh`` runs first, letters
its own A-C, so no two scenes of the tour share a label.

Run it with ``python examples/demo.py``.
"""

from __future__ import annotations

import threading
import time
from typing import Annotated, Any

from pydantic import Field

from py_reactor import (
    Failure,
    FailureResult,
    Input,
    Lock,
    Middleware,
    Reactor,
    Result,
    Step,
    Success,
    background,
    configure,
    find,
    retries,
    step,
    with_lock,
)
from py_reactor.observability import events as ev

# A pretend outside world: what is booked right now, and a gateway that is flaky once.
BOOKED: set[str] = set()
GATEWAY = {"timeouts_left": 0}


class ReserveFlight(Step):
    """Hold a seat; release it if a later step fails."""

    traveller: str
    destination: str

    def run(self) -> Success:
        time.sleep(0.05)  # the airline takes a moment to answer
        seat = f"flight:{self.inputs.destination}:{self.inputs.traveller}"
        BOOKED.add(seat)
        return Success(seat)

    def undo(self, result: str) -> Success:
        BOOKED.discard(result)
        return Success()


class ReserveHotel(Step):
    """Hold a room for the nights asked; release it if a later step fails."""

    traveller: str
    destination: str
    nights: int

    def run(self) -> Success:
        room = f"hotel:{self.inputs.destination}:{self.inputs.traveller}:{self.inputs.nights}n"
        BOOKED.add(room)
        return Success(room)

    def undo(self, result: str) -> Success:
        BOOKED.discard(result)
        return Success()


@retries(max_attempts=3, backoff="exponential", base_delay=0.05)
class ChargeCard(Step):
    """Charge the card; a timeout is retried, a decline is final."""

    card: str
    amount: Annotated[int, Field(ge=1)]

    def run(self) -> Success | Failure:
        if GATEWAY["timeouts_left"] > 0:
            GATEWAY["timeouts_left"] -= 1
            raise TimeoutError("payment gateway timed out")
        if self.inputs.card.endswith("0000"):
            return Failure("card declined by issuer", retryable=False)
        return Success({"charge_id": f"ch_{self.inputs.amount}", "amount": self.inputs.amount})


class BookTrip(Reactor):
    """Reserve a flight and a hotel, charge the card, then confirm."""

    traveller: str
    destination: str
    nights: Annotated[int, Field(ge=1, le=30)]
    card: str

    flight = step(ReserveFlight)
    hotel = step(ReserveHotel)
    charge = step(
        ChargeCard,
        amount=Input("nights", transform=lambda n: 120 * n),
        wait_for=["flight", "hotel"],
    )

    @step(charge_id=Result("charge", "charge_id"), flight=Result("flight"))
    def confirm(traveller: str, charge_id: str, flight: str) -> str:
        return f"{traveller} is booked on {flight} (paid with {charge_id})"

    returns = "confirm"


@with_lock(lambda inputs: f"traveller:{inputs['traveller']}", ttl=30, wait=10)
class BookTripOnePerTraveller(BookTrip):
    """The same trip, but one booking per traveller at a time, across threads and processes."""


@with_lock(lambda args: f"card:{args['card'][-4:]}", ttl=30, wait=10)
class ChargeCardOneAtATime(ChargeCard):
    """The same charge, one at a time per card: the bank answers slowly for shared cards."""

    def run(self) -> Success | Failure:
        time.sleep(0.2)
        return super().run()


class BookTripSharedCard(BookTrip):
    """The same trip; only its charge step is locked, on the card it charges."""

    charge = step(
        ChargeCardOneAtATime,
        amount=Input("nights", transform=lambda n: 120 * n),
        wait_for=["flight", "hotel"],
    )


@background(before="charge")
class BookTripInBackground(BookTripSharedCard):
    """The same trip; from the charge on it runs in a worker (a thread pool of this process)."""


_print_lock = threading.Lock()


def say(line: str) -> None:
    """Print one whole line, even when two threads report at once."""
    with _print_lock:
        print(line, flush=True)


class Narrator(Middleware):
    """Prints what happens, as it happens.

    One care is needed to tell the truth about locks. ``on_lock_released`` is called just
    *after* a release, and the release hands the lock straight to the waiting run, which may
    report "taken" before the releasing run gets to report "released": two holders at once, on
    paper. So the narrator prints a lock's lines in fencing-token order: a new holder's "taken"
    waits until the previous holder's "released" is printed. It tells the true order, since
    nobody can take a lock before its holder has let go of it.
    """

    def __init__(self) -> None:
        self._shown_holder: dict[str, str] = {}  # key -> run whose "released" is not printed yet
        self._lock_lines = threading.Condition()

    def on_step_completed(self, event: ev.StepCompleted) -> None:
        say(f"  ok    {event.step:<8} -> {event.value}")

    def on_step_retried(self, event: ev.StepRetried) -> None:
        say(
            f"  retry {event.step:<8} attempt {event.attempt} failed ({_text(event.error)}); "
            f"trying again in {event.delay:.2f}s"
        )

    def on_step_failed(self, event: ev.StepFailed) -> None:
        say(f"  FAIL  {event.step or '(inputs)':<8} {_text(event.error)}")

    def on_step_parked(self, event: ev.StepParked) -> None:
        say(
            f"  park  {event.step:<8} {event.primitive} {event.key} is busy: parked, its thread "
            "given back"
        )

    def on_undo_completed(self, event: ev.UndoCompleted) -> None:
        say(f"  undo  {event.step:<8} released")

    def on_lock_acquired(self, event: ev.LockAcquired) -> None:
        run = event.execution_id[:6]
        where = f" at step {event.step}" if event.step else ""
        with self._lock_lines:
            # Another run still shown as the holder has let go already (we hold the lock now):
            # wait, briefly, for its "released" line to be printed before printing ours.
            self._lock_lines.wait_for(
                lambda: self._shown_holder.get(event.key, event.execution_id) == event.execution_id,
                timeout=5,
            )
            self._shown_holder[event.key] = event.execution_id
            token = f"fencing token {event.fencing_token}"
            say(f"  lock  {event.key} taken by run {run}{where} ({token})")

    def on_lock_released(self, event: ev.LockReleased) -> None:
        with self._lock_lines:
            try:
                say(f"  lock  {event.key} released by run {event.execution_id[:6]}")
            finally:  # even if printing fails, the next holder must not wait for it
                if self._shown_holder.get(event.key) == event.execution_id:
                    del self._shown_holder[event.key]
                self._lock_lines.notify_all()


def _text(error: Any) -> str:
    return f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error)


def show(title: str, **inputs: Any) -> None:
    print(f"\n== {title}")
    outcome = BookTrip.run(**inputs)
    if not isinstance(outcome, FailureResult):  # completed (BookTrip never halts)
        print(f"  => success: {outcome.value}")
    elif outcome.validation_errors:
        print("  => refused, nothing ran:")
        for problem in outcome.validation_errors:
            print(f"       {problem['field']}: {problem['message']} (got {problem['input']!r})")
    else:
        print(f"  => failure at step {outcome.step_name!r}: {outcome.error}")
        print(f"     rollback failures: {len(outcome.rollback_failures)}")
    print(f"     booked now (every traveller): {sorted(BOOKED) or 'nothing'}")


def main() -> None:
    print(
        "\npy_reactor saga tour (examples/demo.py): scenes 1-6, a trip booked as a saga in this "
        "process.\nEach line is what the engine reports as it happens: a step done (ok), "
        "retried, failed or undone, a lock taken or released, a run parked."
    )
    configure(middleware=[Narrator()])
    GATEWAY["timeouts_left"] = 1
    show(
        "1. Ada books Lisbon; the gateway times out once and the charge is retried",
        traveller="ada",
        destination="lisbon",
        nights=3,
        card="4242424242424242",
    )
    show(
        "2. Bob's card is declined: the flight and hotel are released, newest first",
        traveller="bob",
        destination="oslo",
        nights=2,
        card="4000000000000000",
    )
    show(
        "3. Bad inputs are refused before anything runs, every field named",
        traveller="cy",
        destination="rome",
        nights=0,
        card=1234,
    )

    print(
        "\n== 4. Two agents book for Dee at once: a lock on the traveller serializes them"
        "\n      (a lock's lines come in fencing-token order: each release before the next take;"
        "\n      a fencing token is a number that grows with every new holder of the lock)"
    )
    both = [
        threading.Thread(
            target=BookTripOnePerTraveller.run,
            kwargs={"traveller": "dee", "destination": city, "nights": 1, "card": "4242"},
        )
        for city in ("paris", "vienna")
    ]
    for thread in both:
        thread.start()
    for thread in both:
        thread.join()
    print(f"     booked now for dee: {sorted(b for b in BOOKED if ':dee' in b)}")

    print(
        "\n== 5. Eve and Finn share a card: only the charge step is locked, on the card;"
        "\n      both trips reserve at once, the two charges go one after the other"
    )
    started = time.monotonic()
    trips = [
        threading.Thread(
            target=BookTripSharedCard.run,
            kwargs={"traveller": who, "destination": city, "nights": 2, "card": "5555"},
        )
        for who, city in (("eve", "porto"), ("finn", "bergen"))
    ]
    for thread in trips:
        thread.start()
    for thread in trips:
        thread.join()
    took = time.monotonic() - started
    print(f"     both booked in {took:.1f}s; locking the whole trip instead would serialize it all")

    print(
        "\n== 6. Gus books in the background while the card is busy elsewhere: the charge"
        "\n      parks in the worker and the card's release wakes it"
    )
    with Lock("card:7777", ttl=30):  # another charge on the same card, still at the bank
        out = BookTripInBackground.run(traveller="gus", destination="madrid", nights=1, card="7777")
        print(
            f"  => dispatched run {out.execution_id[:6]}; done in the caller: {sorted(out.results)}"
        )
        while (found := find(out.execution_id)) is None or found.status != "waiting":
            time.sleep(0.005)
        print(
            f"     status {found.status!r}, waiting on {found.waiting_on['primitive']} "  # type: ignore[index]
            f"{found.waiting_on['key']} at step {found.waiting_on['step']!r}"
        )  # type: ignore[index]
        released = time.monotonic()
    done = out.wait(timeout=30)  # type: ignore[attr-defined]
    after = (time.monotonic() - released) * 1000
    print(f"  => success: {done.value}")
    print(f"     resumed and finished {after:.0f} ms after the card was released")


if __name__ == "__main__":
    main()
