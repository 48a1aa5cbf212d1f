r"""Single message transforms (SMTs) and predicates: Kafka Connect's ``Transformation`` and ``Predicate``.

A transform changes one record at a time -- renames a field, masks a column,
routes to another topic, drops the record -- between a connector and Kafka.
Sources: ``poll() -> transforms -> converter -> Kafka``; sinks:
``Kafka -> converter -> transforms -> put()``. A connector config lists them
with Kafka Connect's syntax, and each may run only when a predicate holds::

    transforms=mask,route
    transforms.mask.type=org.apache.kafka.connect.transforms.MaskField$Value
    transforms.mask.fields=ssn,card
    transforms.route.type=RegexRouter
    transforms.route.regex=db\\.(.*)
    transforms.route.replacement=mirror-$1
    transforms.route.predicate=is-db
    predicates=is-db
    predicates.is-db.type=TopicNameMatches
    predicates.is-db.pattern=db\\..*

This module holds the two interfaces. The built-ins live apart from them in
:mod:`airflow_copycat.transforms` (as Kafka Connect keeps its ``connect-transforms``
apart from ``connect-api``); they are Kafka Connect's, with the same keys and behaviour, on
schema'd values (:class:`~airflow_copycat.connect.data.Struct` with a
:class:`~airflow_copycat.connect.data.Schema`) and on schemaless ones (plain
dicts, ``value_schema is None``):

=========================  ==================  ===========================================
family                     module (of            transforms
                           ``airflow_copycat.
                           transforms``)
=========================  ==================  ===========================================
fields of a key or value   ``fields``          InsertField, ReplaceField, ValueToKey
                           ``mask``            MaskField
                           ``extract_hoist``   ExtractField, HoistField
nested values              ``flatten``         Flatten
types                      ``cast``            Cast
timestamps                 ``timestamps``      TimestampConverter
topics                     ``routing``         RegexRouter, TimestampRouter
headers                    ``headers``         HeaderFrom, InsertHeader, DropHeaders
schema name and version    ``metadata``        SetSchemaMetadata
dropping records           ``filter``          Filter
conditions                 ``predicates``      TopicNameMatches, HasHeaderKey, RecordIsTombstone
Debezium change events     ``debezium``        ExtractNewRecordState (Debezium's, not Kafka
                                               Connect's: ``io.debezium.transforms.*``)
=========================  ==================  ===========================================

Transforms that work on the key or the value come as two classes,
``InsertField.Key`` and ``InsertField.Value`` (Kafka Connect's
``InsertField$Key`` / ``InsertField$Value``). Third-party transforms and
predicates subclass :class:`Transformation` / :class:`Predicate` and register
in the entry-point group ``airflow_copycat.transforms``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

from ..config import ConfigDef
from ..records import ConnectRecord

__all__ = ["Predicate", "Transformation"]


class Transformation:
    """A single message transform: one record in, one record (or none) out.

    Lifecycle, as Kafka Connect's ``Transformation``: the framework creates one
    instance per transform alias and task, calls :meth:`configure` once, then
    :meth:`apply` for every record on the task's thread (never concurrently),
    and :meth:`close` once when the task ends. An instance may keep caches
    (updated schemas by input schema) but no per-record state.

    Subclasses set :attr:`config_def` and implement :meth:`configure` and
    :meth:`apply`.
    """

    config_def: ClassVar[ConfigDef] = ConfigDef()
    """The keys this transform understands (``transforms.<alias>.<key>`` with the
    prefix removed). The framework validates a connector's transforms against it."""

    kafka_class: ClassVar[str | None] = None
    """The Kafka Connect class name this transform implements
    (``org.apache.kafka.connect.transforms.InsertField$Value``), or ``None`` for
    one of our own. Error reports and dead-letter headers name it."""

    def configure(self, configs: Mapping[str, Any]) -> None:
        """Called once before :meth:`apply` with this transform's keys (prefix removed;
        values are strings from ``.properties`` files or typed from JSON/YAML).

        Raise :class:`~airflow_copycat.connect.errors.ConfigException` listing every
        problem (key, value, why) when the configuration is invalid.
        """
        self.config_def.parse(configs, context=type(self).__name__)

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        """Return the transformed record: a new one made with ``record.new_record(...)``,
        ``record`` itself when nothing changes, or ``None`` to drop it (later
        transforms and the connector or Kafka never see it; its offset still counts
        as handled).

        ``record`` is a :class:`~airflow_copycat.connect.records.SourceRecord` (sources)
        or a :class:`~airflow_copycat.connect.records.SinkRecord` (sinks). Never
        mutate it or the values it holds (dicts, lists and Structs may be shared);
        build new ones. Raise :class:`~airflow_copycat.connect.errors.DataException`
        for data the transform cannot handle, naming the field; the framework's
        ``errors.tolerance`` then decides whether the task fails or the record is
        skipped (and dead-lettered).
        """
        raise NotImplementedError

    def close(self) -> None:
        """Called once when the task ends; release what :meth:`configure` acquired."""


class Predicate:
    """A condition on a record, deciding whether a transform applies to it.

    ``transforms.<alias>.predicate=<name>`` runs the transform only on records
    for which ``predicates.<name>`` tests true (``transforms.<alias>.negate=true``:
    only those testing false); other records pass through that transform
    unchanged. Same lifecycle as :class:`Transformation`: :meth:`configure` once,
    :meth:`test` per record on the task's thread, :meth:`close` once.
    """

    config_def: ClassVar[ConfigDef] = ConfigDef()
    """The keys this predicate understands (``predicates.<name>.<key>`` with the prefix removed)."""

    kafka_class: ClassVar[str | None] = None
    """The Kafka Connect class name this predicate implements, or ``None``."""

    def configure(self, configs: Mapping[str, Any]) -> None:
        """Called once before :meth:`test`; raise ``ConfigException`` listing every problem."""
        self.config_def.parse(configs, context=type(self).__name__)

    def test(self, record: ConnectRecord) -> bool:
        """Whether ``record`` satisfies the condition. Must not change the record."""
        raise NotImplementedError

    def close(self) -> None:
        """Called once when the task ends."""
