"""Copy one work unit into staging -- the byte-moving part of Distcp, run by a task.

Gobblin's ``FileAwareInputStreamDataWriter`` streams a file into a task staging
directory, checks the bytes against the expected length, and on a retry
recovers a file an earlier attempt had already persisted. The same here, on any
pair of fsspec filesystems, with a marker that makes "staged" a fact one can
test:

**A file is staged iff** ``staging.done_marker(f)`` **exists** (and names ``f.id``).
The marker is written last, after every output has been renamed into place,
so no reader ever takes a partial output for a staged one. Its JSON::

    {"format": "copycat.distcp.done/1", "id": f.id, "origin": ..., "destination": ...,
     "outputs": [{"path": <relative to the target root>, "size": <bytes>}, ...],
     "checksum": "md5:<hex>" | "sha256:<hex>" | null,   # computed over the source bytes
     "source_checksum": f.checksum, "bytes_read": <source bytes read>, "size": f.size,
     "converters": [...], "parts": <k for a split file, else 1>}

Whole file (``parts == 1``): the source is streamed (4 MiB reads) through the
file's converters (:mod:`.converters`) into
``staging.file_dir(f)/<destination>`` -- for ``untar``, into the directory's
entries below it -- each output first written as ``.<name>.<attempt>.tmp`` next to
its final name and renamed when whole (the attempt suffix keeps a zombie attempt
from writing into the same temporary file). The checksum (``checksum``: md5,
sha256 or none) of the *source bytes* is computed while they are read and
compared with ``f.checksum`` when the listing has one; the bytes read must equal
``f.size`` (else the file changed during the copy). A file whose copy fails leaves
nothing behind: its staging directory is removed, and no marker is written.

Split file (``parts > 1``): part ``k`` is the byte range ``[offset, offset+length)``
copied to ``staging.part_path(f, k)`` (temp + rename; a part already there with the
right size is reused). :func:`finish_split`, run by the publisher where the plan
was made, concatenates the parts in order into the staged output, checks size and
checksum and writes the marker.

Reuse: a unit whose file has a marker (with its id) is not copied again
(``status="reused"``, ``bytes_read`` 0), so a rerun after a failure copies only
what is not staged yet. The marker is trusted: publishing moves the outputs
away, so it is the publisher's log, not this module, that knows what happened
after.

Permissions and modification times are set by the publisher on the final files.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import posixpath
import secrets
import time
from typing import Any, Callable, Iterable

from . import converters as conv
from .model import PARTS_DIR, CopyableFile, Staging, WorkUnit

log = logging.getLogger("airflow_copycat.distcp")

CHUNK = 4 << 20
"""Bytes per read and write."""
PROGRESS_EVERY = 64 << 20
"""``progress(bytes_so_far)`` is called after about this many source bytes (and at the end)."""
DONE_FORMAT = "copycat.distcp.done/1"
CHECKSUMS = ("md5", "sha256", "none")

# Exceptions that mean a bug, not bad data or a failing filesystem: raised, never reported as a failed file.
_PROGRAMMING_ERRORS = (TypeError, AttributeError, NameError, AssertionError, KeyError, IndexError, ImportError,
                       NotImplementedError, RecursionError)


class _SourceChanged(Exception):
    """The source has more or fewer bytes than the listing said."""


class _SourceError(Exception):
    """Reading the source failed (kept apart from codec errors, which are OSErrors too)."""


class _SourceReader(conv._Reader):
    """Reads at most ``limit`` bytes of ``f`` (the listed size): hashes them, counts them, reports
    progress, and raises :class:`_SourceChanged` as soon as there are more bytes than expected."""

    def __init__(self, f, origin: str, limit: int, hashers: Iterable, progress: Callable[[int], Any] | None,
                 strict_end: bool = True):
        super().__init__()
        self._f, self._origin, self._limit = f, origin, limit
        self._hashers = list(hashers)
        self._progress, self._next_progress = progress, PROGRESS_EVERY
        self._strict_end = strict_end  # the range ends at the end of the file: a byte more means it grew
        self.count = 0
        self._eof = False

    def _read(self, n: int) -> bytes:
        if self._eof:
            return b""
        left = self._limit - self.count
        if left <= 0 and not self._strict_end:
            self._eof = True
            return b""
        try:
            b = self._f.read(min(n, left) if left > 0 else 1)
        except Exception as e:
            if isinstance(e, _PROGRAMMING_ERRORS):
                raise
            raise _SourceError(f"reading {self._origin} failed: {conv._describe(e)}") from e
        if left <= 0:
            if b:
                raise _SourceChanged(f"{self._origin} changed during the copy: it has more than the "
                                     f"{self._limit} bytes listed")
            self._eof = True
            return b""
        if not b:
            self._eof = True
            return b""
        for h in self._hashers:
            h.update(b)
        self.count += len(b)
        if self._progress is not None and self.count >= self._next_progress:
            self._next_progress = self.count + PROGRESS_EVERY
            self._progress(self.count)
        return b


# --------------------------------------------------------------------------- helpers


def _result(unit_or_file, part: int, parts: int) -> dict[str, Any]:
    f = unit_or_file.file if isinstance(unit_or_file, WorkUnit) else unit_or_file
    return {"file": f.id, "origin": f.origin, "destination": f.destination, "dataset": f.dataset,
            "file_set": f.file_set, "part": part, "parts": parts, "status": "ok", "error": None,
            "bytes_read": 0, "bytes_written": 0, "bytes_reused": 0, "seconds": 0.0}


def _checksum_algorithm(config: dict) -> str | None:
    algo = str(config.get("checksum") or "md5").lower()
    if algo not in CHECKSUMS:
        raise ValueError(f"checksum must be one of {CHECKSUMS}, not {algo!r}")
    return None if algo == "none" else algo


def parse_checksum(value: str | None) -> tuple[str, str] | None:
    """``"md5:<hex>"`` -> ``("md5", "<hex>")``; a bare hex digest of 32 / 64 characters is taken as
    md5 / sha256; ``None`` (or anything else) -> ``None`` (nothing to verify against)."""
    if not value:
        return None
    algo, sep, digest = str(value).partition(":")
    if not sep:
        algo, digest = {32: "md5", 64: "sha256"}.get(len(value), ""), value
    algo, digest = algo.strip().lower(), digest.strip().lower()
    if algo not in hashlib.algorithms_available or not digest or any(c not in "0123456789abcdef" for c in digest):
        return None
    return algo, digest


def _hashers(config: dict, f: CopyableFile) -> tuple[dict[str, Any], str | None, tuple[str, str] | None]:
    """The hash objects to feed, the configured algorithm, and what to verify (algorithm, digest)."""
    algo = _checksum_algorithm(config)
    if algo is None:
        return {}, None, None
    hashers = {algo: hashlib.new(algo)}
    expected = parse_checksum(f.checksum)
    if expected and expected[0] not in hashers:
        hashers[expected[0]] = hashlib.new(expected[0])
    return hashers, algo, expected


def _verify(f: CopyableFile, bytes_read: int, hashers: dict, algo: str | None,
            expected: tuple[str, str] | None) -> str | None:
    """The computed checksum ("algo:hex", None without one); raises when the size or the
    checksum is not the source's."""
    if bytes_read != f.size:
        raise _SourceChanged(f"{f.origin} changed during the copy: read {bytes_read} bytes, "
                             f"the listing said {f.size}")
    computed = f"{algo}:{hashers[algo].hexdigest()}" if algo else None
    if expected:
        got = hashers[expected[0]].hexdigest()
        if got != expected[1]:
            raise conv.ConversionError(f"checksum mismatch for {f.origin}: the source's is "
                                       f"{expected[0]}:{expected[1]}, the bytes read give {expected[0]}:{got}")
    return computed


def _tmp_name(path: str, attempt: str) -> str:
    head, name = posixpath.split(path)
    return posixpath.join(head, f".{name}.{attempt}.tmp")


def _rm_quietly(fs, path: str, recursive: bool = False) -> None:
    try:
        if fs.exists(path):
            fs.rm(path, recursive=recursive)
    except Exception as e:  # noqa: BLE001 - cleanup is best effort
        if isinstance(e, _PROGRAMMING_ERRORS):
            raise
        log.warning("could not remove %s: %s", path, e)


class _Writer:
    """Writes outputs under a staging directory: temp name, then rename."""

    def __init__(self, fs, attempt: str):
        self.fs, self.attempt = fs, attempt
        self._dirs: set[str] = set()
        self.tmp: str | None = None

    def _mkdir(self, path: str) -> None:
        d = posixpath.dirname(path)
        if d and d not in self._dirs:
            self.fs.makedirs(d, exist_ok=True)
            self._dirs.add(d)

    def _commit(self, final: str) -> None:
        self.fs.mv(self.tmp, final)
        self.tmp = None

    def write_stream(self, final: str, src) -> int:
        self._mkdir(final)
        self.tmp = _tmp_name(final, self.attempt)
        with self.fs.open(self.tmp, "wb") as out:
            n = conv.copy_stream(src, out.write, CHUNK)
        self._commit(final)
        return n

    def write_bytes(self, final: str, data: bytes) -> None:
        self._mkdir(final)
        self.tmp = _tmp_name(final, self.attempt)
        self.fs.pipe_file(self.tmp, data)
        self._commit(final)

    def copy_file(self, src: str, final: str) -> int:
        self._mkdir(final)
        self.tmp = _tmp_name(final, self.attempt)
        with self.fs.open(src, "rb") as fin, self.fs.open(self.tmp, "wb") as out:
            n = conv.copy_stream(fin, out.write, CHUNK)
        self._commit(final)
        return n

    def discard(self) -> None:
        if self.tmp:
            _rm_quietly(self.fs, self.tmp)
            self.tmp = None


def read_done_marker(target_fs, staging: Staging, f: CopyableFile) -> dict | None:
    """The done marker of ``f`` if it exists and names ``f.id`` (the file is staged), else None."""
    try:
        marker = json.loads(target_fs.cat_file(staging.done_marker(f)))
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as e:
        log.warning("unreadable done marker of %s (%s): copying again", f.origin, e)
        return None
    return marker if isinstance(marker, dict) and marker.get("id") == f.id else None


def _write_marker(writer: _Writer, staging: Staging, f: CopyableFile, outputs: list[dict], checksum: str | None,
                  bytes_read: int, parts: int) -> None:
    marker = {"format": DONE_FORMAT, "id": f.id, "origin": f.origin, "destination": f.destination,
              "outputs": outputs, "checksum": checksum, "source_checksum": f.checksum, "bytes_read": bytes_read,
              "size": f.size, "converters": list(f.converters), "parts": parts, "staged_at": time.time()}
    writer.write_bytes(staging.done_marker(f), json.dumps(marker, sort_keys=True).encode("utf-8"))


def _output_path(destination: str, relative: str) -> str:
    return posixpath.join(destination, relative) if relative else destination


def _is_failure(e: BaseException) -> bool:
    return not isinstance(e, _PROGRAMMING_ERRORS)


def _message(e: BaseException, f: CopyableFile) -> str:
    if isinstance(e, (conv.ConversionError, _SourceChanged, _SourceError)):
        return str(e)
    if isinstance(e, FileNotFoundError):
        return f"{f.origin}: file not found ({e})"
    return f"{f.origin}: {conv._describe(e)}"


# --------------------------------------------------------------------------- whole files


class _Tree:
    """The outputs of one file (paths relative to its destination), checked for a path that is
    both a file and a directory (possible in an archive; on a filesystem one would land inside
    the other)."""

    def __init__(self, origin: str):
        self.origin = origin
        self.files: dict[str, int] = {}
        self.dirs: set[str] = set()

    def add(self, rel: str, entry: str | None = None) -> None:
        parents = []
        head = posixpath.dirname(rel)
        while head:
            parents.append(head)
            head = posixpath.dirname(head)
        clash = rel if rel in self.dirs else next((p for p in parents if p in self.files), None)
        if clash is not None:
            raise conv.ConversionError(f"archive {self.origin}: entry {entry or rel!r} needs {clash!r} to be both a "
                                       "file and a directory; refused")
        self.dirs.update(parents)


def _materialise_links(writer: _Writer, stage_root: str, tree: _Tree, links: list[tuple[str, conv.Link]]) -> None:
    """Copy link targets (files, or directories of files) to the links' paths, following links to
    links; a link whose target is not an output of the archive fails the file."""
    files, pending = tree.files, list(links)
    while pending:
        left = []
        for path, link in pending:
            if link.target in files:
                sources = [(link.target, path)]
            else:
                prefix = link.target + "/"
                sources = [(p, path + "/" + p[len(prefix):]) for p in sorted(files) if p.startswith(prefix)]
            if not sources:
                left.append((path, link))
                continue
            for src, dst in sources:
                tree.add(dst, link.entry)
                files[dst] = writer.copy_file(posixpath.join(stage_root, src), posixpath.join(stage_root, dst))
        if len(left) == len(pending):
            path, link = left[0]
            raise conv.ConversionError(
                f"archive {tree.origin}: {link.kind} entry {link.entry!r} -> {link.target!r}: its target is not a file or "
                "directory of the archive (or links form a cycle); links are copied as files, so it cannot be")
        pending = left


def _copy_whole(unit: WorkUnit, source_fs, target_fs, staging: Staging, config: dict, result: dict,
                progress) -> None:
    f = unit.file
    file_dir = staging.file_dir(f)
    stage_root = posixpath.join(file_dir, f.destination)
    hashers, algo, expected = _hashers(config, f)
    writer = _Writer(target_fs, secrets.token_hex(4))
    tree = _Tree(f.origin)
    links: list[tuple[str, conv.Link]] = []
    reader = None
    try:
        # leftovers of an attempt that died before its marker: never mixed with this attempt's outputs
        _rm_quietly(target_fs, file_dir, recursive=True)
        with source_fs.open(f.origin, "rb") as raw:
            reader = _SourceReader(raw, f.origin, f.size, hashers.values(), progress)
            for rel, out in conv.open_outputs(reader, f.origin, f.converters, config.get("encryption.key")):
                tree.add(rel, getattr(out, "entry", None))
                if isinstance(out, conv.Link):
                    links.append((rel, out))
                    continue
                tree.files[rel] = writer.write_stream(posixpath.join(stage_root, rel) if rel else stage_root, out)
            conv.drain(reader, CHUNK)
        if links:
            _materialise_links(writer, stage_root, tree, links)
        result["bytes_read"] = reader.count
        computed = _verify(f, reader.count, hashers, algo, expected)
        outputs = [{"path": _output_path(f.destination, rel), "size": size}
                   for rel, size in sorted(tree.files.items())]
        _write_marker(writer, staging, f, outputs, computed, reader.count, 1)
        result["bytes_written"] = sum(tree.files.values())
        if progress is not None:
            progress(reader.count)
    except BaseException as e:
        writer.discard()
        if reader is not None:
            result["bytes_read"] = reader.count
        if not _is_failure(e) or not isinstance(e, Exception):
            raise
        _rm_quietly(target_fs, file_dir, recursive=True)
        result.update(status="failed", error=_message(e, f), bytes_written=0)


# --------------------------------------------------------------------------- split files


def _copy_part(unit: WorkUnit, source_fs, target_fs, staging: Staging, result: dict, progress) -> None:
    f = unit.file
    length = unit.bytes if unit.length >= 0 else f.size - unit.offset
    part = staging.part_path(f, unit.part)
    try:
        if target_fs.exists(part) and target_fs.size(part) == length:
            result.update(status="reused", bytes_reused=length)
            return
    except FileNotFoundError:
        pass
    writer = _Writer(target_fs, secrets.token_hex(4))
    reader = None
    try:
        with source_fs.open(f.origin, "rb") as raw:
            if unit.offset:
                raw.seek(unit.offset)
            reader = _SourceReader(raw, f.origin, length, (), progress,
                                   strict_end=unit.offset + length >= f.size)
            n = writer.write_stream(part, reader)
            conv.drain(reader, CHUNK)  # the last part: one byte more means the file grew
        result["bytes_read"] = reader.count
        if n != length:
            raise _SourceChanged(f"{f.origin} changed during the copy: part {unit.part} of {unit.parts} "
                                 f"(bytes {unit.offset}-{unit.offset + length}) has only {n} bytes")
        result["bytes_written"] = n
        if progress is not None:
            progress(n)
    except BaseException as e:
        writer.discard()
        if reader is not None:
            result["bytes_read"] = reader.count
        if not _is_failure(e) or not isinstance(e, Exception):
            raise
        _rm_quietly(target_fs, part)
        result.update(status="failed", error=_message(e, f), bytes_written=0)


def _expected_parts(f: CopyableFile, config: dict, parts: int | None) -> int:
    if parts:
        return int(parts)
    split = int(config.get("block.split.size") or 0)
    if split <= 0:
        raise ValueError(f"finish_split({f.origin}): pass parts= or set block.split.size")
    return max(1, math.ceil(f.size / split))


def finish_split(f: CopyableFile, target_fs, staging: Staging, config: dict, *, parts: int | None = None,
                 progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Concatenate the staged parts of split file ``f`` (run where the plan was made, before
    publishing its file set).

    ``parts``: how many parts the plan cut it into (default: ``ceil(f.size /
    block.split.size)``). Streams parts ``0..parts-1`` in order into the staged output
    (temp + rename), checks that the total is ``f.size`` and the checksum
    (``checksum`` of the config) against ``f.checksum`` when known, writes the done
    marker, then removes ``_parts``. Already finished (marker there): ``status
    "reused"``. A missing part, a wrong total or checksum: ``status "failed"`` with an
    error naming the file (and the missing parts); the parts stay for inspection,
    the next run copies only what is missing. Returns the same dict as
    :func:`copy_unit` (``part`` is None)."""
    started = time.monotonic()
    n_parts = _expected_parts(f, config, parts)
    result = _result(f, None, n_parts)
    if read_done_marker(target_fs, staging, f) is not None:
        result.update(status="reused", bytes_reused=f.size, seconds=round(time.monotonic() - started, 3))
        return result
    writer = _Writer(target_fs, secrets.token_hex(4))
    try:
        hashers, algo, expected = _hashers(config, f)
        paths = [staging.part_path(f, k) for k in range(n_parts)]
        missing = [k for k, p in enumerate(paths) if not target_fs.exists(p)]
        if missing:
            raise conv.ConversionError(f"{f.origin}: part(s) {', '.join(map(str, missing))} of {n_parts} are not "
                                       "staged; the file cannot be assembled")
        sizes = [target_fs.size(p) for p in paths]
        if sum(sizes) != f.size:
            raise _SourceChanged(f"{f.origin}: its {n_parts} staged parts hold {sum(sizes)} bytes, the listing said "
                                 f"{f.size} (the file changed during the copy)")
        final = posixpath.join(staging.file_dir(f), f.destination)
        writer._mkdir(final)
        writer.tmp = _tmp_name(final, writer.attempt)
        total = 0
        with target_fs.open(writer.tmp, "wb") as out:
            for p in paths:
                with target_fs.open(p, "rb") as fin:
                    reader = _SourceReader(fin, p, f.size - total, hashers.values(), None)
                    total += conv.copy_stream(reader, out.write, CHUNK)
                if progress is not None:
                    progress(total)
        result["bytes_read"] = total
        computed = _verify(f, total, hashers, algo, expected)
        writer._commit(final)
        _write_marker(writer, staging, f, [{"path": f.destination, "size": total}], computed, total, n_parts)
        result["bytes_written"] = total
        _rm_quietly(target_fs, posixpath.join(staging.file_dir(f), PARTS_DIR), recursive=True)
    except BaseException as e:
        writer.discard()
        if not _is_failure(e) or not isinstance(e, Exception):
            raise
        result.update(status="failed", error=_message(e, f), bytes_written=0)
    result["seconds"] = round(time.monotonic() - started, 3)
    return result


# --------------------------------------------------------------------------- entry point


def copy_unit(unit: WorkUnit, source_fs, target_fs, staging: Staging, config: dict, *,
              progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Copy one work unit into staging; never raises for a problem of the file's data or of the
    filesystems (bugs do raise).

    ``source_fs``/``target_fs``: fsspec filesystems; ``unit.file.origin`` is a path on
    the source, ``staging`` is rooted at the target root. ``config``: the copy job's
    (parsed) keys; used here: ``checksum`` (md5 | sha256 | none, default md5) and
    ``encryption.key``. ``progress(n)``: called with the unit's source bytes read so
    far about every 64 MiB, and at the end.

    Returns ``{"file": id, "origin", "destination", "dataset", "file_set", "part",
    "parts", "status": "ok" | "reused" | "failed", "error": None | str,
    "bytes_read", "bytes_written", "bytes_reused", "seconds"}``. ``bytes_read`` counts
    source bytes, ``bytes_written`` staged bytes (after converters), ``bytes_reused``
    the unit's bytes when it was already staged. See the module docstring for
    what is staged where."""
    if not isinstance(unit, WorkUnit):
        raise TypeError(f"copy_unit needs a WorkUnit, not {type(unit).__name__}")
    f = unit.file
    started = time.monotonic()
    split = unit.parts > 1
    if split and f.converters:
        raise ValueError(f"{f.origin}: a split file cannot have converters ({', '.join(f.converters)})")
    _checksum_algorithm(config)  # a bad value is a bug of the caller: config validation rejects it
    result = _result(unit, unit.part, unit.parts)
    if read_done_marker(target_fs, staging, f) is not None:
        result.update(status="reused", bytes_reused=unit.bytes)
    elif split:
        _copy_part(unit, source_fs, target_fs, staging, result, progress)
    else:
        _copy_whole(unit, source_fs, target_fs, staging, config, result, progress)
    result["seconds"] = round(time.monotonic() - started, 3)
    return result
