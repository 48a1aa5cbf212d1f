"""Sticky assignment of partitions to tasks.

``assign(partitions, max_tasks, previous)`` keeps every partition that is still
present on the task it had in ``previous``, releases dropped ones, and gives new
partitions to the least-loaded task, so adding one table or file moves nothing
else. Partitions are any JSON values; they are compared by their canonical JSON.
"""

from __future__ import annotations

import json
from typing import Any, Sequence


def canonical(value: Any) -> str:
    """The canonical JSON of a partition or offset (sorted keys, no spaces): equal values, equal strings."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def assign(partitions: Sequence[Any], max_tasks: int, previous: Sequence[Sequence[Any]] | None = None) -> list[list[Any]]:
    """Partitions grouped into at most ``max_tasks`` non-empty lists, each partition exactly once.

    With no ``previous`` the result is round-robin in the given order. With
    ``previous`` (the lists of the last plan), kept partitions stay on their
    task as long as that task index is below ``max_tasks``.
    """
    if max_tasks < 1:
        raise ValueError("max_tasks must be at least 1")
    present = {canonical(p): p for p in partitions}
    n = min(max_tasks, len(present)) or 0
    if n == 0:
        return []
    tasks: list[list[Any]] = [[] for _ in range(max_tasks)]
    placed: set[str] = set()
    for i, group in enumerate(previous or []):
        if i >= max_tasks:
            break
        for p in group:
            c = canonical(p)
            if c in present and c not in placed:
                tasks[i].append(present[c])
                placed.add(c)
    fresh = [p for c, p in present.items() if c not in placed]
    if not previous:
        for i, p in enumerate(fresh):
            tasks[i % n].append(p)
    else:
        for p in fresh:
            min(tasks, key=len).append(p)
    return [t for t in tasks if t]
