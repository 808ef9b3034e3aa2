"""What the benchmark scripts print with: a target's verdict and a percentile."""

from __future__ import annotations

__all__ = ["pct", "verdict"]


def verdict(ok: bool) -> str:
    """``PASS`` or ``FAIL``, for a target line."""
    return "PASS" if ok else "FAIL"


def pct(samples: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``samples``, by the nearest rank."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]
