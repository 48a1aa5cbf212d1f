"""The look-back re-read's memory: which rows a partition emitted recently, kept in its offset.

With ``copycat.lookback.ms`` = L > 0 (timestamp modes), each run of a JDBC task re-reads the rows
whose timestamp lies in ``[mark - L, mark]`` (``mark``: the committed timestamp) and emits only
those it never emitted: a transaction that committed late, with a timestamp older than the
committed offset, is read by the next run instead of being lost. A row's *identity* is a short
hash of (its timestamp, its primary key -- or its incrementing value, or all its values when the
table has neither). The identities of the rows emitted with a timestamp at or after
``mark - L`` travel in the offset itself, so the de-duplication survives across runs, tasks
and machines:

* ``"lookback": {"<epoch ms>": ["<identity>", ...], ...}`` -- identities by the epoch
  millisecond of their row's timestamp (UTC); entries older than ``mark - L`` are pruned.
* ``"lookback_from": [epoch ms, nanos, incrementing or null]`` -- only while identities are
  incomplete: the position the look-back was switched on at (an offset written without it, e.g.
  by Confluent's connector or with look-back off). Re-reads never go before it, since rows
  emitted earlier were not recorded; a row committed late with a timestamp at or before it is
  not recovered.

The set is bounded by ``copycat.lookback.max.rows``: more identities within the span fail the
task (:class:`LookbackOverflow`) instead of silently forgetting some.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
from typing import Any

from airflow_copycat.connect import ConnectException

LOOKBACK_FIELD = "lookback"
LOOKBACK_FROM_FIELD = "lookback_from"

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


class LookbackOverflow(ConnectException):
    """More rows within the look-back span than ``copycat.lookback.max.rows``."""


def epoch_ms(t: dt.datetime) -> int:
    delta = t - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def identity(ts: dt.datetime, key: list[Any]) -> str:
    """A short, stable hash (11 characters, 64 bits) of a row's UTC timestamp and key values."""
    delta = ts - _EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    text = json.dumps([micros, [v if isinstance(v, (int, str)) or v is None else str(v) for v in key]],
                      separators=(",", ":"), ensure_ascii=False, default=str)
    return base64.urlsafe_b64encode(hashlib.blake2b(text.encode(), digest_size=8).digest()).decode().rstrip("=")


class SeenRows:
    """The identities of the rows a partition emitted within the look-back span."""

    def __init__(self, span_ms: int, max_rows: int, what: str, by_ms: dict[int, tuple[str, ...]] | None = None,
                 since: list | None = None):
        self.span_ms, self.max_rows, self.what = span_ms, max_rows, what
        self._by_ms: dict[int, tuple[str, ...]] = dict(by_ms or {})
        self._all = {h for hs in self._by_ms.values() for h in hs}
        self._oldest = min(self._by_ms, default=None)
        self.since = since
        self.overflowed: LookbackOverflow | None = None

    @classmethod
    def from_offset(cls, offset: dict | None, span_ms: int, max_rows: int, what: str,
                    mark: list | None) -> "SeenRows":
        """The set an offset carries. An offset without it (look-back just switched on) starts an
        empty set complete only after ``mark`` (``[ms, nanos, inc]``, or ``None`` from the start)."""
        offset = offset or {}
        if LOOKBACK_FIELD in offset:
            raw = offset.get(LOOKBACK_FIELD) or {}
            by_ms = {int(k): tuple(v) for k, v in raw.items()}
            return cls(span_ms, max_rows, what, by_ms, offset.get(LOOKBACK_FROM_FIELD))
        return cls(span_ms, max_rows, what, {}, mark)

    def __len__(self) -> int:
        return len(self._all)

    def __contains__(self, ident: str) -> bool:
        return ident in self._all

    def add(self, ms: int, ident: str) -> None:
        self._by_ms[ms] = self._by_ms.get(ms, ()) + (ident,)
        self._all.add(ident)
        self._oldest = ms if self._oldest is None else min(self._oldest, ms)

    def prune(self, mark_ms: int | None) -> None:
        """Forget identities older than ``mark - span``; fail when more than ``max_rows`` remain (and
        keep failing: the caller must not read past rows it could not hand over)."""
        if self.overflowed is not None:
            raise self.overflowed
        if mark_ms is not None:
            floor = mark_ms - self.span_ms
            if self._oldest is not None and self._oldest < floor:
                for ms in [ms for ms in self._by_ms if ms < floor]:
                    for h in self._by_ms.pop(ms):
                        self._all.discard(h)
                self._oldest = min(self._by_ms, default=None)
            if self.since is not None and int(self.since[0]) < floor:
                self.since = None  # the span no longer reaches back to where tracking began
        if len(self._all) > self.max_rows:
            self.overflowed = LookbackOverflow(
                f"{self.what}: {len(self._all)} rows have timestamps within copycat.lookback.ms={self.span_ms} of "
                f"the last one read, more than copycat.lookback.max.rows={self.max_rows} can remember; use a "
                f"shorter copycat.lookback.ms (or timestamp.delay.interval.ms instead), or raise "
                f"copycat.lookback.max.rows")
            raise self.overflowed

    def offset_fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {LOOKBACK_FIELD: {str(ms): hs for ms, hs in self._by_ms.items()}}
        if self.since is not None:
            out[LOOKBACK_FROM_FIELD] = list(self.since)
        return out
