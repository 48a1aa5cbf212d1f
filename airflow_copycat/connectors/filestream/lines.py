"""Lines of a file as Arrow columns: one :class:`SourceBatch` of lines per partition per poll.

:class:`LineBatcher` receives what :meth:`TrackedPartition.read` hands out and builds the
batches. The lines of a run of complete lines (``data``: bytes ending in ``\\n``) become a
``large_string`` column without Python work per line: for UTF-8 and ASCII the bytes are
validated by decoding them once, then split at ``\\n`` with numpy (one ``\\r`` before a
``\\n`` dropped), and the column is built over them. Other encodings, and a run that does
not decode, are decoded line by line exactly as a record would be; a line that does not
decode is reported (:meth:`SourceTaskContext.report_error`) between the batch of the lines
before it and the batch of the lines after it, so batches, errors and offsets come in the
order the records would.

Row offsets are computed only when asked for (:class:`LineOffsets`), from the bytes kept
by reference.
"""

from __future__ import annotations

import bisect
import codecs

import numpy as np
import pyarrow as pa

from airflow_copycat.connect import DataException, Schema, SourceRecord, SourceTaskContext
from airflow_copycat.connect.batch import VALUE_COLUMN, RowOffsets, SourceBatch

from .files import OpenFile
from .identity import Identity

ENCODING_CONFIG = "encoding"
_FAST_CODECS = frozenset({"utf-8", "ascii"})  # valid bytes are UTF-8 as they are; split at 0x0A == split at \n
_NL, _CR = 10, 13


def split_lines(data: bytes) -> pa.Array:
    """The lines of ``data`` (complete lines, each ending in ``\\n``, valid UTF-8) as a
    ``large_string`` array, each without its ``\\n`` and one ``\\r`` before it."""
    u = np.frombuffer(data, np.uint8)
    nl = np.flatnonzero(u == _NL)
    n = len(nl)
    offsets = np.empty(n + 1, np.int64)
    offsets[0] = 0
    if b"\r" not in data:
        offsets[1:] = nl
        offsets[1:] -= np.arange(n)
        return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data.replace(b"\n", b"")))
    starts = np.empty_like(nl)
    starts[0], starts[1:] = 0, nl[:-1] + 1
    cr = nl[(nl > starts) & (u[np.maximum(nl - 1, 0)] == _CR)] - 1  # the \r ending a line
    keep = np.ones(len(u), bool)
    keep[nl] = False
    keep[cr] = False
    ends = nl.copy()
    ends[np.isin(nl, cr + 1, assume_unique=True)] -= 1
    np.cumsum(ends - starts, out=offsets[1:])
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(u[keep].tobytes()))


def line_value(raw: bytes, start: int, encoding: str) -> str | DataException:
    """A line's value as a record carries it (one trailing ``\\r`` dropped, decoded), or the
    error for a line that does not decode (``raw`` starts at byte ``start`` of the file)."""
    line = raw[:-1] if raw.endswith(b"\r") else raw
    try:
        return line.decode(encoding)
    except UnicodeDecodeError as e:
        return DataException(
            f"line is not valid {encoding}: {e.reason} at byte {start + e.start}; set "
            f"'{ENCODING_CONFIG}' to the files' character set")


class LineOffsets(RowOffsets):
    """The source offset after each row of a batch of lines, computed when asked for.

    Built from segments ``(data, start, count, identity, end)``: ``count`` rows from
    ``data`` (lines ending in ``\\n``, read from byte ``start``), or one last line without
    ``\\n`` (``count`` 0, ending at ``end``)."""

    def __init__(self):
        super().__init__(0)
        self._segments: list[tuple[bytes, int, int, Identity, int]] = []
        self._firsts: list[int] = []
        self._ends: dict[int, np.ndarray] = {}

    def add(self, data: bytes, start: int, count: int, identity: Identity, end: int) -> None:
        self._firsts.append(self._n)
        self._segments.append((data, start, count, identity, end))
        self._n += max(count, 1)

    def _make(self, row: int) -> dict:
        k = bisect.bisect_right(self._firsts, row) - 1
        data, start, count, identity, end = self._segments[k]
        if count == 0:
            return identity.as_offset(end)
        ends = self._ends.get(k)
        if ends is None:
            ends = self._ends[k] = np.flatnonzero(np.frombuffer(data, np.uint8) == _NL) + (start + 1)
        return identity.as_offset(int(ends[row - self._firsts[k]]))


class LineBatcher:
    """Collects one partition's lines during one :meth:`TrackedPartition.read` into batches
    (appended to ``out``), or into records when ``records`` (the per-record path)."""

    def __init__(self, topic: str, partition: dict, encoding: str, context: SourceTaskContext,
                 out: list, *, records: bool = False):
        self.topic, self.partition, self.encoding, self.context = topic, partition, encoding, context
        self.out = out
        self.records = records
        self.fast = codecs.lookup(encoding).name in _FAST_CODECS
        self._arrays: list[pa.Array] = []
        self._strings: list[str] = []
        self._offsets = LineOffsets()
        self._last: dict | None = None

    # ---- receiving (the Emit and Mark of TrackedPartition.read)

    def lines(self, data: bytes, start: int, end: int, count: int, f: OpenFile) -> None:
        if self.records:
            self._record(data, start, end, f)
        elif count == 0:  # a last line without \n
            self._slow(data + b"\n", start, f.identity, tail_end=end, path=f.path)
        elif self.fast:
            try:
                data.decode(self.encoding)
            except UnicodeDecodeError:
                self._slow(data, start, f.identity, path=f.path)
                return
            self._take_strings()
            self._arrays.append(split_lines(data))
            self._offsets.add(data, start, count, f.identity, end)
            self._last = f.identity.as_offset(end)
        else:
            self._slow(data, start, f.identity, path=f.path)

    def mark(self, offset: dict) -> None:
        """Commit ``offset`` without a line: a batch of no rows after what came before."""
        self.flush()
        self.out.append(SourceBatch(topic=self.topic, data=_table([]), value_schema=Schema.STRING,
                                    source_partition=self.partition, source_offset=offset))

    def flush(self) -> None:
        """Emit the rows collected so far as one batch."""
        self._take_strings()
        if not self._arrays:
            return
        offsets, arrays = self._offsets, self._arrays
        self._arrays, self._offsets = [], LineOffsets()
        self.out.append(SourceBatch(topic=self.topic, data=_table(arrays), value_schema=Schema.STRING,
                                    source_partition=self.partition, source_offset=self._last,
                                    row_offsets=offsets))

    # ---- line by line

    def _record(self, raw: bytes, start: int, end: int, f: OpenFile) -> None:
        offset = f.identity.as_offset(end)
        value = line_value(raw, start, self.encoding)
        if isinstance(value, DataException):
            self._report(value, raw, start, end, offset, f.path)
            return
        self.out.append(SourceRecord(
            topic=self.topic, kafka_partition=None, key_schema=None, key=None,
            value_schema=Schema.STRING, value=value,
            source_partition=self.partition, source_offset=offset))

    def _slow(self, data: bytes, start: int, identity: Identity, *, path: str, tail_end: int | None = None) -> None:
        """Lines of ``data`` decoded one by one, as records are (``tail_end``: ``data`` is one
        last line, its ``\\n`` added here, ending at byte ``tail_end``)."""
        pos = start
        for raw in data.split(b"\n")[:-1]:
            end = pos + len(raw) + 1 if tail_end is None else tail_end
            value = line_value(raw, pos, self.encoding)
            if isinstance(value, DataException):
                self._report(value, raw, pos, end, identity.as_offset(end), path)
            else:
                self._strings.append(value)
                self._offsets.add(raw, pos, 0, identity, end)
                self._last = identity.as_offset(end)
            pos = end

    def _take_strings(self) -> None:
        if self._strings:
            self._arrays.append(pa.array(self._strings, pa.large_string()))
            self._strings = []

    def _report(self, error: DataException, raw: bytes, start: int, end: int, offset: dict, path: str) -> None:
        self.flush()  # the lines before it first, as records would be
        self.context.report_error(error, source_partition=self.partition, source_offset=offset,
                                  raw=raw, location=f"{path}, bytes {start}..{end}")


def _table(arrays: list) -> pa.Table:
    column = pa.chunked_array(arrays, type=pa.large_string())
    return pa.Table.from_arrays([column], names=[VALUE_COLUMN])

