"""Engine overhead: a 200-step reactor of no-op inline steps vs the same functions in a loop.

Two shapes are measured in the same process:

- ``independent``: 200 steps that take no arguments and depend on nothing;
- ``chain``: 200 steps where each reads the previous step's value through ``Result(...)``
  (so each step also pays for argument resolution and pydantic validation of one argument).

Each shape runs ``--warmup`` times untimed, then ``--rounds`` rounds of ``--runs`` timed runs;
the median run time of the fastest round is reported, with the slowest round alongside. The
baseline calls the same 200 plain functions in a Python loop, passing values along the chain the
same way. Overhead per step is ``(reactor - loop) / steps``.

Run from the repository root: ``python benchmarks/engine_overhead.py``.
"""

from __future__ import annotations

import argparse
import statistics
import time
import types
from collections.abc import Callable
from typing import Any

from py_reactor import Reactor, Result, get_config, step

STEPS = 200
TARGET_US_PER_STEP = 25.0


def _noop() -> None:
    return None


def _pass_on(prev: Any) -> Any:
    return prev


def _named(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """A distinct function object with ``fn``'s code, as real reactors have distinct functions."""
    copy = types.FunctionType(fn.__code__, fn.__globals__, name, fn.__defaults__)
    copy.__annotations__ = dict(fn.__annotations__)
    copy.__qualname__ = name
    return copy


def independent_functions(steps: int) -> list[Callable[..., Any]]:
    return [_named(_noop, f"s{i}") for i in range(steps)]


def chain_functions(steps: int) -> list[Callable[..., Any]]:
    return [_named(_noop if i == 0 else _pass_on, f"s{i}") for i in range(steps)]


def independent_reactor(fns: list[Callable[..., Any]]) -> type[Reactor]:
    namespace = {f"s{i}": step(fn) for i, fn in enumerate(fns)}
    return type("IndependentReactor", (Reactor,), namespace)


def chain_reactor(fns: list[Callable[..., Any]]) -> type[Reactor]:
    namespace: dict[str, Any] = {"s0": step(fns[0])}
    for i, fn in enumerate(fns[1:], start=1):
        namespace[f"s{i}"] = step(fn, prev=Result(f"s{i - 1}"))
    namespace["returns"] = f"s{len(fns) - 1}"
    return type("ChainReactor", (Reactor,), namespace)


def independent_loop(fns: list[Callable[..., Any]]) -> Callable[[], Any]:
    def loop() -> None:
        for fn in fns:
            fn()

    return loop


def chain_loop(fns: list[Callable[..., Any]]) -> Callable[[], Any]:
    first, rest = fns[0], fns[1:]

    def loop() -> Any:
        value = first()
        for fn in rest:
            value = fn(prev=value)
        return value

    return loop


def round_medians(call: Callable[[], Any], args: Any) -> list[float]:
    """Median wall time of ``call()`` in µs for each round of ``args.runs`` timed calls."""
    for _ in range(args.warmup):
        call()
    medians = []
    for _ in range(args.rounds):
        samples = []
        for _ in range(args.runs):
            start = time.perf_counter()
            call()
            samples.append(time.perf_counter() - start)
        medians.append(statistics.median(samples) * 1e6)
    return medians


def measure(label: str, reactor: type[Reactor], loop: Callable[[], Any], args: Any) -> bool:
    """Time one shape, print its report, and say whether it meets the target.

    The reported figure is the best round's median: other processes can only slow a round
    down, so the fastest round is the closest to the engine's own cost. The spread over all
    rounds is printed too, so that a noisy machine shows.
    """
    outcome = reactor.run()
    if not outcome.is_success:
        raise SystemExit(f"{label}: the reactor failed: {outcome.error!r}")
    reactor_rounds = round_medians(reactor.run, args)
    loop_rounds = round_medians(loop, args)
    reactor_us, loop_us = min(reactor_rounds), min(loop_rounds)
    per_step = (reactor_us - loop_us) / args.steps
    worst = (max(reactor_rounds) - min(loop_rounds)) / args.steps
    met = per_step < TARGET_US_PER_STEP
    print(
        f"{label} ({args.steps} steps; best of {args.rounds} rounds, each the median of "
        f"{args.runs} runs, after {args.warmup} warm-up runs)"
    )
    print(f"  reactor run:        {reactor_us:10.1f} µs/run")
    print(f"  plain loop:         {loop_us:10.1f} µs/run")
    print(f"  overhead per step:  {per_step:10.2f} µs (slowest round: {worst:.2f} µs)")
    print(f"  ratio reactor/loop: {reactor_us / loop_us:10.1f}x")
    print(f"  target met:         {'yes' if met else 'NO'}")
    print()
    return met


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS, help="steps per reactor (200)")
    parser.add_argument("--runs", type=int, default=200, help="timed runs per measurement (200)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed runs first (20)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of timed runs (5)")
    args = parser.parse_args()
    if args.steps < 2 or args.runs < 1 or args.warmup < 0 or args.rounds < 1:
        parser.error("need --steps >= 2, --runs >= 1, --warmup >= 0, --rounds >= 1")

    middleware = get_config().middleware
    print(f"target: < {TARGET_US_PER_STEP:g} µs overhead per step")
    print(f"middleware configured: {len(middleware)}")
    print()
    independent = independent_functions(args.steps)
    chain = chain_functions(args.steps)
    results = [
        measure(
            "independent no-input steps",
            independent_reactor(independent),
            independent_loop(independent),
            args,
        ),
        measure(
            "chain (each step reads the previous Result)",
            chain_reactor(chain),
            chain_loop(chain),
            args,
        ),
    ]
    print(f"overall: target {'met' if all(results) else 'NOT met'}")


if __name__ == "__main__":
    main()
