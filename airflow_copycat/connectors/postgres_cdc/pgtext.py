"""PostgreSQL's text output of values, read: dates, times, timestamps, intervals, arrays, hstore, bytea.

What ``COPY ... TO STDOUT`` and pgoutput (text mode) print in the session settings
:data:`.snapshot.SESSION_SETTINGS` fixes (``DateStyle=ISO``, ``IntervalStyle=postgres``,
``bytea_output=hex``). Functions take one non-NULL text and raise
:class:`~airflow_copycat.connect.errors.DataException` when it is not in that format. Dates and
timestamps cover PostgreSQL's whole range (BC years, years past 9999), as proleptic Gregorian
days and microseconds since 1970-01-01 (UTC for timestamptz).
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
import struct

from airflow_copycat.connect.errors import DataException

# Debezium (after PostgreSQL JDBC's PGStatement): what +/-infinity timestamps become, in µs
POSITIVE_INFINITY_MICROS = 9223372036825200000
NEGATIVE_INFINITY_MICROS = -9223372036832400000


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (any year, 0 = 1 BC)."""
    y -= m <= 2
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


# Debezium's LocalDate for 'infinity' is -5877611-06-21 (ISO year numbering), '-infinity' -5877611-06-22
POSITIVE_INFINITY_DAYS = _days_from_civil(-5877611, 6, 21)
NEGATIVE_INFINITY_DAYS = _days_from_civil(-5877611, 6, 22)

_DATE = re.compile(r"(\d+)-(\d\d)-(\d\d)( BC)?$")
_TIME = re.compile(r"(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?")
_TS = re.compile(r"(\d+)-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?([+-]\d\d(?::?\d\d(?::?\d\d)?)?)?( BC)?$")
_OFFSET = re.compile(r"([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?$")


def _fraction_us(text: str | None) -> int:
    return int((text or "0").ljust(6, "0")[:6])


def _offset_seconds(text: str | None) -> int:
    if not text:
        return 0
    m = _OFFSET.match(text)
    sign = -1 if m.group(1) == "-" else 1
    return sign * (int(m.group(2)) * 3600 + int(m.group(3) or 0) * 60 + int(m.group(4) or 0))


def parse_date_days(text: str) -> int:
    """``2024-01-31`` (or ``0044-03-15 BC``) -> days since the epoch."""
    m = _DATE.match(text)
    if m is None:
        raise DataException(f"{text!r} is not a PostgreSQL date (DateStyle ISO)")
    year = int(m.group(1))
    if m.group(4):
        year = 1 - year
    return _days_from_civil(year, int(m.group(2)), int(m.group(3)))


def parse_time_micros(text: str) -> int:
    """``13:45:07.123`` -> µs since midnight (``24:00:00`` is 86 400 000 000)."""
    m = _TIME.match(text)
    if m is None:
        raise DataException(f"{text!r} is not a PostgreSQL time")
    return ((int(m.group(1)) * 60 + int(m.group(2))) * 60 + int(m.group(3))) * 1_000_000 + _fraction_us(m.group(4))


_EPOCH_NAIVE = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _micros_fast(text: str) -> int | None:
    """:func:`parse_timestamp_micros` by the C parser, for years 1-9999 (None when it cannot)."""
    if text.endswith("BC") or text[4:5] != "-":
        return None
    try:
        d = dt.datetime.fromisoformat(text)
        delta = d - (_EPOCH_NAIVE if d.tzinfo is None else _EPOCH_UTC)
    except (ValueError, OverflowError):
        return None
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def parse_timestamp_micros(text: str) -> int:
    """``2024-01-31 12:34:56.789`` (with an offset for timestamptz) -> µs since the epoch, in UTC."""
    fast = _micros_fast(text)
    if fast is not None:
        return fast
    m = _TS.match(text)
    if m is None:
        raise DataException(f"{text!r} is not a PostgreSQL timestamp (DateStyle ISO)")
    year = int(m.group(1))
    if m.group(9):
        year = 1 - year
    days = _days_from_civil(year, int(m.group(2)), int(m.group(3)))
    seconds = days * 86400 + (int(m.group(4)) * 60 + int(m.group(5))) * 60 + int(m.group(6))
    return (seconds - _offset_seconds(m.group(8))) * 1_000_000 + _fraction_us(m.group(7))


def _civil_from_days(z: int) -> tuple[int, int, int]:
    z += 719468
    era = (z if z >= 0 else z - 146096) // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + (3 if mp < 10 else -9)
    return yoe + era * 400 + (m <= 2), m, d


def _iso_fraction(us: int, width: int) -> str:
    if width <= 0 or width > 9:  # Java's ISO formatter: as many digits as needed, none for whole seconds
        return ("." + f"{us:06d}".rstrip("0")) if us else ""
    return "." + (f"{us:06d}" + "000")[:width]


def zoned_timestamp(text: str, width: int) -> str:
    """timestamptz text -> Debezium's ZonedTimestamp string: ISO-8601 in UTC, ``Z``, ``width`` fraction digits."""
    if text in ("infinity", "-infinity"):
        return text
    if not text.endswith("BC") and text[4:5] == "-":
        try:
            d = dt.datetime.fromisoformat(text).astimezone(dt.timezone.utc)
            return "%04d-%02d-%02dT%02d:%02d:%02d%sZ" % (d.year, d.month, d.day, d.hour, d.minute, d.second,
                                                          _iso_fraction(d.microsecond, width))
        except (ValueError, OverflowError):
            pass  # years beyond 9999 after the shift to UTC: the general path below
    micros = parse_timestamp_micros(text)
    seconds, us = divmod(micros, 1_000_000)
    days, sod = divmod(seconds, 86400)
    y, mo, d = _civil_from_days(days)
    year = f"{y:04d}" if 0 <= y <= 9999 else (f"+{y}" if y > 9999 else f"-{-y:04d}")
    return f"{year}-{mo:02d}-{d:02d}T{sod // 3600:02d}:{sod // 60 % 60:02d}:{sod % 60:02d}{_iso_fraction(us, width)}Z"


def _iso_year(y: int) -> str:
    return f"{y:04d}" if 0 <= y <= 9999 else (f"+{y}" if y > 9999 else f"-{-y:04d}")


def iso_date(days: int) -> str:
    """Days since the epoch -> Java's ISO_OFFSET_DATE in UTC (``2017-09-15Z``)."""
    y, m, d = _civil_from_days(days)
    return f"{_iso_year(y)}-{m:02d}-{d:02d}Z"


def iso_time(micros: int) -> str:
    """µs since midnight -> Java's ISO_OFFSET_TIME in UTC (``04:05:11.789Z``)."""
    seconds, us = divmod(micros % 86_400_000_000, 1_000_000)
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}{_iso_fraction(us, 0)}Z"


def zoned_time(text: str) -> str:
    """timetz text (``13:45:07.5+02``) -> Debezium's ZonedTime string in UTC (``11:45:07.5Z``)."""
    m = _TIME.match(text)
    if m is None:
        raise DataException(f"{text!r} is not a PostgreSQL time with time zone")
    micros = parse_time_micros(text) - _offset_seconds(text[m.end():]) * 1_000_000
    micros %= 86_400_000_000
    seconds, us = divmod(micros, 1_000_000)
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}{_iso_fraction(us, 0)}Z"


_INTERVAL_PART = re.compile(r"([+-]?\d+) (year|mon|day)s?|([+-])?(\d+):(\d\d):(\d\d)(?:\.(\d+))?")
DAYS_PER_MONTH_AVG = 365.25 / 12.0


def parse_interval(text: str) -> tuple[int, int, int, int, int, decimal.Decimal]:
    """``1 year 2 mons -3 days 04:05:06.7`` (IntervalStyle postgres) -> (years, months, days, hours,
    minutes, seconds) as PostgreSQL JDBC's PGInterval holds them (the time part's sign on each of them)."""
    years = months = days = hours = minutes = 0
    seconds = decimal.Decimal(0)
    pos = 0
    text = text.strip()
    for m in _INTERVAL_PART.finditer(text):
        if text[pos:m.start()].strip():
            raise DataException(f"{text!r} is not a PostgreSQL interval (IntervalStyle postgres)")
        pos = m.end()
        if m.group(2):
            n = int(m.group(1))
            if m.group(2) == "year":
                years = n
            elif m.group(2) == "mon":
                months = n
            else:
                days = n
        else:
            sign = -1 if m.group(3) == "-" else 1
            hours, minutes = sign * int(m.group(4)), sign * int(m.group(5))
            seconds = sign * decimal.Decimal(f"{m.group(6)}.{m.group(7) or '0'}")
    if text[pos:].strip():
        raise DataException(f"{text!r} is not a PostgreSQL interval (IntervalStyle postgres)")
    return years, months, days, hours, minutes, seconds


def interval_micros(text: str) -> int:
    """Debezium's MicroDuration of an interval: months of 365.25/12 days, computed in doubles as it does."""
    y, mo, d, h, mi, s = parse_interval(text)
    number_of_days = (y * 12 + mo) * DAYS_PER_MONTH_AVG + d
    number_of_seconds = ((number_of_days * 24 + h) * 60 + mi) * 60 + float(s)
    return max(-(2**63), min(2**63 - 1, int(number_of_seconds * 1e6)))  # Java's (long) saturates


def interval_iso(text: str) -> str:
    """Debezium's Interval string: ``P<y>Y<m>M<d>DT<h>H<m>M<s>S``."""
    y, mo, d, h, mi, s = parse_interval(text)
    s = s.quantize(decimal.Decimal("1E-9"), rounding=decimal.ROUND_DOWN) if -s.as_tuple().exponent > 9 else s
    plain = format(s.normalize(), "f") if s else "0"
    return f"P{y}Y{mo}M{d}DT{h}H{mi}M{plain}S"


def parse_array(text: str) -> list[str | None]:
    """A one-dimensional PostgreSQL array literal (``{1,NULL,"a b","x\\"y"}``) -> element texts (None for NULL).

    Raises :class:`DataException` for a multi-dimensional array (Debezium maps only one dimension)."""
    if not text.startswith("{"):
        if text.startswith("["):  # explicit bounds: [0:1]={...}
            text = text[text.index("=") + 1:]
        else:
            raise DataException(f"{text[:40]!r} is not a PostgreSQL array")
    if text == "{}":
        return []
    out: list[str | None] = []
    i, n = 1, len(text)
    while i < n:
        c = text[i]
        if c == "{":
            raise DataException("multi-dimensional arrays cannot be mapped (Debezium maps one dimension)")
        if c == '"':
            i += 1
            buf = []
            while text[i] != '"':
                if text[i] == "\\":
                    i += 1
                buf.append(text[i])
                i += 1
            out.append("".join(buf))
            i += 1
        else:
            j = i
            while text[j] not in ",}":
                j += 1
            item = text[i:j].strip()
            out.append(None if item.upper() == "NULL" else item)
            i = j
        if text[i] == "}":
            break
        i += 1  # the comma
    return out


_HSTORE_ITEM = re.compile(r'\s*"((?:[^"\\]|\\.)*)"\s*=>\s*(NULL|"((?:[^"\\]|\\.)*)")\s*(,|$)')


def parse_hstore(text: str) -> dict[str, str | None]:
    """hstore text (``"a"=>"1", "b"=>NULL``) -> dict."""
    out: dict[str, str | None] = {}
    pos = 0
    while pos < len(text):
        m = _HSTORE_ITEM.match(text, pos)
        if m is None:
            raise DataException(f"{text[:40]!r} is not hstore text")
        key = re.sub(r"\\(.)", r"\1", m.group(1))
        out[key] = None if m.group(2) == "NULL" else re.sub(r"\\(.)", r"\1", m.group(3))
        pos = m.end()
    return out


_F32 = struct.Struct("<f")


def parse_float32(text: str) -> float:
    f = float(text)
    try:
        return _F32.unpack(_F32.pack(f))[0]
    except OverflowError:
        return f


def parse_bytea(text: str) -> bytes:
    if text.startswith("\\x"):
        return bytes.fromhex(text[2:])
    raise DataException("bytea values must come in hex output (bytea_output=hex, PostgreSQL's default)")


def parse_money(text: str) -> decimal.Decimal:
    negative = text.startswith("-") or text.startswith("(")
    digits = re.sub(r"[^0-9.]", "", text)
    value = decimal.Decimal(digits or "0")
    return -value if negative else value


def unscaled_bytes(n: int) -> bytes:
    """Minimal big-endian two's complement of ``n`` (Java's ``BigInteger.toByteArray``)."""
    bits = n.bit_length() if n >= 0 else (~n).bit_length()
    return n.to_bytes(bits // 8 + 1, "big", signed=True)


