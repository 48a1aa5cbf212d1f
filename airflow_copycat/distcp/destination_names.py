"""A source file's destination name after the copy job's converters, and the way back.

Contract: :func:`destination_name` gives the destination (only the last path component changes)
and the converters that apply to a file, by the naming rules of :func:`.converters.converted_name`
(one set of rules for the listing and the copier); :func:`source_name_candidates` gives every
name a source file may have had for a destination name (a superset), so that the diff can tell
whether a target file is in a job's scope.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

from .converters import converted_name

DECOMPRESSORS = ("gunzip", "bunzip2", "unxz", "unzstd")
"""The explicit decompress converters; ``decompress`` picks one of them by extension."""

# per decompressor: (extensions it drops, compressed-tar extensions it turns into .tar), as in .converters
_EXTENSIONS = {
    "gunzip": ((".gz", ".gzip"), (".tgz",)),
    "bunzip2": ((".bz2",), (".tbz2", ".tbz")),
    "unxz": ((".xz", ".lzma"), (".txz",)),
    "unzstd": ((".zst", ".zstd"), (".tzst",)),
}
_TAR_SUFFIXES = (".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst", ".tgz", ".tbz2", ".tbz", ".txz", ".tzst", ".tar")


def destination_name(relative: str, converters: Iterable[str]) -> tuple[str, tuple[str, ...]]:
    """``(destination, converters that apply)`` of a file at ``relative`` with the job's converters.

    A converter applies to the files whose names it fits -- a decompressor to its
    extension, ``untar`` to tar archives, ``decrypt`` to ``.enc``, ``encrypt`` to all --
    and other files are copied as they are.

    Only the last path component changes, by :func:`.converters.converted_name` (one set of
    naming rules for the listing and the copier), converter by converter: a decompressor
    drops its extension when present (``gunzip``: ``.gz``, ``.tgz`` -> ``.tar``...);
    ``decompress`` becomes the decompressor of the current extension, or is left out
    when there is none; ``untar`` drops ``.tar``/``.tar.gz``/``.tgz``... -- the destination
    is the directory the archive expands into -- and the converters after it, which
    convert the archive's entries, are kept as given and leave the name alone;
    ``encrypt`` adds ``.enc``; ``decrypt`` drops it.
    """
    head, name = posixpath.split(relative)
    chain = list(converters)
    applied: list[str] = []
    for i, conv in enumerate(chain):
        if conv == "decompress":
            conv = next((d for d in DECOMPRESSORS if converted_name(name, d) != name), None)
            if conv is None:
                continue
        elif conv != "encrypt" and converted_name(name, conv) == name:
            continue  # a converter applies to the files whose names it fits: .gz, tar archives, .enc
        name = converted_name(name, conv)
        applied.append(conv)
        if conv == "untar":
            applied.extend(chain[i + 1:])
            break
    return (posixpath.join(head, name) if head else name), tuple(applied)


def source_name_candidates(name: str, converters: Iterable[str]) -> set[str]:
    """Names a source file may have had for :func:`destination_name` to give ``name``
    (a superset; used to decide whether a target file is in a job's scope)."""
    chain = list(converters)
    if "untar" in chain:
        chain = chain[: chain.index("untar") + 1]
    names = {name}
    for conv in reversed(chain):
        more = set()
        for n in names:
            if conv in DECOMPRESSORS or conv == "decompress":
                for d in (DECOMPRESSORS if conv == "decompress" else (conv,)):
                    more.update(n + e for e in _EXTENSIONS[d][0])
                    if n.lower().endswith(".tar"):
                        more.update(n[:-4] + e for e in _EXTENSIONS[d][1])
            elif conv == "untar":
                more.update(n + s for s in _TAR_SUFFIXES)
            elif conv == "encrypt" and n.endswith(".enc"):
                more.add(n[:-4])
            elif conv == "decrypt":
                more.add(n + ".enc")
        names |= more
    return names
