"""Whole columns of PostgreSQL's text output converted by Arrow, each value exactly as its converter would.

A batch of streamed changes (:mod:`.change_batches`) holds each column's texts as one Arrow ``string``
array. :func:`cast_texts` converts them at once where the column's
:class:`~.values.FieldMapping` allows it -- ``text_exact`` (strings, integers, decimals of the
column's scale, floats) or ``zoned_width`` (``timestamptz`` as Debezium's ``ZonedTimestamp``) --
and raises ``pyarrow.ArrowInvalid`` for any text it does not convert the way the per-value converter
does; the caller then converts the column value by value, with that converter's result or error. A
``real`` text beyond float32's range raises ``OverflowError`` (no float32 column holds what the converter
gives for it).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

FLOAT_TEXT = r"^(-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?|NaN|-?Infinity)$"
"""PostgreSQL's float output. Other texts (which ``float()`` and Arrow may read differently:
``nan(1)``, `` 1``) go value by value."""

ISO_TIMESTAMPTZ = r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?[+-][0-9]{2}(:[0-9]{2})?$"
"""``timestamptz`` output with ``DateStyle=ISO`` and an offset of whole minutes. Others (``infinity``,
``BC``, an offset with seconds, another DateStyle) go value by value."""


def cast_texts(texts: pa.Array, typ: pa.DataType, zoned_width: int | None = None) -> pa.Array:
    """``texts`` (``string``, nulls staying null) as ``typ``: by one cast (floats read as ``float()``
    reads them, a float32 through the double as :func:`.pgtext.parse_float32`), or with
    ``zoned_width`` as :func:`.pgtext.zoned_timestamp` formats them. Raises ``ArrowInvalid`` where
    that would differ from the per-value converter (see the module docstring), and ``OverflowError`` for a
    ``real`` text beyond float32's range (no batch column holds it: the changes go as records)."""
    if zoned_width is not None:
        return zoned_timestamps(texts, zoned_width)
    if typ == pa.string():
        return texts
    if pa.types.is_floating(typ):
        _all_match(texts, FLOAT_TEXT, "not PostgreSQL's float output")
        doubles = texts.cast(pa.float64())
        return doubles if typ == pa.float64() else float32s(doubles)
    return texts.cast(typ)


def float32s(doubles: pa.Array) -> pa.Array:
    """Doubles as float32, as :func:`.pgtext.parse_float32` rounds them; raises ``OverflowError`` for a finite
    double beyond float32's range (which ``parse_float32`` leaves a double and a converter refuses: Arrow
    would make it an infinity)."""
    floats = doubles.cast(pa.float32())
    if pc.any(pc.and_(pc.is_inf(floats), pc.invert(pc.is_inf(doubles)))).as_py():
        raise OverflowError("a value beyond float32's range")
    return floats


def zoned_timestamps(texts: pa.Array, width: int) -> pa.Array:
    """``timestamptz`` texts as ``ZonedTimestamp`` strings: ISO-8601 in UTC with ``Z``, the fraction as
    :func:`.pgtext.zoned_timestamp` writes it for ``width``. Raises ``ArrowInvalid`` for a text not in
    :data:`ISO_TIMESTAMPTZ`'s form or a UTC year outside 1-9999."""
    _all_match(texts, ISO_TIMESTAMPTZ, "not an ISO timestamptz with a whole-minute offset")
    instants = texts.cast(pa.timestamp("us", tz="UTC"))
    years = pc.min_max(pc.year(instants)).as_py()
    if years["min"] is not None and not (1 <= years["min"] and years["max"] <= 9999):
        raise pa.ArrowInvalid("a year outside 1-9999 in UTC")
    # "YYYY-MM-DD HH:MM:SS.ffffff": formatted without a time zone (UTC already), many times faster
    text = instants.cast(pa.int64()).cast(pa.timestamp("us")).cast(pa.string())
    text = pc.replace_substring(text, " ", "T", max_replacements=1)
    if width <= 0 or width > 9:  # as many digits as needed, none for whole seconds
        text = pc.replace_substring_regex(text, r"\.?0+$", "")
    else:
        text = pc.utf8_slice_codeunits(text, 0, 20 + min(width, 6))
        if width > 6:
            text = pc.binary_join_element_wise(text, "0" * (width - 6), "")
    return pc.binary_join_element_wise(text, "Z", "")


def _all_match(texts: pa.Array, pattern: str, what: str) -> None:
    if texts.null_count < len(texts) and not pc.all(pc.match_substring_regex(texts, pattern)).as_py():
        raise pa.ArrowInvalid(what)
