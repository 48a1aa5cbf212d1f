"""PostgreSQL types -> Debezium's Connect schemas and values, read from real PostgreSQL text output.

Every value here is what the server itself prints (``COPY ... TO STDOUT`` in the sessions
``snapshot.prepare_session`` sets up), so the parsing is checked against PostgreSQL's own formats.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import uuid

import psycopg
import pytest

from airflow_copycat.connect.data import Struct, Type
from airflow_copycat.connect.errors import DataException
from airflow_copycat.connectors.postgres_cdc import pgtext
from airflow_copycat.connectors.postgres_cdc import values as v
from airflow_copycat.connectors.postgres_cdc.config import CdcConfig
from airflow_copycat.connectors.postgres_cdc.model import UNCHANGED_TOAST, Column
from airflow_copycat.connectors.postgres_cdc.snapshot import load_types, prepare_session, relation_from_catalog

BASE = {"database.hostname": "h", "database.dbname": "d", "database.user": "u", "topic.prefix": "p"}


def mapper(**keys) -> v.ValueMapper:
    return v.ValueMapper(CdcConfig.parse(dict(BASE, **keys)))


@pytest.fixture()
def pg(postgres_url):
    conn = psycopg.connect(postgres_url.replace("+psycopg", ""), autocommit=True)
    prepare_session(conn)
    conn.execute("SET TimeZone = 'Europe/Berlin'")  # offsets must be read, whatever the session's zone
    schema = f"cdc_values_{uuid.uuid4().hex[:8]}"
    conn.execute(f"CREATE SCHEMA {schema}")
    conn.execute(f"SET search_path = {schema}")
    yield conn, schema
    conn.execute(f"DROP SCHEMA {schema} CASCADE")
    conn.close()


def read(conn, schema: str, columns_sql: str, values_sql: str, **keys):
    """Create a one-row table, read its row as text like the snapshot does, map each column."""
    conn.execute(f"CREATE TABLE {schema}.t ({columns_sql})")
    conn.execute(f"INSERT INTO {schema}.t VALUES ({values_sql})")
    relation = relation_from_catalog(conn, schema, "t")
    types = load_types(conn, [c.type_oid for c in relation.columns])
    m = v.ValueMapper(CdcConfig.parse(dict(BASE, **keys)), types)
    with conn.cursor() as cur, cur.copy(f"COPY {schema}.t TO STDOUT") as copy:
        (row,) = list(copy.rows())
    out = {}
    for column, text in zip(relation.columns, row):
        f = m.field(column)
        out[column.name] = (f.schema, f.convert(text))
    return out


def test_numbers_booleans_and_text(pg):
    got = read(*pg, "a smallint, b integer NOT NULL, c bigint, d real, e double precision, f boolean, "
                    "g text, h varchar(5), i char(3), j oid, k bit(1)",
               "-3, 7, 9007199254740993, 1.1, 0.1, true, 'tab\tand\\back', 'abc', 'x', 42, B'1'")

    assert [(s.type, s.optional) for s, _ in got.values()][:2] == [(Type.INT16, True), (Type.INT32, False)]
    assert got["a"][1] == -3 and got["b"][1] == 7 and got["c"][1] == 9007199254740993
    assert got["d"][0].type is Type.FLOAT32 and abs(got["d"][1] - 1.1) < 1e-7
    assert got["e"] == (got["e"][0], 0.1) and got["e"][0].type is Type.FLOAT64
    assert got["f"][1] is True and got["k"][1] is True
    assert got["g"][1] == "tab\tand\\back"
    assert got["i"][1] == "x  "  # char(n) keeps its padding, as Debezium sends it
    assert got["j"][0].type is Type.INT64 and got["j"][1] == 42


def test_numeric_in_every_decimal_handling_mode(pg):
    conn, schema = pg
    cols, vals = "a numeric(10,2), b numeric, c numeric, d money", "1234.5, 3.14159, 'NaN', 12.34"

    precise = read(conn, schema, cols, vals.replace("'NaN'", "-0.0100"))
    assert precise["a"][0].name == "org.apache.kafka.connect.data.Decimal"
    assert precise["a"][0].parameters == {"scale": "2", "connect.decimal.precision": "10"}
    assert precise["a"][1] == decimal.Decimal("1234.50")
    b = precise["b"]
    assert b[0].name == "io.debezium.data.VariableScaleDecimal" and isinstance(b[1], Struct)
    assert b[1]["scale"] == 5 and int.from_bytes(b[1]["value"], "big", signed=True) == 314159
    assert int.from_bytes(precise["c"][1]["value"], "big", signed=True) == -100 and precise["c"][1]["scale"] == 4
    assert precise["d"][0].parameters["scale"] == "2" and precise["d"][1] == decimal.Decimal("12.34")

    conn.execute(f"DROP TABLE {schema}.t")
    doubles = read(conn, schema, cols, vals, **{"decimal.handling.mode": "double"})
    assert doubles["a"][1] == 1234.5 and doubles["b"][1] == 3.14159 and doubles["c"][1] != doubles["c"][1]
    assert doubles["d"][1] == 12.34

    conn.execute(f"DROP TABLE {schema}.t")
    strings = read(conn, schema, cols, vals, **{"decimal.handling.mode": "string"})
    assert [strings[k][1] for k in "abcd"] == ["1234.50", "3.14159", "NAN", "12.34"]


def test_nan_in_precise_mode_says_which_mode_to_use(pg):
    got_error = None
    try:
        read(*pg, "n numeric", "'NaN'")
    except DataException as e:
        got_error = str(e)
    assert got_error and "column 'n'" in got_error and "decimal.handling.mode=string" in got_error


def test_temporal_types_in_adaptive_mode(pg):
    got = read(*pg,
               "d date, t time, t3 time(3), ts timestamp, ts2 timestamp(2), tz timestamptz, tz3 timestamptz(3), "
               "ttz timetz, iv interval, inf timestamp, ninf timestamptz, bc date",
               "'2024-02-29', '13:45:07.123456', '13:45:07.5', '2018-06-20 15:13:16.945104', '2024-01-01 00:00:01.25', "
               "'2024-01-31 12:34:56.5+01', '2024-07-01 00:00:00+00', '13:45:07.5+02', "
               "'1 year 2 mons 3 days 04:05:06.7', 'infinity', '-infinity', '0044-03-15 BC'")

    def name(k):
        return got[k][0].name

    assert name("d") == "io.debezium.time.Date" and got["d"][1] == (dt.date(2024, 2, 29) - dt.date(1970, 1, 1)).days
    assert name("t") == "io.debezium.time.MicroTime" and got["t"][1] == (49507 * 1_000_000 + 123456)
    assert name("t3") == "io.debezium.time.Time" and got["t3"][1] == 49507 * 1000 + 500
    assert name("ts") == "io.debezium.time.MicroTimestamp" and got["ts"][1] == 1529507596945104  # Debezium's doc example
    assert name("ts2") == "io.debezium.time.Timestamp" and got["ts2"][1] == 1704067201250
    # the session runs in Europe/Berlin: the text carries the offset, the event is UTC
    assert name("tz") == "io.debezium.time.ZonedTimestamp" and got["tz"][1] == "2024-01-31T11:34:56.500000Z"
    assert got["tz3"][1] == "2024-07-01T00:00:00.000Z"
    assert name("ttz") == "io.debezium.time.ZonedTime" and got["ttz"][1] == "11:45:07.5Z"
    assert name("iv") == "io.debezium.time.MicroDuration"
    expected = int(((((1 * 12 + 2) * (365.25 / 12) + 3) * 24 + 4) * 60 + 5) * 60 * 1e6 + 6.7e6)
    assert abs(got["iv"][1] - expected) <= 1
    assert got["inf"][1] == v.POSITIVE_INFINITY_MICROS and got["ninf"][1] == "-infinity"
    assert got["bc"][1] == pgtext._days_from_civil(-43, 3, 15)


def test_temporal_types_in_connect_and_microsecond_modes(pg):
    conn, schema = pg
    cols = "d date, t time(6), ts timestamp(1)"
    vals = "'2024-02-29', '13:45:07.123456', '2024-01-01 00:00:01.2'"
    connect = read(conn, schema, cols, vals, **{"time.precision.mode": "connect"})
    assert connect["d"] == (connect["d"][0], dt.date(2024, 2, 29))
    assert connect["d"][0].name == "org.apache.kafka.connect.data.Date"
    assert connect["t"][1] == dt.time(13, 45, 7, 123000)  # Connect's Time has milliseconds
    assert connect["ts"][1] == dt.datetime(2024, 1, 1, 0, 0, 1, 200000, tzinfo=dt.timezone.utc)

    conn.execute(f"DROP TABLE {schema}.t")
    micros = read(conn, schema, cols, vals, **{"time.precision.mode": "microseconds"})
    assert micros["ts"][0].name == "io.debezium.time.MicroTimestamp" and micros["ts"][1] == 1704067201200000

    conn.execute(f"DROP TABLE {schema}.t")
    nanos = read(conn, schema, cols + ", inf timestamp", vals + ", 'infinity'", **{"time.precision.mode": "nanoseconds"})
    assert nanos["t"][0].name == "io.debezium.time.NanoTime" and nanos["t"][1] == 49507_123456000
    assert nanos["ts"][0].name == "io.debezium.time.NanoTimestamp" and nanos["ts"][1] == 1704067201200000000
    assert nanos["inf"][1] == 2**63 - 1 and nanos["d"][0].name == "io.debezium.time.Date"
    with pytest.raises(DataException, match="1677-2262"):
        mapper(**{"time.precision.mode": "nanoseconds"}).field(Column("x", v.TIMESTAMP)).convert("9999-12-31 00:00:00")

    conn.execute(f"DROP TABLE {schema}.t")
    iso = read(conn, schema, cols, vals, **{"time.precision.mode": "isostring"})
    assert [iso[k][0].name for k in ("d", "t", "ts")] == [
        "io.debezium.time.IsoDate", "io.debezium.time.IsoTime", "io.debezium.time.IsoTimestamp"]
    assert [iso[k][1] for k in ("d", "t", "ts")] == ["2024-02-29Z", "13:45:07.123456Z", "2024-01-01T00:00:01.2Z"]

    conn.execute(f"DROP TABLE {schema}.t")
    adaptive_us = read(conn, schema, "t time(2)", "'01:00:00.25'", **{"time.precision.mode": "adaptive_time_microseconds"})
    assert adaptive_us["t"] == (adaptive_us["t"][0], 3_600_250_000)


def test_strings_with_debezium_semantic_names(pg):
    got = read(*pg, "j json, jb jsonb, x xml, u uuid, ip inet, r int4range, tv tsvector",
               """'{"b": 1,  "a": [1, 2]}', '{"b": 1, "a": [1, 2]}', '<a>1</a>',
                  'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '10.0.0.1/8', '[1,5)', 'the quick fox'""")
    assert got["j"] == (got["j"][0], '{"b": 1,  "a": [1, 2]}') and got["j"][0].name == "io.debezium.data.Json"
    assert json.loads(got["jb"][1]) == {"a": [1, 2], "b": 1}
    assert got["x"][0].name == "io.debezium.data.Xml"
    assert got["u"] == (got["u"][0], "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11") and got["u"][0].name == "io.debezium.data.Uuid"
    assert got["ip"][1] == "10.0.0.1/8" and got["r"][1] == "[1,5)"
    assert got["tv"][0].name == "io.debezium.data.Tsvector" and got["tv"][1] == "'fox' 'quick' 'the'"


@pytest.mark.parametrize("mode, expected", [
    ("bytes", b"\x00\x01\xfe\xff"), ("base64", base64.b64encode(b"\x00\x01\xfe\xff").decode()),
    ("base64-url-safe", base64.urlsafe_b64encode(b"\x00\x01\xfe\xff").decode()), ("hex", "0001feff")])
def test_bytea_in_every_binary_handling_mode(pg, mode, expected):
    got = read(*pg, "b bytea", r"'\x0001feff'", **{"binary.handling.mode": mode})
    assert got["b"][1] == expected


def test_arrays_of_several_element_types(pg):
    got = read(*pg, "ints int[], texts text[], dates date[], nums numeric(5,1)[], empty int[], bools bool[]",
               """'{1,NULL,3}', ARRAY['a b', NULL, 'NULL', 'q"t', 'back\\slash', ''], '{2024-01-01}',
                  '{1.5,2}', '{}', '{t,f}'""")
    assert got["ints"][0].type is Type.ARRAY and got["ints"][0].value_schema.type is Type.INT32
    assert got["ints"][0].value_schema.optional
    assert got["ints"][1] == [1, None, 3]
    assert got["texts"][1] == ["a b", None, "NULL", 'q"t', "back\\slash", ""]
    assert got["dates"][1] == [(dt.date(2024, 1, 1) - dt.date(1970, 1, 1)).days]
    assert got["nums"][1] == [decimal.Decimal("1.5"), decimal.Decimal("2.0")]
    assert got["empty"][1] == [] and got["bools"][1] == [True, False]


def test_enums_domains_and_unknown_types(pg):
    conn, schema = pg
    conn.execute(f"CREATE TYPE {schema}.mood AS ENUM ('sad', 'happy')")
    conn.execute(f"ALTER TYPE {schema}.mood ADD VALUE 'ok' BEFORE 'happy'")  # sort order, not creation order
    conn.execute(f"CREATE DOMAIN {schema}.price AS numeric(8,3) CHECK (VALUE >= 0)")
    got = read(conn, schema, f"m {schema}.mood, ms {schema}.mood[], p {schema}.price, pt point, c circle",
               "'ok', '{sad,happy}', 2.5, '(1,2)', '<(0,0),1>'")
    assert got["m"][0].name == "io.debezium.data.Enum" and got["m"][0].parameters == {"allowed": "sad,ok,happy"}
    assert got["m"][1] == "ok" and got["ms"][1] == ["sad", "happy"]
    assert got["p"][0].name == "org.apache.kafka.connect.data.Decimal" and got["p"][1] == decimal.Decimal("2.500")
    assert got["pt"][0].name == "io.debezium.data.geometry.Point"
    assert got["pt"][1]["x"] == 1.0 and got["pt"][1]["y"] == 2.0 and got["pt"][1]["srid"] is None
    assert got["pt"][1]["wkb"] == bytes.fromhex("0101000000000000000000f03f0000000000000040")  # OGC WKB POINT(1 2)
    # no mapping (Debezium's Circle struct is not built): the text, with the type named
    assert got["c"][0].type is Type.STRING and got["c"][0].parameters == {"__debezium.source.column.type": "CIRCLE"}
    assert got["c"][1] == "<(0,0),1>"


def test_hstore_as_json_or_map():
    m = v.ValueMapper(CdcConfig.parse(BASE), {99999: v.PgType(99999, "hstore")})
    text = '"a"=>"1", "b"=>NULL, "q\\"k"=>"v,w"'
    as_json = m.field(Column("h", 99999, -1, "hstore"))
    assert as_json.schema.name == "io.debezium.data.Json"
    assert json.loads(as_json.convert(text)) == {"a": "1", "b": None, 'q"k': "v,w"}
    as_map = v.ValueMapper(CdcConfig.parse(dict(BASE, **{"hstore.handling.mode": "map"})),
                           {99999: v.PgType(99999, "hstore")}).field(Column("h", 99999, -1, "hstore"))
    assert as_map.schema.type is Type.MAP and as_map.convert(text) == {"a": "1", "b": None, 'q"k': "v,w"}


def test_interval_as_iso_string():
    f = mapper(**{"interval.handling.mode": "string"}).field(Column("i", v.INTERVAL_OID))
    assert f.schema.name == "io.debezium.time.Interval"
    assert f.convert("1 year 2 mons 3 days 04:05:06.78") == "P1Y2M3DT4H5M6.78S"
    assert f.convert("-1 days +02:00:00") == "P0Y0M-1DT2H0M0S"
    assert f.convert("-00:30:00") == "P0Y0M0DT0H-30M0S"


def test_unchanged_toast_becomes_debeziums_placeholder():
    m = mapper()
    assert m.field(Column("t", v.TEXT)).convert(UNCHANGED_TOAST) == "__debezium_unavailable_value"
    assert m.field(Column("b", v.BYTEA)).convert(UNCHANGED_TOAST) == b"__debezium_unavailable_value"
    assert m.field(Column("j", v.JSONB)).convert(UNCHANGED_TOAST) == "__debezium_unavailable_value"
    assert m.field(Column("a", 1009)).convert(UNCHANGED_TOAST) == ["__debezium_unavailable_value"]
    custom = mapper(**{"unavailable.value.placeholder": "<toast>"})
    assert custom.field(Column("t", v.TEXT)).convert(UNCHANGED_TOAST) == "<toast>"
    with pytest.raises(DataException, match="REPLICA IDENTITY FULL"):
        m.field(Column("n", v.NUMERIC)).convert(UNCHANGED_TOAST)


def test_null_in_a_not_null_column_the_wal_did_not_carry_gets_debeziums_fallback():
    m = mapper()
    assert m.field(Column("t", v.TEXT, optional=False)).convert(None) == ""
    assert m.field(Column("i", v.INT4, optional=False)).convert(None) == 0
    assert m.field(Column("z", v.TIMESTAMPTZ, optional=False)).convert(None) == "1970-01-01T00:00:00Z"
    assert m.field(Column("t", v.TEXT, optional=True)).convert(None) is None


def test_array_literals_with_quoting_and_bounds():
    assert pgtext.parse_array('{1,2,NULL,"a b"}') == ["1", "2", None, "a b"]
    assert pgtext.parse_array('{"x\\\\y","{}",""}') == ["x\\y", "{}", ""]
    assert pgtext.parse_array("[0:1]={7,8}") == ["7", "8"]
    with pytest.raises(DataException, match="multi-dimensional"):
        pgtext.parse_array("{{1,2},{3,4}}")


def test_unreadable_text_names_the_column():
    with pytest.raises(DataException, match="column 'd'"):
        mapper().field(Column("d", v.DATE)).convert("31/01/2024")


def test_timestamps_beyond_the_common_years_read_the_same_as_postgresql_prints_them(pg):
    conn, schema = pg
    got = read(conn, schema, "a timestamp, b timestamptz, c timestamptz(2), d timestamp",
               "'10000-01-01 00:00:00', '9999-12-31 23:30:00-01', '0044-03-15 12:00:00.5+00 BC', "
               "'1969-12-31 23:59:59.999999'")
    assert got["a"][1] == pgtext._days_from_civil(10000, 1, 1) * 86_400_000_000
    assert got["b"][1] == "+10000-01-01T00:30:00.000000Z"  # past year 9999 after the shift to UTC
    assert got["c"][1] == "-0043-03-15T12:00:00.50Z"  # 44 BC is ISO year -43
    assert got["d"][1] == -1


def test_offsets_with_seconds_and_zones_west_of_utc():
    assert pgtext.zoned_timestamp("1900-01-01 00:00:00+00:09:21", 0) == "1899-12-31T23:50:39Z"
    assert pgtext.zoned_timestamp("2024-01-31 22:00:00-05", 6) == "2024-02-01T03:00:00.000000Z"
    assert pgtext.parse_timestamp_micros("2024-01-31 22:00:00-05") == pgtext.parse_timestamp_micros("2024-02-01 03:00:00+00")


def test_column_defaults_go_into_the_schemas_as_debezium_puts_them(pg):
    got = read(*pg, "id serial, name varchar(20) NOT NULL DEFAULT 'it''s', qty int DEFAULT -5, "
                    "price numeric(8,2) DEFAULT 9.5, active boolean DEFAULT true, at timestamptz DEFAULT now(), "
                    "day date DEFAULT '2024-01-01', note text DEFAULT NULL, free numeric DEFAULT 1.5",
               "DEFAULT, DEFAULT, DEFAULT, DEFAULT, DEFAULT, DEFAULT, DEFAULT, DEFAULT, DEFAULT")
    defaults = {name: schema.default for name, (schema, _) in got.items()}
    assert defaults == {
        "id": 0,  # nextval(...): a generated default is the type's zero
        "name": "it's", "qty": -5, "price": decimal.Decimal("9.50"), "active": True,
        "at": "1970-01-01T00:00:00.000000Z", "day": (dt.date(2024, 1, 1) - dt.date(1970, 1, 1)).days,
        "note": None,
        "free": None,  # a VariableScaleDecimal struct cannot be a default (Kafka's KAFKA-12694)
    }
    assert got["id"][1] == 1 and got["name"][1] == "it's"
