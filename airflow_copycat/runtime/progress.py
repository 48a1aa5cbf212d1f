"""Progress of a running task group: what its tasks moved so far, while they run.

Kafka Connect's workers publish their tasks' state to a status topic
(``status.storage.topic``); copycat's tasks do the same with their progress, and
whoever runs the group -- the Airflow run operator, ``copycat run`` / ``copycat
copy`` -- reads it back and logs a line every ``progress.interval.ms``::

    group 0 of orders-import: 3/4 tasks done, 1 running, 1,234,567 records, 456.0 MiB so far

Two halves, one per side of the Spark boundary:

* :class:`TaskProgress` (where a task runs: a Spark executor, or this process).
  :func:`airflow_copycat.runtime.executor.run_task` makes one per task when the
  runner asked for progress (its worker props carry :data:`RUN_KEY`); the task's
  loop hands it, once, a function returning the records and bytes it counted so
  far (the source loop's, the sink loop's, the copier's own counters), and a
  thread of the reporter reads that function every few seconds and publishes a
  small progress record. The loops' hot path does nothing more than it did: the
  counters are the ones the task result is built from.
* :class:`GroupProgress` (where the runner runs): reads the records of its own
  run, adds what Spark says about the job's tasks (the Spark Connect progress
  handler, or the driver's status tracker; :mod:`spark_apps.task_group`), and
  logs a line every interval, then :meth:`GroupProgress.final_line` from the
  group result.

Why a Kafka topic: a task's records and bytes exist only in its executor, and the
runner must see them while the task runs, in all three modes. Accumulators reach
the driver only when a task ends, and do not exist over Spark Connect; the Spark
Connect progress handler and the status tracker know tasks and input bytes, not
our records. Executors that run connectors reach Kafka (the worker props carry
``bootstrap.servers``), also when they cannot reach the Airflow worker (a remote
Spark Connect server), and so does the runner. In process no topic is needed: the
tasks report to the runner directly (``listener``).

A progress record (JSON value, key ``progress-<connector>-<task>`` so a compacted
topic keeps each task's last one)::

    {"run": "3f9c...", "connector": "orders-import", "group": 0, "task": 2, "kind": "source",
     "state": "running" | "done" | "failed", "records": 1200, "bytes": 45678, "time": 1732200000000}

It carries counts only: never a config value, so never a secret. ``run`` is the
id the runner gave this run of the group; the runner keeps only records of its
own run. It starts reading where each partition of the topic ended before the
group started, asked with a watermark query: some Kafka-protocol brokers answer
those wrongly, which here only moves where reading begins (too early costs
reading records that are then skipped), never what is counted.

A thread per task, not a check per batch: it publishes also while the task waits
in ``poll()`` or ``put()``, and the loops pay nothing per record or batch.

Limits: without Kafka (a copy job whose worker props give no
``bootstrap.servers``) records cannot travel from the executors. In process
everything is still reported; over Spark Connect only Spark's tasks done of total
(the copier's bytes are not Spark input bytes); through spark-submit the driver
prints Spark's tasks done of total to its output, which the Spark provider copies
into the task log (in cluster deploy mode that output stays with the driver).
Publishing is best effort: a task whose progress records cannot be written runs
on, and says so once in its log.

Worker keys: ``progress.interval.ms`` (default 30000: a line at least every 30 s;
tasks publish every ``min(interval, 5 s)``), ``status.storage.topic`` (default
``copycat-status``), ``status.storage.partitions`` (5) and
``status.storage.replication.factor`` (-1, the broker's default), as Kafka
Connect's.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from typing import Any, Callable, Mapping

log = logging.getLogger("airflow_copycat.progress")

INTERVAL_KEY = "progress.interval.ms"
DEFAULT_INTERVAL_MS = 30_000
TOPIC_KEY = "status.storage.topic"
DEFAULT_TOPIC = "copycat-status"
PARTITIONS_KEY = "status.storage.partitions"
REPLICATION_KEY = "status.storage.replication.factor"
RUN_KEY = "copycat.progress.run"
"""Worker prop the runner sets for the group's tasks: the id of this run of the group. Without it
tasks publish no progress (nobody would read it)."""
GROUP_KEY = "copycat.progress.group"
"""Worker prop the runner sets for the group's tasks: the group's number, carried in their records."""
PUBLISH_MAX_S = 5.0
"""Tasks publish at least this often while they run (and at the interval, if shorter)."""
SPARK_LINE_PREFIX = "copycat progress: "
"""How a spark-submit driver prefixes the progress lines it prints, so a runner can pick them out."""

Counts = Callable[[], "tuple[int, int]"]
"""A task's ``(records, bytes)`` so far; called from the reporter's thread."""


def interval_s(worker_props: Mapping[str, Any] | None) -> float:
    """The progress interval the worker props ask for, in seconds (``progress.interval.ms``)."""
    value = (worker_props or {}).get(INTERVAL_KEY)
    try:
        ms = DEFAULT_INTERVAL_MS if value in (None, "") else int(value)
    except (TypeError, ValueError):
        ms = 0
    if ms <= 0:
        raise ValueError(f"worker key {INTERVAL_KEY}={value!r}: must be a positive number of milliseconds, "
                         f"e.g. {DEFAULT_INTERVAL_MS}")
    return ms / 1000.0


def status_topic(worker_props: Mapping[str, Any] | None) -> str:
    return str((worker_props or {}).get(TOPIC_KEY) or DEFAULT_TOPIC)


# ------------------------------------------------------------------------------ where a task runs


class TaskProgress:
    """Publishes the progress of one task of one run while it runs.

    Made by the runtime for each task (:func:`task_progress`); the task's loop calls
    :meth:`watch` once, when it has started, and the runtime calls :meth:`close` with
    the task result once the loop returned. ``publish`` gets each progress record (a
    dict); it is called from the reporter's thread and, once, from :meth:`close`, never
    twice at a time. A ``publish`` that raises is not called again.
    """

    def __init__(self, publish: Callable[[dict], None], identity: Mapping[str, Any], every_s: float,
                 close: Callable[[], None] | None = None):
        self._publish, self._close = publish, close
        self.identity = dict(identity)
        self.every_s = every_s
        self._counts: Counts | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._broken = False

    def watch(self, counts: Counts) -> None:
        """Publish ``counts()`` now and then every interval until :meth:`close`. ``counts`` must be
        cheap and safe to call from another thread (it reads counters the loop keeps anyway)."""
        self._counts = counts
        self._send("running", *counts())
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"copycat-progress-{self.identity.get('connector')}-"
                                             f"{self.identity.get('task')}")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                records, nbytes = self._counts()
            except Exception:  # noqa: BLE001 -- a count read mid-update: the next tick reads again
                continue
            self._send("running", records, nbytes)

    def close(self, result: Mapping[str, Any] | None) -> None:
        """Stop publishing; publish the task's final state and counts from its ``result``
        (``None``: the task raised)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        ok = result is not None and result.get("status") == "ok"
        self._send("done" if ok else "failed", int((result or {}).get("records") or 0),
                   int((result or {}).get("bytes") or 0))
        if self._close is not None:
            try:
                self._close()
            except Exception:  # noqa: BLE001 -- progress is best effort
                pass

    def _send(self, state: str, records: int, nbytes: int) -> None:
        if self._broken:
            return
        record = dict(self.identity, state=state, records=int(records), bytes=int(nbytes),
                      time=int(time.time() * 1000))
        with self._lock:
            try:
                self._publish(record)
            except Exception as e:  # noqa: BLE001 -- the task runs on without progress
                self._broken = True
                log.warning("connector %s task %s: progress not published, the run goes on without it: %s",
                            self.identity.get("connector"), self.identity.get("task"), e)


def task_progress(task: Mapping[str, Any], kind: str, worker_props: Mapping[str, Any],
                  listener: Callable[[dict], None] | None = None) -> TaskProgress | None:
    """The reporter of one task, or ``None`` when the runner asked for no progress (no
    :data:`RUN_KEY` in ``worker_props``). Records go to ``listener`` when given (the runner
    is this process), else to the status topic of the worker's Kafka; with neither, ``None``."""
    run = (worker_props or {}).get(RUN_KEY)
    if not run:
        return None
    identity = {"run": str(run), "connector": str((task.get("config") or {}).get("name")),
                "group": (worker_props or {}).get(GROUP_KEY), "task": int(task["task"]), "kind": kind}
    every = min(interval_s(worker_props), PUBLISH_MAX_S)
    if listener is not None:
        return TaskProgress(listener, identity, every)
    if not (worker_props or {}).get("bootstrap.servers"):
        return None
    writer = _StatusWriter(worker_props)
    return TaskProgress(writer.publish, identity, every, close=writer.close)


class _StatusWriter:
    """A small producer of progress records to the status topic (not the task's own producer,
    which may be transactional); made at the first record."""

    def __init__(self, worker_props: Mapping[str, Any]):
        self.worker_props = worker_props
        self.topic = status_topic(worker_props)
        self._producer = None

    def publish(self, record: dict) -> None:
        if self._producer is None:
            from confluent_kafka import Producer

            from .worker import WorkerConfig

            cfg = WorkerConfig(self.worker_props, env={}).producer_config(
                {"enable.idempotence": False, "acks": 1, "linger.ms": 0, "message.timeout.ms": 15000,
                 "enable.sparse.connections": True})
            self._producer = Producer(cfg)
        key = f"progress-{record['connector']}-{record['task']}"
        self._producer.produce(self.topic, key=key.encode(), value=json.dumps(record).encode())
        self._producer.poll(0)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None  # released now: its connections close with it


# ------------------------------------------------------------------------------ where the runner runs


class GroupProgress:
    """Watches one run of one task group and logs a progress line every interval.

    Use it around the run::

        with GroupProgress(group, worker_props, log.info, local=True) as progress:
            result = run_group(group, progress.task_props, secrets, listener=progress.record)
        log.info(progress.final_line(result))

    Give the group's tasks :attr:`task_props` (the worker props plus this run's id), so
    they publish progress. What it learns from:

    * :meth:`record`: with ``local``, the tasks run in this process and report here (the
      ``listener`` of :func:`~airflow_copycat.runtime.executor.run_group`);
    * else the status topic, when ``kafka`` and the worker props give ``bootstrap.servers``:
      read from where it ended before the run (a thread of this object);
    * :meth:`spark`: Spark's tasks done of total, fed by :mod:`spark_apps.task_group`.

    Lines go to ``log`` (called from this object's thread), only once one of these is
    live. Nothing here fails the run: a status topic out of reach is said once, in a line.
    """

    def __init__(self, group: Mapping[str, Any], worker_props: Mapping[str, Any] | None,
                 log: Callable[[str], None], *, local: bool = False, kafka: bool = True):
        self.group = group
        self.worker_props = dict(worker_props or {})
        self.interval = interval_s(self.worker_props)
        self.log = log
        self.run_id = uuid.uuid4().hex[:16]
        self.total = len(group.get("tasks") or [])
        self._local = local
        self._use_kafka = not local and kafka and bool(self.worker_props.get("bootstrap.servers"))
        self._tasks: dict[int, dict] = {}
        self._spark: tuple[int, int, int] | None = None
        self._consumer = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lines = 0
        """Progress lines logged so far."""

    @property
    def task_props(self) -> dict[str, Any]:
        """The worker props to give the group's tasks, once inside the ``with`` block: the
        worker's, plus this run's id so the tasks publish progress -- unless the status topic
        they would publish to could not be opened (then they do not try)."""
        if self._use_kafka and self._consumer is None:
            return dict(self.worker_props)
        return dict(self.worker_props, **{RUN_KEY: self.run_id, GROUP_KEY: self.group.get("group")})

    # the run's sources

    def record(self, rec: Mapping[str, Any]) -> None:
        """A task's progress record (from a task in this process, or the status topic)."""
        if rec.get("run") != self.run_id:
            return
        with self._lock:
            self._tasks[int(rec["task"])] = dict(rec)

    def spark(self, done: int, total: int, running: int = 0) -> None:
        """Spark's view of the group's job: tasks completed, tasks in all, tasks running."""
        with self._lock:
            self._spark = (int(done), int(total), int(running))

    def relay(self, line: str) -> None:
        """A progress line of this group that another process made (a spark-submit driver's,
        :data:`SPARK_LINE_PREFIX` taken off): logged as it is, and counted in :attr:`lines`."""
        self.lines += 1
        self.log(line)

    # lines

    def _label(self) -> str:
        return f"group {self.group.get('group')} of {self.group.get('connector')}"

    def _unit(self) -> str:
        from .jobs import job_of

        return job_of(self.group.get("kind") or "source").unit

    def line(self) -> str | None:
        """The current progress line; ``None`` while nothing reported yet."""
        with self._lock:
            tasks, spark = list(self._tasks.values()), self._spark
        has_records = self._local or self._consumer is not None
        if not tasks and spark is None and not has_records:
            return None
        done = sum(1 for t in tasks if t.get("state") == "done")
        failed = sum(1 for t in tasks if t.get("state") == "failed")
        running = sum(1 for t in tasks if t.get("state") == "running")
        total = self.total
        if spark is not None:  # Spark's counts lag the tasks' own records by up to a report
            finished = max(done + failed, spark[0])
            total = max(total, spark[1])
            done, running = finished - failed, min(max(running, spark[2]), total - finished)
        text = f"{self._label()}: {done + failed}/{total} tasks done"
        if failed:
            text += f" ({failed} failed)"
        if running:
            text += f", {running} running"
        if has_records or tasks:
            records, nbytes = sum(int(t.get("records") or 0) for t in tasks), sum(int(t.get("bytes") or 0)
                                                                                  for t in tasks)
            text += f", {records:,} {self._unit()}, {format_bytes(nbytes)} so far"
        else:
            text += f" so far ({self._unit()} are not reported without Kafka)"
        return text

    def final_line(self, result: Mapping[str, Any]) -> str:
        """The group's last line, from its ``result``: what the group moved in all."""
        tasks = result.get("tasks") or []
        failed = sum(1 for t in tasks if t.get("status") != "ok")
        text = f"{self._label()}: {len(tasks)}/{self.total} tasks done"
        if failed:
            text += f" ({failed} failed)"
        return text + (f", {int(result.get('records') or 0):,} {self._unit()}, "
                       f"{format_bytes(int(result.get('bytes') or 0))} in all")

    # the thread

    def __enter__(self) -> "GroupProgress":
        if self._use_kafka:
            self._consumer = self._open_status_topic()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"copycat-progress-{self.run_id}")
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:  # noqa: BLE001
                pass

    def _run(self) -> None:
        due = time.monotonic() + self.interval
        while not self._stop.is_set():
            wait = max(0.0, min(0.1, due - time.monotonic()))  # short: closing waits for at most one wait
            if self._consumer is not None:
                self._consume(wait)
            else:
                self._stop.wait(wait)
            now = time.monotonic()
            if now >= due and not self._stop.is_set():
                while due <= now:  # one line, also after a stall of several intervals
                    due += self.interval
                line = self.line()
                if line:
                    self.lines += 1
                    self.log(line)

    def _consume(self, timeout: float) -> None:
        try:
            messages = self._consumer.consume(num_messages=500, timeout=timeout)
        except Exception as e:  # noqa: BLE001
            self.log(f"{self._label()}: progress records cannot be read any more: {e}")
            self._consumer = None
            return
        for msg in messages:
            if msg.error() is not None or msg.value() is None:
                continue
            try:
                self.record(json.loads(msg.value()))
            except (ValueError, KeyError, TypeError):
                continue

    def _open_status_topic(self):
        """A consumer of the status topic (created when missing, compacted), at where each
        partition ended before the run; ``None``, said in a line, when it cannot be reached."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        from .kafka import admin_client, ensure_topic, existing_topics
        from .worker import WorkerConfig

        topic = status_topic(self.worker_props)
        try:
            worker = WorkerConfig(self.worker_props, env={})
            admin = admin_client(worker.admin_config())
            known = existing_topics(admin)
            ensure_topic(admin, topic, partitions=int(self.worker_props.get(PARTITIONS_KEY) or 5),
                         replication_factor=int(self.worker_props.get(REPLICATION_KEY) or -1),
                         config={"cleanup.policy": "compact"}, known=known)
            partitions = known.get(topic) or existing_topics(admin).get(topic, 0)
            consumer = Consumer(worker.consumer_config(f"copycat-progress-{self.run_id}",
                                                       {"enable.partition.eof": False}))
            start = []
            for p in range(partitions):
                tp = TopicPartition(topic, p)
                try:  # where reading starts, not what it finds: records of other runs are skipped
                    tp.offset = consumer.get_watermark_offsets(tp, timeout=5, cached=False)[1]
                except Exception:  # noqa: BLE001
                    tp.offset = OFFSET_BEGINNING
                start.append(tp)
            consumer.assign(start)
            return consumer
        except Exception as e:  # noqa: BLE001 -- the run goes on; only its records do not show
            self.log(f"{self._label()}: progress records cannot be read from topic {topic}: "
                     f"{type(e).__name__}: {e}; only Spark's task counts will show")
            return None


def format_bytes(n: int) -> str:
    """``912 bytes``, ``4.2 KiB``, ``456.0 MiB``, ``1.5 GiB``."""
    if n < 1024:
        return f"{n:,} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:,.1f} {unit}"
    return f"{n} bytes"
