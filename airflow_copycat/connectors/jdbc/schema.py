"""Columns -> Connect schemas and database values -> Connect values.

Mapping (Confluent's ``GenericDatabaseDialect`` rules, decided on SQLAlchemy's reflected types):

============================================  =======================================
column                                        Connect schema
============================================  =======================================
BOOLEAN (MySQL BIT(1), TINYINT(1))            BOOLEAN
TINYINT / SMALLINT / INTEGER / BIGINT         INT8 / INT16 / INT32 / INT64 (unsigned: next wider)
NUMERIC / DECIMAL (p, s)                      Decimal(s) -- or per ``numeric.mapping``:
                                              precision_only / best_fit: s = 0, p <= 18 -> smallest INT;
                                              best_fit: 0 < s, p <= 15 -> FLOAT64
REAL / FLOAT(<=24)                            FLOAT32
DOUBLE / FLOAT                                FLOAT64
DATE / TIME                                   Date / Time (ms of the day)
TIMESTAMP [WITH TIME ZONE], DATETIME          Timestamp (UTC; naive values are in ``db.timezone``,
                                              except MySQL TIMESTAMP: UTC, see :func:`naive_zone`)
CHAR / VARCHAR / TEXT / JSON / UUID / ENUM    STRING (JSON written as compact JSON text)
BINARY / VARBINARY / BLOB / BYTEA             BYTES
anything else                                 STRING (its ``str()``)
============================================  =======================================

A nullable column maps to an optional schema.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import struct
import uuid
from dataclasses import dataclass
from typing import Any, Callable
from zoneinfo import ZoneInfo

from sqlalchemy import types as sat
from sqlalchemy.dialects import mysql

from airflow_copycat.connect import Schema, SchemaBuilder
from airflow_copycat.connect.data import Date, Decimal, Time, Timestamp, Type

_INT_BY_PRECISION = ((3, Type.INT8), (5, Type.INT16), (10, Type.INT32), (19, Type.INT64))


@dataclass(frozen=True)
class ColumnMapping:
    name: str
    schema: Schema
    convert: Callable[[Any], Any]


def _int_type(coltype: sat.TypeEngine) -> Type:
    name = type(coltype).__name__.upper()
    unsigned = bool(getattr(coltype, "unsigned", False))
    if "TINYINT" in name:
        base = Type.INT8
    elif "SMALLINT" in name or isinstance(coltype, sat.SmallInteger):
        base = Type.INT16
    elif "MEDIUMINT" in name:
        base = Type.INT32
    elif "BIGINT" in name or isinstance(coltype, sat.BigInteger):
        base = Type.INT64
    else:
        base = Type.INT32
    if unsigned:
        order = [Type.INT8, Type.INT16, Type.INT32, Type.INT64]
        if base is Type.INT64:
            return Type.INT64  # BIGINT UNSIGNED: Confluent also maps it to INT64 (values above 2^63 fail)
        return order[order.index(base) + 1]
    return base


def _prim(t: Type, optional: bool) -> Schema:
    b = SchemaBuilder.type(t)
    return (b.optional() if optional else b).build()


def _to_utc(zone: ZoneInfo) -> Callable[[Any], Any]:
    def convert(v):
        if v is None:
            return None
        if isinstance(v, str):
            v = dt.datetime.fromisoformat(v)
        if isinstance(v, dt.date) and not isinstance(v, dt.datetime):
            v = dt.datetime(v.year, v.month, v.day)
        if v.tzinfo is None:
            v = v.replace(tzinfo=zone)
        return v.astimezone(dt.timezone.utc)

    return convert


def _time(v):
    if v is None:
        return None
    if isinstance(v, dt.timedelta):  # pymysql returns TIME as a timedelta
        total = int(v.total_seconds() * 1_000_000) % (86_400 * 1_000_000)
        s, us = divmod(total, 1_000_000)
        return dt.time(s // 3600, s // 60 % 60, s % 60, us)
    if isinstance(v, str):
        return dt.time.fromisoformat(v)
    return v.replace(tzinfo=None) if v.tzinfo else v


def _date(v):
    if v is None:
        return None
    if isinstance(v, dt.datetime):
        return v.date()
    if isinstance(v, str):
        return dt.date.fromisoformat(v[:10])
    return v


def _decimal(scale: int):
    q = decimal.Decimal(1).scaleb(-scale)

    def convert(v):
        if v is None:
            return None
        d = v if isinstance(v, decimal.Decimal) else decimal.Decimal(str(v))
        return d.quantize(q, context=decimal.Context(prec=max(60, len(d.as_tuple().digits) + scale + 2)))

    return convert


def _int(v):
    return None if v is None else int(v)


def _float(v):
    return None if v is None else float(v)


_F32 = struct.Struct("<f")


def _float32(v):
    """A REAL/FLOAT(<=24) value as the float32 it is (drivers give the double of its shortest text):
    the value a converter writes, and what an Arrow float32 column holds."""
    if v is None:
        return None
    f = float(v)
    try:
        return _F32.unpack(_F32.pack(f))[0]
    except OverflowError:
        return f  # out of float32 range: left for the converter to refuse, as before


def _bool(v):
    if v is None:
        return None
    if isinstance(v, (bytes, bytearray)):
        return any(v)
    return bool(v)


def _text(v):
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8")
    if isinstance(v, uuid.UUID):
        return str(v)
    return str(v)


def _json(v):
    if v is None or isinstance(v, str):
        return v
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False, default=str)


def _bytes(v):
    return None if v is None else bytes(v)


def naive_zone(coltype: sat.TypeEngine, db_zone: ZoneInfo) -> ZoneInfo:
    """The zone of a timestamp column's naive values: UTC for MySQL/MariaDB ``TIMESTAMP`` (stored in
    UTC and returned in the session's time zone, which the connector sets to UTC on connect),
    ``db.timezone`` for every other column without a time zone (``DATETIME``, PostgreSQL
    ``timestamp``, SQLite text). Columns with a time zone (``timestamptz``) give aware values."""
    if isinstance(coltype, mysql.TIMESTAMP):
        return ZoneInfo("UTC")
    return db_zone


def map_column(name: str, coltype: sat.TypeEngine, nullable: bool, numeric_mapping: str,
               db_zone: ZoneInfo) -> ColumnMapping:
    """The Connect schema of a column and the function turning its driver values into Connect values."""
    name = str(name)  # a plain str: SQLAlchemy's quoted_name would keep field lookups off their fast paths
    opt = bool(nullable)
    tname = type(coltype).__name__.upper()
    if isinstance(coltype, sat.Boolean) or (tname == "BIT" and getattr(coltype, "length", 1) in (None, 1)) or (
            tname == "TINYINT" and getattr(coltype, "display_width", None) == 1):  # MySQL BOOLEAN, as Connector/J
        return ColumnMapping(name, _prim(Type.BOOLEAN, opt), _bool)
    if isinstance(coltype, sat.Integer):
        return ColumnMapping(name, _prim(_int_type(coltype), opt), _int)
    if isinstance(coltype, sat.Float) or tname in ("REAL", "DOUBLE", "DOUBLE_PRECISION", "FLOAT"):
        precision = getattr(coltype, "precision", None)
        single = tname == "REAL" or (tname == "FLOAT" and precision is not None and precision <= 24)
        if single:
            return ColumnMapping(name, _prim(Type.FLOAT32, opt), _float32)
        return ColumnMapping(name, _prim(Type.FLOAT64, opt), _float)
    if isinstance(coltype, sat.Numeric):
        precision, scale = coltype.precision, coltype.scale
        if numeric_mapping in ("precision_only", "best_fit") and precision and (scale or 0) == 0:
            for limit, t in _INT_BY_PRECISION:
                if precision < limit:
                    return ColumnMapping(name, _prim(t, opt), _int)
        if numeric_mapping == "best_fit" and precision and scale and 0 < scale and precision <= 15:
            return ColumnMapping(name, _prim(Type.FLOAT64, opt), _float)
        if scale is None or scale < 0:
            # NUMERIC without a declared scale (PostgreSQL's unconstrained NUMERIC): Confluent uses
            # scale 0 only when it cannot know better; keep the digits with a generous fixed scale
            scale = 0 if precision else 10
        b = Decimal.builder(scale)
        if opt:
            b = b.optional()
        return ColumnMapping(name, b.build(), _decimal(scale))
    if isinstance(coltype, sat.DateTime) or tname in ("TIMESTAMP", "DATETIME"):
        b = Timestamp.builder()
        return ColumnMapping(name, (b.optional() if opt else b).build(), _to_utc(naive_zone(coltype, db_zone)))
    if isinstance(coltype, sat.Date):
        b = Date.builder()
        return ColumnMapping(name, (b.optional() if opt else b).build(), _date)
    if isinstance(coltype, sat.Time):
        b = Time.builder()
        return ColumnMapping(name, (b.optional() if opt else b).build(), _time)
    if isinstance(coltype, sat.JSON):
        return ColumnMapping(name, _prim(Type.STRING, opt), _json)
    if isinstance(coltype, sat._Binary) or tname in ("BYTEA", "BLOB", "LONGBLOB", "MEDIUMBLOB", "TINYBLOB"):
        return ColumnMapping(name, _prim(Type.BYTES, opt), _bytes)
    return ColumnMapping(name, _prim(Type.STRING, opt), _text)


def struct_schema(name: str | None, columns: list[ColumnMapping], optional: bool = False) -> Schema:
    b = SchemaBuilder.struct()
    if name:
        b = b.name(name)
    for c in columns:
        b = b.field(c.name, c.schema)
    if optional:
        b = b.optional()
    return b.build()
