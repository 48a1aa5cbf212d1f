"""Parallel reads inside one table: key-range splits, and task configs balanced by table size.

Kafka Connect's JDBC source reads a table in one thread. With
``copycat.split.count=n`` (n > 1) and ``copycat.split.column``, each selected table
that has the split column is read as ``n`` partitions, one per key range, each with
its own offset, so ``n`` tasks can snapshot one big table side by side and each
resumes where it stopped.

* **Which tables**: ``copycat.split.column`` is a list. A bare ``column`` entry
  splits every selected table that has that column; a ``table=column`` entry (the
  table as ``name``, ``schema.name`` or the partition's fqn) splits that table on
  that column and wins over bare entries. Other tables stay one partition. The
  column must be NOT NULL and numeric (integer, decimal, float) or a date/timestamp,
  else the plan fails naming the table and column. It should be indexed: every
  split query filters on it, and the plan reads its MIN and MAX.
* **Partitions**: ``{"protocol": "1", "table": fqn, "split": "k/n", "column": col}``
  (k = 1..n). They never hold bounds, so they are the same in every plan.
* **Bounds**: the plan reads ``MIN(col)`` and ``MAX(col)`` and cuts ``n`` ranges at
  ``n-1`` evenly spaced boundaries ``b1 < ... < b(n-1)``: split 1 is ``col < b1``
  (open below), split k is ``b(k-1) <= col < bk``, split n is ``col >= b(n-1)``
  (open above: rows inserted later with larger keys are read by the last split).
  The ranges cover every value exactly once, whatever the boundaries. A table that
  is empty at plan time gets no boundaries (``[]``): the last split reads it whole,
  the others nothing.
* **Bounds persist**: task configs carry the plan's boundaries (key
  :data:`SPLIT_BOUNDS_KEY`), and every offset a split commits carries them too
  (``{"incrementing": 42, "split.bounds": [250, 500, 750]}``). A task uses the
  boundaries of the lowest-numbered split of its table that has committed ones, and
  the plan's only when no split of the table has committed any. So once a table's
  reading has begun, a re-plan that sees another MIN/MAX changes nothing: all
  splits keep one set of boundaries, never overlapping, never leaving a gap.
  Bulk mode re-reads the table every run and keeps no offsets: its splits use the
  boundaries of the run's plan. Changing ``copycat.split.count`` or the column makes
  new partitions that start from nothing (the table is read again).
* **Balancing**: :func:`task_configs` estimates each table's rows cheaply
  (PostgreSQL ``pg_class.reltuples`` scaled to the table's current size,
  MySQL/MariaDB ``information_schema.tables.table_rows``, SQLite ``count(*)``), a
  split getting its table's estimate / n, and gives partitions largest first to the
  least-loaded task, sticky on re-plans (see
  :func:`airflow_copycat.connect.assignment.assign`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json
import logging
from typing import Any, Sequence

import sqlalchemy as sa

from airflow_copycat.connect import ConfigException, ConfigProblem, ConnectException
from airflow_copycat.connect.assignment import assign, canonical
from airflow_copycat.connect.connector import TASK_PARTITIONS_KEY, _as_str

log = logging.getLogger(__name__)

SPLIT_COLUMN = "copycat.split.column"
SPLIT_COUNT = "copycat.split.count"
SPLIT_BOUNDS_KEY = "copycat.split.bounds"
"""Task config key set by :func:`task_configs`: JSON ``{fqn: {"column": c, "count": n, "bounds": [...]}}``,
the plan's boundaries of the split tables in that task."""
OFFSET_BOUNDS = "split.bounds"
"""Offset field in which every split commits its table's boundaries."""

SPLIT_COLUMN_DOC = (
    "Split big tables into key ranges read in parallel (with copycat.split.count > 1): a column name splits "
    "every selected table that has that column; table=column splits one table (name, schema.name or fqn) on "
    "one column. The column must be NOT NULL, numeric or a date/timestamp, and should be indexed.")
SPLIT_COUNT_DOC = (
    "Into how many key ranges (partitions, each with its own offset) each table named by copycat.split.column "
    "is cut; 1 = no split. Bounds come from MIN/MAX at the first plan and are kept in the splits' offsets.")


# ------------------------------------------------------------------ config


def _entries(value: Any) -> tuple[list[str], dict[str, str], list[str]]:
    """(bare columns, {table: column}, malformed entries) of a ``copycat.split.column`` value."""
    items = value if isinstance(value, list) else [v for v in str(value or "").split(",")]
    bare, per_table, bad = [], {}, []
    for item in (str(i).strip() for i in items):
        if not item:
            continue
        table, sep, column = (s.strip() for s in item.rpartition("="))
        if not sep:
            bare.append(column)
        elif table and column:
            per_table[table] = column
        else:
            bad.append(item)
    return bare, per_table, bad


def check_split_column(key: str, value: Any) -> str | None:
    """Per-key validator of ``copycat.split.column``."""
    bad = _entries(value)[2]
    return f"malformed entr{'y' if len(bad) == 1 else 'ies'} {bad}: use column or table=column" if bad else None


def config_problems(config: dict[str, Any]) -> list[ConfigProblem]:
    """Cross-key problems of the split keys (the database is not asked; :func:`expand` checks columns)."""
    count, column = config.get(SPLIT_COUNT), config.get(SPLIT_COLUMN)
    bare, per_table, _ = _entries(column)
    split = isinstance(count, int) and count > 1
    problems = []
    if split and not (bare or per_table):
        problems.append(ConfigProblem(SPLIT_COLUMN, column or None,
                                      f"is required with {SPLIT_COUNT}={count}: the column to split tables on"))
    if (split or bare or per_table) and str(config.get("query") or "").strip():
        problems.append(ConfigProblem(SPLIT_COLUMN if (bare or per_table) else SPLIT_COUNT,
                                      column or count, "cannot be used with query mode: splits cut tables"))
    return problems


# ------------------------------------------------------------------ splits and their ranges


@dataclasses.dataclass(frozen=True)
class Split:
    """Split ``index`` (1..count) of a table on ``column``; ``bounds`` are the encoded boundaries
    once known (``None``: not resolved yet; ``()``: the table was empty, the last split reads all)."""

    column: str
    index: int
    count: int
    bounds: tuple | None = None

    def partition(self, fqn: str) -> dict:
        return {"protocol": "1", "table": fqn, "split": f"{self.index}/{self.count}", "column": self.column}

    def siblings(self, fqn: str) -> list[dict]:
        return [Split(self.column, k, self.count).partition(fqn) for k in range(1, self.count + 1)]

    def conditions(self, table: sa.Table, fqn: str) -> list:
        """The WHERE conditions of this split's range on ``table`` (``[]``: no condition)."""
        if self.bounds is None:
            raise ConnectException(f"table {fqn}: split {self.index}/{self.count} has no bounds")
        col = table.c[self.column]
        if not self.bounds:
            return [] if self.index == self.count else [sa.false()]
        kind = kind_of(col.type)
        b = [decode(v, kind) for v in self.bounds]
        out = []
        if self.index > 1:
            out.append(col >= b[self.index - 2])
        if self.index < self.count:
            out.append(col < b[self.index - 1])
        return out

    def offset_fields(self, mode: str) -> dict:
        """What every committed offset of this split carries (nothing in bulk mode)."""
        return {} if mode == "bulk" else {OFFSET_BOUNDS: list(self.bounds or ())}


def parse_partition(partition: dict) -> tuple[str, Split | None]:
    """``(fqn, split or None)`` of a partition id."""
    fqn, text = partition.get("table"), partition.get("split")
    if text is None:
        return fqn, None
    k, _, n = str(text).partition("/")
    return fqn, Split(str(partition.get("column")), int(k), int(n))


def kind_of(type_: sa.types.TypeEngine) -> str | None:
    """``int``, ``float``, ``decimal``, ``datetime``, ``date``, or ``None`` (cannot be split on)."""
    for cls, kind in ((sa.Integer, "int"), (sa.Float, "float"), (sa.Numeric, "decimal"),
                      (sa.DateTime, "datetime"), (sa.Date, "date")):
        if isinstance(type_, cls):
            return kind
    return None


def encode(v: Any, kind: str) -> Any:
    if kind == "int":
        return int(v)
    if kind == "float":
        return float(v)
    return str(v) if kind == "decimal" else v.isoformat()


def decode(v: Any, kind: str | None) -> Any:
    if kind == "int":
        return int(v)
    if kind == "float":
        return float(v)
    if kind == "decimal":
        return decimal.Decimal(str(v))
    return (dt.datetime if kind == "datetime" else dt.date).fromisoformat(str(v))


def boundaries(lo: Any, hi: Any, n: int, kind: str) -> list:
    """``n-1`` evenly spaced boundaries between ``lo`` and ``hi`` (encoded); ``[]`` when ``lo`` is None."""
    if lo is None or hi is None:
        return []
    ks = range(1, n)
    if kind == "int":
        out = [int(lo) + (int(hi) - int(lo)) * k // n for k in ks]
    elif kind == "float":
        out = [float(lo) + (float(hi) - float(lo)) * k / n for k in ks]
    elif kind == "decimal":
        lo, hi = decimal.Decimal(lo), decimal.Decimal(hi)
        out = [lo + (hi - lo) * k / n for k in ks]
    elif kind == "date":
        out = [dt.date.fromordinal(lo.toordinal() + (hi.toordinal() - lo.toordinal()) * k // n) for k in ks]
    else:
        out = [lo + (hi - lo) * k // n for k in ks]
    return [encode(v, kind) for v in out]


# ------------------------------------------------------------------ plan time


def _aliases(ref) -> set[str]:
    return {ref.name, ref.fqn, f"{ref.schema}.{ref.name}"}


def expand(engine: sa.Engine, values: dict[str, Any], tables: Sequence) -> list:
    """``tables`` (``TableRef``) with every table that is split replaced by its ``count`` split refs.

    Raises :class:`ConfigException` naming every table whose split column is missing, nullable or
    of a type that cannot be split, and every ``table=column`` entry that names no selected table."""
    count = int(values.get(SPLIT_COUNT) or 1)
    bare, per_table, _ = _entries(values.get(SPLIT_COLUMN))
    if count <= 1 or not (bare or per_table):
        return list(tables)
    insp = sa.inspect(engine)
    problems, out, used = [], [], set()
    for ref in tables:
        named = [t for t in per_table if t in _aliases(ref)]
        cols = {col["name"]: col for col in insp.get_columns(ref.name, schema=ref.schema)}
        wanted = per_table[named[0]] if named else next((b for b in bare if b in cols), None)
        used.update(named + ([wanted] if wanted else []))
        if wanted is None:
            out.append(ref)
            continue
        col = cols.get(wanted)
        why = None
        if col is None:
            why = f"has no column {wanted!r}; its columns are {sorted(cols)}"
        elif col.get("nullable", True):
            why = f"column {wanted!r} is nullable: a split column must be NOT NULL (rows with NULL would be in no range)"
        elif kind_of(col["type"]) is None:
            why = f"column {wanted!r} has type {col['type']}: a split column must be numeric or a date/timestamp"
        if why:
            problems.append(ConfigProblem(SPLIT_COLUMN, values.get(SPLIT_COLUMN), f"table {ref.fqn} {why}"))
            continue
        out += [dataclasses.replace(ref, split=Split(wanted, k, count)) for k in range(1, count + 1)]
    for t in sorted(set(per_table) - used):
        problems.append(ConfigProblem(SPLIT_COLUMN, values.get(SPLIT_COLUMN),
                                      f"table {t!r} is not among the tables this connector reads"))
    for b in sorted(set(bare) - used):
        problems.append(ConfigProblem(SPLIT_COLUMN, values.get(SPLIT_COLUMN),
                                      f"no table this connector reads has a column {b!r}"))
    if problems:
        raise ConfigException(problems, context="JDBC source splits")
    return out


def estimate_rows(conn: sa.Connection, ref) -> float:
    """A cheap estimate of ``ref``'s row count (0 when the database cannot tell)."""
    try:
        if conn.dialect.name == "postgresql":
            row = conn.execute(sa.text(
                "SELECT c.reltuples, c.relpages, pg_relation_size(c.oid) / current_setting('block_size')::int "
                "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = :s AND c.relname = :t"), {"s": ref.schema, "t": ref.name}).first()
            if row is None:
                return 0.0
            tuples, pages, now_pages = (float(x or 0) for x in row)
            if tuples > 0 and pages > 0:  # as the planner does: density at the last ANALYZE x current size
                return tuples / pages * max(now_pages, 1.0)
            return now_pages * 50.0  # never analyzed: guess 50 rows a page
        if conn.dialect.name in ("mysql", "mariadb"):
            row = conn.execute(sa.text("SELECT table_rows, data_length FROM information_schema.tables "
                                       "WHERE table_schema = :s AND table_name = :t"),
                               {"s": ref.schema, "t": ref.name}).first()
            if row is None:
                return 0.0
            return float(row[0]) if row[0] else float(row[1] or 0) / 100.0
        return float(conn.execute(sa.select(sa.func.count()).select_from(
            sa.table(ref.name, schema=ref.schema))).scalar_one())
    except sa.exc.SQLAlchemyError as e:
        log.warning("cannot estimate the rows of %s (%s); counting it as 0", ref.fqn, e)
        return 0.0


def _plan_bounds(conn: sa.Connection, ref) -> list:
    cols = {c["name"]: c for c in sa.inspect(conn).get_columns(ref.name, schema=ref.schema)}
    col_type = cols[ref.split.column]["type"]
    col = sa.column(ref.split.column, col_type)
    lo, hi = conn.execute(sa.select(sa.func.min(col, type_=col_type), sa.func.max(col, type_=col_type))
                          .select_from(sa.table(ref.name, col, schema=ref.schema))).one()
    return boundaries(lo, hi, ref.split.count, kind_of(col_type))


def task_configs(engine: sa.Engine, values: dict[str, Any], tables: Sequence, max_tasks: int,
                 previous: list[list[dict]] | None) -> list[dict[str, str]]:
    """The JDBC connector's task configs: partitions (splits expanded) balanced by estimated rows,
    sticky to ``previous``; each config is the connector config plus ``task.partitions`` and, for
    split tables, the plan's boundaries (:data:`SPLIT_BOUNDS_KEY`)."""
    refs = expand(engine, values, tables)
    try:
        with engine.connect() as conn:
            rows = {r.fqn: estimate_rows(conn, r) for r in refs}
            plans = {r.fqn: {"column": r.split.column, "count": r.split.count, "bounds": _plan_bounds(conn, r)}
                     for r in refs if r.split and r.split.index == 1}
    except sa.exc.SQLAlchemyError as e:
        from .source import _safe_url  # (source imports this module)

        raise ConnectException(f"cannot plan the splits of {_safe_url(engine)}: {e}") from e
    weights = [rows[r.fqn] / (r.split.count if r.split else 1) for r in refs]
    groups = assign([r.partition for r in refs], max_tasks, previous, weights)
    base = {k: _as_str(v) for k, v in values.items()}
    out = []
    for group in groups:
        cfg = dict(base, **{TASK_PARTITIONS_KEY: json.dumps(group)})
        mine = {p["table"]: plans[p["table"]] for p in group if p.get("split") and p["table"] in plans}
        if mine:
            cfg[SPLIT_BOUNDS_KEY] = json.dumps(mine, sort_keys=True)
        out.append(cfg)
    return out


# ------------------------------------------------------------------ task time


def resolve(refs: Sequence, config: dict[str, Any], reader) -> list:
    """``refs`` with the bounds of every split resolved: the committed boundaries of the
    lowest-numbered split of the table that has some (via ``reader``, the task's offset storage
    reader), else the plan's (``config[SPLIT_BOUNDS_KEY]``). Raises :class:`ConnectException` when
    neither has them."""
    split_refs = [r for r in refs if r.split]
    if not split_refs:
        return list(refs)
    planned = json.loads(config.get(SPLIT_BOUNDS_KEY) or "{}")
    siblings = {canonical(p): p for r in split_refs for p in r.split.siblings(r.fqn)}
    committed = reader.offsets(list(siblings.values())) if reader is not None else {}
    out = []
    for ref in refs:
        s = ref.split
        if s is None:
            out.append(ref)
            continue
        valid = lambda b: isinstance(b, list) and len(b) in (0, s.count - 1)  # noqa: E731
        found = [(committed.get(canonical(p)) or {}).get(OFFSET_BOUNDS) for p in s.siblings(ref.fqn)]
        found = [b for b in found if valid(b)]
        plan = planned.get(ref.fqn) or {}
        if found:
            bounds = found[0]
            if any(b != bounds for b in found):
                log.warning("table %s: splits committed different bounds %s; using the first", ref.fqn, found)
        elif plan.get("column") == s.column and plan.get("count") == s.count and valid(plan.get("bounds")):
            bounds = plan["bounds"]
        else:
            raise ConnectException(f"table {ref.fqn}: split {s.index}/{s.count} on {s.column!r} has no bounds "
                                   f"in its task config ({SPLIT_BOUNDS_KEY}) or its offsets: re-plan the connector")
        out.append(dataclasses.replace(ref, split=dataclasses.replace(s, bounds=tuple(bounds))))
    return out
