"""Java regular expressions and replacement strings, as RegexRouter and TopicNameMatches take them.

Python's ``re`` reads most Java patterns as they are. :func:`compile_java`
also accepts Java's named groups ``(?<name>...)`` and quoting ``\\Q...\\E``;
:class:`JavaReplacement` expands ``$1``, ``${name}`` and ``\\$`` as
``Matcher.replaceFirst`` does.
"""

from __future__ import annotations

import re

_NAMED_GROUP = re.compile(r"\(\?<(?=[A-Za-z])")


def compile_java(pattern: str) -> re.Pattern:
    """``pattern`` compiled; ``ValueError`` saying why it is not a valid expression."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            if pattern[i + 1] == "Q":
                end = pattern.find("\\E", i + 2)
                quoted = pattern[i + 2:] if end < 0 else pattern[i + 2:end]
                out.append(re.escape(quoted))
                i = n if end < 0 else end + 2
                continue
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if pattern.startswith("(?<", i) and _NAMED_GROUP.match(pattern, i):
            out.append("(?P<")
            i += 3
            continue
        out.append(c)
        i += 1
    try:
        return re.compile("".join(out))
    except re.error as e:
        raise ValueError(f"{pattern!r} is not a valid regular expression: {e}") from None


def valid_java_regex(key, value):
    """A :class:`~airflow_copycat.connect.config.ConfigDef` validator."""
    if value is None:
        return None
    try:
        compile_java(value)
    except ValueError as e:
        return str(e)
    return None


class JavaReplacement:
    """A replacement string with Java's group references, checked against ``regex``'s groups.
    ``ValueError`` for a reference to a missing group or a dangling ``$`` or ``\\``."""

    def __init__(self, replacement: str, regex: re.Pattern):
        parts: list[str | int] = []
        literal: list[str] = []
        i, n = 0, len(replacement)
        while i < n:
            c = replacement[i]
            if c == "\\":
                if i + 1 >= n:
                    raise ValueError(f"replacement {replacement!r} ends with a lone backslash (escape it as \\\\)")
                literal.append(replacement[i + 1])
                i += 2
                continue
            if c != "$":
                literal.append(c)
                i += 1
                continue
            i += 1
            if i >= n:
                raise ValueError(f"replacement {replacement!r} ends with '$': write \\$ for a dollar sign")
            if replacement[i] == "{":
                end = replacement.find("}", i)
                name = replacement[i + 1:end] if end > 0 else ""
                if end < 0 or name not in regex.groupindex:
                    raise ValueError(f"replacement {replacement!r} refers to group ${{{name}}}, which the regex "
                                     f"does not define (named groups: {', '.join(regex.groupindex) or 'none'})")
                group: int = regex.groupindex[name]
                i = end + 1
            elif replacement[i].isdigit():
                group = int(replacement[i])
                i += 1
                while i < n and replacement[i].isdigit() and group * 10 + int(replacement[i]) <= regex.groups:
                    group = group * 10 + int(replacement[i])
                    i += 1
                if group > regex.groups:
                    raise ValueError(f"replacement {replacement!r} refers to group ${group}, but the regex has "
                                     f"{regex.groups} group(s)")
            else:
                raise ValueError(f"replacement {replacement!r}: '$' must be followed by a group number or "
                                 "{name}; write \\$ for a dollar sign")
            if literal:
                parts.append("".join(literal))
                literal = []
            parts.append(group)
        if literal:
            parts.append("".join(literal))
        self._parts = parts

    def expand(self, match: re.Match) -> str:
        """The replacement for ``match``; a group that did not take part adds nothing."""
        return "".join(p if isinstance(p, str) else (match.group(p) or "") for p in self._parts)

    def replace_first(self, regex: re.Pattern, text: str) -> str:
        """``Matcher.replaceFirst``: the first match of ``regex`` in ``text`` replaced."""
        m = regex.search(text)
        if m is None:
            return text
        return text[:m.start()] + self.expand(m) + text[m.end():]
