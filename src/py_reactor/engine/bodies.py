"""Calling a step's own code (``guard``, ``run``, ``compensate``, ``undo``): sync or async.

The engine is synchronous; a user's body may be either. An ``async def`` body's coroutine is
awaited on the run's loop when the run is on one (``arun``, the asyncio worker), else run on a
loop of its own (``run``, the thread and Celery workers). A plain body called on a loop runs in
the loop's thread pool, so the loop never blocks, as the execution it belongs to: it re-enters
what the execution holds, and a run it starts is part of the execution.
"""

from __future__ import annotations

from collections.abc import Callable
from types import CoroutineType, MethodType
from typing import Any

from py_reactor.aio import in_bridge, is_async_callable, run_coroutine, to_thread
from py_reactor.dsl.step import Step
from py_reactor.engine.context import carried, carried_coroutine

__all__ = ["call_body", "call_hook"]


#: Whether a body (a function, or a method's function) is ``async def``: asked once per body,
#: not at every call (bodies are declared once, with their class or their ``@step``).
_ASYNC: dict[Any, bool] = {}


def call_body(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """What the user's ``fn`` returns (an ``async def`` one's coroutine awaited)."""
    key = fn.__func__ if type(fn) is MethodType else fn
    is_async = _ASYNC.get(key)
    if is_async is None:
        is_async = _ASYNC[key] = is_async_callable(fn)
    if is_async:
        coroutine = fn(*args, **kwargs)
        if not in_bridge():  # on a loop of its own: another task, the same execution
            coroutine = carried_coroutine(coroutine)
        return run_coroutine(coroutine)
    if in_bridge():
        return to_thread(carried(fn), *args, **kwargs)
    result = fn(*args, **kwargs)
    return run_coroutine(result) if type(result) is CoroutineType else result


def call_hook(method: Callable[..., Any], /, *args: Any) -> Any:
    """Call a unit's ``guard``/``run``/``compensate``/``undo``: a Step subclass's is the
    user's code (:func:`call_body`); the other kinds' call the user's code themselves (an
    inline step) or run nested reactors in the engine (compose, map)."""
    if isinstance(getattr(method, "__self__", None), Step):
        return call_body(method, *args)
    return method(*args)
