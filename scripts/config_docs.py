"""Print the configuration reference (Markdown tables) from the ConfigDefs.

``python scripts/config_docs.py`` prints it; ``--write docs/configuration.md`` replaces the
part of docs/configuration.md between ``<!-- config-reference:start -->`` and
``<!-- config-reference:end -->``. A test checks the page is up to date.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_copycat.connectors.filestream import FileStreamSinkConnector, FileStreamSourceConnector  # noqa: E402
from airflow_copycat.connectors.deadletter import DeadLetterReplaySource  # noqa: E402
from airflow_copycat.connectors.files import FilesSinkConnector  # noqa: E402
from airflow_copycat.connectors.jdbc import JdbcSourceConnector  # noqa: E402
from airflow_copycat.connectors.jdbc_sink import JdbcSinkConnector  # noqa: E402
from airflow_copycat.connectors.postgres_cdc import PostgresCdcSourceConnector  # noqa: E402
from airflow_copycat.distcp.config import COPY_CONFIG  # noqa: E402
from airflow_copycat.runtime.connector_config import FRAMEWORK_CONFIG  # noqa: E402

START, END = "<!-- config-reference:start -->", "<!-- config-reference:end -->"

SECTIONS = [
    ("Every connector (framework keys)", FRAMEWORK_CONFIG),
    ("FileStreamSource (`FileStreamSource`, `org.apache.kafka.connect.file.FileStreamSourceConnector`)",
     FileStreamSourceConnector.config_def),
    ("FilesSink (`FilesSink`, `io.confluent.connect.s3.S3SinkConnector`, `io.confluent.connect.hdfs.HdfsSinkConnector`)",
     FilesSinkConnector.config_def),
    ("FileStreamSink (`FileStreamSink`, `org.apache.kafka.connect.file.FileStreamSinkConnector`)",
     FileStreamSinkConnector.config_def),
    ("JdbcSource (`JdbcSource`, `io.confluent.connect.jdbc.JdbcSourceConnector`)", JdbcSourceConnector.config_def),
    ("JdbcSink (`JdbcSink`, `io.confluent.connect.jdbc.JdbcSinkConnector`, "
     "`io.debezium.connector.jdbc.JdbcSinkConnector`)", JdbcSinkConnector.config_def),
    ("PostgresCdcSource (`PostgresCdcSource`, `io.debezium.connector.postgresql.PostgresConnector`)",
     PostgresCdcSourceConnector.config_def),
    ("DeadLetterReplaySource (`DeadLetterReplaySource`; made by `replay_config` / `copycat run --replay-dlq`)",
     DeadLetterReplaySource.config_def),
    ("Copy jobs (Distcp: `copy_task_group`, `copycat copy`)", COPY_CONFIG),
]


def _cell(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v).replace("|", "\\|").replace("\n", " ")


def reference() -> str:
    out = []
    for title, config_def in SECTIONS:
        out += [f"#### {title}", "", "| key | type | default | description |", "|---|---|---|---|"]
        for row in config_def.describe():
            default = "*required*" if row["required"] else ("" if row["default"] in (None, "") else f"`{_cell(row['default'])}`")
            doc = _cell(row["doc"]) + (f" Valid: {_cell(row['valid'])}." if row["valid"] else "")
            out.append(f"| `{row['name']}` | {row['type']} | {default} | {doc} |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    text = reference()
    if len(argv) == 2 and argv[0] == "--write":
        path = Path(argv[1])
        doc = path.read_text(encoding="utf-8")
        head, rest = doc.split(START, 1)
        _, tail = rest.split(END, 1)
        path.write_text(f"{head}{START}\n{text}\n{END}{tail}", encoding="utf-8")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
