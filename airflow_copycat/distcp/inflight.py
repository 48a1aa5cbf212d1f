"""Several work units of one task in flight: :func:`copy_units`.

A task copies its units one after another in the streaming design; for many
small files that leaves the disk and the second core idle while one file's
directories are made, its marker written and its temporaries renamed. Here up
to ``threads`` units (:data:`FILES_IN_FLIGHT`) are copied at once, each by
:func:`.copier.copy_unit` exactly as alone -- its own attempt directory, its own
temporaries, its own result -- so nothing of the staging contract changes: the
units are independent (two parts of one split file are two byte ranges, two
part files and two records). The units of one call share one
:class:`.staged.Session`: one scan per set dir of what is staged, one done journal
per set dir for the files staged flat. The system calls that move bytes, make
directories and rename, and hashlib on large buffers, release the GIL.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Iterator

from .copier import copy_unit
from .model import Staging, WorkUnit
from .staged import Session

FILES_IN_FLIGHT = 4
"""Units one task copies at a time (threads)."""


def copy_units(units: Iterable[WorkUnit], source_fs, target_fs, staging: Staging, config: dict, *,
               progress: Callable[[int], Any] | None = None, threads: int | None = None,
               fast: bool = True) -> Iterator[tuple[WorkUnit, dict[str, Any]]]:
    """Copy ``units`` with :func:`.copier.copy_unit` (same arguments), up to ``threads`` at a time;
    ``threads``: default :data:`FILES_IN_FLIGHT`. Yields ``(unit, result)`` in the order of ``units``, each as soon as it and every unit before
    it are done.

    ``progress(n)``: ``n`` is the task's source bytes so far -- the bytes of the units done
    (``unit.bytes``, reused or failed ones too) plus what the running ones have read --
    called from the copying threads (one at a time), about every 64 MiB of a unit and
    when a unit ends. A bug (an exception :func:`copy_unit` raises) is raised here once the
    units started before it have ended; the units not started yet are not copied."""
    units = list(units)
    threads = FILES_IN_FLIGHT if threads is None else threads
    lock = threading.Lock()
    running: dict[int, int] = {}
    done = [0]

    def one(i: int) -> dict[str, Any]:
        unit = units[i]

        def unit_progress(n: int) -> None:
            with lock:
                running[i] = n
                if progress is not None:
                    progress(done[0] + sum(running.values()))

        try:
            return copy_unit(unit, source_fs, target_fs, staging, config,
                             progress=unit_progress if progress is not None else None, fast=fast, session=session)
        finally:
            with lock:
                running.pop(i, None)
                done[0] += unit.bytes
                if progress is not None:
                    progress(done[0] + sum(running.values()))

    session = Session(target_fs, staging)
    try:
        if threads <= 1 or len(units) <= 1:
            for i, unit in enumerate(units):
                yield unit, one(i)
            return
        pool = ThreadPoolExecutor(max_workers=min(threads, len(units)), thread_name_prefix="copycat-copy")
        try:
            futures = [pool.submit(one, i) for i in range(len(units))]
            for unit, future in zip(units, futures):
                yield unit, future.result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    finally:
        session.close()
