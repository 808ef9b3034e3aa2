"""Declaring workflows: reactors, steps, argument sources, signals, retry policies. No I/O."""

from py_reactor.dsl.compose import compose
from py_reactor.dsl.coordination import (
    with_lock,
    with_ordered_lock,
    with_period,
    with_rate_limit,
    with_semaphore,
)
from py_reactor.dsl.declaration import StepDeclaration, StepKind
from py_reactor.dsl.map import MapResult, map_step
from py_reactor.dsl.reactor import Reactor, StepPlan
from py_reactor.dsl.retries import RetryPolicy, retries
from py_reactor.dsl.signals import Failure, Halt, Signal, Skipped, Success
from py_reactor.dsl.sources import Element, Input, Result, Source, Value
from py_reactor.dsl.step import Step, step
from py_reactor.dsl.units import async_reactor, async_step

__all__ = [
    "Element",
    "Failure",
    "Halt",
    "Input",
    "MapResult",
    "Reactor",
    "Result",
    "RetryPolicy",
    "Signal",
    "Skipped",
    "Source",
    "Step",
    "StepDeclaration",
    "StepKind",
    "StepPlan",
    "Success",
    "Value",
    "async_reactor",
    "async_step",
    "compose",
    "map_step",
    "retries",
    "step",
    "with_lock",
    "with_ordered_lock",
    "with_period",
    "with_rate_limit",
    "with_semaphore",
]
