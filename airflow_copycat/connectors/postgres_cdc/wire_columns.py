"""pgoutput tuples of many changes read into columns at once: the stream's batch path without a loop per value.

A run of one table's changes (see :mod:`.change_batches`) arrives as the messages' bytes
(:class:`.pgoutput.WireChange`). :func:`tuple_columns` reads the same tuple of each of them -- the
new row of every change, the old row of every delete, the key row of each output row -- into one
Arrow ``string`` array per column, walking all the messages one column at a time with array
operations, where :meth:`.pgoutput.PgOutputDecoder.decode` walks one message's columns one value at
a time. Per column it also says which rows hold pgoutput's ``'u'`` (a TOASTed value the change left
alone) and which ``'n'`` (NULL).

The contract is the per-message decoder's, value for value: a ``'t'`` column is its text, a
``'n'`` column None, a ``'u'`` column :data:`~.model.UNCHANGED_TOAST`. Only UTF-8 text is read here.
A tuple that is not exactly the relation's columns, each whole in its message -- a column count other
than the relation's, a kind other than ``t``/``n``/``u``, a length past the message's end, bytes that
are not UTF-8 -- makes :func:`tuple_columns` return ``None``: the caller then decodes message by
message, which raises the decoder's own error (the kind, the UTF-8) or reads what the decoder reads
(the decoder takes a tuple's own column count, and a text cut short as it is).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .model import UNCHANGED_TOAST

_T, _N, _U = 0x74, 0x6E, 0x75


@dataclass(frozen=True)
class TextColumn:
    """One column of a run's rows: ``texts`` (null where the row has no tuple, ``'n'`` or ``'u'``),
    ``unchanged`` (the rows holding ``'u'``, or None when none does), ``nulls`` (the rows *with* a
    tuple that hold ``'n'``)."""

    texts: pa.StringArray
    unchanged: np.ndarray | None
    nulls: np.ndarray

    @property
    def null_values(self) -> int:
        """How many rows with a tuple hold ``'n'``."""
        return int(np.count_nonzero(self.nulls))

    def take(self, rows: np.ndarray) -> "TextColumn":
        """The column's values at ``rows`` (indices; -1: a row without tuple, null)."""
        if len(rows) == len(self.texts) and np.array_equal(rows, np.arange(len(rows))):
            return self
        absent = rows < 0
        at = np.where(absent, 0, rows)
        texts = self.texts.take(pa.array(at, mask=absent)) if absent.any() else self.texts.take(pa.array(at))
        unchanged = None
        if self.unchanged is not None:
            unchanged = self.unchanged[at] & ~absent
            if not unchanged.any():
                unchanged = None
        return TextColumn(texts, unchanged, self.nulls[at] & ~absent)

    def values(self) -> list:
        """The column as the per-message decoder's values: text, None or UNCHANGED_TOAST (None too for a
        row without tuple)."""
        values = self.texts.to_pylist()
        if self.unchanged is not None:
            for i in np.flatnonzero(self.unchanged):
                values[i] = UNCHANGED_TOAST
        return values


_WORD = np.arange(4)


def _int32(buffer: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The big-endian int32 at each of ``at`` in ``buffer`` (int64)."""
    return buffer[at[:, None] + _WORD].view(">i4").ravel().astype(np.int64)


def tuple_columns(buffer: np.ndarray, ends: np.ndarray, starts: np.ndarray, ncols: int) -> list[TextColumn] | None:
    """The ``ncols`` columns of the tuples at ``starts`` in ``buffer`` (see the module docstring).

    ``buffer`` holds the messages one after another (uint8); ``ends[i]`` is where message ``i`` ends
    in it, ``starts[i]`` where its tuple's column count is (ascending: one tuple per message). Returns
    None when a tuple is not what the per-message decoder reads (see the module docstring)."""
    n = len(starts)
    pos = starts.astype(np.int64)
    limit = ends.astype(np.int64)
    if np.any(pos + 2 > limit) or np.any(((buffer[pos].astype(np.int32) << 8) | buffer[pos + 1]) != ncols):
        return None
    pos += 2
    kinds = np.empty((n, ncols), np.uint8)  # per message and column: t, n or u
    firsts = np.zeros((n, ncols), np.int64)  # where a 't' value's text starts
    lengths = np.zeros((n, ncols), np.int64)  # its length (0 for the others)
    for j in range(ncols):
        if np.any(pos >= limit):
            return None
        kind = kinds[:, j] = buffer[pos]
        text = kind == _T
        if not np.all(text | (kind == _N) | (kind == _U)):
            return None
        heads = pos[text]
        if np.any(heads + 5 > limit[text]):
            return None
        length = _int32(buffer, heads + 1)
        if np.any(length < 0) or np.any(heads + 5 + length > limit[text]):
            return None
        firsts[text, j] = heads + 5
        lengths[text, j] = length
        pos = pos + 1  # the kind byte
        pos[text] = heads + 5 + length
    # every text, message by message and column by column: the order they have in the buffer
    total = int(lengths.sum())
    if total >= 1 << 31:
        return None
    inside = np.zeros(len(buffer) + 1, np.int8)
    spans = lengths.ravel() > 0
    inside[firsts.ravel()[spans]] = 1
    inside[(firsts + lengths).ravel()[spans]] -= 1
    data = buffer[np.cumsum(inside[:-1], dtype=np.int8).view(bool)]
    text = (kinds == _T).ravel()
    offsets = np.zeros(n * ncols + 1, np.int32)
    np.cumsum(lengths.ravel(), out=offsets[1:])
    every = pa.Array.from_buffers(pa.string(), n * ncols, [pa.py_buffer(np.packbits(text, bitorder="little")),
                                                          pa.py_buffer(offsets), pa.py_buffer(data)])
    try:
        every.validate(full=True)  # UTF-8
    except pa.ArrowInvalid:
        return None
    columns = []
    for j in range(ncols):
        unchanged = kinds[:, j] == _U
        columns.append(TextColumn(every.take(pa.array(np.arange(j, n * ncols, ncols))),
                                  unchanged if unchanged.any() else None, kinds[:, j] == _N))
    return columns
