"""Python's cyclic garbage collector while a task runs: fewer, cheaper collections on the data path.

A task's loops allocate a few container objects per record or change (decoded messages, items,
tuples of a cursor's rows) while the process holds many long-lived ones (modules, the driver's and
the framework's objects). With Python's default thresholds a collection of the youngest objects runs
every 700 allocations and a full one, which walks every tracked object of the process, every 100 of
those: measured on the PostgreSQL CDC stream, about 30 % of the poll thread's CPU. Nothing on the
data path relies on the collector to free memory soon (its objects are freed by reference counting;
Arrow and librdkafka buffers are not Python containers).

:func:`task_collection` is what :func:`.executor.run_task` runs a task in: it first moves every
object alive at that point into the permanent generation (``gc.freeze``: full collections no longer
walk them) and raises the youngest generation's threshold to :data:`YOUNG_THRESHOLD` (unless the
process turned automatic collection off with a threshold of 0); when the last task running in the
process ends it restores the thresholds it found and unfreezes what it froze (unless objects were
frozen already when the first task began: a process forked from one that froze its objects, as
Airflow's LocalExecutor does, keeps them frozen, sharing their memory pages with its parent).
Cyclic garbage is still collected, only later (after that many allocations instead of 700). Nested
and concurrent runs (threads of one process) share one setting, counted.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

YOUNG_THRESHOLD = 50_000
"""Allocations (minus deallocations) of container objects between two collections of the youngest
generation while a task runs (Python's default: 700)."""

_lock = threading.Lock()
_active = 0
_saved: tuple[int, int, int] | None = None


_unfreeze = False  # whether the last task's end unfreezes: not when objects were frozen before the first began


@contextmanager
def task_collection() -> Iterator[None]:
    """Runs the block with the collector set for a task (see the module docstring)."""
    global _active, _saved, _unfreeze
    entered = False
    try:
        with _lock:
            if _active == 0:
                _saved = gc.get_threshold()
                # a process forked from one that froze its objects (Airflow's LocalExecutor does) keeps them
                # frozen after the task; a threshold of 0 (automatic collection off) stays 0
                _unfreeze = gc.get_freeze_count() == 0
                gc.freeze()
                if _saved[0]:
                    gc.set_threshold(max(YOUNG_THRESHOLD, _saved[0]), _saved[1], _saved[2])
            _active, entered = _active + 1, True
        yield
    finally:
        if entered:
            with _lock:
                _active -= 1
                if _active == 0 and _saved is not None:
                    gc.set_threshold(*_saved)
                    if _unfreeze:
                        gc.unfreeze()
                    _saved = None
