"""Which tables, columns and key columns a PostgreSQL CDC connector captures: Debezium's filter rules.

Filter keys hold comma-separated regular expressions (``\\,`` for a literal comma; a JSON/YAML list
is taken element by element), each matched **case-insensitively against the whole** fully-qualified
name, never a substring: a schema name, ``schema.table``, or ``schema.table.column``. Tables in
``pg_catalog``, ``information_schema``, ``pg_temp*`` schemas and ``spatial_ref_sys`` are never
captured. ``message.key.columns`` (``<schema.table regex>:<column>,<column>;...``) names event key
columns per table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

SYSTEM_SCHEMAS = ("pg_catalog", "information_schema")
SYSTEM_TABLES = ("spatial_ref_sys",)


def split_regexes(value: Any) -> list[str]:
    """Debezium's list of regular expressions: split on commas not escaped by a backslash, ``\\,``
    read as a comma, parts trimmed, empty parts dropped. A list (JSON/YAML config) is taken as given."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    parts, current, i, text = [], [], 0, str(value)
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            current.append(text[i:i + 2])
            i += 2
            continue
        if c == ",":
            parts.append("".join(current))
            current = []
        else:
            current.append(c)
        i += 1
    parts.append("".join(current))
    return [p.strip().replace("\\,", ",") for p in parts if p.strip()]


def regex_list_problem(key: str, value: Any) -> str | None:
    bad = []
    for pattern in split_regexes(value):
        try:
            re.compile(pattern)
        except re.error as e:
            bad.append(f"{pattern!r} ({e})")
    return ("has invalid regular expression(s): " + "; ".join(bad)) if bad else None


def parse_key_columns(value: Any) -> list[re.Pattern]:
    """``message.key.columns`` (``<schema.table regex>:<col>,<col>;...``) as Debezium reads it: one
    case-insensitive pattern per column, matched against ``schema.table.column``."""
    patterns = []
    for entry in str(value or "").split(";"):
        if not entry.strip():
            continue
        table, sep, columns = entry.partition(":")
        if not sep or not table.strip() or not columns.strip():
            raise ValueError(f"entry {entry.strip()!r} is not <schema.table regex>:<column>[,<column>...]")
        for column in columns.split(","):
            if column.strip():
                patterns.append(re.compile(f"{table.strip()}.{column.strip()}", re.IGNORECASE))
    return patterns


def key_columns_problem(key: str, value: Any) -> str | None:
    try:
        parse_key_columns(value)
    except ValueError as e:
        return str(e)
    except re.error as e:
        return f"has an invalid regular expression: {e}"
    return None


@dataclass(frozen=True)
class Filters:
    """Compiled filters (empty tuples: no filter). Build with :meth:`of` from parsed config values."""

    schema_include: tuple = ()
    schema_exclude: tuple = ()
    table_include: tuple = ()
    table_exclude: tuple = ()
    column_include: tuple = ()
    column_exclude: tuple = ()
    snapshot_include: tuple = ()
    key_columns: tuple = ()

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> "Filters":
        """The filters of a parsed config's ``values`` (valid regular expressions)."""
        def compiled(key):
            return tuple(re.compile(p, re.IGNORECASE) for p in split_regexes(values.get(key)))

        return cls(compiled("schema.include.list"), compiled("schema.exclude.list"), compiled("table.include.list"),
                   compiled("table.exclude.list"), compiled("column.include.list"), compiled("column.exclude.list"),
                   compiled("snapshot.include.collection.list"),
                   tuple(parse_key_columns(values.get("message.key.columns"))))

    def table_included(self, schema: str, table: str) -> bool:
        if schema.lower() in SYSTEM_SCHEMAS or schema.startswith("pg_temp") or table.lower() in SYSTEM_TABLES:
            return False
        if self.schema_include and not any(p.fullmatch(schema) for p in self.schema_include):
            return False
        if any(p.fullmatch(schema) for p in self.schema_exclude):
            return False
        qualified = f"{schema}.{table}"
        if self.table_include:
            return any(p.fullmatch(qualified) for p in self.table_include)
        return not any(p.fullmatch(qualified) for p in self.table_exclude)

    def snapshot_included(self, schema: str, table: str) -> bool:
        if not self.table_included(schema, table):
            return False
        return not self.snapshot_include or any(p.fullmatch(f"{schema}.{table}") for p in self.snapshot_include)

    def column_included(self, schema: str, table: str, column: str) -> bool:
        qualified = f"{schema}.{table}.{column}"
        if self.column_include:
            return any(p.fullmatch(qualified) for p in self.column_include)
        return not any(p.fullmatch(qualified) for p in self.column_exclude)

    def message_key_columns(self, schema: str, table: str, columns) -> list[str] | None:
        """The columns of ``columns`` (names) ``message.key.columns`` makes the key of ``schema.table``,
        in the order of its entries (as Debezium's KeyMapper); None when no entry matches."""
        out: list[str] = []
        for pattern in self.key_columns:
            out += [c for c in columns if c not in out and pattern.fullmatch(f"{schema}.{table}.{c}")]
        return out or None
