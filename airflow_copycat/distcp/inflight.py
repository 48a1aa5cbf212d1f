"""Several work units of one task in flight: :func:`copy_units`.

A task copies its units one after another in the streaming design; for large
files that leaves the second core idle while the kernel copies one file. Here
the units of at least :data:`SMALL_UNIT` bytes are copied by up to ``threads``
threads (:data:`FILES_IN_FLIGHT`) while the calling thread copies the smaller
ones itself, one after another. Each unit is copied by
:func:`.copier.copy_unit` exactly as alone -- its own attempt directory, its own
temporaries, its own result -- so nothing of the staging contract changes: the
units are independent (two parts of one split file are two byte ranges, two
part files and two records). The units of one call share one
:class:`.staged.Session`: one scan per set dir of what is staged, one done journal
per set dir for the files staged flat. The system calls that move bytes, make
directories and rename, and hashlib on large buffers, release the GIL.

Why small units stay in the calling thread: a small file's copy is a dozen
system calls around some Python, and every one of them hands the GIL to another
thread that waits for it; with four threads on small files the hand-overs cost
more than the copies (2,000 files of 100 bytes: 0.36-0.41 s in four threads,
0.15 s in one). A large unit spends its time in the kernel (``copy_file_range``)
or in hashlib, without the GIL, so two of them in flight use two cores.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterable, Iterator

from .copier import copy_unit
from .model import Staging, WorkUnit
from .staged import Session

FILES_IN_FLIGHT = 4
"""Large units one task copies at a time (threads), beside the small ones."""

SMALL_UNIT = 256 << 10
"""Units of fewer bytes are copied by the calling thread of :func:`copy_units`, one at a time: their
kernel copy takes about as long as the GIL hand-overs a thread adds to a file (~0.1 ms)."""


def copy_units(units: Iterable[WorkUnit], source_fs, target_fs, staging: Staging, config: dict, *,
               progress: Callable[[int], Any] | None = None, threads: int | None = None,
               fast: bool = True, small: int | None = None) -> Iterator[tuple[WorkUnit, dict[str, Any]]]:
    """Copy ``units`` with :func:`.copier.copy_unit` (same arguments): those of at least ``small``
    bytes (default :data:`SMALL_UNIT`) up to ``threads`` at a time (default :data:`FILES_IN_FLIGHT`)
    in threads of their own, the others in the calling thread, in order, meanwhile; ``threads`` 1:
    every unit in the calling thread, one after another. Yields ``(unit, result)`` in the order of
    ``units``, each once it and every unit before it are done (looked at after each unit the
    calling thread copies, and while it waits).

    ``progress(n)``: ``n`` is the task's source bytes so far -- the bytes of the units done
    (``unit.bytes``, reused or failed ones too) plus what the running ones have read --
    called from the copying threads (one at a time), about every 64 MiB of a unit and
    when a unit ends. A bug (an exception :func:`copy_unit` raises) is raised here after the
    results of the units before it, once every unit started has ended; the units not started
    yet are not copied. Which units those are depends on sizes and timing: the large units are
    queued to the threads at once (a bug in a small unit cancels those after it not yet started),
    and the calling thread goes on with its small units until it looks at a failed large one --
    the units copied past a bug are staged only, reused or dropped by the next run."""
    units = list(units)
    threads = FILES_IN_FLIGHT if threads is None else threads
    small = SMALL_UNIT if small is None else small
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
        large = [i for i, unit in enumerate(units) if unit.bytes >= small] if threads > 1 else []
        if not large:
            for i, unit in enumerate(units):
                yield unit, one(i)
            return
        pool = ThreadPoolExecutor(max_workers=min(threads, len(large)), thread_name_prefix="copycat-copy")
        try:
            yield from _alongside(units, {i: pool.submit(one, i) for i in large}, one)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    finally:
        session.close()


def _alongside(units: list[WorkUnit], futures: dict[int, Future],
               one: Callable[[int], dict[str, Any]]) -> Iterator[tuple[WorkUnit, dict[str, Any]]]:
    """Copy the units without a future with ``one`` in this thread while the pool runs the others;
    yield every result in order as soon as the ones before it are out. A bug of a unit copied here:
    the pool's units after it that have not started are cancelled, those before it are waited for
    and yielded, then it is raised (a bug in the pool is raised by ``result()`` in its turn)."""
    results: dict[int, dict[str, Any]] = {}
    out = 0  # the next unit to yield
    for i in range(len(units)):
        if i in futures:
            continue
        try:
            results[i] = one(i)
        except Exception:
            for j, future in futures.items():
                if j > i:
                    future.cancel()
            for j in range(out, i):
                yield units[j], results.pop(j) if j in results else futures[j].result()
            raise
        while out < len(units):
            if out in results:
                yield units[out], results.pop(out)
            elif out in futures and futures[out].done():
                yield units[out], futures[out].result()
            else:
                break
            out += 1
    for j in range(out, len(units)):
        yield units[j], results.pop(j) if j in results else futures[j].result()
