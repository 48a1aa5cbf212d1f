"""A source connector that emits exactly the records a test describes (importable as
``tests.support.record_sources``).

``FixedRecordsSource`` reads its records from ``records`` (inline JSON) or ``records.file``
(a JSON file), a list of objects::

    {"topic": "orders",                       # else the connector's "topic"
     "key_schema": {"type": "string", "optional": false}, "key": "k1",
     "value_schema": {"type": "struct", "fields": [...], "optional": false},
     "value": {"id": 42, "cost": 4000},
     "headers": [["source", "RedditSource"], ["trace", null]],
     "timestamp": 1626102708861,
     "partition": 0}                          # Kafka partition; absent: the producer chooses

Schemas are written in Kafka Connect's JSON schema format (the ``schema`` half of the
JsonConverter envelope) and values as its payload; the connector builds the Connect
schema and value (Struct, logical types...) with :class:`JsonConverter`, exactly as a
sink would read ``{"schema": ..., "payload": ...}``. A missing or null ``*_schema`` makes
that side schemaless: the JSON value as is (object -> dict, array -> list). A null
``value`` is a tombstone. Header values are text (UTF-8) or null.

One source partition, ``{"records": <connector name>}``; the offset after record ``i`` is
``{"index": i + 1}``, so a rerun resumes after the last record handled (emitted, dropped
by a transform or dead-lettered) and emits nothing when all were.
"""

from __future__ import annotations

import json
from typing import Any

from airflow_copycat.connect import (
    ConfigDef,
    ConfigException,
    ConfigProblem,
    ConfigType,
    SourceConnector,
    SourceRecord,
    SourceTask,
)
from airflow_copycat.converters.json_converter import JsonConverter


def load_records(config: dict[str, Any]) -> list[dict]:
    """The record descriptions of ``records`` (inline JSON) or ``records.file`` (path)."""
    inline, path = config.get("records") or "", config.get("records.file") or ""
    if bool(inline) == bool(path):
        raise ConfigException([ConfigProblem("records", inline or None,
                                             "give exactly one of records (inline JSON) and records.file (a path)")])
    text = inline
    if path:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    records = json.loads(text) if isinstance(text, str) else text
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ConfigException([ConfigProblem("records.file" if path else "records", path or inline,
                                             "must be a JSON list of record objects")])
    return records


class FixedRecordsSource(SourceConnector):
    """Emits the described records once, in order; see the module docstring."""

    config_def = (ConfigDef().define("records", ConfigType.STRING, "").define("records.file", ConfigType.STRING, "")
                  .define("topic", ConfigType.STRING, ""))

    def validate(self, config):
        try:
            load_records(config)  # at plan time, not in the task
        except ConfigException as e:
            return e.problems
        except (OSError, ValueError) as e:
            return [ConfigProblem("records.file" if config.get("records.file") else "records", None, str(e))]
        return []

    def partitions(self):
        return [{"records": str(self.config["name"])}]

    def exactly_once_support(self, config):
        return True  # the same records from the same offset, every time

    def task_class(self):
        return FixedRecordsTask


class FixedRecordsTask(SourceTask):
    def start(self, config):
        self.partition = {"records": str(config["name"])}
        self.default_topic = config.get("topic") or ""
        self.records = load_records(config)
        offset = self.context.offset_storage_reader.offset(self.partition)
        self.next = int(offset["index"]) if offset else 0
        self.converter = JsonConverter()
        self.converter.configure({"schemas.enable": True}, False)

    def _connect(self, topic: str, schema: Any, payload: Any):
        """(Connect schema, Connect value) of a JSON schema and payload; schemaless if no schema."""
        if schema is None:
            return None, payload
        envelope = json.dumps({"schema": schema, "payload": payload}).encode()
        out = self.converter.to_connect_data(topic, envelope)
        return out.schema, out.value

    def poll(self):
        if self.next >= len(self.records):
            return None
        out = []
        for i in range(self.next, len(self.records)):
            r = self.records[i]
            topic = r.get("topic") or self.default_topic
            key_schema, key = self._connect(topic, r.get("key_schema"), r.get("key"))
            value_schema, value = self._connect(topic, r.get("value_schema"), r.get("value"))
            headers = [(name, None if v is None else str(v).encode("utf-8")) for name, v in r.get("headers") or []]
            out.append(SourceRecord(topic=topic, kafka_partition=r.get("partition"), key_schema=key_schema, key=key,
                                    value_schema=value_schema, value=value, timestamp=r.get("timestamp"),
                                    headers=headers, source_partition=self.partition,
                                    source_offset={"index": i + 1}))
        self.next = len(self.records)
        return out
