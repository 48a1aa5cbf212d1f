"""What Java's date patterns share: SimpleDateFormat (transforms) and Joda-Time (file paths).

Both are runs of pattern letters (``yyyy``, ``MM``) and quoted literal text
(``'T'``, with ``''`` for a quote); each user of a pattern knows its own letters.
"""

from __future__ import annotations

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def tokens(pattern: str, letters: set[str], style: str) -> list[tuple[str, str]]:
    """``("lit", text)`` and ``("field", "yyyy")`` tokens of ``pattern``. ``ValueError`` names an
    unterminated quote, or a letter not in ``letters`` (not a ``style`` pattern letter)."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "'":
            if i + 1 < n and pattern[i + 1] == "'":
                out.append(("lit", "'"))
                i += 2
                continue
            j, buf = i + 1, []
            while True:
                if j >= n:
                    raise ValueError(f"unterminated quote at position {i} of pattern {pattern!r}")
                if pattern[j] == "'":
                    if j + 1 < n and pattern[j + 1] == "'":
                        buf.append("'")
                        j += 2
                        continue
                    break
                buf.append(pattern[j])
                j += 1
            out.append(("lit", "".join(buf)))
            i = j + 1
        elif c.isascii() and c.isalpha():
            j = i
            while j < n and pattern[j] == c:
                j += 1
            if c not in letters:
                raise ValueError(f"pattern letter {c!r} at position {i} of {pattern!r} is not a {style} pattern "
                                 "letter (quote literal text: 'T')")
            out.append(("field", pattern[i:j]))
            i = j
        else:
            out.append(("lit", c))
            i += 1
    return out


def num(v: int, width: int) -> str:
    """``v`` zero-padded to ``width`` digits, sign first."""
    return ("-" if v < 0 else "") + str(abs(v)).zfill(width)


def month(n: int):
    """The formatter of a month field of ``n`` letters: full name (4+), short name (3), number."""
    if n >= 4:
        return lambda dt: MONTHS[dt.month - 1]
    if n == 3:
        return lambda dt: MONTHS[dt.month - 1][:3]
    return lambda dt: num(dt.month, n)


def weekday(n: int):
    """The formatter of a day-of-week name field of ``n`` letters: full name (4+), else short."""
    return (lambda dt: DAYS[dt.weekday()]) if n >= 4 else (lambda dt: DAYS[dt.weekday()][:3])
