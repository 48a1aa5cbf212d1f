"""Facts of PostgreSQL's type catalog the event builder needs: built-in type OIDs, what the catalog
says about other types (:class:`PgType`), and what a column's type modifier means."""

from __future__ import annotations

from dataclasses import dataclass

# built-in type OIDs (pg_type.oid; fixed in every PostgreSQL)
BOOL, BYTEA, CHAR, NAME, INT8, INT2, INT4, TEXT, OID = 16, 17, 18, 19, 20, 21, 23, 25, 26
JSON_OID, XML_OID, FLOAT4, FLOAT8, MONEY = 114, 142, 700, 701, 790
CIDR, MACADDR8, MACADDR, INET, BPCHAR, VARCHAR = 650, 774, 829, 869, 1042, 1043
DATE, TIME_OID, TIMESTAMP, TIMESTAMPTZ, INTERVAL_OID, TIMETZ = 1082, 1083, 1114, 1184, 1186, 1266
BIT, VARBIT, NUMERIC, UUID_OID, TSVECTOR_OID, JSONB = 1560, 1562, 1700, 2950, 3614, 3802
POINT_OID = 600
RANGES = {3904, 3906, 3908, 3910, 3912, 3926}
STRINGS = {CHAR, NAME, TEXT, CIDR, MACADDR8, MACADDR, INET, BPCHAR, VARCHAR} | RANGES
ARRAY_ELEMENTS = {
    1000: BOOL, 1001: BYTEA, 1002: CHAR, 1003: NAME, 1005: INT2, 1007: INT4, 1009: TEXT, 1014: BPCHAR,
    1015: VARCHAR, 1016: INT8, 1021: FLOAT4, 1022: FLOAT8, 1028: OID, 791: MONEY, 1041: INET, 651: CIDR,
    1040: MACADDR, 775: MACADDR8, 1182: DATE, 1183: TIME_OID, 1115: TIMESTAMP, 1185: TIMESTAMPTZ,
    1187: INTERVAL_OID, 1231: NUMERIC, 1270: TIMETZ, 2951: UUID_OID, 199: JSON_OID, 3807: JSONB, 143: XML_OID,
    1561: BIT, 1563: VARBIT, 3905: 3904, 3907: 3906, 3909: 3908, 3911: 3910, 3913: 3912, 3927: 3926,
}
"""Built-in array type OID -> element type OID."""


@dataclass(frozen=True)
class PgType:
    """What the catalog says about a type that is not built in (see :func:`.snapshot.load_types`):
    ``kind`` is ``pg_type.typtype`` (``b`` base, ``e`` enum, ``d`` domain, ``r`` range, ``c``
    composite), ``element_oid`` the element type of an array (0 otherwise), ``base_oid`` and
    ``base_modifier`` a domain's base type and modifier, ``enum_labels`` an enum's labels in sort order."""

    oid: int
    name: str
    kind: str = "b"
    element_oid: int = 0
    base_oid: int = 0
    base_modifier: int = -1
    enum_labels: tuple[str, ...] = ()



def numeric_precision_scale(modifier: int) -> tuple[int, int] | None:
    """``numeric(p,s)``'s precision and scale from its ``atttypmod``; None without a declared precision."""
    if modifier < 4:
        return None
    m = modifier - 4
    scale = ((m & 0x7FF) ^ 1024) - 1024  # PostgreSQL 15 allows negative scales (11-bit two's complement)
    return (m >> 16) & 0xFFFF, scale


def time_precision(modifier: int) -> int:
    """Fractional digits of a time/timestamp column: its declared precision, 6 without one."""
    return 6 if modifier < 0 else modifier
