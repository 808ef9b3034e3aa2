"""Every script in examples/ runs to completion as its own process."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType

import pytest

from py_reactor.observability import events as ev

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
DEMO = ROOT / "examples" / "demo.py"

#: A lock line of the demo's narration: key, verb, run and (for "taken") the fencing token.
_LOCK_LINE = re.compile(
    r"lock  (?P<key>\S+) (?P<verb>taken|released) by run (?P<run>\w+)"
    r"(?:.*\(fencing token (?P<token>\d+)\))?"
)


def _run(script: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


#: The park timer the demo runs with in ``demo_output`` (the script itself keeps the library's
#: 5-10 s default): far longer than WOKEN_WITHIN, so part 6 resuming within WOKEN_WITHIN of the
#: card's release can only be the release's wake.
PARK_DELAY = 60.0
WOKEN_WITHIN = 10.0

#: Runs examples/demo.py as ``__main__`` (as ``python examples/demo.py`` does) with the park
#: timer set first, then prints the timer still in effect once the demo is done.
_WITH_A_LONG_TIMER = f"""
import runpy, sys
from py_reactor import configure, get_config
configure(park_delay={PARK_DELAY}, park_jitter=0.0)
runpy.run_path(sys.argv[1], run_name="__main__")
print(f"park timer: {{get_config().park_delay:g}} s + {{get_config().park_jitter:g}} s")
"""


@pytest.fixture(scope="module")
def demo_output() -> str:
    """The standard output of one run of examples/demo.py (which must exit 0), with a 60 s park
    timer (test_example_runs runs it as it is)."""
    done = subprocess.run(
        [sys.executable, "-c", _WITH_A_LONG_TIMER, str(DEMO)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith(f"park timer: {PARK_DELAY:g} s + 0 s"), done.stdout
    return done.stdout


def _part(out: str, number: int) -> list[str]:
    """The lines of part ``number`` (4, 5 or 6) of the demo's output."""
    text = out.split(f"== {number}.")[1]
    if f"== {number + 1}." in text:
        text = text.split(f"== {number + 1}.")[0]
    return text.splitlines()


def _load_demo() -> ModuleType:
    """examples/demo.py imported as a module (its ``main`` is not run)."""
    spec = importlib.util.spec_from_file_location("py_reactor_demo_under_test", DEMO)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # annotations are resolved through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script: Path) -> None:
    """The example exits 0 and prints something."""
    done = _run(script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_demo_shows_success_retry_and_rollback(demo_output: str) -> None:
    """The demo's output shows a retried success, a rolled-back failure and refused inputs."""
    out = demo_output
    assert "retry charge" in out
    assert "=> success: ada is booked" in out
    assert out.index("undo  hotel") < out.index("undo  flight")
    assert "=> failure at step 'charge': card declined by issuer" in out
    assert "nights: Input should be greater than or equal to 1" in out
    assert "card: Input should be a valid string" in out


def test_demo_numbers_its_scenes_1_to_6_and_shows_clean_keys(demo_output: str) -> None:
    """The tour says what it is, numbers its scenes 1-6 (``py-reactor demo``, run before it by
    scripts/demo.sh, letters its own A-C: tests/test_demo.py), and its keys carry no pid or
    timestamp suffix."""
    assert demo_output.lstrip().startswith("py_reactor saga tour (examples/demo.py): scenes 1-6")
    headings = re.findall(r"^== (\S+)\. ", demo_output, flags=re.MULTILINE)
    assert headings == ["1", "2", "3", "4", "5", "6"], headings
    keys = set(re.findall(r"\b(?:card|traveller):\S*\w", demo_output))
    assert keys == {"traveller:dee", "card:5555", "card:7777"}, keys


def test_demo_serializes_two_bookings_for_one_traveller_with_a_lock(demo_output: str) -> None:
    """In part 4 the second booking takes the traveller lock only after the first confirmed."""
    part = _part(demo_output, 4)
    taken = [i for i, line in enumerate(part) if "lock  traveller:dee taken" in line]
    confirmed = [i for i, line in enumerate(part) if "ok    confirm" in line]
    assert len(taken) == 2
    assert len(confirmed) == 2
    assert taken[0] < confirmed[0] < taken[1] < confirmed[1]


def test_demo_locks_only_the_charge_step_for_a_shared_card(demo_output: str) -> None:
    """In part 5 both trips reserve before the second charge gets the card lock, at step charge."""
    part = _part(demo_output, 5)
    taken = [i for i, line in enumerate(part) if "lock  card:5555 taken" in line]
    flights = [i for i, line in enumerate(part) if "ok    flight" in line]
    charged = [i for i, line in enumerate(part) if "ok    charge" in line]
    assert len(taken) == 2
    assert all("at step charge" in part[i] for i in taken)
    assert len(flights) == 2
    assert max(flights) < taken[1]  # both trips reserved while the first charge was locked
    assert taken[0] < charged[0]
    assert len(charged) == 2


@pytest.mark.parametrize("number", [4, 5])
def test_demo_prints_each_release_before_the_next_holder_takes_the_lock(
    demo_output: str, number: int
) -> None:
    """In parts 4 and 5 the lock lines alternate: taken, released (same run), taken, released."""
    seen = [m for line in _part(demo_output, number) if (m := _LOCK_LINE.search(line))]
    shown = "\n".join(m.group(0) for m in seen)
    assert [m["verb"] for m in seen] == ["taken", "released", "taken", "released"], shown
    first, second = seen[0]["run"], seen[2]["run"]
    assert first != second, shown
    assert [m["run"] for m in seen] == [first, first, second, second], shown
    assert len({m["key"] for m in seen}) == 1, shown
    assert int(seen[0]["token"]) < int(seen[2]["token"]), shown  # printed in fencing-token order


def test_demo_narrator_holds_back_a_new_holder_until_the_release_is_printed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Forced interleaving: the waiter's "taken" arrives before the holder's "released".

    That is the real race of the demo (``LockReleased`` is delivered after the release, and the
    release wakes the waiter at once); the narrator must still print the release first.
    """
    narrator = _load_demo().Narrator()
    key = "traveller:test"
    narrator.on_lock_acquired(
        ev.LockAcquired(execution_id="aaaaaa01", reactor="R", key=key, fencing_token=1)
    )
    waiter = threading.Thread(
        target=narrator.on_lock_acquired,
        args=(ev.LockAcquired(execution_id="bbbbbb02", reactor="R", key=key, fencing_token=2),),
    )
    waiter.start()
    waiter.join(timeout=0.3)  # the waiter's hook has had every chance to print first
    narrator.on_lock_released(ev.LockReleased(execution_id="aaaaaa01", reactor="R", key=key))
    waiter.join(timeout=10)
    assert not waiter.is_alive()
    lines = [
        m.group(0)
        for line in capsys.readouterr().out.splitlines()
        if (m := _LOCK_LINE.search(line))
    ]
    assert [(line.split()[2], line.split()[5]) for line in lines] == [
        ("taken", "aaaaaa"),
        ("released", "aaaaaa"),
        ("taken", "bbbbbb"),
    ], lines


def test_demo_parks_a_background_charge_and_the_release_wakes_it(demo_output: str) -> None:
    """Part 6: flight and hotel run in the caller, the dispatched charge parks on the busy card
    (no failure), and takes the lock only after that, then the trip succeeds; it resumed within
    10 s of the card's release, with a 60 s park timer: the release woke it."""
    part = _part(demo_output, 6)
    text = "\n".join(part)
    assert "done in the caller: ['flight', 'hotel']" in text
    parked = [i for i, line in enumerate(part) if "park  charge" in line]
    taken = [i for i, line in enumerate(part) if "lock  card:7777 taken" in line]
    assert len(parked) == 1
    assert len(taken) == 1
    assert parked[0] < taken[0]
    assert "status 'waiting', waiting on lock card:7777 at step 'charge'" in text
    assert "FAIL" not in text
    assert "=> success: gus is booked" in text
    [after] = [m for line in part if (m := re.search(r"finished (\d+) ms after the card", line))]
    assert int(after.group(1)) < WOKEN_WITHIN * 1000, after.group(0)
