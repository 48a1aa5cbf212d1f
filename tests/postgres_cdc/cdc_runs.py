"""Bounded runs of the PostgreSQL CDC source through the real source loop, and what they wrote
(importable as ``tests.postgres_cdc.cdc_runs``; also the entry point of the crash tests' child
process: ``python cdc_runs.py CONFIG_JSON WORKER_JSON KILL`` runs once, where KILL is ``none``,
``after-offsets``: SIGKILL itself right after the framework committed the offsets, before the
task confirms the slot, or ``commit-N``: SIGKILL itself at the task's N-th ``commit()``)."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from airflow_copycat.runtime.kafka import read_to_end  # noqa: E402
from airflow_copycat.runtime.connector_config import restore_secrets  # noqa: E402
from airflow_copycat.runtime.offsets import offset_store  # noqa: E402
from airflow_copycat.runtime.plan import make_plan  # noqa: E402
from airflow_copycat.runtime.source import SourceRun  # noqa: E402
from airflow_copycat.runtime.worker import WorkerConfig  # noqa: E402

PARTITION_KEY = "server"


class CdcRuns:
    """Runs of one connector config; :meth:`read` gives the JSON messages (key, value) a topic got since the last read."""

    def __init__(self, config: dict, worker_props: dict):
        self.config, self.worker_props = config, worker_props
        self.bootstrap = worker_props["bootstrap.servers"]
        self._positions: dict[str, int] = {}

    def run(self, *, ok: bool = True, **overrides) -> dict:
        """One bounded run (plan + the one task); returns the task result plus the task's ``metrics``."""
        config = {**self.config, **overrides}
        worker = WorkerConfig(self.worker_props, env={})
        plan = make_plan(config, worker)
        tasks = [t for g in plan["groups"] for t in g["tasks"]]
        assert len(tasks) == 1
        self.plan = plan
        # the plan hides secrets; the runner puts them back from the connector config, as the operators do
        task = dict(tasks[0], config=restore_secrets(tasks[0]["config"], config))
        run = SourceRun(task, worker)
        result = run.run()
        result["metrics"] = dict(getattr(run.task, "metrics", None) or {})
        if ok:
            assert result["status"] == "ok", result.get("error")
        return result

    def run_tasks(self, tasks_max: int, *, order: str = "together", ok: bool = True, **overrides) -> list[dict]:
        """One bounded run of every task of a plan with ``tasks.max=tasks_max``: ``together`` (each task
        in a thread of its own, as a group's Spark tasks), ``stream-first`` or ``stream-last`` (one after
        the other, the stream task -- the one holding the server partition -- first or last). Returns the
        task results (with ``metrics`` and ``streams``), in task order."""
        import threading

        config = {**self.config, "tasks.max": str(tasks_max), **overrides}
        worker = WorkerConfig(self.worker_props, env={})
        self.plan = plan = make_plan(config, worker)
        tasks = [t for g in plan["groups"] for t in g["tasks"]]
        results: dict[int, dict] = {}

        def one(i, task):
            run = SourceRun(dict(task, config=restore_secrets(task["config"], config)), worker)
            result = run.run()
            result["metrics"] = dict(getattr(run.task, "metrics", None) or {})
            result["streams"] = any("table" not in p for p in task["partitions"])
            results[i] = result

        if order == "together":
            threads = [threading.Thread(target=one, args=(i, t)) for i, t in enumerate(tasks)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:
            streams_first = sorted(range(len(tasks)), key=lambda i: all("table" in p for p in tasks[i]["partitions"]))
            for i in (streams_first if order == "stream-first" else streams_first[::-1]):
                one(i, tasks[i])
        out = [results[i] for i in range(len(tasks))]
        if ok:
            assert all(r["status"] == "ok" for r in out), [r.get("error") for r in out]
        return out

    def read(self, topic: str, *, schemas: bool = False) -> list[tuple]:
        """``(key, value)`` of the messages ``topic`` got since the last read (JSON payloads; ``None`` for
        tombstones; with ``schemas`` the whole JSON documents, ``{"schema": ..., "payload": ...}``)."""
        start = self._positions.get(topic, 0)
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "cdc-check", "enable.partition.eof": True,
                      "isolation.level": "read_committed"})
        try:
            md = c.list_topics(topic, timeout=10).topics.get(topic)
            if md is None or md.error is not None:
                return []
            msgs = list(read_to_end(c, [TopicPartition(topic, 0, start)]))
        finally:
            c.close()
        if msgs:
            self._positions[topic] = msgs[-1].offset() + 1

        def payload(raw):
            return None if raw is None else json.loads(raw) if schemas else json.loads(raw)["payload"]

        return [(payload(m.key()), payload(m.value())) for m in msgs]

    def committed(self, table: str | None = None) -> dict | None:
        """The connector's committed offset of partition ``{"server": <topic.prefix>}`` (the stream's), or
        with ``table`` of the table's snapshot partition ``{"server": ..., "table": table}``."""
        worker = WorkerConfig(self.worker_props, env={})
        store = offset_store(worker)
        try:
            offsets = store.read(self.config["name"])
        finally:
            store.close()
        for entry in offsets.values():
            partition = entry.get("partition") or {}
            if PARTITION_KEY in partition and partition.get("table") == table:
                return entry["offset"]
        return None


def _child(config_json: str, worker_json: str, kill: str) -> int:
    """One run in this process, dying by SIGKILL inside the task's commit() (before it confirms the slot):
    ``commit-N`` at the N-th call; ``after-offsets`` once the framework committed offsets that reach the
    slot's data."""
    from airflow_copycat.connectors.postgres_cdc.source import PostgresCdcSourceTask

    calls: list[int] = []

    def due(task) -> bool:
        """Whether this commit() is the one to die at."""
        if kill.startswith("commit-"):  # the n-th commit(), before the task confirms anything
            calls.append(1)
            return len(calls) == int(kill.split("-")[1])
        # after-offsets: the framework committed offsets reaching the slot's data, not yet confirmed
        return kill == "after-offsets" and task._confirmable_polled > task._confirmed and \
            task._read is not None and task._read.exhausted

    def commit(self):
        if due(self):
            sys.stdout.write("killed\n")
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self)

    original = PostgresCdcSourceTask.commit
    PostgresCdcSourceTask.commit = commit
    result = CdcRuns(json.loads(config_json), json.loads(worker_json)).run(ok=False)
    print(json.dumps({"status": result["status"], "records": result["records"]}))
    return 0


if __name__ == "__main__":
    sys.exit(_child(*sys.argv[1:4]))
