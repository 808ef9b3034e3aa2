"""Topological ordering of a reactor's steps, with cycles reported as a readable path."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

__all__ = ["find_cycle", "topological_order"]


def topological_order(
    names: Sequence[str], depends_on: Mapping[str, Sequence[str]]
) -> list[str] | None:
    """Order ``names`` so each comes after what it depends on; ties keep declaration order.

    Returns None when the graph has a cycle.
    """
    position = {name: i for i, name in enumerate(names)}
    waiting = {name: len(set(depends_on.get(name, ()))) for name in names}
    dependents: dict[str, list[str]] = {name: [] for name in names}
    for name in names:
        for dep in set(depends_on.get(name, ())):
            dependents[dep].append(name)
    ready = [(position[n], n) for n in names if waiting[n] == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, name = heapq.heappop(ready)
        order.append(name)
        for dependent in dependents[name]:
            waiting[dependent] -= 1
            if waiting[dependent] == 0:
                heapq.heappush(ready, (position[dependent], dependent))
    return order if len(order) == len(names) else None


def find_cycle(names: Sequence[str], depends_on: Mapping[str, Sequence[str]]) -> list[str]:
    """One cycle as a path that ends where it starts, e.g. ``["a", "b", "a"]``."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for dep in depends_on.get(name, ()):
            if state.get(dep) == 1:
                return [*path[path.index(dep) :], dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        state[name] = 2
        path.pop()
        return None

    for name in names:
        if name not in state:
            found = visit(name)
            if found:
                return found
    return []
