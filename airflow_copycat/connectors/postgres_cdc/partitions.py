"""The connector's source partitions and what their committed offsets say a run must do.

Two kinds of partition, both under the connector's name in the offset topic:

* the **server** partition ``{"server": <topic.prefix>}`` -- Debezium's own, the stream's: its
  offset is Debezium's streaming offset (``lsn``, ``lsn_proc``, ``lsn_commit``, ``txId``,
  ``ts_usec``, ``messageType``) plus :data:`TABLES_KEY`, the tables the stream sends and from
  where (see below). Exactly one task owns it and reads the slot;
* one **table** partition ``{"server": <topic.prefix>, "table": "<schema>.<table>"}`` per table the
  snapshot reads: its offset is the table's snapshot progress::

      {"snapshot": true, "lsn": <boundary>, "ts_usec": ..., "snapshot_after_key": ["17"],
       "last_snapshot_record": false}

  ``last_snapshot_record: true`` once the table was read to its end (no key then).

**Boundaries.** Every table snapshot reads under a snapshot exported by a replication slot made
for it (the connector's own slot when the same task creates it, else a temporary slot), whose
consistent point is the table's **boundary** ``lsn``: a transaction is in the rows read exactly
when its commit record lies before the boundary. The stream sends a table's changes only from
transactions committing at or after its boundary (:meth:`Captured.wants`), and only once the
table's snapshot is complete -- so rows and changes meet without gap or overlap, as PostgreSQL's
own table synchronisation of a subscription does. A table resumed in a later run reads its
remaining rows under a newer snapshot but keeps its first boundary: changes in between may come
twice, after the rows, and consumers converge.

**Who decides what.** :func:`table_plan` gives, from the offsets committed before the run (the
same view for every task of a run), each table's state. The stream task adopts completed
tables into :data:`TABLES_KEY` with their boundary (its own tables once it has read them); while
a table another task must read is not complete (in its view at start), it does not stream at
all, so the slot is never confirmed past a boundary not yet known. A boundary is usable only if the stream has not gone past it
(``boundary >= floor``, the stream's ``lsn_commit``): otherwise (the table left the include
list and came back, the slot was made anew) the table is read again from the start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

TABLES_KEY = "copycat_tables"
"""Server offset key: ``{"<schema>.<table>": boundary}`` of the tables the stream sends (boundary
0 once the stream is past it). Debezium ignores keys it does not know."""

DONE, RESUME, FRESH, STREAMED = "done", "resume", "fresh", "streamed"


def server_partition(topic_prefix: str) -> dict:
    """Debezium's PostgreSQL source partition (the stream's)."""
    return {"server": topic_prefix}


def table_partition(topic_prefix: str, table: str) -> dict:
    """The snapshot partition of ``table`` (``schema.table``)."""
    return {"server": topic_prefix, "table": table}


def legacy_snapshot_running(offset: Mapping | None) -> bool:
    """Whether a server offset was committed in the middle of a snapshot (Debezium's, or ours before
    snapshots had partitions of their own): such a snapshot starts again."""
    return bool(offset and offset.get("snapshot") and not offset.get("last_snapshot_record"))


def stream_offset(server: Mapping | None) -> Mapping | None:
    """The part of a committed server offset the stream resumes from (``None`` when it holds none)."""
    if not server or legacy_snapshot_running(server) or server.get("lsn") is None:
        return None
    return server


@dataclass
class Captured:
    """The tables the stream sends, each from its boundary on (see the module docstring).

    ``adopt_all``: the offset came from Debezium (or an older version of this connector), which
    has no :data:`TABLES_KEY`: every captured table is taken as streamed already."""

    boundaries: dict[str, int] = field(default_factory=dict)
    adopt_all: bool = False

    @classmethod
    def of(cls, server: Mapping | None) -> "Captured":
        stream = stream_offset(server)
        if stream is None:
            return cls()
        known = stream.get(TABLES_KEY)
        if known is None:
            return cls(adopt_all=True)
        return cls({str(k): int(v or 0) for k, v in dict(known).items()})

    def has(self, table: str) -> bool:
        return self.adopt_all or table in self.boundaries

    def wants(self, table: str, commit_lsn: int) -> bool:
        """Whether a change of ``table`` in a transaction whose commit record is at ``commit_lsn`` is sent."""
        boundary = self.boundaries.get(table)
        return boundary is not None and commit_lsn >= boundary

    def to_offset(self, floor: int) -> dict[str, int]:
        """The :data:`TABLES_KEY` value; boundaries the stream passed (``<= floor``) become 0."""
        return {t: (b if b > floor else 0) for t, b in sorted(self.boundaries.items())}


def floor_of(server: Mapping | None) -> int:
    """Where the stream stands in a committed server offset (its ``lsn_commit``; 0 when none)."""
    stream = stream_offset(server)
    return int((stream or {}).get("lsn_commit") or 0)


@dataclass(frozen=True)
class TableState:
    """What a run does with one table: ``done`` (complete, boundary usable), ``resume`` (after
    ``after_key``), ``fresh`` (from the start, a new boundary), ``streamed`` (the stream sends it
    already: nothing to read)."""

    table: str
    state: str
    boundary: int | None = None
    after_key: list | None = None


def table_state(table: str, offset: Mapping | None, captured: Captured, floor: int) -> TableState:
    """The state of ``table`` given its committed snapshot ``offset``, the stream's ``captured``
    tables and its ``floor`` (see the module docstring)."""
    if captured.has(table):
        return TableState(table, STREAMED)
    if not offset or offset.get("lsn") is None:
        return TableState(table, FRESH)
    boundary = int(offset["lsn"])
    if boundary < floor:  # the stream went past it: the changes in between are gone
        return TableState(table, FRESH)
    if offset.get("last_snapshot_record"):
        return TableState(table, DONE, boundary)
    return TableState(table, RESUME, boundary, offset.get("snapshot_after_key"))


def table_plan(tables: Iterable[str], offsets: Mapping[str, Mapping | None], captured: Captured,
               floor: int) -> dict[str, TableState]:
    """:func:`table_state` of each of ``tables`` (``offsets``: table -> committed offset or None)."""
    return {t: table_state(t, offsets.get(t), captured, floor) for t in tables}
