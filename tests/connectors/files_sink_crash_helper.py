"""Runs the files sink in its own process and SIGKILLs it at a chosen point of the commit protocol.

Usage::

    python files_sink_crash_helper.py STORE KILL START:END CHUNK [key=value ...]

Opens topic-partition ``t``/0, resumes where the destination says (else at
START), puts records START..END-1 (``{"id": offset, "ts": ...}``) in chunks of
CHUNK with a non-final ``pre_commit`` after each chunk and a final one at the
end, then prints the committed offsets as JSON. ``key=value`` pairs override
the sink config. KILL is ``none`` or ``<step>:<n>[:stop]``: SIGKILL this process
(with ``:stop``, SIGSTOP it: a stalled attempt that a test resumes with SIGCONT)
right after the n-th completed

* ``rename`` -- staging → final rename of a published file (``AtomicFiles.rename``),
* ``wal`` / ``marker`` -- rename of the publish log / marker into place,
* ``stage`` -- staging write of a finished file.

Only this process is patched; the test reruns the sink normally afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


from airflow_copycat.connect import SinkRecord, SinkTaskContext  # noqa: E402
from airflow_copycat.connectors.files import FilesSinkConnector, FilesSinkTask  # noqa: E402
from airflow_copycat.connectors.files import publish  # noqa: E402
from airflow_copycat.storage import AtomicFiles  # noqa: E402

BASE_TS = 1_700_000_000_000


def make_record(offset: int, topic: str = "t", partition: int = 0) -> SinkRecord:
    """The record at ``offset``: value ``{"id": offset, "ts": ...}``, timestamp 1 s apart."""
    ts = BASE_TS + offset * 1000
    return SinkRecord(topic=topic, kafka_partition=partition, value={"id": offset, "ts": ts},
                      timestamp=ts, kafka_offset=offset)


def install_kill(kill: str) -> None:
    if kill == "none":
        return
    step, n, *mode = kill.split(":")
    n = int(n)
    sig = signal.SIGSTOP if mode == ["stop"] else signal.SIGKILL
    seen = {"count": 0}

    def hit():
        seen["count"] += 1
        if seen["count"] == n:
            sys.stdout.flush()
            os.kill(os.getpid(), sig)

    if step == "stage":
        real_stage = publish.PublishStore.stage

        def stage(self, tp, rel, data):
            real_stage(self, tp, rel, data)
            hit()

        publish.PublishStore.stage = stage
        return

    marker = {"rename": "/_copycat/staging/", "wal": "/_copycat/wal/", "marker": "/_copycat/offsets/"}[step]
    real_rename = AtomicFiles.rename

    def rename(self, src, dst):
        real_rename(self, src, dst)
        if marker in str(src):
            hit()

    AtomicFiles.rename = rename


def main(argv: list[str]) -> None:
    store, kill, span, chunk, *overrides = argv
    start, end = (int(x) for x in span.split(":"))
    raw = {"topics": "t", "store.url": store, "format.class": "json", "flush.size": "3"}
    raw.update(kv.split("=", 1) for kv in overrides)
    config = FilesSinkConnector.parse_config(raw)
    connector = FilesSinkConnector()
    connector.start(config)
    task_config = connector.task_configs(1)[0]
    install_kill(kill)
    task = FilesSinkTask()
    context = SinkTaskContext(task_config, [("t", 0)])
    task.initialize(context)
    task.start(task_config)
    task.open([("t", 0)])
    position = context.take_rewinds().get(("t", 0), start)
    chunk = int(chunk)
    for lo in range(position, end, chunk):
        hi = min(lo + chunk, end)
        task.put([make_record(o) for o in range(lo, hi)])
        task.pre_commit({("t", 0): hi})
    committed = task.pre_commit({("t", 0): max(position, end)}, final=True)
    task.close([("t", 0)])
    task.stop()
    print(json.dumps({f"{t}-{p}": o for (t, p), o in committed.items()}))


if __name__ == "__main__":
    main(sys.argv[1:])
