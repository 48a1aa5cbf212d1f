"""The result format of tasks and task groups.

A task result (``TaskStats.to_dict()``)::

    {"task": 0, "connector": "logs", "kind": "source", "status": "ok" | "failed",
     "error": null | "message", "records": 10, "bytes": 450, "errors": 0,
     "dead_lettered": 0, "filtered": 0, "retries": 0, "duration_s": 1.2, "topics": {"logs": 10},
     "partitions": [{"partition": {"filename": "/x"} | ["topic", 0],
                     "offset_before": {...} | 17 | null, "offset_after": {...} | 27 | null,
                     "records": 10, "bytes": 450}]}

``errors`` counts records that failed and were tolerated (``errors.tolerance=all``),
``dead_lettered`` those of them written to the dead-letter queue, ``filtered`` records
a transform dropped, ``retries`` retried operations. Exactly-once source tasks add
``transactional_id`` and ``transactions`` (commits made).

A group result is ``{"group": 0, "connector": ..., "kind": ..., "tasks": [task results...]}``
plus totals; :func:`summarize` folds group results into the run summary the
finish step records in XCom::

    {"connector": "shop-orders", "kind": "source", "plan_id": "3f9c0a1b2d4e", "status": "ok",
     "window": null | {"start": ..., "end": ..., "offsets_namespace": ...},
     "records": 12, ...totals..., "topics": {"shop-orders": 12},
     "partitions": [{"partition": {"protocol": "1", "table": "orders"}, "offset_before": {...} | null,
                     "offset_after": {...}, "records": 12, "bytes": 3456}],
     "failures": []}

``partitions`` has one entry per source partition (a table, a file) or Kafka
topic-partition: its offsets before and after the run and what the run copied from it.
A windowed run's offsets are the window's own (``window.offsets_namespace``).
"""

from __future__ import annotations

import json

import time
from typing import Any, Callable, Iterable

from ..connect.assignment import canonical


class TaskStats:
    def __init__(self, task: int, connector: str, kind: str):
        self.task, self.connector, self.kind = task, connector, kind
        self.started = time.monotonic()
        self.partitions: dict[str, dict[str, Any]] = {}
        self.topics: dict[str, int] = {}
        self.errors = 0
        self.dead_lettered = 0
        self.filtered = 0
        self.retries = 0
        self.transactional_id: str | None = None
        self.transactions = 0
        self.status = "ok"
        self.error: str | None = None
        self.duration_s: float | None = None
        self.metrics: dict[str, Any] = {}  # what the task counted itself (a sink task's ``metrics``), JSON-able

    def partition(self, partition: Any, offset_before: Any = None) -> dict[str, Any]:
        key = canonical(partition)
        entry = self.partitions.get(key)
        if entry is None:
            entry = self.partitions[key] = {
                "partition": partition,
                "offset_before": offset_before,
                "offset_after": offset_before,
                "records": 0,
                "bytes": 0,
            }
        return entry

    def progress(self) -> tuple[int, int]:
        """``(records, bytes)`` counted so far; safe to call from another thread while the task runs
        (:class:`~.progress.TaskProgress` reads it every few seconds)."""
        parts = list(self.partitions.values())
        return sum(p["records"] for p in parts), sum(p["bytes"] for p in parts)

    def fail(self, error: BaseException) -> None:
        self.status = "failed"
        self.error = f"{type(error).__name__}: {error}"

    def to_dict(self) -> dict[str, Any]:
        parts = list(self.partitions.values())
        out = {
            "task": self.task,
            "connector": self.connector,
            "kind": self.kind,
            "status": self.status,
            "error": self.error,
            "records": sum(p["records"] for p in parts),
            "bytes": sum(p["bytes"] for p in parts),
            "errors": self.errors,
            "dead_lettered": self.dead_lettered,
            "filtered": self.filtered,
            "retries": self.retries,
            "duration_s": round(self.duration_s if self.duration_s is not None else time.monotonic() - self.started, 3),
            "topics": dict(self.topics),
            "partitions": parts,
        }
        if self.transactional_id:
            out.update(transactional_id=self.transactional_id, transactions=self.transactions)
        if self.metrics:
            out["metrics"] = self.metrics
        return out


def scrub_errors(result: Any, scrub: Callable[[Any], str]) -> Any:
    """A copy of a task or group result (any JSON-like value) with every ``error`` text in it passed
    through ``scrub`` (a :class:`~airflow_copycat.connect.secrets.Scrubber`): a task's own error and
    those deeper in it (a copy task's ``failed_files[].error``). Error texts are what a driver or client
    said, and may quote a secret; everything else in a result the package wrote itself."""
    if isinstance(result, dict):
        return {k: scrub(v) if k == "error" and isinstance(v, str) else scrub_errors(v, scrub)
                for k, v in result.items()}
    if isinstance(result, list):
        return [scrub_errors(v, scrub) for v in result]
    return result


_COUNTS = ("records", "bytes", "errors", "dead_lettered", "filtered", "retries")


def _totals(tasks: list[dict]) -> dict[str, int]:
    return {k: sum(t.get(k, 0) for t in tasks) for k in _COUNTS}


def group_result(group: dict, task_results: list[dict]) -> dict[str, Any]:
    return {
        "group": group["group"],
        "connector": group["connector"],
        "kind": group["kind"],
        "status": "ok" if all(t["status"] == "ok" for t in task_results) else "failed",
        **_totals(task_results),
        "tasks": task_results,
    }


def failures(group_results: Iterable[dict]) -> list[str]:
    """One line per failed task, for the exception that fails the run."""
    return [
        f"task {t['task']} of group {g['group']}: {t['error']}"
        for g in group_results
        for t in g["tasks"]
        if t["status"] != "ok"
    ]


def summarize(plan: dict, group_results: Iterable[dict]) -> dict[str, Any]:
    """The run summary: totals, per-topic counts and per-partition offsets before/after."""
    groups = [g for g in group_results if g]
    tasks = [t for g in groups for t in g["tasks"]]
    topics: dict[str, int] = {}
    for t in tasks:
        for name, n in t["topics"].items():
            topics[name] = topics.get(name, 0) + n
    return {
        "connector": plan["connector"],
        "kind": plan["kind"],
        "plan_id": plan.get("id"),
        "window": plan.get("window"),
        "status": "ok" if tasks and all(t["status"] == "ok" for t in tasks) or (not tasks and not plan["groups"]) else "failed",
        "groups": len(groups),
        "tasks": len(tasks),
        **_totals(tasks),
        "errors_by_task": {str(t["task"]): t["errors"] for t in tasks if t["errors"]},
        "topics": topics,
        "partitions": sorted((p for t in tasks for p in t["partitions"]), key=lambda p: canonical(p["partition"])),
        "tables": _tables(tasks),
        "failures": failures(groups),
    }


def _tables(tasks: list[dict]) -> dict[str, dict[str, int]]:
    """Per table, the counts the tasks of a sink that writes tables reported (``metrics.tables``:
    inserted, updated, upserted, deleted), summed over tasks; ``{}`` for other connectors."""
    out: dict[str, dict[str, int]] = {}
    for t in tasks:
        for table, counts in ((t.get("metrics") or {}).get("tables") or {}).items():
            mine = out.setdefault(table, {})
            for k, v in counts.items():
                mine[k] = mine.get(k, 0) + int(v)
    return out


def describe_group(group: dict[str, Any], limit: int = 120) -> str:
    """What a task group runs, in a line for the UI (a mapped run task's label):
    ``group 0: orders, customers`` (tables), ``group 1: app.log, app.log.1`` (files),
    ``group 0: orders[0], orders[1]`` (a sink's Kafka partitions), ``group 2: 3 task(s), 120 work
    unit(s), 1.5 GB`` (a copy job); cut at ``limit`` characters with how many more there are."""
    head = f"group {group.get('group')}: "
    tasks = group.get("tasks") or []
    from .jobs import job_of

    described = job_of(group.get("kind") or "source").describe_tasks(group)
    if described is not None:
        return head + described
    names: list[str] = []
    for t in tasks:
        for p in t.get("partitions") or []:
            name = _partition_name(p)
            if name not in names:
                names.append(name)
    if not names:
        return head + f"{len(tasks)} task(s)"
    text, shown = "", 0
    for name in names:
        more = len(names) - shown
        if shown and len(head) + len(text) + len(name) + 2 > limit - len(f" (+{more} more)"):
            return head + text + f" (+{more} more)"
        text += (", " if shown else "") + name
        shown += 1
    return head + text


def _partition_name(p: Any) -> str:
    if isinstance(p, (list, tuple)) and len(p) == 2:
        return f"{p[0]}[{p[1]}]"
    if isinstance(p, dict):
        for key in ("table", "query", "filename", "file", "path"):
            if p.get(key):
                value = str(p[key])
                name = value.rstrip("/").rsplit("/", 1)[-1] if key in ("filename", "file", "path") else value
                if key == "table":
                    name = value.rsplit(".", 1)[-1]
                return name + (f" {p['split']}" if p.get("split") else "")
    return json.dumps(p, sort_keys=True, default=str)[:40]


def size_text(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"
