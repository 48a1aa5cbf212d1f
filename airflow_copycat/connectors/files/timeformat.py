"""Joda-Time style date patterns, as Confluent's ``TimeBasedPartitioner`` ``path.format`` uses them.

``compile_pattern("'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH")`` returns a
function that formats a timezone-aware :class:`datetime.datetime` as
``year=2024/month=05/day=01/hour=13``. Supported pattern letters (Joda's
``DateTimeFormat``; the number of letters is the minimum number of digits):

=======  ==========================================  =======================
letter   meaning                                      example
=======  ==========================================  =======================
G        era                                          AD
C        century of era                               20
Y y x    year of era, year, ISO week-year             ``YYYY`` 2024, ``yy`` 24
M        month (``MMM`` Jan, ``MMMM`` January)        ``MM`` 05
w        ISO week of week-year                        ``ww`` 18
D        day of year                                  ``DDD`` 122
d        day of month                                 ``dd`` 01
e / E    day of week, number (1 = Monday) / text      2 / Tue / Tuesday
a        half-day                                     PM
H k      hour 0-23, clock-hour 1-24                   ``HH`` 13
K h      hour of half-day 0-11, clock-hour 1-12       ``hh`` 01
m s      minute, second                               ``mm`` 05
S        fraction of second (truncated to N digits)   ``SSS`` 042
z Z      zone name / offset (``Z`` +0200, ``ZZ`` +02:00, ``ZZZ`` zone id)
=======  ==========================================  =======================

Text between single quotes is literal (``''`` is a quote); other non-letters
are literal. As in Joda, a two-letter year (``yy``, ``YY``, ``xx``) is the
two-digit year of the century. Text fields (month and day names, era,
half-day) are English only: :func:`compile_pattern` refuses them for another
``locale`` rather than write names a Joda-based writer would spell differently.
"""

from __future__ import annotations

import datetime as _dt
from typing import Callable

from ...connect.datepattern import month, num, tokens, weekday

_TEXT_LETTERS = set("GaE")
_KNOWN = set("GCYyxMwDdeEaHkKhmsSzZ")


def _tokens(pattern: str) -> list[tuple[str, str]]:
    return tokens(pattern, _KNOWN, "Joda-Time")


def _offset(dt: _dt.datetime, colon: bool) -> str:
    off = dt.utcoffset() or _dt.timedelta(0)
    total = int(off.total_seconds())
    sign = "-" if total < 0 else "+"
    h, m = divmod(abs(total) // 60, 60)
    return f"{sign}{h:02d}:{m:02d}" if colon else f"{sign}{h:02d}{m:02d}"


def _field(token: str) -> Callable[[_dt.datetime], str]:
    c, n = token[0], len(token)
    if c in "Yyx":
        def year(dt, c=c):
            y = dt.isocalendar()[0] if c == "x" else dt.year
            return num(y % 100, 2) if n == 2 else num(y, n)
        return year
    if c == "M":
        return month(n)
    if c == "E":
        return weekday(n)
    simple = {
        "G": lambda dt: "AD",
        "C": lambda dt: num(dt.year // 100, n),
        "w": lambda dt: num(dt.isocalendar()[1], n),
        "D": lambda dt: num(dt.timetuple().tm_yday, n),
        "d": lambda dt: num(dt.day, n),
        "e": lambda dt: num(dt.isoweekday(), n),
        "a": lambda dt: "AM" if dt.hour < 12 else "PM",
        "H": lambda dt: num(dt.hour, n),
        "k": lambda dt: num(dt.hour or 24, n),
        "K": lambda dt: num(dt.hour % 12, n),
        "h": lambda dt: num(dt.hour % 12 or 12, n),
        "m": lambda dt: num(dt.minute, n),
        "s": lambda dt: num(dt.second, n),
        "S": lambda dt: str(dt.microsecond).zfill(6)[:n].ljust(n, "0"),
        "z": lambda dt: dt.tzname() or "UTC",
        "Z": (lambda dt: _offset(dt, False)) if n == 1 else
             (lambda dt: _offset(dt, True)) if n == 2 else
             (lambda dt: str(getattr(dt.tzinfo, "key", None) or dt.tzname() or "UTC")),
    }
    return simple[c]


def compile_pattern(pattern: str, locale: str = "en") -> Callable[[_dt.datetime], str]:
    """A formatter for the Joda-Time ``pattern``.

    Raises ``ValueError`` saying what is wrong: an unknown letter, an unterminated
    quote, or a text field (month/day names, era, half-day) with a non-English ``locale``.
    """
    tokens = _tokens(pattern)
    lang = (locale or "en").replace("-", "_").split("_")[0].lower()
    if lang != "en":
        texty = [t for kind, t in tokens if kind == "field" and (t[0] in _TEXT_LETTERS or (t[0] == "M" and len(t) >= 3))]
        if texty:
            raise ValueError(f"pattern fields {texty} write names, which this sink spells in English only, "
                             f"but locale is {locale!r}; use numeric fields (MM, e) or locale=en")
    parts: list[Callable[[_dt.datetime], str]] = []
    for kind, text in tokens:
        parts.append((lambda dt, t=text: t) if kind == "lit" else _field(text))

    def fmt(dt: _dt.datetime) -> str:
        return "".join(p(dt) for p in parts)

    fmt.pattern = pattern
    return fmt
