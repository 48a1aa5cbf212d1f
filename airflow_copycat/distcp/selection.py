"""Which files a copy listing selects: globs, date ranges of partitions, checksum sidecars.

Contract: :func:`glob_matcher` compiles ``file.pattern`` (fsspec's glob dialect, the one
``fs.glob`` uses for ``dataset.pattern``); :func:`date_filter` compiles
``partition.date.format`` with ``[date.range.start, date.range.end)`` into a predicate on
paths; :func:`parse_instant` reads an ISO date or datetime (naive = UTC). :func:`is_sidecar`
tells a checksum sidecar (``<file>.md5`` / ``<file>.sha256``), ``_read_sidecars`` reads the
chosen ones in one batched ``cat`` and raises for one that does not hold a hex digest.
"""

from __future__ import annotations

import posixpath
import re
from datetime import date, datetime, timezone
from typing import Callable

import fsspec
from fsspec.utils import glob_translate

SIDECAR_ALGORITHMS = ("md5", "sha256")
_HEX_LENGTH = {"md5": 32, "sha256": 64}


def glob_matcher(pattern: str) -> Callable[[str], bool] | None:
    """A predicate matching paths (relative, ``/``-separated) against a glob, or ``None`` for
    ``**`` (everything). The dialect is fsspec's, the one ``fs.glob`` uses for ``dataset.pattern``
    (``fsspec.utils.glob_translate``): ``*``/``?``/``[...]`` stay within a component, ``**`` is a
    whole component that crosses them, ``**/`` also matches no directory. ``ValueError`` for a
    pattern that is not a glob (the config check reports it first)."""
    pattern = pattern.strip().strip("/")
    if pattern in ("", "**"):
        return None
    return re.compile(glob_translate(pattern)).match  # type: ignore[return-value]  # ends in \Z: whole paths


_DIRECTIVES = {
    "Y": r"\d{4}", "y": r"\d{2}", "m": r"\d{2}", "d": r"\d{2}", "H": r"\d{2}", "M": r"\d{2}", "S": r"\d{2}",
    "j": r"\d{3}", "U": r"\d{2}", "W": r"\d{2}", "w": r"\d", "u": r"\d", "b": r"[A-Za-z]{3}", "B": r"[A-Za-z]+",
    "a": r"[A-Za-z]{3}", "A": r"[A-Za-z]+", "%": "%",
}


def parse_instant(text: str, key: str = "date") -> float:
    """Seconds since the epoch of an ISO date or datetime (``2026-11-21``,
    ``2026-11-21T05:00:00+02:00``, ``...Z``); naive means UTC."""
    text = str(text).strip()
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise ValueError(f"{key} {text!r} is not an ISO date or datetime (e.g. 2026-11-21 or "
                         f"2026-11-21T00:00:00+00:00)") from None
    if isinstance(dt, date) and not isinstance(dt, datetime):  # pragma: no cover - fromisoformat gives datetime
        dt = datetime(dt.year, dt.month, dt.day)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def date_filter(fmt: str, start: str, end: str) -> Callable[[str, str], bool] | None:
    """A predicate ``(path relative to the dataset, path relative to the root) -> bool``: true
    when the first path (or, when it has none, the second) contains a date of ``fmt``
    within ``[start, end)``. ``None`` when ``fmt`` is empty (no date selection).

    The date is found where it is not surrounded by digits (``2026/11/21/``,
    ``dt=2026-11-21/``, ``2026-11-21.log``); a partition's time is the start of the period
    it names, naive = UTC. Parsed dates are cached: a strptime per partition, not per file.
    """
    if not fmt:
        return None
    if not (start and end):
        raise ValueError("partition.date.format needs date.range.start and date.range.end")
    lo, hi = parse_instant(start, "date.range.start"), parse_instant(end, "date.range.end")
    body, i = [], 0
    while i < len(fmt):
        if fmt[i] == "%" and i + 1 < len(fmt):
            d = fmt[i + 1]
            if d not in _DIRECTIVES:
                raise ValueError(f"partition.date.format {fmt!r}: %{d} is not supported "
                                 f"(use %{', %'.join(k for k in _DIRECTIVES if k != '%')})")
            body.append(_DIRECTIVES[d])
            i += 2
        else:
            body.append(re.escape(fmt[i]))
            i += 1
    regex = re.compile(r"(?<![0-9])(" + "".join(body) + r")(?![0-9])")
    parse_fmt, suffix = fmt, ""
    if re.search(r"%[UW]", fmt) and not re.search(r"%[aAwu]", fmt):
        parse_fmt, suffix = fmt + " %w", " 1"  # a week number needs a weekday: its Monday
    cache: dict[str, float | None] = {}

    def instant(text: str) -> float | None:
        if text not in cache:
            try:
                cache[text] = datetime.strptime(text + suffix, parse_fmt).replace(tzinfo=timezone.utc).timestamp()
            except ValueError:
                cache[text] = None
        return cache[text]

    def find(path: str) -> float | None:
        for m in regex.finditer(path):
            t = instant(m.group(1))
            if t is not None:
                return t
        return None

    def keep(in_dataset: str, relative: str) -> bool:
        t = find(in_dataset) if in_dataset else None
        if t is None:
            t = find(relative)
        return t is not None and lo <= t < hi

    return keep


def _sidecar_algorithm(path: str) -> str | None:
    for algorithm in SIDECAR_ALGORITHMS:
        if path.endswith("." + algorithm) and len(posixpath.basename(path)) > len(algorithm) + 1:
            return algorithm
    return None


def is_sidecar(path: str) -> bool:
    """Whether ``path`` names a checksum sidecar (``<file>.md5`` / ``<file>.sha256``)."""
    return _sidecar_algorithm(path) is not None


def _read_sidecars(fs: fsspec.AbstractFileSystem, wanted: dict[str, dict[str, str]], prefer: str) -> dict[str, str]:
    """``{data file: "<algorithm>:<hex>"}`` from the sidecars, read in one batched ``cat``."""
    if not wanted:
        return {}
    choice = {}
    for path, by_algorithm in wanted.items():
        algorithm = prefer if prefer in by_algorithm else sorted(by_algorithm)[0]
        choice[path] = (algorithm, by_algorithm[algorithm])
    contents = fs.cat([p for _, p in choice.values()], on_error="return")
    out = {}
    for path, (algorithm, sidecar) in choice.items():
        data = contents.get(sidecar)
        if data is None:
            data = contents.get(fs._strip_protocol(sidecar))
        if isinstance(data, BaseException) or data is None:
            raise OSError(f"cannot read the checksum sidecar {sidecar!r}: {data!r}")
        token = data.decode("ascii", "replace").split()[:1]
        digest = token[0].lower() if token else ""
        if len(digest) != _HEX_LENGTH[algorithm] or not re.fullmatch(r"[0-9a-f]+", digest):
            raise ValueError(f"the checksum sidecar {sidecar!r} does not start with a {algorithm} hex digest "
                             f"({_HEX_LENGTH[algorithm]} hex characters); fix or remove it, or set "
                             f"checksum.sidecar=false")
        out[path] = f"{algorithm}:{digest}"
    return out
