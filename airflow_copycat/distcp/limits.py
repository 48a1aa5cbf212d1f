"""The bounds of what one source file may expand to through the converters of a copy.

Contract: a :class:`Limits` per source file holds the bounds (the copy job's keys
``untar.max.bytes``, ``untar.max.entries``, ``decompress.max.ratio``; 0 or ``None``: no bound)
and the counts so far; nested archives and the copier's link copies add to the same object.
``add_entry`` / ``add_bytes`` / ``check_bytes`` raise a :class:`~.streams.ConversionError` naming
the archive, the entry and the key to raise. ``_Counted`` counts an archive output's bytes as
they are read. What each bound means is in the docstring of :mod:`.converters` ("Bounds").
"""

from __future__ import annotations

from typing import Any

from .streams import ConversionError, _Reader

UNTAR_MAX_BYTES = 100 << 30
"""Default of ``untar.max.bytes``: the bytes the archives of one file may expand to (100 GiB)."""
UNTAR_MAX_ENTRIES = 1_000_000
"""Default of ``untar.max.entries``: the entries of the archives of one file, link copies included."""
DECOMPRESS_MAX_RATIO = 1000
"""Default of ``decompress.max.ratio``: output bytes per compressed byte read."""
DECOMPRESS_RATIO_FLOOR = 16 << 20
"""Any stream may decompress to this many bytes whatever the ratio (a tiny file is not refused)."""

def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"


class Limits:
    """The bounds of what one source file may expand to, and the counts so far (see the module
    docstring). One object per file: nested archives and link copies add to the same counts.
    A bound of 0 (or None) is no bound."""

    def __init__(self, max_bytes: int | None = UNTAR_MAX_BYTES, max_entries: int | None = UNTAR_MAX_ENTRIES,
                 max_ratio: float | None = DECOMPRESS_MAX_RATIO, input_bytes: int | None = None):
        self.max_bytes = int(max_bytes or 0)
        self.max_entries = int(max_entries or 0)
        self.max_ratio = float(max_ratio or 0)
        self.input_bytes = input_bytes  # the source file's size, when known: bounds archive outputs by the ratio
        self.bytes = 0
        self.entries = 0

    @classmethod
    def from_config(cls, config: Any, input_bytes: int | None = None) -> "Limits":
        """From the keys ``untar.max.bytes``, ``untar.max.entries``, ``decompress.max.ratio`` (defaults
        when absent); ``input_bytes``: the size of the source file."""
        def get(key, default):
            value = config.get(key) if config is not None else None
            return default if value is None or value == "" else value
        return cls(int(get("untar.max.bytes", UNTAR_MAX_BYTES)), int(get("untar.max.entries", UNTAR_MAX_ENTRIES)),
                   float(get("decompress.max.ratio", DECOMPRESS_MAX_RATIO)), input_bytes)

    def add_entry(self, archive: str, entry: str, what: str = "entry") -> None:
        """Count one entry (or link copy) of ``archive``; a :class:`ConversionError` past the bound."""
        self.entries += 1
        if self.max_entries and self.entries > self.max_entries:
            raise ConversionError(f"archive {archive}: {what} {entry!r} is past untar.max.entries = "
                                  f"{self.max_entries} entries (link copies included); refused -- raise "
                                  "untar.max.entries to expand larger archives")

    def check_bytes(self, n: int, archive: str, entry: str, what: str = "entry") -> None:
        """Fail now when ``n`` more bytes would be past ``untar.max.bytes``."""
        if self.max_bytes and self.bytes + n > self.max_bytes:
            raise ConversionError(f"archive {archive}: {what} {entry!r} takes its expanded size past "
                                  f"untar.max.bytes = {self.max_bytes} bytes ({_size(self.max_bytes)}, link copies "
                                  "included); refused -- raise untar.max.bytes to expand larger archives")
        if self.max_ratio and self.input_bytes is not None \
                and self.bytes + n > max(DECOMPRESS_RATIO_FLOOR, self.max_ratio * self.input_bytes):
            raise ConversionError(f"archive {archive}: {what} {entry!r} takes its expanded size past "
                                  f"decompress.max.ratio = {self.max_ratio:g} times the archive's "
                                  f"{_size(self.input_bytes)} (16 MiB at least; link copies included); refused as a likely archive "
                                  "bomb -- raise decompress.max.ratio to allow it")

    def add_bytes(self, n: int, archive: str, entry: str, what: str = "entry") -> None:
        """Count ``n`` output bytes of ``archive``; a :class:`ConversionError` past the bound."""
        self.check_bytes(n, archive, entry, what)
        self.bytes += n


class _Counted(_Reader):
    """An output of an archive: its bytes count against ``untar.max.bytes``."""

    def __init__(self, inner, limits: "Limits", archive: str, entry: str):
        super().__init__()
        self._inner, self._limits, self._archive, self._entry = inner, limits, archive, entry

    def _read(self, n: int) -> bytes:
        b = self._inner.read(n)
        if b:
            self._limits.add_bytes(len(b), self._archive, self._entry)
        return b
