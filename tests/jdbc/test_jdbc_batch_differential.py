"""The batch path (Arrow batches, ``copycat.batch.enabled=true``, the default) against the record path
(``false``): on generated rows (seeded: NULLs, extreme integers, decimals of several scales incl.
negative ones, float32/float64 edge values, non-ASCII and control-character text, timestamps around
daylight-saving changes, dates before 1970), every mode, splits, a query and ``numeric.mapping``, the
batches' ``to_records()`` equal the records, one by one: topic, key, key schema, value, value schema,
source partition and source offset -- on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import random
import zlib

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql

from airflow_copycat.connect import ConnectException, SourceBatch, Struct
from airflow_copycat.connect.assignment import canonical
from airflow_copycat.connect.task import OffsetStorageReader, SourceTaskContext
from airflow_copycat.connectors.jdbc import JdbcSourceConnector, JdbcSourceTask
from tests.jdbc.conftest import Db

ZONE = "Europe/Berlin"
D = decimal.Decimal


class _Offsets(OffsetStorageReader):
    def __init__(self, offsets: dict | None = None):
        self._o = offsets or {}

    def offsets(self, partitions):
        return {canonical(p): self._o[canonical(p)] for p in partitions if canonical(p) in self._o}


def _fine_dt(kind):
    """DATETIME/TIME with microseconds on MariaDB (its default keeps whole seconds)."""
    return (sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb"),
            sa.Time().with_variant(mysql.TIME(fsp=6), "mysql", "mariadb"))


def _table(db, name: str) -> sa.Table:
    when, tod = _fine_dt(db.kind)
    cols = [sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("ts", when, nullable=False),
            sa.Column("ts_other", when),  # a naive column that may hold daylight-saving gap times
            sa.Column("big", sa.BigInteger), sa.Column("small", sa.SmallInteger),
            sa.Column("dec2", sa.Numeric(12, 2)), sa.Column("dec6", sa.Numeric(20, 6)),
            sa.Column("dec0", sa.Numeric(18, 0)), sa.Column("neg", sa.Numeric(5, 3)),
            sa.Column("r", sa.REAL().with_variant(mysql.FLOAT(), "mysql", "mariadb")),
            sa.Column("d", sa.Float(precision=53)),
            sa.Column("txt", sa.String(200)), sa.Column("blob", sa.LargeBinary),
            sa.Column("flag", sa.Boolean), sa.Column("day", sa.Date), sa.Column("tod", tod)]
    if db.kind == "postgresql":
        cols.append(sa.Column("tz", postgresql.TIMESTAMP(timezone=True)))
    kw = {"mysql_charset": "utf8mb4"} if db.kind == "mariadb" else {}
    return db.create(sa.Table(name, sa.MetaData(), *cols, **kw))


_TEXT = ["", "plain", "é ü ß", "日本語", "tab\there", "nl\nand\rcr", "quote ' \" \\", "ctl \x01\x1f", "😀 emoji",
         "x" * 200]
_FLOATS32 = [0.0, -0.0, 1.5, -2.25, 0.1, 3.4028234663852886e38, -3.4028234663852886e38, 1.1754943508222875e-38,
             1e-45, 16777217.0, 0.3333333432674408]
_FLOATS64 = [0.0, 0.1, -1e308, 1.7976931348623157e308, 5e-324, 2.2250738585072014e-308, 1 / 3, 123456789.125]
_DAYS = [dt.date(1969, 12, 31), dt.date(1900, 1, 1), dt.date(1, 1, 1), dt.date(1970, 1, 1), dt.date(2024, 2, 29),
         dt.date(9999, 12, 31)]
# around Europe/Berlin's changes: 2024-03-31 02:00-03:00 does not exist, 2024-10-27 02:00-03:00 happens twice
_TIMES = [dt.datetime(2024, 3, 31, 1, 59, 59, 999999), dt.datetime(2024, 3, 31, 3, 0),
          dt.datetime(2024, 10, 27, 1, 59), dt.datetime(2024, 10, 27, 2, 0), dt.datetime(2024, 10, 27, 2, 30, 0, 5),
          dt.datetime(2024, 10, 27, 3, 0), dt.datetime(1969, 12, 31, 23, 59, 59, 999999), dt.datetime(1950, 6, 1, 12),
          dt.datetime(2024, 1, 1, 0, 0, 0, 1)]
_GAP = dt.datetime(2024, 3, 31, 2, 30)


def _rows(db, n: int, seed: int) -> list[dict]:
    rnd = random.Random(seed)

    def maybe(v):
        return None if rnd.random() < 0.15 else v

    rows = []
    for i in range(1, n + 1):
        ts = rnd.choice(_TIMES) + dt.timedelta(days=rnd.choice([0, 0, 0, 1]))  # many rows share a timestamp
        row = {"id": i, "ts": ts,
               "ts_other": maybe(rnd.choice(_TIMES + [_GAP])),
               "big": maybe(rnd.choice([0, 1, -1, 2 ** 63 - 1, -2 ** 63, rnd.randint(-10 ** 12, 10 ** 12)])),
               "small": maybe(rnd.choice([0, 32767, -32768, rnd.randint(-1000, 1000)])),
               "dec2": maybe(D(rnd.randint(-10 ** 12 + 1, 10 ** 12 - 1)).scaleb(-2)),
               "dec6": maybe(D(rnd.randint(-10 ** 14, 10 ** 14)).scaleb(-6) if db.kind != "sqlite"
                             else D(rnd.randint(-10 ** 9, 10 ** 9)).scaleb(-6)),
               "dec0": maybe(D(rnd.choice([0, 10 ** 18 - 1, 1 - 10 ** 18, rnd.randint(-999, 999)]) if db.kind != "sqlite"
                               else rnd.randint(-10 ** 15, 10 ** 15))),  # SQLite keeps NUMERIC as a double
               "neg": maybe(D(rnd.randint(-99999, 99999)).scaleb(-3)),
               "r": maybe(rnd.choice(_FLOATS32)),
               "d": maybe(rnd.choice(_FLOATS64)),
               "txt": maybe(rnd.choice(_TEXT)),
               "blob": maybe(bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 40)))),
               "flag": maybe(rnd.random() < 0.5),
               "day": maybe(rnd.choice(_DAYS)),
               "tod": maybe(dt.time(rnd.randint(0, 23), rnd.randint(0, 59), rnd.randint(0, 59),
                                    rnd.choice([0, 1, 999999, rnd.randint(0, 999999)])))}
        if db.kind == "postgresql":
            row["tz"] = maybe(dt.datetime(1960, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
                microseconds=rnd.randint(0, 2 * 10 ** 15)))
        if db.kind == "mariadb" and row["txt"] is not None:
            row["txt"] = row["txt"].replace("\x01", "")  # kept: control characters \x1f, \t, \n, \r
        rows.append(row)
    return rows


def _config(db, name: str, mode: str, enabled: bool, **extra) -> dict:
    cfg = {"connector.class": "JdbcSourceConnector", "connection.url": db.url, "mode": mode, "tasks.max": 1,
           "table.whitelist": name, "topic.prefix": "diff-", "batch.max.rows": 7, "db.timezone": ZONE,
           "copycat.batch.enabled": str(enabled).lower(), "name": "diff"}
    if mode in ("incrementing", "timestamp+incrementing"):
        cfg["incrementing.column.name"] = "id"
    if mode in ("timestamp", "timestamp+incrementing"):
        cfg["timestamp.column.name"] = "ts"
    cfg.update(extra)
    return cfg


def _norm(v):
    """A value comparable with == (NaN equal to itself)."""
    if isinstance(v, Struct):
        return tuple((f.name, _norm(v.get(f.name))) for f in v.schema.fields)
    if isinstance(v, float) and math.isnan(v):
        return "float-nan"
    if isinstance(v, decimal.Decimal) and v.is_nan():
        return "decimal-nan"
    if isinstance(v, float):
        return ("float", v, math.copysign(1, v))  # -0.0 and 0.0 apart
    return v


def _records(cfg: dict, offsets: dict | None = None) -> tuple[list, int]:
    """Every record of every poll of one task (batches as their ``to_records()``), and how many batches."""
    values = JdbcSourceConnector.parse_config(cfg)
    connector = JdbcSourceConnector()
    connector.start(values)
    configs = connector.task_configs(int(cfg.get("tasks.max", 1)))
    connector.stop()
    out, batches = [], 0
    for task_config in configs:
        task = JdbcSourceTask()
        task.initialize(SourceTaskContext(task_config, _Offsets(offsets)))
        task.start(task_config)
        try:
            while (items := task.poll()) is not None:
                for item in items:
                    if isinstance(item, SourceBatch):
                        batches += 1
                        recs = item.to_records()
                        assert [r.source_offset for r in recs] == [item.offset_of(i) for i in range(len(item))]
                        assert recs[-1].source_offset == item.source_offset
                        out += recs
                    else:
                        out.append(item)
        finally:
            task.stop()
    return [(r.topic, _norm(r.key), r.key_schema, _norm(r.value), r.value_schema, r.source_partition,
             r.source_offset) for r in out], batches


CASES = {
    "bulk": ("bulk", {}),
    "incrementing": ("incrementing", {}),
    "timestamp": ("timestamp", {}),
    "timestamp+incrementing": ("timestamp+incrementing", {}),
    "timestamp+incrementing split": ("timestamp+incrementing", {"copycat.split.column": "id",
                                                                "copycat.split.count": 3, "tasks.max": 2}),
    "incrementing best_fit": ("incrementing", {"numeric.mapping": "best_fit", "batch.max.rows": 50}),
    "bulk split": ("bulk", {"copycat.split.column": "id", "copycat.split.count": 2}),
    "timestamp look-back": ("timestamp", {"copycat.lookback.ms": 3_600_000}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_batches_mean_the_records_of_the_record_path(db, unique, case):
    name = f"diff_{unique}"
    table = _table(db, name)
    rows = _rows(db, 150, seed=zlib.crc32(case.encode()))
    db.insert(table, rows)
    mode, extra = CASES[case]
    expected, none = _records(_config(db, name, mode, False, **extra))
    got, batches = _records(_config(db, name, mode, True, **extra))
    assert none == 0
    assert len(got) == len(expected) > 0
    for k, (g, e) in enumerate(zip(got, expected)):
        assert g == e, f"record {k} differs"
    doubles = {v["id"]: v["d"] for v in (dict(value) for _, _, _, value, *_ in expected)}
    assert doubles == {r["id"]: _norm(r["d"]) for r in rows if r["id"] in doubles}, "doubles read as written"
    if "look-back" not in case:
        assert batches > 0, "the batch path was not taken"


_LATIN1_TEXT = ["café", "Ærø ß ÿ", "¿qué? ¡sí!", "plain", "tab\there", "\xa0 ½ © µ", "ctl \x01\x1f", ""]


def test_a_legacy_database_gives_its_values_the_same_on_both_paths(legacy_postgres_url, unique):
    """Given a table of a LATIN1 database with ``extra_float_digits=0``, DateStyle ``SQL, DMY`` and
    IntervalStyle ``sql_standard`` (whose sessions talk LATIN1 and print floats rounded, dates and
    intervals their way unless a client asks otherwise), when it is read through batches and through
    records, then both give every text, float and timestamp as it was written, and an interval (read
    as records) as in any database (before: ADBC read LATIN1 bytes as UTF-8; the record path read
    0.1 + 0.2 as 0.3, and could parse neither the timestamps with a time zone nor the interval)."""
    db = Db("postgresql", legacy_postgres_url)
    try:
        name = f"diff_latin1_{unique}"
        table = _table(db, name)
        rows = _rows(db, 80, seed=11)
        for i, row in enumerate(rows):
            row["txt"] = _LATIN1_TEXT[i % len(_LATIN1_TEXT)]
        rows[0]["d"], rows[1]["d"] = 0.1 + 0.2, 1 / 3  # 17 significant digits to print exactly
        db.insert(table, rows)
        expected, _ = _records(_config(db, name, "incrementing", False))
        got, batches = _records(_config(db, name, "incrementing", True))
        assert batches > 0, "the batch path was not taken"
        values = [dict(value) for _, _, _, value, *_ in expected]
        assert [v["txt"] for v in values] == [row["txt"] for row in rows]
        assert [v["d"] for v in values] == [_norm(row["d"]) for row in rows]
        assert [v["tz"] for v in values] == [row["tz"] for row in rows]
        assert got == expected

        spans = db.create(sa.Table(f"spans_{unique}", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True),
                                   sa.Column("span", sa.Interval)))
        db.insert(spans, [{"id": 1, "span": dt.timedelta(days=-3, hours=4, minutes=5, seconds=6.7)}])
        for enabled in (False, True):
            cfg = _config(db, spans.name, "incrementing", enabled)
            ((*_, value, _, _, _),), _ = _records(cfg)
            assert dict(value)["span"] == str(dt.timedelta(days=-3, hours=4, minutes=5, seconds=6.7))
    finally:
        db.close()


def test_the_environments_libpq_options_reach_both_paths(postgres_url, unique, monkeypatch):
    """Given ``PGOPTIONS`` naming a schema first in the search path, and a table of the same name in that
    schema and in ``public``, when a query reads it through batches and through records, then both read
    the schema's (the record path's own session settings must not replace the environment's options)."""
    schema, name = f"pgopt_{unique}", f"both_{unique}"
    engine = sa.create_engine(postgres_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
            for where, text in ((schema, "schema row"), ("public", "public row")):
                conn.execute(sa.text(f"CREATE TABLE {where}.{name} (id INT PRIMARY KEY, v TEXT)"))
                conn.execute(sa.text(f"INSERT INTO {where}.{name} VALUES (1, '{text}')"))
        monkeypatch.setenv("PGOPTIONS", f"-c search_path={schema}")
        db = Db("postgresql", postgres_url)
        got = {}
        for enabled in (False, True):
            cfg = _config(db, "", "incrementing", enabled, query=f"SELECT id, v FROM {name}", **{"table.whitelist": ""})
            records, batches = _records(cfg)
            got[enabled] = [dict(value)["v"] for _, _, _, value, *_ in records]
            assert batches == (1 if enabled else 0)
        assert got == {False: ["schema row"], True: ["schema row"]}
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
            conn.execute(sa.text(f"DROP TABLE IF EXISTS public.{name}"))
        engine.dispose()


def test_query_mode_and_a_resumed_offset(db, unique):
    name = f"diffq_{unique}"
    table = _table(db, name)
    rows = _rows(db, 60, seed=7)
    db.insert(table, rows)
    query = f"SELECT * FROM {name} WHERE id > 3 AND id <> 17"
    extra = {"query": query, "table.whitelist": ""}
    expected, _ = _records(_config(db, name, "timestamp+incrementing", False, **extra))
    got, batches = _records(_config(db, name, "timestamp+incrementing", True, **extra))
    assert got == expected and batches > 0
    doubles = {v["id"]: v["d"] for v in (dict(value) for _, _, _, value, *_ in expected)}
    assert doubles == {r["id"]: _norm(r["d"]) for r in rows if r["id"] in doubles}, "doubles read as written"
    # from a committed offset in the middle: the same rows after it
    middle = expected[len(expected) // 2]
    offsets = {canonical(middle[5]): middle[6]}
    expected, _ = _records(_config(db, name, "timestamp+incrementing", False, **extra), offsets)
    got, _ = _records(_config(db, name, "timestamp+incrementing", True, **extra), offsets)
    assert got == expected and 0 < len(got) < 30


def test_a_timestamp_in_a_daylight_saving_gap_fails_the_same_way(db, unique):
    if db.kind == "sqlite":
        when = sa.DateTime()
    else:
        when = _fine_dt(db.kind)[0]
    name = f"diffgap_{unique}"
    table = db.create(sa.Table(name, sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True,
                                                                 autoincrement=False),
                               sa.Column("ts", when, nullable=False)))
    db.insert(table, [{"id": i, "ts": dt.datetime(2024, 3, 31, 1, 0) + dt.timedelta(minutes=20 * i)}
                      for i in range(1, 8)])  # 02:00 .. 02:40 do not exist in Europe/Berlin
    errors = []
    for enabled in (False, True):
        with pytest.raises(ConnectException) as e:
            _records(_config(db, name, "timestamp+incrementing", enabled))
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "daylight-saving gap" in errors[0]


def test_postgresql_values_without_an_arrow_form_fall_back_to_records(postgres_url, unique):
    db = Db("postgresql", postgres_url)
    try:
        name = f"diffnan_{unique}"
        table = db.create(sa.Table(name, sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True,
                                                                     autoincrement=False),
                                   sa.Column("n", sa.Numeric(10, 2)), sa.Column("u", sa.Numeric()),
                                   sa.Column("r", sa.REAL)))
        db.insert(table, [{"id": i, "n": D("NaN") if i == 5 else D(i).scaleb(-2),
                           "u": D("1.123456789012345") if i == 9 else D(10) ** 40 if i == 12 else D(i),
                           "r": float("nan") if i == 3 else float("inf") if i == 4 else i / 3} for i in range(1, 16)])
        for mode in ("bulk", "incrementing"):
            expected, _ = _records(_config(db, name, mode, False))
            got, batches = _records(_config(db, name, mode, True))
            assert got == expected and len(got) == 15 and batches > 0
    finally:
        db.close()
