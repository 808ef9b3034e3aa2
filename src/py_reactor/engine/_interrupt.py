"""Interrupt steps as the engine runs them: pause the run, or take the payload of a resume."""

from __future__ import annotations

from typing import Any

from py_reactor.dsl.reactor import StepPlan
from py_reactor.engine._run import Run

__all__ = ["reach_interrupt"]


def reach_interrupt(run: Run, plan: StepPlan) -> Any:
    """The run reached the interrupt step ``plan``: see the module docstring."""
    raise NotImplementedError(plan.name)  # built in this change
