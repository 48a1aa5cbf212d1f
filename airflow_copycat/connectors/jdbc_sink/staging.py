"""How the JDBC sink's columns path stages a column in PostgreSQL, and which table columns take it.

:func:`staged` gives the Arrow column the staging table is loaded with (timestamps as naive local
time of ``db.timezone``, decimals as their digits), or ``None`` when the fast path does not write
that type; :func:`takes` says whether a table column holds such a staged value exactly as the record
path would write it. :mod:`.columns` sends a run whose columns do not fit to the records path.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa

_LOCAL_RANGE = (-62_135_596_800_000_000, 253_402_300_799_999_999)  # datetime min .. max, in us


def staged(array, zone: str):
    """A column as staged: timestamps as naive local time of ``zone``, decimals as their digits
    (the database keeps their scale then); ``None`` for a type the fast path does not write."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    t = array.type
    if pa.types.is_timestamp(t):
        if not t.tz:
            return None
        local = pc.local_timestamp(array.cast(pa.timestamp(t.unit, tz=zone)))
        if len(local) > local.null_count:  # beyond Python's datetime in local time: the records fail there
            lo, hi = (v.value for v in pc.min_max(local.cast(pa.timestamp("us"))).values())
            if lo < _LOCAL_RANGE[0] or hi > _LOCAL_RANGE[1]:
                return None
        return local
    if pa.types.is_decimal(t):
        return pc.cast(array, pa.string()) if t.scale >= 0 else None
    if (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_string(t)
            or pa.types.is_binary(t) or pa.types.is_date32(t) or pa.types.is_time32(t)):
        return array
    return None


def takes(column: Any, staged: pa.DataType, numeric: bool) -> bool:
    """Whether a column of SQLAlchemy type ``column`` holds a staged value as the record path's value
    (the database's assignment cast from the staged type is exact, or fails where the records' do)."""
    name = type(column).__name__.upper()
    if numeric:
        return isinstance(column, sa.Numeric) and not isinstance(column, sa.Float)
    if pa.types.is_integer(staged):
        return isinstance(column, sa.Integer) or (isinstance(column, sa.Numeric) and not isinstance(column, sa.Float))
    if pa.types.is_float32(staged):
        return name == "REAL"
    if pa.types.is_float64(staged):
        return name in ("DOUBLE_PRECISION", "DOUBLE")
    if pa.types.is_boolean(staged):
        return isinstance(column, sa.Boolean)
    if pa.types.is_string(staged):
        return name in ("TEXT", "VARCHAR", "CHAR")
    if pa.types.is_binary(staged):
        return isinstance(column, sa.LargeBinary) or name == "BYTEA"
    if pa.types.is_date32(staged):
        return isinstance(column, sa.Date) and not isinstance(column, sa.DateTime)
    if pa.types.is_time32(staged):
        return isinstance(column, sa.Time) and not getattr(column, "timezone", False)
    if pa.types.is_timestamp(staged):
        return isinstance(column, sa.DateTime) and not getattr(column, "timezone", False)
    return False
