"""Streaming converters of a copy: decompress, untar, encrypt and decrypt -- chained, in order,
without ever holding a whole file in memory.

Gobblin Distcp decorates the input stream of a copied file (``UnGzipConverter``,
``DecryptConverter``) and has a special writer expand a tar
(``TarArchiveInputStreamDataWriter``). Here every converter is a function of
a readable binary stream to another, and ``untar`` turns one stream into many:

======================  ========================================================  =================================
converter               what it does to the bytes                                 what it does to the name
======================  ========================================================  =================================
``gunzip``              gzip (every member of a multi-member file)                drops ``.gz``/``.gzip``;
                                                                                  ``.tgz`` -> ``.tar``
``bunzip2``             bzip2 (multi-stream)                                      drops ``.bz2``; ``.tbz2``/``.tbz``
                                                                                  -> ``.tar``
``unxz``                xz / lzma                                                 drops ``.xz``/``.lzma``;
                                                                                  ``.txz`` -> ``.tar``
``unzstd``              Zstandard (multi-frame)                                   drops ``.zst``/``.zstd``;
                                                                                  ``.tzst`` -> ``.tar``
``decompress``          one of the four above, picked by the current name's       as the converter it picks; a name
                        extension (``.gz .tgz .bz2 .xz .zst``...); a name          without a known extension passes
                        without a known extension passes through unchanged         through
``untar``               expands a tar into its regular files; a compressed tar    the archive becomes a directory:
                        (gzip, bzip2, xz, zstd: told by its magic bytes) is       drops ``.tar`` (or ``.tar.gz``,
                        decompressed first, so ``untar`` alone reads a ``.tgz``   ``.tgz``, ``.tar.xz``...)
``encrypt``/``decrypt``  the age format, or the earlier AES-256-GCM stream (see     adds ``.enc`` / drops ``.enc``
                        below, :mod:`.aes_stream` and :mod:`.encryption`)          or ``.age``
======================  ========================================================  =================================

The listing decides a file's destination (``destination_names.destination_name``); this
module only produces the bytes, and names the outputs *inside* an archive with
:func:`converted_name` (:func:`destination_for` applies the same rules to a
relative path). The entry point is :func:`open_outputs`::

    for path, out in open_outputs(stream, origin, ("gunzip", "untar"), key):
        ...  # path: relative to the file's destination ("" = the destination itself)
             # out: a readable binary stream, or a Link (an archive link to another output)

Contract of :func:`open_outputs`
--------------------------------
* It yields ``(path, stream)`` pairs lazily; each ``stream`` must be read to its
  end (``read(n)`` until ``b""``) *before* the next pair is asked for (the
  outputs of an archive come one after the other from a single pass over its
  bytes). Without ``untar`` there is exactly one output, with path ``""``.
* With ``untar`` there is one output per regular file of the archive, its path
  the entry's path inside the archive (normalised: no ``./``, no ``//``), in
  archive order; directories produce nothing (empty ones are not kept); device
  and FIFO entries are skipped. Converters after ``untar`` apply to every
  entry (``untar,decompress`` decompresses the ``*.gz`` files of an archive;
  ``untar,untar`` expands the archives inside an archive into directories).
* A symbolic or hard link whose target stays inside the archive is yielded as
  ``(path, Link(target=...))``, ``target`` being the path of the output (file, or
  directory of outputs) it points to, relative to the same destination; the
  caller materialises it as a copy (object stores have no links).
* **Refused, with a** :class:`ConversionError` **naming the archive and the entry**:
  an absolute entry path (``/etc/passwd``, ``C:...``), a path with a ``..``
  component, and a symlink or hard link whose target is absolute or leaves the
  archive root. The error is raised when the entry is reached (outputs before
  it may already have been yielded: the caller discards them).
* Corrupt or truncated input of any converter -- a bad gzip header or CRC, a gzip
  or bzip2/xz/zstd stream that ends early, a tar that ends without its
  end-of-archive blocks or with a bad header, an encrypted file that fails
  authentication -- raises :class:`ConversionError` naming the file (and the
  entry, for a file inside an archive). After the last output of an archive
  the rest of its input is read (so a compressor's trailing checksum is
  verified and every source byte is seen).
* Exceptions raised by ``stream`` itself (the source) pass through unchanged,
  so a caller can tell a failing source from corrupt data.

Bounds (:class:`Limits`, one per source file; keys of the copy job)
--------------------------------------------------------------------
A small hostile file must not fill the disk or the memory of a task, so the
expansion is bounded, each bound raising a :class:`ConversionError` that names the
file, the entry and the key to raise:

* ``decompress.max.ratio`` (default 1000; 0: no bound): every decompressor
  (explicit, or the one ``untar`` picks for a compressed tar) may produce at most
  ``max(16 MiB, ratio * compressed bytes read so far)`` bytes -- checked as
  bytes come out, so a gzip/bzip2/xz/zstd bomb stops after at most a few MiB
  more than the bound. (gzip's own limit is about 1032:1; only long runs of one
  byte get near 1000.)
* ``untar.max.bytes`` (default 100 GiB; 0: no bound): the bytes of all outputs
  of the archives of one file (nested ones included), counted as they are
  produced (an entry whose header already claims too much fails at once); the
  copier adds the bytes of the copies it makes for links
  (:meth:`Limits.add_bytes`). When the size of the source file is known
  (``Limits.input_bytes``, set by the copier) the same bytes are also bounded by
  ``max(16 MiB, decompress.max.ratio * that size)``: links cost no bytes in an
  archive, so a few KiB of links to links would otherwise expand to the whole
  ``untar.max.bytes``.
* ``untar.max.entries`` (default 1,000,000; 0: no bound): the entries (headers) of
  the archives of one file; the copier adds one per copy made for a link.
* Not configurable: a GNU long-name/long-link or pax header larger than
  ``TAR_MAX_HEADER`` (1 MiB) is refused before tarfile reads it (tarfile reads it
  whole into memory), as is an entry whose headers take more than that in all
  (GNU sparse maps) or are chained more than ``TAR_MAX_CHAINED_HEADERS`` deep.

Encrypted formats (``encrypt`` writes one, ``decrypt`` reads both)
--------------------------------------------------------------------
With ``encryption.recipients`` (``age1...`` keys) or ``encryption.passphrase``, ``encrypt``
writes the standard age format (:mod:`.age`: X25519 or scrypt recipients, ChaCha20-Poly1305
STREAM in 64 KiB chunks), which ``age -d`` and every age library decrypt; ``decrypt`` reads it
with ``encryption.identity`` or ``encryption.passphrase``. With only ``encryption.key``, the
earlier copycat format (an AES-256-GCM stream: its layout and guarantees are in :mod:`.aes_stream`)
is written; ``decrypt`` reads either, told apart by the first bytes (:mod:`.encryption` holds the
keys and the choice).

The parts, by concept: :mod:`.streams` (the readers every converter is built of, and
:class:`ConversionError`), :mod:`.limits` (the bounds), :mod:`.decompress` (the four
decompressors), :mod:`.untar` (tar entries and links), :mod:`.aes_stream` and :mod:`.age`
(the encrypted formats); this module names outputs and chains the converters.
"""

from __future__ import annotations

import posixpath
from typing import Any, BinaryIO, Iterable, Iterator

from .aes_stream import parse_key
from .decompress import _decompress
from .limits import Limits, _Counted
from .streams import ConversionError
from .untar import Link, Output, _untar

_TAR_SUFFIXES = (".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst", ".tgz", ".tbz2", ".tbz", ".txz", ".tzst", ".tar")
STREAM_CONVERTERS = ("gunzip", "bunzip2", "unxz", "unzstd", "decompress", "encrypt", "decrypt")

# (suffix, replacement) per decompressor: the name a decompressed file gets.
_SUFFIXES = {
    "gunzip": ((".tgz", ".tar"), (".gz", ""), (".gzip", "")),
    "bunzip2": ((".tbz2", ".tar"), (".tbz", ".tar"), (".bz2", "")),
    "unxz": ((".txz", ".tar"), (".xz", ""), (".lzma", "")),
    "unzstd": ((".tzst", ".tar"), (".zst", ""), (".zstd", "")),
}


# --------------------------------------------------------------------------- names


def _decompressor_for(name: str) -> str | None:
    lower = name.lower()
    for conv, suffixes in _SUFFIXES.items():
        if any(lower.endswith(s) for s, _ in suffixes):
            return conv
    return None


def converted_name(name: str, converter: str) -> str:
    """The name a file called ``name`` has after ``converter`` (see the module's table).
    A name is never made empty: ``.gz`` stays ``.gz``."""
    if converter == "decompress":
        conv = _decompressor_for(name)
        return converted_name(name, conv) if conv else name
    if converter in _SUFFIXES:
        lower = name.lower()
        for suffix, replacement in _SUFFIXES[converter]:
            if lower.endswith(suffix) and len(name) > len(suffix):
                return name[: -len(suffix)] + replacement
        return name
    if converter == "untar":
        lower = name.lower()
        for suffix in _TAR_SUFFIXES:
            if lower.endswith(suffix) and len(name) > len(suffix):
                return name[: -len(suffix)]
        return name
    if converter == "encrypt":
        return name + ".enc"
    if converter == "decrypt":
        return name[:-4] if name.lower().endswith((".enc", ".age")) and len(name) > 4 else name
    raise ValueError(f"unknown converter {converter!r}")


def destination_for(relative: str, converters: Iterable[str]) -> str:
    """The destination (relative path) of a source file at ``relative`` after ``converters``:
    only its last component changes (``logs/a.csv.gz`` + decompress -> ``logs/a.csv``;
    ``x/b.tar.gz`` + gunzip,untar -> ``x/b``, a directory). Converters after ``untar``
    rename the entries inside, not the directory."""
    head, name = posixpath.split(relative)
    for conv in converters:
        name = converted_name(name, conv)
        if conv == "untar":
            break
    return posixpath.join(head, name) if head else name


def _rename(path: str, converter: str) -> str:
    head, name = posixpath.split(path)
    name = converted_name(name, converter)
    return posixpath.join(head, name) if head else name


def _apply(converter: str, stream, name: str, label: str, key, limits: Limits):
    """One stream converter: the new stream and name."""
    if converter == "decompress":
        conv = _decompressor_for(name)
        if conv is None:
            return stream, name
        return _decompress(stream, conv, label, limits), converted_name(name, conv)
    if converter in _SUFFIXES:
        return _decompress(stream, converter, label, limits), converted_name(name, converter)
    if converter in ("encrypt", "decrypt"):  # key: the EncryptionKeys open_outputs checked
        if key is None:
            raise ConversionError(f"{converter} of {label} needs encryption.recipients, encryption.identity, "
                                  "encryption.passphrase or encryption.key")
        if converter == "encrypt":
            return key.encrypt(stream), converted_name(name, converter)
        return key.decrypt(stream, label), converted_name(name, converter)
    raise ValueError(f"unknown converter {converter!r}")


def _chain(stream, path: str, name: str, label: str, converters: tuple[str, ...], key,
           limits: Limits, archive: tuple[str, str] | None = None) -> Iterator[tuple[str, Output]]:
    """``archive``: (archive, entry) when ``stream`` is an entry of an archive: its output counts
    against ``untar.max.bytes``."""
    for i, conv in enumerate(converters):
        if conv == "untar":
            rest = converters[i + 1:]
            path = _rename(path, "untar") if path else path  # an archive inside an archive: its directory
            for entry, item in _untar(stream, label, limits):
                out = posixpath.join(path, entry) if path else entry
                if isinstance(item, Link):
                    target = posixpath.join(path, item.target) if path else item.target
                    for later in rest:
                        out, target = _rename(out, later), _rename(target, later)
                    yield out, Link(target, item.kind, item.entry)
                else:
                    if not rest:  # the entry is an output: fail before writing what its header claims
                        limits.check_bytes(getattr(item, "size", 0), label, entry)
                    yield from _chain(item, out, posixpath.basename(entry), f"{label}[{entry}]", rest, key,
                                      limits, (label, entry))
            return
        stream, new_name = _apply(conv, stream, name, label, key, limits)
        if path and new_name != name:
            path = posixpath.join(posixpath.dirname(path), new_name)
        name = new_name
    if archive is not None and limits.max_bytes:
        stream = _Counted(stream, limits, *archive)
    yield path, stream


def open_outputs(stream: BinaryIO, origin_name: str, converters: Iterable[str],
                 key: Any = None, limits: Limits | None = None) -> Iterator[tuple[str, Output]]:
    """The outputs of the bytes read from ``stream`` through ``converters`` (names, in order).

    ``origin_name``: the source path; its base name picks the codec of ``decompress``,
    and it names the file in errors. ``key``: the job's key material, an
    :class:`~.encryption.EncryptionKeys` (``EncryptionKeys.from_config(config)``), or just
    ``encryption.key`` (64 hex characters, or a Password holding them); needed by
    ``encrypt``/``decrypt`` only, and checked before any byte is read (a
    :class:`ConversionError` that shows no secret). ``limits``: the
    bounds of the expansion (default: :class:`Limits` with the default bounds); pass the
    same object to count link copies. See the module docstring for the contract (lazy,
    one stream at a time, paths relative to the destination, :class:`Link` for links,
    :class:`ConversionError`, bounds)."""
    converters = tuple(converters)
    unknown = [c for c in converters if c not in STREAM_CONVERTERS and c != "untar"]
    if unknown:
        raise ValueError(f"unknown converter(s) {unknown}")
    raw_key = None
    if {"encrypt", "decrypt"} & set(converters):
        from .encryption import EncryptionKeys

        raw_key = key if isinstance(key, EncryptionKeys) else EncryptionKeys(key=key)
        if not isinstance(key, EncryptionKeys) and getattr(key, "value", key) not in (None, ""):
            parse_key(key)  # a bad encryption.key: the message it always had
        raw_key.check(converters)
    limits = limits if limits is not None else Limits()
    return _chain(stream, "", posixpath.basename(origin_name.rstrip("/")), origin_name, converters, raw_key, limits)
