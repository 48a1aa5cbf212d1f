"""Log files for the Spark tests, and the string payloads a FileStreamSource wrote for them to Kafka."""

from __future__ import annotations

import json
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from airflow_copycat.runtime.kafka import read_to_end


def write_logs(directory: Path, files: int, lines: int) -> str:
    """``files`` files ``app-<f>.log`` of ``lines`` lines ``file <f> line <i>`` in ``directory``; their glob."""
    directory.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        (directory / f"app-{f}.log").write_text("".join(f"file {f} line {i}\n" for i in range(lines)))
    return str(directory / "*.log")


def topic_payloads(bootstrap: str, topic: str, partitions: int) -> list[str]:
    """The JsonConverter payload of every record of ``topic``, partition by partition."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.partition.eof": True})
    try:
        tps = [TopicPartition(topic, p, 0) for p in range(partitions)]
        return [json.loads(m.value())["payload"] for m in read_to_end(c, tps)]
    finally:
        c.close()
