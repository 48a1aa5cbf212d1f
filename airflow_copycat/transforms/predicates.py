"""Predicates: TopicNameMatches, HasHeaderKey, RecordIsTombstone (Kafka Connect's)."""

from __future__ import annotations

from typing import Any, Mapping

from ..connect.config import ConfigDef, ConfigType, non_empty
from ..connect.transforms import Predicate
from ._keyvalue import parse_config
from .javaregex import compile_java, valid_java_regex

_PACKAGE = "org.apache.kafka.connect.transforms.predicates."


def _pattern_ok(key, value):
    return non_empty(key, value) or valid_java_regex(key, value)


class TopicNameMatches(Predicate):
    """True for records whose whole topic name matches ``pattern`` (a Java regular expression)."""

    kafka_class = _PACKAGE + "TopicNameMatches"
    config_def = ConfigDef().define("pattern", ConfigType.STRING, validator=_pattern_ok,
                                    doc="Regular expression (Java syntax) the whole topic name must match.")

    def configure(self, configs: Mapping[str, Any]) -> None:
        self._pattern = compile_java(parse_config(self, configs)["pattern"])

    def test(self, record) -> bool:
        return record.topic is not None and self._pattern.fullmatch(record.topic) is not None


class HasHeaderKey(Predicate):
    """True for records with at least one header called ``name``."""

    kafka_class = _PACKAGE + "HasHeaderKey"
    config_def = ConfigDef().define("name", ConfigType.STRING, validator=non_empty, doc="The header name.")

    def configure(self, configs: Mapping[str, Any]) -> None:
        self._name = parse_config(self, configs)["name"]

    def test(self, record) -> bool:
        name = self._name
        return any(key == name for key, _ in record.headers)


class RecordIsTombstone(Predicate):
    """True for tombstones: records whose value is null."""

    kafka_class = _PACKAGE + "RecordIsTombstone"

    def test(self, record) -> bool:
        return record.value is None
