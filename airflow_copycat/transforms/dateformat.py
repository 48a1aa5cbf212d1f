"""Java ``SimpleDateFormat`` patterns, as TimestampConverter's ``format`` and TimestampRouter's
``timestamp.format`` take them, formatting and parsing in UTC.

``JavaDateFormat("yyyy-MM-dd HH:mm:ss.SSS")`` compiles a pattern once;
``format(dt)`` writes an aware or naive-UTC ``datetime``; ``parse(text)``
reads one back as an aware UTC ``datetime``. Pattern letters (English names):

======  ==========================================  ====================================
letter  meaning                                     examples
======  ==========================================  ====================================
G       era                                         AD
y Y     year, week year (US weeks)                  ``yyyy`` 2024, ``yy`` 24
M L     month (``MMM`` Jan, ``MMMM`` January)       ``MM`` 05
w W     week in year / in month (US weeks)          ``ww`` 18
D d F   day in year / in month / day-of-week        ``DDD`` 122, ``dd`` 01
        in month
E u     day name (``EEE`` Tue, ``EEEE`` Tuesday) /  Tue / 2
        day number (1 = Monday)
a       AM/PM marker                                PM
H k     hour 0-23 / 1-24                            ``HH`` 13
K h     hour 0-11 / 1-12                            ``hh`` 01
m s     minute, second                              ``mm`` 05
S       millisecond (a count, as in Java)           ``SSS`` 042
z Z X   zone: ``UTC`` / ``+0000`` / ``Z``
======  ==========================================  ====================================

Text between single quotes is literal (``''`` is a quote). As in Java, the
number of letters is the minimum number of digits, ``yy`` is a two-digit year
(parsed into the century around now), and parsing reads a prefix of the text
(trailing text is ignored); unlike Java's lenient default, out-of-range fields
(month 13) are an error rather than rolled over.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Callable

from ..connect.datepattern import MONTHS, month, num, tokens, weekday

_LETTERS = set("GyYMLwWDdFEuaHkKhmsSzZX")
_NUMERIC = set("yYMLwWDdFuHkKhmsS")
_UTC = _dt.timezone.utc


def _tokens(pattern: str) -> list[tuple[str, str]]:
    return tokens(pattern, _LETTERS, "SimpleDateFormat")


def _us_week(d: _dt.date) -> tuple[int, int]:
    """(week year, week of year) with US rules: weeks start on Sunday, week 1 holds January 1."""
    sunday = d - _dt.timedelta(days=(d.weekday() + 1) % 7)
    saturday = sunday + _dt.timedelta(days=6)
    if saturday.year > d.year:
        return d.year + 1, 1
    jan1 = _dt.date(d.year, 1, 1)
    first_sunday = jan1 - _dt.timedelta(days=(jan1.weekday() + 1) % 7)
    return d.year, (sunday - first_sunday).days // 7 + 1


def _formatter(token: str) -> Callable[[_dt.datetime], str]:
    c, n = token[0], len(token)
    if c in "yY":
        def year(dt, c=c):
            y = _us_week(dt.date())[0] if c == "Y" else dt.year
            return num(y % 100, 2) if n == 2 else num(y, n)
        return year
    if c in "ML":
        return month(n)
    if c == "E":
        return weekday(n)
    if c == "z":
        return (lambda dt: "Coordinated Universal Time") if n >= 4 else (lambda dt: "UTC")
    if c == "Z":
        return lambda dt: "+0000"
    if c == "X":
        return lambda dt: "Z"
    numbers: dict[str, Callable[[_dt.datetime], int]] = {
        "w": lambda dt: _us_week(dt.date())[1],
        "W": lambda dt: (dt.day + (dt.replace(day=1).weekday() + 1) % 7 - 1) // 7 + 1,
        "D": lambda dt: dt.timetuple().tm_yday,
        "d": lambda dt: dt.day,
        "F": lambda dt: (dt.day - 1) // 7 + 1,
        "u": lambda dt: dt.isoweekday(),
        "H": lambda dt: dt.hour,
        "k": lambda dt: dt.hour or 24,
        "K": lambda dt: dt.hour % 12,
        "h": lambda dt: dt.hour % 12 or 12,
        "m": lambda dt: dt.minute,
        "s": lambda dt: dt.second,
        "S": lambda dt: dt.microsecond // 1000,
    }
    if c in numbers:
        get = numbers[c]
        return lambda dt: num(get(dt), n)
    if c == "G":
        return lambda dt: "AD"
    return lambda dt: "AM" if dt.hour < 12 else "PM"  # a


_ZONE = r"(?P<zone>Z|[+-]\d{2}(?::?\d{2})?|(?:GMT|UTC|UT)(?:[+-]\d{1,2}(?::?\d{2})?)?|[A-Za-z][A-Za-z_/+-]*)"


class JavaDateFormat:
    """A compiled ``SimpleDateFormat`` pattern in the UTC zone. ``ValueError`` for a bad pattern."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        tokens = _tokens(pattern)
        parts: list[Callable[[_dt.datetime], str]] = []
        for kind, text in tokens:
            parts.append((lambda dt, text=text: text) if kind == "lit" else _formatter(text))
        self._parts = parts
        literal = all(kind == "lit" for kind, _ in tokens)
        self._constant = "".join(text for _, text in tokens) if literal else None
        regex, self._groups = [], []
        for i, (kind, text) in enumerate(tokens):
            if kind == "lit":
                regex.append(re.escape(text))
                continue
            c, n = text[0], len(text)
            group = f"g{i}"
            self._groups.append((group, c, n))
            adjacent = i + 1 < len(tokens) and tokens[i + 1][0] == "field" and tokens[i + 1][1][0] in _NUMERIC
            if c in _NUMERIC and not (c in "ML" and n >= 3):
                digits = rf"\d{{{n}}}" if adjacent else r"\d+"
                sign = "-?" if c in "yY" and not adjacent else ""
                regex.append(f"(?P<{group}>{sign}{digits})")
            elif c in "ML":
                regex.append(f"(?P<{group}>[A-Za-z]+)")
            elif c == "E":
                regex.append(f"(?P<{group}>[A-Za-z]+)")
            elif c == "a":
                regex.append(f"(?P<{group}>[AaPp][Mm])")
            elif c == "G":
                regex.append(f"(?P<{group}>AD|BC)")
            else:  # zones
                regex.append(_ZONE.replace("?P<zone>", f"?P<{group}>"))
        self._regex = re.compile("".join(regex), re.IGNORECASE)

    def format(self, value: _dt.datetime) -> str:
        """``value`` (naive is UTC) as text in UTC."""
        if self._constant is not None:
            return self._constant
        if value.tzinfo is not None and value.utcoffset():
            value = value.astimezone(_UTC)
        return "".join(part(value) for part in self._parts)

    def parse(self, text: str) -> _dt.datetime:
        """The aware UTC datetime ``text`` (or its longest matching prefix) denotes; fields
        the pattern lacks default to 1970-01-01 00:00:00.000 UTC. ``ValueError`` if it does not match."""
        m = self._regex.match(text)
        if m is None:
            raise ValueError(f"{text!r} does not match pattern {self.pattern!r}")
        year, month, day, yday = 1970, 1, 1, None
        hour, minute, second, millis, pm, hour12 = 0, 0, 0, 0, None, None
        zone: _dt.tzinfo = _UTC
        for group, c, n in self._groups:
            s = m.group(group)
            if c == "y":
                year = int(s)
                if n <= 2 and len(s) == 2:
                    year = _two_digit_year(year)
            elif c in "ML":
                month = int(s) if s.isdigit() else _month_number(s)
            elif c == "d":
                day = int(s)
            elif c == "D":
                yday = int(s)
            elif c in "Hk":
                hour = int(s) % 24 if c == "k" else int(s)
            elif c in "Kh":
                hour12 = int(s) % 12
            elif c == "a":
                pm = s.upper() == "PM"
            elif c == "m":
                minute = int(s)
            elif c == "s":
                second = int(s)
            elif c == "S":
                millis = int(s)
            elif c in "zZX":
                zone = _zone(s)
        if hour12 is not None:
            hour = hour12 + (12 if pm else 0)
        elif pm and hour < 12:
            hour += 12
        if yday is not None:
            date = _dt.date(year, 1, 1) + _dt.timedelta(days=yday - 1)
        else:
            date = _dt.date(year, month, day)
        local = _dt.datetime(date.year, date.month, date.day, hour, minute, second, tzinfo=zone)
        return (local + _dt.timedelta(milliseconds=millis)).astimezone(_UTC)


def _two_digit_year(yy: int) -> int:
    """Java's rule: the year within 80 years before and 20 years after now."""
    now = _dt.datetime.now(_UTC).year
    year = now - now % 100 + yy
    if year > now + 20:
        year -= 100
    elif year <= now - 80:
        year += 100
    return year


def _month_number(name: str) -> int:
    lowered = name.lower()
    for i, name_ in enumerate(MONTHS):
        if name_.lower() == lowered or name_[:3].lower() == lowered:
            return i + 1
    raise ValueError(f"{name!r} is not a month name")


def _zone(text: str) -> _dt.tzinfo:
    upper = text.upper()
    if upper in ("Z", "UTC", "GMT", "UT"):
        return _UTC
    m = re.fullmatch(r"(?:GMT|UTC|UT)?([+-])(\d{1,2})(?::?(\d{2}))?", upper)
    if m:
        delta = _dt.timedelta(hours=int(m.group(2)), minutes=int(m.group(3) or 0))
        return _dt.timezone(-delta if m.group(1) == "-" else delta)
    try:
        from zoneinfo import ZoneInfo

        return ZoneInfo(text)
    except Exception:
        raise ValueError(f"unknown time zone {text!r}: use an offset (+0100), Z, UTC or a zone id "
                         "(Europe/Paris)") from None
