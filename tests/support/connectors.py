"""Small connectors used by runtime tests (importable as tests.support.connectors)."""

from __future__ import annotations

import json

from airflow_copycat.connect import (
    ConfigDef, ConfigType, Schema, SinkConnector, SinkTask, SourceConnector, SourceRecord, SourceTask, task_partitions,
)


class CountingSource(SourceConnector):
    """Partitions ``c0..c<n-1>``; each emits records ``0..count-1`` as strings, offset ``{"n": next}``."""

    config_def = (ConfigDef().define("topic", ConfigType.STRING).define("counters", ConfigType.INT, 2)
                  .define("count", ConfigType.INT, 10).define("batch", ConfigType.INT, 3)
                  .define("fail.at", ConfigType.INT, -1))

    def partitions(self):
        return [{"counter": f"c{i}"} for i in range(self.config["counters"])]

    def task_class(self):
        return CountingTask


class CountingTask(SourceTask):
    def start(self, config):
        self.topic = config["topic"]
        self.count = int(config["count"])
        self.batch = int(config["batch"])
        self.fail_at = int(config.get("fail.at", -1))
        self.next = {}
        for p in task_partitions(config):
            off = self.context.offset_storage_reader.offset(p)
            self.next[p["counter"]] = off["n"] if off else 0

    def poll(self):
        out = []
        for name, n in self.next.items():
            while n < self.count and len(out) < self.batch:
                if n == self.fail_at:
                    raise RuntimeError(f"boom at {name}:{n}")
                out.append(SourceRecord(topic=self.topic, key_schema=Schema.STRING, key=name,
                                        value_schema=Schema.STRING, value=f"{name}-{n}",
                                        source_partition={"counter": name}, source_offset={"n": n + 1}))
                n += 1
            self.next[name] = n
        return out or None


class JsonFileSink(SinkConnector):
    """Appends ``[topic, partition, offset, value]`` lines to ``<dir>/task-<first partition>.jsonl``."""

    config_def = (ConfigDef().define("dir", ConfigType.STRING).define("topics", ConfigType.LIST, "")
                  .define("reject.value", ConfigType.STRING, "",
                          doc="put() refuses records with this value through the errant record reporter"))

    def task_class(self):
        return JsonFileSinkTask


class JsonFileSinkTask(SinkTask):
    def start(self, config):
        self.dir = config["dir"]
        self.buf = []

    def put(self, records):
        reject = self.context.config.get("reject.value") or None
        for r in records:
            if reject is not None and r.value == reject:
                self.context.report_error(r, ValueError(f"the destination refuses {reject!r}"))
            else:
                self.buf.append([r.topic, r.kafka_partition, r.kafka_offset, r.value])

    def flush(self, offsets):
        import os

        os.makedirs(self.dir, exist_ok=True)
        if self.buf:
            t, p = self.context.assignment[0]
            with open(os.path.join(self.dir, f"task-{t}-{p}.jsonl"), "a") as f:
                for row in self.buf:
                    f.write(json.dumps(row) + "\n")
        self.buf = []


class PacedSource(SourceConnector):
    """Like :class:`CountingSource`, but each poll first waits ``pause.ms``: a run that lasts long
    enough to report progress (``count`` records per counter, ``batch`` per poll)."""

    config_def = (ConfigDef().define("topic", ConfigType.STRING).define("counters", ConfigType.INT, 2)
                  .define("count", ConfigType.INT, 100).define("batch", ConfigType.INT, 10)
                  .define("pause.ms", ConfigType.INT, 100))

    def partitions(self):
        return [{"counter": f"c{i}"} for i in range(self.config["counters"])]

    def task_class(self):
        return PacedTask


class PacedTask(CountingTask):
    def start(self, config):
        config = dict(config, **{"fail.at": -1})
        super().start(config)
        self.pause = int(config.get("pause.ms", 100)) / 1000.0

    def poll(self):
        import time

        time.sleep(self.pause)
        return super().poll()
