"""Resolving connector and converter class names.

``connector.class`` may be a Kafka Connect or Confluent class name
(``org.apache.kafka.connect.file.FileStreamSourceConnector``), a short alias
(``FileStreamSource``), one of our classes (``module:Class`` or
``module.Class``), or the name of a third-party plugin registered in the
entry-point group ``airflow_copycat.connectors``. Converters resolve the same way.
"""

from __future__ import annotations

import importlib
from typing import Any, Mapping

from ..connect.connector import Connector, SinkConnector, SourceConnector
from ..connect.converters import Converter
from ..connect.errors import ConnectException

CONNECTOR_ENTRY_POINT_GROUP = "airflow_copycat.connectors"

_FILE_SOURCE = "airflow_copycat.connectors.filestream:FileStreamSourceConnector"
_FILE_SINK = "airflow_copycat.connectors.filestream:FileStreamSinkConnector"
_FILES_SINK = "airflow_copycat.connectors.files:FilesSinkConnector"
_DLQ_REPLAY = "airflow_copycat.connectors.deadletter:DeadLetterReplaySource"
_JDBC_SOURCE = "airflow_copycat.connectors.jdbc:JdbcSourceConnector"
_JDBC_SINK = "airflow_copycat.connectors.jdbc_sink:JdbcSinkConnector"
_POSTGRES_CDC = "airflow_copycat.connectors.postgres_cdc:PostgresCdcSourceConnector"

CONNECTOR_ALIASES: dict[str, str] = {
    "FileStreamSource": _FILE_SOURCE,
    "FileStreamSourceConnector": _FILE_SOURCE,
    "org.apache.kafka.connect.file.FileStreamSourceConnector": _FILE_SOURCE,
    "FileStreamSink": _FILE_SINK,
    "FileStreamSinkConnector": _FILE_SINK,
    "org.apache.kafka.connect.file.FileStreamSinkConnector": _FILE_SINK,
    "FilesSink": _FILES_SINK,
    "FilesSinkConnector": _FILES_SINK,
    "S3SinkConnector": _FILES_SINK,
    "io.confluent.connect.s3.S3SinkConnector": _FILES_SINK,
    "HdfsSinkConnector": _FILES_SINK,
    "io.confluent.connect.hdfs.HdfsSinkConnector": _FILES_SINK,
    "io.confluent.connect.hdfs3.Hdfs3SinkConnector": _FILES_SINK,
    "DeadLetterReplaySource": _DLQ_REPLAY,
    "DeadLetterReplay": _DLQ_REPLAY,
    "JdbcSource": _JDBC_SOURCE,
    "JdbcSourceConnector": _JDBC_SOURCE,
    "io.confluent.connect.jdbc.JdbcSourceConnector": _JDBC_SOURCE,
    "JdbcSink": _JDBC_SINK,
    "JdbcSinkConnector": _JDBC_SINK,
    "io.confluent.connect.jdbc.JdbcSinkConnector": _JDBC_SINK,
    "io.debezium.connector.jdbc.JdbcSinkConnector": _JDBC_SINK,
    "PostgresCdcSource": _POSTGRES_CDC,
    "PostgresConnector": _POSTGRES_CDC,
    "io.debezium.connector.postgresql.PostgresConnector": _POSTGRES_CDC,
}

_JSON = "airflow_copycat.converters.json_converter:JsonConverter"
_STRING = "airflow_copycat.connect.converters:StringConverter"
_BYTES = "airflow_copycat.connect.converters:ByteArrayConverter"
_AVRO = "airflow_copycat.converters.avro.converter:AvroConverter"

CONVERTER_ALIASES: dict[str, str] = {
    "json": _JSON,
    "JsonConverter": _JSON,
    "org.apache.kafka.connect.json.JsonConverter": _JSON,
    "string": _STRING,
    "StringConverter": _STRING,
    "org.apache.kafka.connect.storage.StringConverter": _STRING,
    "bytes": _BYTES,
    "ByteArrayConverter": _BYTES,
    "org.apache.kafka.connect.converters.ByteArrayConverter": _BYTES,
    "avro": _AVRO,
    "AvroConverter": _AVRO,
    "io.confluent.connect.avro.AvroConverter": _AVRO,
}


def _import(path: str):
    if ":" in path:
        module, _, attr = path.partition(":")
    else:
        module, _, attr = path.rpartition(".")
    if not module:
        raise ImportError(f"{path!r} is not a module path")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def resolve_connector(name: str) -> type[Connector]:
    """The connector class for ``name``; raises :class:`ConnectException` saying what was tried."""
    if not name:
        raise ConnectException("connector.class is empty")
    target = CONNECTOR_ALIASES.get(name)
    if target is None:
        from importlib.metadata import entry_points  # only here: half the import time of the command line

        for ep in entry_points(group=CONNECTOR_ENTRY_POINT_GROUP):
            if name in (ep.name, ep.value, ep.value.replace(":", ".")):
                cls = ep.load()
                break
        else:
            cls = None
        if cls is None:
            try:
                cls = _import(name)
            except (ImportError, AttributeError, ValueError) as e:
                raise ConnectException(
                    f"unknown connector.class {name!r}: not a built-in alias ({', '.join(sorted(a for a in CONNECTOR_ALIASES if '.' not in a))}), "
                    f"not a plugin in entry-point group {CONNECTOR_ENTRY_POINT_GROUP!r}, and not importable ({e})"
                ) from None
    else:
        cls = _import(target)
    if not (isinstance(cls, type) and issubclass(cls, (SourceConnector, SinkConnector))):
        raise ConnectException(f"connector.class {name!r} is not a SourceConnector or SinkConnector")
    return cls


def connector_kind(cls: type[Connector]) -> str:
    return "source" if issubclass(cls, SourceConnector) else "sink"


def class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def resolve_converter(name: str) -> type[Converter]:
    target = CONVERTER_ALIASES.get(name, name)
    try:
        cls = _import(target)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConnectException(f"unknown converter {name!r}: {e}") from None
    if not (isinstance(cls, type) and issubclass(cls, Converter)):
        raise ConnectException(f"converter {name!r} is not a Converter")
    return cls


def make_converter(connector_config: Mapping[str, Any], worker_props: Mapping[str, Any], is_key: bool) -> Converter:
    """The key or value converter of a connector: the connector's ``key.converter`` /
    ``value.converter`` if set (with its ``<side>.converter.*`` keys), else the worker's."""
    side = "key.converter" if is_key else "value.converter"
    source = connector_config if connector_config.get(side) else worker_props
    converter = resolve_converter(str(source[side]))()
    prefix = side + "."
    configs = {k[len(prefix):]: v for k, v in source.items() if k.startswith(prefix)}
    converter.configure(configs, is_key)
    return converter
