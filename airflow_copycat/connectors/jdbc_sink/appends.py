"""Upserts that turn out to be inserts: their rows copied straight into the table (PostgreSQL).

An upsert through the staging table (:mod:`.columns`) has PostgreSQL load every row
twice -- into the temporary table, then into the table with ``INSERT ... ON
CONFLICT`` -- where an insert loads it once. When none of a transaction's keys is in
its tables yet (an initial load, a topic of new keys, an append-only stream), the
upsert's result *is* the insert's, so :class:`Appends` has the column writer try
the transaction as plain ``COPY ... FROM STDIN (FORMAT csv)`` into the tables first:

* A table is tried from its first run on, unless a ``COPY`` would not do what the
  upsert's ``INSERT`` does there: a view, rules (``COPY`` skips them), a ``GENERATED
  ALWAYS`` identity column among the written ones (``COPY`` overrides it), a
  deferrable unique constraint (checked only at commit). After a key was found
  there, it is tried again once merges through the staging table found only new
  keys (one merge after the first such refusal, then twice as many each time).
* A ``COPY`` writes every row or fails, and the caller then rolls the transaction
  back and writes it again through the staging table. A key already in the table --
  or one a concurrent writer committed meanwhile -- fails it with a unique
  violation: this table waits for merges as above. A row the database refuses
  (another constraint, a value the column does not take, a trigger's error), a
  deadlock, a timeout or a lost connection leaves the table tried: the staging path
  and then the records find and report such rows, and retry what may pass. A table
  that cannot take a ``COPY`` at all (SQLSTATE classes 42 and 0A: a privilege, a
  column) is not tried again for the task's life.
* The rows are copied in key order (text in byte order), as the staging path's
  ``INSERT ... SELECT ... ORDER BY ... COLLATE "C"`` locks them: two writers of the
  same new keys wait for each other.

What the rows become is what the staging path makes of them: each value is sent as
the text PostgreSQL's input function of the column reads back to the value the
staging path's cast gives -- integers, the shortest round-trip text of floats
(``nan``, ``inf``, ``-0``), decimals as their digits (the scale kept, as the staging
path's ``CAST(... AS NUMERIC)``), ``true``/``false``, ISO dates, times and
timestamps to the microsecond, strings quoted (so ``""`` is an empty string and an
unquoted empty field a NULL), bytes as ``\\x`` and their hex digits. A run with a
column of another type (nanosecond timestamps) goes through the staging table.
"""

from __future__ import annotations

import io
import logging
from typing import Any, Mapping, Sequence

import pyarrow as pa
import pyarrow.csv as pcsv

log = logging.getLogger(__name__)

UNIQUE_VIOLATION = "23505"

_OPTIONS = pcsv.WriteOptions(include_header=False, quoting_style="all_valid")


def csv_rows(table: pa.Table, keys: int) -> bytes | None:
    """``table``'s rows (staged columns, see :mod:`.columns`; the first ``keys`` columns the primary
    key) as the body of ``COPY ... (FORMAT csv)``, in key order; ``None`` when a column's type has no
    exact text here (see the module docstring)."""
    for i, t in enumerate(table.schema.types):
        if pa.types.is_binary(t):  # rare in tables; one Python step per value
            hexed = pa.array([None if v is None else "\\x" + v.hex() for v in table.column(i).to_pylist()],
                             pa.string())
            table = table.set_column(i, table.field(i).with_type(pa.string()), hexed)
        elif not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
                  or pa.types.is_string(t) or pa.types.is_date32(t) or pa.types.is_time32(t)
                  or (pa.types.is_timestamp(t) and t.unit != "ns" and not t.tz)):
            return None
    if keys and table.num_rows > 1:
        table = table.sort_by([(name, "ascending") for name in table.column_names[:keys]])
    out = io.BytesIO()
    pcsv.write_csv(table, out, _OPTIONS)
    return out.getvalue()


_PLAIN = """SELECT c.relkind IN ('r', 'p') AND NOT c.relhasrules
  AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attidentity = 'a'
                  AND NOT a.attisdropped AND a.attname = ANY(%s))
  AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype IN ('p', 'u', 'x')
                  AND k.condeferrable)
FROM pg_class c WHERE c.oid = to_regclass(%s)"""
"""Whether a ``COPY`` into the table does what the upsert's ``INSERT`` does: a table (or a partitioned
one), no rules (``COPY`` skips them), no ``GENERATED ALWAYS`` identity among the copied columns
(``COPY`` overrides it where the ``INSERT`` fails), no deferrable unique constraint (checked at commit
only, where the ``INSERT ... ON CONFLICT`` fails at once)."""

_NEVER_CLASSES = ("42", "0A")
"""SQLSTATE classes that say the table cannot take a ``COPY`` at all (a wrong object type, a missing
privilege or column, a feature not supported); other refusals depend on the rows or pass."""

_MAX_WAIT = 64


class Appends:
    """Which tables a column writer copies into straight (see the module docstring). Used from the
    writer's transaction only: one thread at a time.

    After the ``n``-th refusal of a table for a key already there, ``2 ** (n - 1)`` merges in a row
    (at most 64) must find only new keys before the table is tried again: a stream that mixes new
    keys and updates wastes fewer and fewer copies."""

    def __init__(self) -> None:
        self._off: dict[str, str] = {}  # table -> "keys" (until merges find only new keys) | "never"
        self._conflicts: dict[str, int] = {}  # table -> refusals for a key already there
        self._streak: dict[str, int] = {}  # table -> merges in a row that found only new keys
        self._plain: dict[tuple, bool] = {}  # (table, columns) -> _PLAIN's answer
        self._trying: str | None = None
        self.rows = 0

    def wanted(self, table: str) -> bool:
        """Whether ``table``'s next rows are tried as a straight copy."""
        return table not in self._off

    def bodies(self, stretches: Sequence[tuple[pa.Table, Any]]) -> list[bytes] | None:
        """Each stretch's CSV (:func:`csv_rows`; a stretch: the staged rows of one table and column set,
        and its first run) when every table is wanted and every column has its text, else ``None``:
        the transaction goes through the staging table."""
        if not all(self.wanted(run.row.table) for _, run in stretches):
            return None
        out = []
        for rows, run in stretches:
            body = csv_rows(rows, len(run.row.key_columns))
            if body is None:
                return None
            out.append(body)
        return out

    def write(self, engine, dialect, offsets, stretches: Sequence[tuple[pa.Table, Any]], bodies: list[bytes],
              moves: Mapping, counts: dict) -> bool:
        """One transaction on a connection of ``engine`` (psycopg): each stretch copied straight into its
        table, then the offsets moved (:meth:`.offsets_table.OffsetsTable.advance`), then commit; the rows
        the database took counted as inserted in ``counts``. ``False``, having written nothing, when a
        table is not one a ``COPY`` writes as the upsert does (:data:`_PLAIN`; it is not tried again).
        When it raises, nothing of it is committed: see :meth:`refused`."""
        with engine.connect() as conn, conn.begin():
            with conn.connection.driver_connection.cursor() as cur:
                for _, run in stretches:
                    if not self._copies_as_inserts(cur, dialect, run):
                        self._off[run.row.table] = "never"
                        log.info("table %s: not copied straight into (a view, rules, an identity column "
                                 "GENERATED ALWAYS or a deferrable key): upserts go through the staging table",
                                 run.row.table)
                        return False
                written = 0
                for (rows, run), body in zip(stretches, bodies):
                    table = run.row.table
                    n = self.copy(cur, table, dialect.table(table), ", ".join(dialect.ident(c) for c in run.names),
                                  body)
                    n = rows.num_rows if n < 0 else n
                    c = counts.setdefault(table, {})
                    c["inserted"] = c.get("inserted", 0) + n
                    c["updated"] = c.get("updated", 0)
                    written += n
            offsets.advance(conn, moves)
        self.rows += written
        return True

    def _copies_as_inserts(self, cur, dialect, run) -> bool:
        names = tuple(n if dialect.quote else n.lower() for n in run.names)
        key = (run.row.table, names)
        if key not in self._plain:
            found = cur.execute(_PLAIN, (list(names), dialect.table(run.row.table))).fetchone()
            self._plain[key] = bool(found and found[0])
        return self._plain[key]

    def copy(self, cursor, table: str, target: str, columns: str, body: bytes) -> int:
        """``COPY`` ``body`` (:func:`csv_rows`) into ``target`` (``table``, quoted as configured) ``(columns)``
        on a psycopg ``cursor``; the rows the database took (a ``BEFORE`` trigger may skip some; -1 when the
        driver does not say). When it raises, the transaction must be rolled back and :meth:`refused`
        called."""
        self._trying = table
        with cursor.copy(f"COPY {target} ({columns}) FROM STDIN (FORMAT csv)") as copy:
            copy.write(body)
        self._trying = None
        return cursor.rowcount

    def refused(self, error: BaseException) -> bool:
        """After the transaction failed: ``True`` when a straight copy was running (the caller writes the
        transaction again through the staging table), ``False`` when the failure was elsewhere."""
        table, self._trying = self._trying, None
        if table is None:
            return False
        state = str(getattr(error, "sqlstate", None) or "")
        if state == UNIQUE_VIOLATION:
            self._off[table] = "keys"
            self._conflicts[table] = self._conflicts.get(table, 0) + 1
            self._streak[table] = 0
            until = f" until {self._wait(table)} merge(s) in a row find new keys only"
        elif state[:2] in _NEVER_CLASSES:
            self._off[table], until = "never", ""
        else:  # a row's values, a deadlock, a timeout, a lost connection: the staging path decides
            until = " (this time)"
        text = str(error).strip()
        log.info("table %s: copying rows straight in was refused (%s); upserting through the staging table%s",
                 table, text.splitlines()[0][:200] if text else type(error).__name__, until)
        return True

    def _wait(self, table: str) -> int:
        return min(2 ** (self._conflicts.get(table, 1) - 1), _MAX_WAIT)

    def merged(self, table: str, inserted: int, staged: int) -> None:
        """A merge through the staging table inserted ``inserted`` of its ``staged`` rows (an update, or a
        conflict ``DO NOTHING`` skipped, makes them differ): see the class docstring."""
        if inserted != staged:
            self._streak[table] = 0
            return
        self._streak[table] = self._streak.get(table, 0) + 1
        if self._off.get(table) == "keys" and self._streak[table] >= self._wait(table):
            del self._off[table]
            self._streak[table] = 0
