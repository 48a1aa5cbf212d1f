"""The JDBC sink: Kafka topics into PostgreSQL, MySQL/MariaDB or SQLite tables, exactly once.

Confluent's ``io.confluent.connect.jdbc.JdbcSinkConnector`` configuration works as
is, Debezium's ``io.debezium.connector.jdbc.JdbcSinkConnector`` keys too (see
:mod:`.config`)::

    {"name": "orders-to-pg", "connector.class": "JdbcSink", "topics": "orders",
     "connection.url": "jdbc:postgresql://db:5432/shop", "airflow.conn.id": ...,
     "insert.mode": "upsert", "pk.mode": "record_key", "delete.enabled": true,
     "auto.create": true, "auto.evolve": true}

Each record becomes a row of the table ``table.name.format`` names (:mod:`.rows`);
a tombstone deletes the row of its key with ``delete.enabled`` and is skipped
otherwise. Records need a value schema (JsonConverter with ``schemas.enable=true``,
or Avro); Debezium change events go through
``io.debezium.transforms.ExtractNewRecordState`` first.

Offsets: the task keeps them in the target database (:mod:`.offsets_table`),
moved in the transaction that writes the rows of each ``put``
(:mod:`.writer`). :meth:`JdbcSinkTask.open` reads them and asks the framework to
resume there (``context.offset``); the consumer group ``connect-<name>`` mirrors
them for lag tools only. A run killed anywhere leaves the table and the offsets
of one transaction or the other; the rerun neither duplicates nor skips a row.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Sequence
from zoneinfo import ZoneInfo

from airflow_copycat.connect.config import ConfigProblem
from airflow_copycat.connect.connector import SinkConnector
from airflow_copycat.connect.errors import ConnectException
from airflow_copycat.connect.records import SinkRecord
from airflow_copycat.connect.task import SinkTask

from ..jdbc.source import _safe_url, create_engine
from . import config as c
from .columns import ColumnWriter
from .dialects import dialect_for
from .offsets_table import OffsetsTable
from .rows import RecordError, Row, row_of
from .tables import Tables
from .writer import Writer

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class JdbcSinkConnector(SinkConnector):
    """Plans the JDBC sink: every task gets the config; the framework assigns the topics' partitions."""

    config_def = c.CONFIG_DEF
    exactly_once = True
    offsets_in_destination = True

    def validate(self, config: dict[str, Any]) -> list[ConfigProblem]:
        return c.validate(config)

    def task_class(self) -> type:
        return JdbcSinkTask

    @classmethod
    def table_asset_uri(cls, config: dict[str, Any], table: str) -> str | None:
        """The Asset URI of ``table`` (see :mod:`.assets`): the finish task emits one event per table written."""
        from .assets import table_uri

        return table_uri(config, table)


class JdbcSinkTask(SinkTask):
    """Writes its partitions' records to tables (see the module docstring).

    ``metrics``: ``tables`` (per table: ``inserted``, ``updated``, ``upserted`` where
    the database does not tell the two apart, ``deleted``), ``tombstones_skipped`` (without
    ``delete.enabled``, or for a table that does not exist),
    ``tables_created``, ``columns_added``, ``write_retries``, ``rows_columnar`` (records written
    through the columns of :mod:`.columns`), ``rows_copied_straight`` (upserted rows -- the last of each
    key in a consume round -- copied straight into their table because none of their keys was there,
    :mod:`.appends`).
    """

    def __init__(self) -> None:
        self.metrics: dict[str, Any] = {}
        self.committed: dict[TopicPartition, int] = {}
        self._engine = None
        self.columns: ColumnWriter | None = None
        self._tombstones_skipped = 0  # without delete.enabled

    def start(self, config: Mapping[str, Any]) -> None:
        values = JdbcSinkConnector.parse_config(dict(config), name=config.get("name"))
        self.name = str(config.get("name") or "jdbc-sink")
        self.settings = c.effective(values)
        self.zone = ZoneInfo(self.settings.db_timezone)
        self._engine = create_engine(values)
        try:
            self.dialect = dialect_for(self._engine, self.settings.quote)
        except ValueError as e:
            raise ConnectException(str(e)) from None
        log.info("JDBC sink task writing to %s, insert.mode=%s pk.mode=%s", _safe_url(self._engine),
                 self.settings.insert_mode, self.settings.pk_mode)
        self.tables = Tables(self._engine, self.dialect, self.settings)
        self.offsets = OffsetsTable(self._engine, self.dialect, self.settings.offsets_table, self.name)
        self.offsets.ensure()
        self.writer = Writer(self._engine, self.dialect, self.settings, self.tables, self.offsets,
                             lambda record, error: self.context.report_error(record, error))
        if self.settings.batch_enabled and self.dialect.name == "postgresql":
            self.columns = ColumnWriter(self)

    def open(self, partitions: Sequence[TopicPartition]) -> None:
        """Resume each partition at the offset the database holds for it (none: the framework starts at
        the earliest offset)."""
        found = self.offsets.read(partitions)
        self.committed.update(found)
        if found:
            self.context.offset(found)

    def put(self, records: Sequence[SinkRecord]) -> None:
        """Write ``records`` and their offsets in one transaction (see :mod:`.writer`)."""
        rows, ends = [], {}
        for record in records:
            topic, partition, offset = record.read_from  # a transform may have renamed the topic
            tp = (topic, int(partition))
            if offset < self.committed.get(tp, -1):
                continue  # written by an earlier transaction (given again): the database has it
            ends[tp] = offset + 1
            try:
                row = self._row(record)
            except RecordError as e:
                self.context.report_error(record, ConnectException(str(e)))
                continue
            if row is None:
                self._tombstones_skipped += 1
                continue
            rows.append(row)
        if not ends:
            return
        moves = {tp: (self.committed.get(tp), end) for tp, end in ends.items()}
        self.writer.write(rows, moves)
        self.committed.update(ends)
        skipped = self._tombstones_skipped + self.writer.deletes_skipped
        if skipped:
            self.metrics["tombstones_skipped"] = skipped
        self.metrics.update(tables=self.writer.counts, tables_created=len(self.tables.created),
                            columns_added=len(self.tables.added), write_retries=self.writer.retries)

    def _row(self, record: SinkRecord) -> Row | None:
        """``record``'s row (:func:`.rows.row_of`); raises :class:`RecordError` also for a value the
        database cannot hold (:meth:`.dialects.Dialect.unwritable`: NaN into MySQL/MariaDB)."""
        row = row_of(record, self.settings, self.zone)
        why = row is not None and not row.delete and self.dialect.unwritable(row.values)
        if why:
            raise RecordError(f"{row.where}: table {row.table} {why}")
        return row

    def put_batch(self, batch) -> None:
        """A consume round's messages (up to 10,000 rather than 500 for ``put``: fewer, larger
        transactions): on PostgreSQL in columns (:mod:`.columns`, ``copycat.batch.enabled``), else
        through their records as :meth:`put` writes them; the same rows, offsets and errors. In
        columns, the batch's last transaction commits while the framework reads and decodes the next
        batch: it is waited for before the next batch writes anything, and by ``pre_commit``."""
        if self.columns is None:
            self.put(batch.to_records())
        else:
            self.columns.put_batch(batch)

    def pre_commit(self, offsets: Mapping[TopicPartition, int], *, final: bool = False) -> dict[TopicPartition, int]:
        """Everything ``put`` got is committed already; records the framework handled without ``put``
        (dead-lettered, dropped by a transform) move the database's offsets past them here."""
        if self.columns is not None:
            self.columns.drain()  # the last batch's transaction, which may still run
        moves = {}
        for (topic, part), off in offsets.items():
            tp = (topic, int(part))
            have = self.committed.get(tp)
            if off is not None and (have is None or off > have):
                moves[tp] = (have, int(off))
        if moves:
            self.writer.write([], moves)
            self.committed.update({tp: new for tp, (_, new) in moves.items()})
        return {tp: off for tp, off in self.committed.items() if tp in {(t, int(p)) for t, p in offsets}}

    def close(self, partitions: Sequence[TopicPartition]) -> None:
        for topic, part in partitions:
            self.committed.pop((topic, int(part)), None)

    def stop(self) -> None:
        if self.columns is not None:
            self.columns.close()
            self.columns = None
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
