"""The source loop's sending thread: what a task's poll() returned is transformed, encoded and produced
on a thread of its own while the task's thread polls for the next rows.

Contract, for :class:`.source.SourceRun`:

* The task's own methods (``start``, ``poll``, ``commit``, ``stop``) stay on the run's thread,
  as :class:`~..connect.task.SourceTask` promises; only the framework's steps run here, one
  at a time, in the order :meth:`Sender.submit` received them -- so records, batches and the
  offsets of skipped records are handed to the producer and marked in the task's order.
* :meth:`Sender.drain` returns once every step submitted so far has run: the run calls it
  before it commits, so no offset is committed before its records were handed to the producer
  (and, after the producer's flush, acknowledged).
* A step that raises stops the thread: later steps are dropped, and the error is raised again
  on the run's thread by the next :meth:`submit` or :meth:`drain`. Offsets marked by the
  steps that ran before it stay committable, as if the run had failed there.
* At most ``depth`` steps wait at a time (``submit`` blocks): the poll thread runs at most that
  far ahead, which bounds the memory of batches read but not yet sent. A step is one batch, or the
  run of records one ``poll()`` returned (bounded by the connector's own batch size), so up to
  ``depth`` + 1 polls' worth is in memory besides the one being polled.

Where the poll thread mostly waits in C (a database driver reading into Arrow) this overlaps
reading with encoding and producing; on a task whose poll() is Python work it changes little.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Callable

log = logging.getLogger("airflow_copycat.source")

_STOP = object()


class Sender:
    """Runs submitted steps in order on one daemon thread (see the module docstring)."""

    def __init__(self, name: str, depth: int = 2):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            step = self._queue.get()
            try:
                if step is _STOP:
                    return
                if self._error is None:
                    step()
            except BaseException as e:  # noqa: BLE001 -- handed to the run's thread
                self._error = e
            finally:
                self._queue.task_done()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def submit(self, step: Callable[[], None]) -> None:
        """Queue ``step``; raises the error of an earlier step instead, if one failed."""
        self._raise()
        self._queue.put(step)

    def drain(self, *, raise_error: bool = True) -> None:
        """Wait until every submitted step ran; raises the error of a step that failed (unless
        ``raise_error`` is false: the run failed already and commits what the steps before did)."""
        self._queue.join()
        if raise_error:
            self._raise()
        elif self._error is not None:
            log.warning("%s: a step failed too: %s", self._thread.name, self._error)

    def close(self) -> None:
        """Wait for the queued steps (dropped after an error), then end the thread."""
        self._queue.put(_STOP)
        self._thread.join()
