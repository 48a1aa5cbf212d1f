"""FileStream sink: append one line per record value to a local file (Kafka Connect's ``FileStreamSink``).

Compatible with ``org.apache.kafka.connect.file.FileStreamSinkConnector``: key
``file`` names the file, ``topics`` / ``topics.regex`` the topics (the
framework assigns their Kafka partitions to the tasks). Each record becomes one
line, ``\\n``-terminated:

=====================================  ===========================================
record value                           line
=====================================  ===========================================
``str``                                as is (a value holding ``\\n`` spans lines)
``None``                               ``null`` (as Java's ``println`` writes it)
``bool``                               ``true`` / ``false``
``dict``, ``list``, :class:`Struct`    compact JSON (``{"id":1}``); dates and times
                                       ISO 8601, ``Decimal`` as a string, bytes base64
``bytes``                              the bytes as they are
anything else                          ``str(value)``
=====================================  ===========================================

``put`` appends each batch with one ``write`` to a file opened ``O_APPEND``,
so on a local POSIX filesystem the lines of several tasks writing the same
file do not interleave mid-line; ``flush`` (and so ``pre_commit``) ``fsync``\\ s.

Delivery is **at-least-once**: offsets are committed only after the lines are
fsynced, but a task that fails between writing and committing has its records
delivered again and appended a second time. Writing to standard output when
``file`` is empty (Kafka Connect's default) is not supported: an executor's
stdout is its log.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal as _decimal
import json
import logging
import os
from typing import Any, Mapping, Sequence

from airflow_copycat.connect import (
    ConfigDef,
    ConfigProblem,
    ConfigType,
    ConnectException,
    DataException,
    SinkConnector,
    SinkRecord,
    SinkTask,
    Struct,
)
from airflow_copycat.connect.config import non_empty, valid_regex

from .source import line_encoding

log = logging.getLogger(__name__)

FILE_CONFIG = "file"
TOPICS_CONFIG = "topics"
TOPICS_REGEX_CONFIG = "topics.regex"
ENCODING_CONFIG = "encoding"

CONFIG_DEF = (
    ConfigDef()
    .define(FILE_CONFIG, ConfigType.STRING, validator=non_empty, importance="high",
            doc="Destination file: one line per record is appended to it (created if missing; its directory "
                "must exist). Kafka Connect writes to stdout when this is empty; Copycat requires a file.")
    .define(TOPICS_CONFIG, ConfigType.LIST, [], importance="high",
            doc="Comma-separated list of topics to copy. Set this or topics.regex.")
    .define(TOPICS_REGEX_CONFIG, ConfigType.STRING, "", validator=valid_regex, importance="high",
            doc="Regular expression; every topic whose whole name matches is copied. Set this or topics.")
    .define(ENCODING_CONFIG, ConfigType.STRING, "utf-8", validator=line_encoding, importance="low",
            doc="Character set the lines are written in.")
)


class FileStreamSinkConnector(SinkConnector):
    """Appends the values of the records of some topics to one local file, a line each."""

    config_def = CONFIG_DEF
    exactly_once = False

    def task_class(self) -> type:
        return FileStreamSinkTask

    def validate(self, config: dict[str, Any]) -> list[ConfigProblem]:
        """Exactly one of ``topics`` and ``topics.regex``; a ``file`` that is not a directory."""
        problems = []
        topics, regex = config.get(TOPICS_CONFIG) or [], config.get(TOPICS_REGEX_CONFIG) or ""
        if topics and regex:
            problems.append(ConfigProblem(TOPICS_REGEX_CONFIG, regex,
                                          "set either 'topics' or 'topics.regex', not both"))
        elif not topics and not regex:
            problems.append(ConfigProblem(TOPICS_CONFIG, None,
                                          "set 'topics' (a comma-separated list) or 'topics.regex'"))
        path = config.get(FILE_CONFIG)
        if path and os.path.isdir(os.path.expanduser(path)):
            problems.append(ConfigProblem(FILE_CONFIG, path, "is a directory; name a file to append to"))
        return problems



def _json_default(value: Any) -> Any:
    if isinstance(value, Struct):
        return value.to_dict()
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def format_value(value: Any, encoding: str = "utf-8") -> bytes:
    """The line (without ``\\n``) a record value is written as; see the module docstring."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = value
    elif isinstance(value, (dict, list, tuple, Struct)):
        text = json.dumps(_json_default(value) if isinstance(value, Struct) else value,
                          default=_json_default, ensure_ascii=False, separators=(",", ":"))
    else:
        text = str(value)
    return text.encode(encoding)


class FileStreamSinkTask(SinkTask):
    """Appends a line per record to ``file``; ``flush`` makes them durable (fsync)."""

    def __init__(self) -> None:
        self.path: str | None = None
        self._fd = -1

    def start(self, config: dict[str, str]) -> None:
        values = CONFIG_DEF.parse(config, context="FileStreamSinkTask")
        self.path = os.path.abspath(os.path.expanduser(values[FILE_CONFIG]))
        self.encoding = values[ENCODING_CONFIG]
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise ConnectException(
                f"cannot open {self.path} for appending: {e.strerror}; check that its directory exists and "
                f"is writable by the user running the task") from e

    def put(self, records: Sequence[SinkRecord]) -> None:
        """Append the lines of ``records`` with one write (whole lines only)."""
        lines = []
        for r in records:
            try:
                lines.append(format_value(r.value, self.encoding) + b"\n")
            except (UnicodeEncodeError, TypeError, ValueError) as e:
                raise DataException(
                    f"record {r.topic}-{r.kafka_partition}@{r.kafka_offset}: value cannot be written as a "
                    f"{self.encoding} line to {self.path}: {e}; change '{ENCODING_CONFIG}' or the value "
                    f"converter") from e
        if lines:
            self._write(b"".join(lines))

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError as e:
            raise ConnectException(f"cannot append to {self.path}: {e.strerror}") from e

    def flush(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """Everything ``put`` so far reaches the disk (fsync) before offsets are committed."""
        if self._fd >= 0:
            try:
                os.fsync(self._fd)
            except OSError as e:
                raise ConnectException(f"cannot fsync {self.path}: {e.strerror}") from e

    def stop(self) -> None:
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                log.warning("closing %s failed", self.path, exc_info=True)
            self._fd = -1
