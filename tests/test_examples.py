"""Every script in examples/ runs to completion as its own process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(script: Path) -> None:
    """The example exits 0 and prints something."""
    done = subprocess.run(
        [sys.executable, str(script)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_demo_shows_success_retry_and_rollback() -> None:
    """The demo's output shows a retried success, a rolled-back failure and refused inputs."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout
    assert "retry charge" in out
    assert "=> success: ada is booked" in out
    assert out.index("undo  hotel") < out.index("undo  flight")
    assert "=> failure at step 'charge': card declined by issuer" in out
    assert "nights: Input should be greater than or equal to 1" in out
    assert "card: Input should be a valid string" in out


def test_demo_serializes_two_bookings_for_one_traveller_with_a_lock() -> None:
    """In part 4 the second booking takes the traveller lock only after the first confirmed."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    part = done.stdout.split("== 4.")[1].split("== 5.")[0].splitlines()
    taken = [i for i, line in enumerate(part) if "lock  traveller:dee taken" in line]
    confirmed = [i for i, line in enumerate(part) if "ok    confirm" in line]
    assert len(taken) == 2
    assert len(confirmed) == 2
    assert taken[0] < confirmed[0] < taken[1] < confirmed[1]


def test_demo_locks_only_the_charge_step_for_a_shared_card() -> None:
    """In part 5 both trips reserve before the second charge gets the card lock, at step charge."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    part = done.stdout.split("== 5.")[1].splitlines()
    taken = [i for i, line in enumerate(part) if "lock  card:5555 taken" in line]
    flights = [i for i, line in enumerate(part) if "ok    flight" in line]
    charged = [i for i, line in enumerate(part) if "ok    charge" in line]
    assert len(taken) == 2
    assert all("at step charge" in part[i] for i in taken)
    assert len(flights) == 2
    assert max(flights) < taken[1]  # both trips reserved while the first charge was locked
    assert taken[0] < charged[0]
    assert len(charged) == 2
