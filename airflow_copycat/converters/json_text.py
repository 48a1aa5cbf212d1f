"""JSON text as Kafka's Jackson writes and reads it: string escaping and parsing.

Contract: ``_quote(s)`` is the JSON string Jackson's ``UTF8JsonGenerator`` writes for ``s``
(``\\n`` style escapes for ``\\b\\t\\n\\f\\r``, upper-case ``\\u00XX`` for other control
characters, characters beyond U+FFFF as surrogate-pair escapes, the rest raw); it takes a fast
path through Python's C encoder where that writes the same, ``_jackson_quote`` is the reference.
``_loads(data)`` parses JSON bytes as Kafka's ``JsonDeserializer`` does (numbers with a fraction
or exponent as ``decimal.Decimal``, leading zeros allowed, ``NaN`` / ``Infinity`` rejected) and
raises ``ValueError`` for anything else. ``_split_envelope(raw)`` parses a compact envelope
``{"schema":…,"payload":…}`` into the same values, or returns ``None`` when it does not apply.
Parsing here nests at least as deep as ``json.loads`` does, so a fast path never succeeds where
the slow one would hit the recursion limit.
"""

from __future__ import annotations

import decimal as _decimal
import json
import re
from typing import Any

# Jackson 2.x escapes control characters and, unless COMBINE_UNICODE_SURROGATES_IN_UTF8 (off by
# default) is set, every UTF-16 surrogate: an emoji is written as "\uD83D\uDE00", not as 4 bytes.
_ESCAPE = re.compile(r'[\x00-\x1f"\\\ud800-\udfff\U00010000-\U0010ffff]')
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _escape(m: re.Match) -> str:
    c = m.group()
    short = _SHORT_ESCAPES.get(c)
    if short is not None:
        return short
    n = ord(c)
    if n > 0xFFFF:
        n -= 0x10000
        return "\\u%04X\\u%04X" % (0xD800 + (n >> 10), 0xDC00 + (n & 0x3FF))
    return "\\u%04X" % n


def _jackson_quote(s: str) -> str:
    """A JSON string as Jackson's UTF8JsonGenerator writes it (upper-case hex escapes)."""
    return '"' + (_ESCAPE.sub(_escape, s) if _ESCAPE.search(s) else s) + '"'


# Python's C encoder writes what Jackson does (\" \\ \b \t \n \f \r, everything else raw) for
# every string without the characters it escapes differently: other control characters (it
# writes lower-case \u00xx) and surrogates and characters beyond U+FFFF (it writes them raw).
_c_quote = json.encoder.encode_basestring
_NOT_LIKE_JACKSON = re.compile(r"[\x00-\x07\x0b\x0e-\x1f\ud800-\udfff\U00010000-\U0010ffff]")


def _quote(s: str) -> str:
    """A JSON string as Jackson's UTF8JsonGenerator writes it (upper-case hex escapes)."""
    if s.isascii():
        # only a control character other than \b\t\n\f\r gives a \u escape (a backslash
        # followed by u in the text gives \\u: rare, and written by the slow path alike)
        quoted = _c_quote(s)
        return quoted if "\\u" not in quoted else _jackson_quote(s)
    if _NOT_LIKE_JACKSON.search(s) is None:
        return _c_quote(s)
    return _jackson_quote(s)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def _number(text: str) -> _decimal.Decimal:
    """A JSON number with a fraction or an exponent, exactly (``json``'s ``parse_float``). One whose
    exponent a Decimal cannot hold (``1e-1999999999999999998``: Jackson's BigDecimal cannot either) is
    not valid JSON here, as it is for Kafka's JsonConverter, not an InvalidOperation without a message."""
    try:
        return _decimal.Decimal(text)
    except _decimal.InvalidOperation:
        raise ValueError(f"the number {text[:40]} is out of range") from None


# Jackson's ALLOW_LEADING_ZEROS_FOR_NUMBERS, which Kafka's JsonDeserializer enables: a string
# literal is matched (and kept) as a whole, so only zeros that start a number are dropped.
_LEADING_ZEROS = re.compile(r'"(?:[^"\\]|\\.)*"|(?<![0-9.eE+\-])(-?)0+(?=[0-9])')


_DECODER = json.JSONDecoder(parse_float=_number, parse_constant=_reject_constant)
_ENVELOPE_START = b'{"schema":'
_PAYLOAD_KEY = ',"payload":'
_ENVELOPE_END = re.compile(r"[ \t\n\r]*\}[ \t\n\r]*")  # after the payload: the rest of a valid envelope

# Nesting depth: json.loads, called from _loads, parses each JSON value under a few Python frames
# (and a payload one level deeper still, inside its envelope). The fast paths below parse under
# at least as many (tests/connect/test_json_converter_fast_paths.py checks it), so that they
# never succeed where json.loads would have reached the recursion limit; when they reach it
# themselves, the caller takes the slow path, which decides as before.
_EXTRA_FRAMES = 4


def _raw_decode_deep(text: str, idx: int, frames: int = _EXTRA_FRAMES):
    if frames:
        return _raw_decode_deep(text, idx, frames - 1)
    return _DECODER.raw_decode(text, idx)


def _decode_deep(text: str, frames: int = _EXTRA_FRAMES):
    if frames:
        return _decode_deep(text, frames - 1)
    return _DECODER.decode(text)


def _split_envelope(raw: bytes) -> tuple[Any, Any, int, int] | None:
    """``raw`` parsed as the envelope ``{"schema":<schema>,"payload":<payload>}`` written
    compactly (as Kafka writes it; whitespace only after the payload): ``(schema, payload,
    length of the bytes up to the payload, where the payload starts in the text)``, the same
    values ``json.loads`` gives for them; ``None`` for anything else, even valid JSON (then
    :func:`_loads` reads it)."""
    if not raw.startswith(_ENVELOPE_START):
        return None
    try:
        text = raw.decode("utf-8")
        schema, end = _raw_decode_deep(text, len(_ENVELOPE_START))
        if not text.startswith(_PAYLOAD_KEY, end):
            return None
        start = end + len(_PAYLOAD_KEY)
        payload, end = _raw_decode_deep(text, start)
    except (ValueError, RecursionError):
        return None
    if _ENVELOPE_END.fullmatch(text, end) is None:
        return None
    prefix_length = start if text.isascii() else len(text[:start].encode("utf-8"))
    return schema, payload, prefix_length, start


def _loads(data: bytes) -> Any:
    try:
        # json.loads(bytes) decodes UTF-8 with surrogatepass: when a strict decode succeeds it is the
        # same text; every other input (BOM, UTF-16/32, encoded surrogates, leading zeros) and
        # every error go to json.loads as before (called from here, at the same depth as before)
        return _decode_deep(data.decode("utf-8"))
    except (ValueError, RecursionError):
        pass
    try:
        return json.loads(data, parse_float=_number, parse_constant=_reject_constant)
    except json.JSONDecodeError:
        text = data.decode(json.detect_encoding(data))
        fixed = _LEADING_ZEROS.sub(lambda m: m.group() if m.group(1) is None else m.group(1), text)
        if fixed == text:
            raise
        return json.loads(fixed, parse_float=_number, parse_constant=_reject_constant)
