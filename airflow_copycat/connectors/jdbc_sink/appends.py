"""Upserts that turn out to be inserts: their rows copied straight into the table (PostgreSQL).

An upsert through the staging table (:mod:`.columns`) has PostgreSQL load every row
twice -- into the temporary table, then into the table with ``INSERT ... ON
CONFLICT`` -- where an insert loads it once. When none of a transaction's keys is in
its tables yet (an initial load, a topic of new keys, an append-only stream), the
upsert's result *is* the insert's, so :class:`Appends` has the column writer try
the transaction as plain ``COPY ... FROM STDIN (FORMAT csv)`` into the tables first:

* A table is tried from its first run on, and again whenever its last merge
  through the staging table inserted every row it merged (no key was there).
* A ``COPY`` writes every row or fails, and the caller then rolls the transaction
  back and writes it again through the staging table. A key already in the table --
  or one a concurrent writer committed meanwhile -- fails it with a unique
  violation: this table is not tried again until a merge inserts every row again. A
  row the database refuses (another constraint, a value the column does not take)
  leaves the table tried: the staging path and then the records find and report
  that row, and the next rows may go straight. Any other refusal (a view, a
  privilege, a trigger's error) ends the tries for the table for the task's life.
* The rows are copied in key order, as the staging path's ``INSERT ... SELECT ...
  ORDER BY`` locks them: two writers of the same new keys wait for each other.

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


class Appends:
    """Which tables a column writer copies into straight (see the module docstring). Used from the
    writer's transaction only: one thread at a time."""

    def __init__(self) -> None:
        self._off: dict[str, str] = {}  # table -> "keys" (until a merge inserts every row) | "never"
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
              moves: Mapping, counts: dict) -> None:
        """One transaction on a connection of ``engine`` (psycopg): each stretch copied straight into its
        table, then the offsets moved (:meth:`.offsets_table.OffsetsTable.advance`), then commit; the rows
        counted as inserted in ``counts``. When it raises, nothing of it is committed: see :meth:`refused`."""
        with engine.connect() as conn, conn.begin():
            with conn.connection.driver_connection.cursor() as cur:
                for (rows, run), body in zip(stretches, bodies):
                    table = run.row.table
                    self.copy(cur, table, dialect.table(table), ", ".join(dialect.ident(n) for n in run.names), body)
                    c = counts.setdefault(table, {})
                    c["inserted"] = c.get("inserted", 0) + rows.num_rows
            offsets.advance(conn, moves)
        self.rows += sum(rows.num_rows for rows, _ in stretches)

    def copy(self, cursor, table: str, target: str, columns: str, body: bytes) -> None:
        """``COPY`` ``body`` (:func:`csv_rows`) into ``target`` (``table``, quoted as configured) ``(columns)``
        on a psycopg ``cursor``. When it raises, the transaction must be rolled back and
        :meth:`refused` called."""
        self._trying = table
        with cursor.copy(f"COPY {target} ({columns}) FROM STDIN (FORMAT csv)") as copy:
            copy.write(body)
        self._trying = None

    def refused(self, error: BaseException) -> bool:
        """After the transaction failed: ``True`` when a straight copy was running (the caller writes the
        transaction again through the staging table), ``False`` when the failure was elsewhere."""
        table, self._trying = self._trying, None
        if table is None:
            return False
        state = str(getattr(error, "sqlstate", None) or "")
        if state == UNIQUE_VIOLATION:
            self._off[table], until = "keys", " until a merge finds new keys only"
        elif state[:2] in ("22", "23"):  # a row's values: the staging path and the records report it
            until = " (this time)"
        else:
            self._off[table], until = "never", ""
        text = str(error).strip()
        log.info("table %s: copying rows straight in was refused (%s); upserting through the staging table%s",
                 table, text.splitlines()[0][:200] if text else type(error).__name__, until)
        return True

    def merged(self, table: str, inserted: int, total: int) -> None:
        """A merge through the staging table inserted ``inserted`` of ``total`` rows: when every row was
        new, the table is tried again."""
        if inserted == total and self._off.get(table) == "keys":
            del self._off[table]
