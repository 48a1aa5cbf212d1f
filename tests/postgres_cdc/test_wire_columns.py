"""Many changes' tuples read into columns at once (``wire_columns``) against the per-message decoder.

Generated pgoutput Insert/Update/Delete messages (hypothesis): the columns :func:`tuple_columns` reads
must hold, row for row, what :class:`PgOutputDecoder` decodes from each message (text, None,
UNCHANGED_TOAST); a message the decoder refuses (a column kind it does not read, a length past the
end, a wrong column count, bytes that are not UTF-8) must make :func:`tuple_columns` give up (None),
so that the batch falls back to the decoder, which raises its own error.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_copycat.connectors.postgres_cdc.model import UNCHANGED_TOAST
from airflow_copycat.connectors.postgres_cdc.pgoutput import PgOutputDecoder, PgOutputError, WireChange
from airflow_copycat.connectors.postgres_cdc.wire_columns import tuple_columns

NCOLS = 4
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
VALUE = st.one_of(TEXT, st.none(), st.just(UNCHANGED_TOAST))


def relation_message(ncols: int = NCOLS) -> bytes:
    out = b"R" + struct.pack(">I", 42) + b"public\0t\0d" + struct.pack(">h", ncols)
    for i in range(ncols):
        out += bytes([1 if i == 0 else 0]) + f"c{i}".encode() + b"\0" + struct.pack(">Ii", 25, -1)
    return out


def tuple_bytes(values) -> bytes:
    out = struct.pack(">h", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v is UNCHANGED_TOAST:
            out += b"u"
        else:
            raw = v.encode() if isinstance(v, str) else v
            out += b"t" + struct.pack(">i", len(raw)) + raw
    return out


def message(op: str, values) -> bytes:
    head = {"c": b"I", "u": b"U", "d": b"D"}[op] + struct.pack(">I", 42)
    return head + (b"K" if op == "d" else b"N") + tuple_bytes(values)


def decoder() -> PgOutputDecoder:
    d = PgOutputDecoder()
    d.decode(relation_message(), 1)
    return d


def columns_of(changes: list[WireChange]) -> list[list] | None:
    """tuple_columns over the changes' one tuple each, as lists of values per column."""
    wires = [c.wire for c in changes]
    lengths = np.array([len(w) for w in wires], np.int64)
    ends = np.cumsum(lengths)
    starts = ends - lengths + 6
    columns = tuple_columns(np.frombuffer(b"".join(wires), np.uint8), ends, starts, NCOLS)
    return None if columns is None else [c.values() for c in columns]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from("cud"), st.lists(VALUE, min_size=NCOLS, max_size=NCOLS)), min_size=1,
                max_size=20))
def test_columns_hold_what_the_decoder_decodes(rows):
    d = decoder()
    changes = [d.decode(message(op, values), 100 + i) for i, (op, values) in enumerate(rows)]
    assert all(type(c) is WireChange for c in changes)
    decoded = [c.after if c.op != "d" else c.before for c in changes]
    assert decoded == [tuple(values) for _, values in rows]
    assert columns_of(changes) == [list(col) for col in zip(*decoded)]


def test_rows_taken_without_a_tuple_are_null_and_not_counted_as_nulls():
    d = decoder()
    insert = d.decode(message("c", ["1", None, "x", UNCHANGED_TOAST]), 5)
    columns = tuple_columns(np.frombuffer(insert.wire, np.uint8), np.array([len(insert.wire)]), np.array([6]), NCOLS)
    c0, c1, c2, c3 = (c.take(np.array([0, -1, 0])) for c in columns)
    assert c0.values() == ["1", None, "1"] and c1.values() == [None] * 3
    assert c3.values() == [UNCHANGED_TOAST, None, UNCHANGED_TOAST]
    assert (c0.null_values, c1.null_values, c3.null_values) == (0, 2, 0)
    assert c3.unchanged.tolist() == [True, False, True] and c0.unchanged is None


BAD = {
    "a binary column ('b')": lambda v: struct.pack(">h", 4) + b"b" + struct.pack(">i", 1) + b"x" + b"n" * 3,
    "a length past the end": lambda v: struct.pack(">h", 4) + b"t" + struct.pack(">i", 99) + b"abc",
    "a message cut short": lambda v: tuple_bytes(v)[:-2],
    "a column count other than the relation's": lambda v: tuple_bytes(v + ["extra"]),
    "bytes that are not UTF-8": lambda v: struct.pack(">h", 4) + b"t" + struct.pack(">i", 2) + b"\xff\xfe" + b"n" * 3,
}


@pytest.mark.parametrize("what", sorted(BAD))
def test_a_tuple_the_decoder_refuses_makes_the_columns_give_up(what):
    d = decoder()
    good = d.decode(message("c", ["1", "a", None, "b"]), 5)
    bad = d.decode(b"I" + struct.pack(">I", 42) + b"N" + BAD[what](["1", "a", None, "b"]), 6)
    if what == "a column count other than the relation's":
        assert len(bad.after) == NCOLS + 1  # the decoder reads it; the batch's columns would not line up
    else:
        with pytest.raises(PgOutputError, match="at LSN 6|tuple column kind"):
            bad.after
    assert columns_of([good, bad]) is None
    assert columns_of([good]) == [["1"], ["a"], [None], ["b"]]
