"""Work units and their packing into tasks.

Gobblin's ``CopySource`` makes one work unit per copyable file (or per block with
``DistcpFileSplitter``) and packs them with ``WorstFitDecreasingBinPacking``: sort
by weight, largest first, and put each on the currently lightest bin. With a fixed
number of bins that is Graham's LPT rule: the heaviest task ends at most
``4/3 - 1/(3k)`` times the optimum, and the heaviest and lightest task differ by at
most the largest unit. O(n log n) for the sort plus O(n log k) for the heap.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from .model import CopyableFile, WorkUnit


def work_units(files: Iterable[CopyableFile], block_split_size: int = 0) -> list[WorkUnit]:
    """One :class:`WorkUnit` per file, or, for a file larger than ``block_split_size`` (> 0),
    one per ``block_split_size`` bytes: ``parts`` = their count, the last one shorter.

    A file with converters is never split (a converted stream has no byte ranges; the
    config refuses the combination anyway).
    """
    out: list[WorkUnit] = []
    size = int(block_split_size or 0)
    for f in files:
        if size > 0 and f.size > size and not f.converters:
            parts = -(-f.size // size)
            for k in range(parts):
                offset = k * size
                out.append(WorkUnit(f, part=k, parts=parts, offset=offset, length=min(size, f.size - offset)))
        else:
            out.append(WorkUnit(f))
    return out


def pack(units: Sequence[WorkUnit], max_tasks: int) -> list[list[WorkUnit]]:
    """Units grouped into at most ``max_tasks`` non-empty tasks, balanced by bytes.

    Largest first onto the lightest task (LPT / worst-fit decreasing); an empty file
    weighs 1 byte so that many of them spread too. Deterministic: the result depends
    only on the set of units (ties broken by file id and part, then task index), not
    on their order. Within a task, units come largest first.
    """
    if max_tasks < 1:
        raise ValueError(f"max_tasks must be at least 1, not {max_tasks}")
    if not units:
        return []
    n_tasks = min(max_tasks, len(units))
    ordered = sorted(units, key=lambda u: (-u.bytes, u.file.id, u.file.origin, u.part))
    tasks: list[list[WorkUnit]] = [[] for _ in range(n_tasks)]
    heap = [(0, i) for i in range(n_tasks)]  # (bytes so far, task index): already a heap
    for unit in ordered:
        load, i = heap[0]
        tasks[i].append(unit)
        heapq.heapreplace(heap, (load + max(1, unit.bytes), i))
    return tasks


def task_bytes(task: Iterable[WorkUnit]) -> int:
    """The bytes a task copies."""
    return sum(u.bytes for u in task)
