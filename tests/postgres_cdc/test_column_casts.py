"""Whole columns of PostgreSQL text converted at once (``column_casts``) against the per-value converters.

Generated texts (hypothesis): where :func:`cast_texts` converts a column, every value must be what the
converter a record gets gives (``float``, ``parse_float32``, ``zoned_timestamp``); where the converter
would refuse a text or read it otherwise, the cast must give up (``ArrowInvalid``), so that the batch
converts value by value.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_copycat.connectors.postgres_cdc.column_casts import cast_texts
from airflow_copycat.connectors.postgres_cdc.pgtext import parse_float32, zoned_timestamp

FLOAT_TEXTS = st.one_of(st.floats(width=64).map(repr), st.floats(width=32).map(lambda f: f"{f:.9g}"),
                        st.sampled_from(["NaN", "Infinity", "-Infinity", "nan(1)", "inf", " 1", "1_0", "0x10", "1e",
                                         ".5", "1.", "-0", "1e+300", "9" * 400, "\u0661", "+1"]),
                        st.text("0123456789.eE+-naifINFtyx( ", max_size=12))


def _reads(convert, text) -> bool:
    try:
        convert(text)
        return True
    except ValueError:
        return False


def converted(texts: list, typ: pa.DataType, convert, width=None) -> list | None:
    """What cast_texts gives (None: it gave up), after checking it against ``convert`` value by value."""
    try:
        got = cast_texts(pa.array(texts, pa.string()), typ, width).to_pylist()
    except pa.ArrowInvalid:
        return None
    except OverflowError:  # real: a finite value beyond float32, which parse_float32 leaves a double
        assert typ == pa.float32()
        assert any(abs(convert(t)) > 3.4028234663852886e38 and abs(convert(t)) != float("inf")
                   for t in texts if t is not None and _reads(convert, t))
        return None
    want = pa.array([None if t is None else convert(t) for t in texts], typ).to_pylist()
    assert [repr(v) for v in got] == [repr(v) for v in want]
    return got


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(st.none(), FLOAT_TEXTS), min_size=1, max_size=8), st.sampled_from(["float64", "float32"]))
def test_a_float_column_reads_what_float_reads_or_gives_up(texts, width):
    converted(texts, getattr(pa, width)(), float if width == "float64" else parse_float32)


def test_floats_in_postgresql_output_are_cast():
    texts = ["0", "-0", "1.5", "0.1", "1e-07", "123456789.125", "1e+300", "-2.5e-310", "NaN", "Infinity", None]
    assert converted(texts, pa.float64(), float) is not None
    assert converted(["3.4028235e+38", "1e-45", "0.1", "-Infinity"], pa.float32(), parse_float32) is not None
    assert converted(["nan(1)"], pa.float64(), float) is None
    # extra_float_digits below 0 rounds FLT_MAX up: the converter leaves it a double (and refuses it later)
    assert converted(["1.5", "3.403e+38"], pa.float32(), parse_float32) is None


OFFSETS = st.sampled_from(["+00", "+02", "-05", "+05:30", "-03:30", "+14", "-12", "+00:09:21", "+05:45"])
TIMESTAMPTZ = st.builds(
    lambda d, us, offset, digits: d.strftime("%Y-%m-%d %H:%M:%S").rjust(19, "0")
    + (f".{us:06d}"[:digits + 1].rstrip("0").rstrip(".") if digits else "") + offset,
    st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30)),
    st.integers(0, 999_999), OFFSETS, st.integers(0, 6))


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(st.none(), TIMESTAMPTZ, st.sampled_from(["infinity", "-infinity", "2024-01-01 00:00:00 BC+00",
                                                                  "0001-01-01 00:30:00+01", "9999-12-31 23:30:00-01"])),
                min_size=1, max_size=6), st.sampled_from([-1, 0, 1, 3, 6, 7, 9, 10]))
def test_a_timestamptz_column_formats_what_zoned_timestamp_formats_or_gives_up(texts, width):
    converted(texts, pa.string(), lambda t: zoned_timestamp(t, width), width)


def test_iso_timestamptz_columns_are_converted_at_once():
    texts = ["2024-03-01 10:00:00.123456+02", "1970-01-01 00:00:00+00", "0044-03-15 12:00:00+00",
             "2024-03-01 10:00:00.5-03:30", None]
    for width in (0, 3, 6, 9):
        assert converted(texts, pa.string(), lambda t: zoned_timestamp(t, width), width) is not None
    assert converted(["2024-03-01 10:00:00.5+05:30"], pa.string(), lambda t: zoned_timestamp(t, 0), 0) == \
        ["2024-03-01T04:30:00.5Z"]
    assert converted(["infinity"], pa.string(), lambda t: zoned_timestamp(t, 6), 6) is None
    assert converted(["1900-01-01 00:00:00+00:09:21"], pa.string(), lambda t: zoned_timestamp(t, 6), 6) is None
