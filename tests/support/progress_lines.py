"""Reading the progress lines a run logs (:mod:`airflow_copycat.runtime.progress`) back out of a log."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Line:
    done: int
    total: int
    count: int | None
    """Records (files, for a copy job) so far; ``None`` when the line reports none."""


def progress_lines(text: str, group: int, connector: str, unit: str = "records") -> list[Line]:
    """The ``... so far`` lines of group ``group`` of ``connector`` in ``text``, in order."""
    head = re.escape(f"group {group} of {connector}: ")
    out = []
    for m in re.finditer(head + r"(\d+)/(\d+) tasks done[^\n]*?(?:, ([\d,]+) " + unit + r", [^\n]*?)? so far", text):
        out.append(Line(int(m[1]), int(m[2]), int(m[3].replace(",", "")) if m[3] else None))
    return out


def final_line(text: str, group: int, connector: str, unit: str = "records") -> Line:
    """The one ``... in all`` line of group ``group`` of ``connector`` in ``text``."""
    head = re.escape(f"group {group} of {connector}: ")
    [m] = re.findall(head + r"(\d+)/(\d+) tasks done[^\n]*?, ([\d,]+) " + unit + r", [^\n]*? in all", text)
    return Line(int(m[0]), int(m[1]), int(m[2].replace(",", "")))
