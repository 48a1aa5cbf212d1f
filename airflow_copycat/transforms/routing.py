"""Transforms that change the record's topic: RegexRouter and TimestampRouter (Kafka Connect's)."""

from __future__ import annotations

from typing import Any, Mapping

from ..connect.config import ConfigDef, ConfigType
from ..connect.data import Timestamp
from ..connect.errors import DataException
from ..connect.transforms import Transformation
from ._keyvalue import KAFKA_PACKAGE, config_error, parse_config
from .dateformat import JavaDateFormat
from .javaregex import JavaReplacement, compile_java, valid_java_regex


class RegexRouter(Transformation):
    """Rename the topic when it matches ``regex`` (the whole topic name must match) to
    ``replacement``, in which ``$1`` / ``${name}`` insert groups. ``regex=(.*)-raw``,
    ``replacement=$1-clean`` sends ``orders-raw`` to ``orders-clean``; other topics keep
    their name."""

    kafka_class = KAFKA_PACKAGE + "RegexRouter"
    config_def = (
        ConfigDef()
        .define("regex", ConfigType.STRING, validator=valid_java_regex, importance="high",
                doc="Regular expression the whole topic name must match (Java syntax).")
        .define("replacement", ConfigType.STRING, importance="high",
                doc="The new topic name; $1, ${name} insert the regex's groups, \\$ is a dollar sign.")
    )

    def configure(self, configs: Mapping[str, Any]) -> None:
        c = parse_config(self, configs)
        self._regex = compile_java(c["regex"])
        try:
            self._replacement = JavaReplacement(c["replacement"], self._regex)
        except ValueError as e:
            raise config_error("replacement", c["replacement"], str(e)) from None

    def apply(self, record):
        topic = record.topic
        if topic is None or self._regex.fullmatch(topic) is None:
            return record
        return record.new_record(topic=self._replacement.replace_first(self._regex, topic))


class TimestampRouter(Transformation):
    """Rename the topic from its name and the record's timestamp: ``topic.format``
    (default ``${topic}-${timestamp}``) with ``${timestamp}`` written in
    ``timestamp.format`` (a Java SimpleDateFormat pattern, UTC; default ``yyyyMMdd``).
    ``orders`` at 2024-05-01 becomes ``orders-20240501``. Mostly for sinks that name
    tables or indexes after topics. A record without a timestamp is a DataException."""

    kafka_class = KAFKA_PACKAGE + "TimestampRouter"
    config_def = (
        ConfigDef()
        .define("topic.format", ConfigType.STRING, "${topic}-${timestamp}", importance="high",
                doc="The new topic name; ${topic} and ${timestamp} are replaced.")
        .define("timestamp.format", ConfigType.STRING, "yyyyMMdd", importance="high",
                doc="java.text.SimpleDateFormat pattern for ${timestamp}, in UTC.")
    )

    def configure(self, configs: Mapping[str, Any]) -> None:
        c = parse_config(self, configs)
        self._topic_format = c["topic.format"]
        try:
            self._format = JavaDateFormat(c["timestamp.format"])
        except ValueError as e:
            raise config_error("timestamp.format", c["timestamp.format"],
                               f"is not a SimpleDateFormat pattern: {e}") from None
        self._last: tuple[int, str] | None = None

    def apply(self, record):
        ts = record.timestamp
        if ts is None:
            raise DataException(f"TimestampRouter: the record of topic {record.topic!r} has no timestamp to "
                                "route by; give records timestamps or route only timestamped ones (a predicate)")
        last = self._last
        if last is not None and last[0] == ts:
            formatted = last[1]
        else:
            formatted = self._format.format(Timestamp.to_logical(ts))
            self._last = (ts, formatted)
        topic = self._topic_format.replace("${topic}", record.topic).replace("${timestamp}", formatted)
        return record.new_record(topic=topic)
