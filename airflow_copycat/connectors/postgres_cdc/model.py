"""What the PostgreSQL change-data-capture source reads, as plain values.

Shared by the two halves of the connector: the WAL reader (``pgoutput``,
``slot``: logical replication decoded into these messages) and the snapshot
(``snapshot``: table rows read under the slot's exported snapshot) on one side,
the Debezium event builder (``values``, ``envelope``: Connect schemas, keys and
change-event envelopes) on the other.

Column values are PostgreSQL's **text output** of the value (what pgoutput sends
when ``binary`` is off, and what ``COPY ... TO STDOUT`` or a ``::text`` cast
gives), ``None`` for SQL NULL, or :data:`UNCHANGED_TOAST` for a TOASTed value an
UPDATE did not change (pgoutput's ``'u'``): one parsing of values, one type
mapping, for snapshot rows and streamed changes alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class _UnchangedToast:
    """pgoutput's ``'u'``: the column is a TOASTed value the change did not touch; its value is not in the WAL."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"

    def __reduce__(self):
        return (_UnchangedToast, ())


UNCHANGED_TOAST = _UnchangedToast()


@dataclass(frozen=True)
class Column:
    """One column of a table as pgoutput's Relation message (or the catalog, for snapshots) describes it.

    ``type_oid`` is the column's type OID (``pg_type.oid``), ``type_modifier`` its ``atttypmod``
    (-1 when none: e.g. ``numeric`` without precision), ``type_name`` the type's name as
    ``format_type(type_oid, NULL)`` gives it without the modifier (``integer``, ``numeric``,
    ``timestamp with time zone``, ``character varying``, ``_int4`` for arrays, a domain's or an
    enum's own name), ``key`` whether the column is part of the replica identity (the primary
    key, the identity index, or every column with ``REPLICA IDENTITY FULL``), ``optional`` whether
    it may be NULL (``not attnotnull``; pgoutput does not say, the catalog does), ``default`` the
    column's default expression text or None.
    """

    name: str
    type_oid: int
    type_modifier: int = -1
    type_name: str = ""
    key: bool = False
    optional: bool = True
    default: str | None = None


@dataclass(frozen=True)
class Relation:
    """A table as of one point of the WAL: pgoutput sends one before the first change of a table
    in a session and again after its definition changed (ADD/DROP COLUMN, a type change), so the
    changes after it are read with this column list. ``replica_identity`` is pgoutput's letter:
    ``d`` default (primary key), ``n`` nothing, ``f`` full, ``i`` index."""

    oid: int
    schema: str
    table: str
    columns: tuple[Column, ...]
    replica_identity: str = "d"

    @property
    def key_columns(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.key)


@dataclass(frozen=True)
class Begin:
    """A transaction starts: ``final_lsn`` is its commit record's LSN, ``commit_ts_us`` the commit
    time in microseconds since the Unix epoch, ``xid`` its transaction id."""

    final_lsn: int
    commit_ts_us: int
    xid: int


@dataclass(frozen=True)
class Commit:
    """A transaction ends: ``commit_lsn`` its commit record, ``end_lsn`` the WAL position just
    after it (what the slot may be confirmed up to once its changes are in Kafka)."""

    commit_lsn: int
    end_lsn: int
    commit_ts_us: int


@dataclass(frozen=True)
class Change:
    """One row change inside a transaction.

    ``op`` is Debezium's letter: ``c`` insert, ``u`` update, ``d`` delete (``r`` for snapshot
    reads). ``before`` holds the old row's values when the WAL has them (``REPLICA IDENTITY
    FULL``: every column; otherwise only the key columns when the key changed or on delete,
    other positions None) or is None; ``after`` the new row's values (None for deletes). Value
    tuples follow ``relation.columns``' order. ``lsn`` is the change's own WAL position.
    """

    relation: Relation
    op: str
    before: tuple | None
    after: tuple | None
    lsn: int = 0
    xid: int = 0
    commit_ts_us: int = 0


@dataclass(frozen=True)
class Truncate:
    """``TRUNCATE`` of one or more tables in one statement (Debezium's ``op: t``, one event per table)."""

    relations: tuple[Relation, ...]
    lsn: int = 0
    xid: int = 0
    commit_ts_us: int = 0
    cascade: bool = False
    restart_identity: bool = False


@dataclass
class Position:
    """Where a stream read stands, in Debezium's offset terms: ``lsn`` of the last change handed
    out, ``lsn_commit`` of the last *complete* transaction (the slot is confirmed only up to
    there), ``tx_id`` and ``ts_usec`` of that transaction."""

    lsn: int = 0
    lsn_commit: int = 0
    tx_id: int | None = None
    ts_usec: int | None = None
    extra: dict = field(default_factory=dict)


def lsn_text(lsn: int) -> str:
    """``0x16B3748`` -> ``'0/16B3748'`` (PostgreSQL's pg_lsn text)."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    """``'0/16B3748'`` -> ``0x16B3748``."""
    hi, _, lo = text.partition("/")
    return (int(hi, 16) << 32) | int(lo, 16)
