"""Sticky, size-balanced assignment of partitions to tasks.

``assign(partitions, max_tasks, previous, weights)`` groups partitions into at
most ``max_tasks`` non-empty task lists:

* **first plan** (no ``previous``): without ``weights``, round robin in the given
  order (what every connector got before weights existed, so their plans do not
  change); with ``weights``, the largest partition first, each to the task with
  the least weight so far (LPT: longest processing time first).
* **re-plan** (``previous``, the lists of the last plan): every partition that is
  still present stays on its task as long as that task index is below
  ``max_tasks``; dropped partitions release their task; new partitions and those
  of removed tasks (index >= ``max_tasks``) go, largest first, to the
  least-loaded task (by weight, else by count). So adding one table or file moves
  nothing else, and lowering ``tasks.max`` moves only the partitions of the tasks
  that are gone. A task left with no partitions is dropped from the result (the
  tasks after it move down one index); no task config is ever empty.

Partitions are any JSON values, compared by their canonical JSON.
"""

from __future__ import annotations

import json
from typing import Any, Sequence


def canonical(value: Any) -> str:
    """The canonical JSON of a partition or offset (sorted keys, no spaces): equal values, equal strings."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def assign(partitions: Sequence[Any], max_tasks: int, previous: Sequence[Sequence[Any]] | None = None,
           weights: Sequence[float] | None = None) -> list[list[Any]]:
    """Partitions grouped into at most ``max_tasks`` non-empty lists, each partition exactly once.

    ``weights`` (same length and order as ``partitions``; e.g. estimated rows) balance the
    tasks by size; ``None`` counts every partition as 1. ``previous`` makes the result sticky
    (see the module docstring). Duplicate partitions are placed once. Raises ``ValueError``
    when ``max_tasks < 1`` or ``weights`` does not match ``partitions``.
    """
    if max_tasks < 1:
        raise ValueError("max_tasks must be at least 1")
    if weights is not None and len(weights) != len(partitions):
        raise ValueError(f"{len(weights)} weights for {len(partitions)} partitions")
    present: dict[str, tuple[Any, float]] = {}
    for i, p in enumerate(partitions):
        present.setdefault(canonical(p), (p, 1.0 if weights is None else max(0.0, float(weights[i]))))
    if not present:
        return []
    if not previous and weights is None:  # round robin: unchanged plans for unweighted connectors
        n = min(max_tasks, len(present))
        return [[p for p, _ in list(present.values())[i::n]] for i in range(n)]
    tasks: list[list[Any]] = [[] for _ in range(max_tasks)]
    load = [0.0] * max_tasks
    placed: set[str] = set()
    for i, group in enumerate((previous or [])[:max_tasks]):
        for p in group:
            c = canonical(p)
            if c in present and c not in placed:
                tasks[i].append(present[c][0])
                load[i] += present[c][1]
                placed.add(c)
    fresh = sorted((v for c, v in present.items() if c not in placed), key=lambda v: -v[1])  # stable: ties keep order
    for p, w in fresh:
        i = min(range(max_tasks), key=lambda k: (load[k], len(tasks[k]), k))
        tasks[i].append(p)
        load[i] += w
    return [t for t in tasks if t]
