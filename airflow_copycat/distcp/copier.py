"""Copy one work unit into staging -- the byte-moving part of Distcp, run by a task.

Gobblin's ``FileAwareInputStreamDataWriter`` streams a file into a task staging
directory, checks the bytes against the expected length, and on a retry
recovers a file an earlier attempt had already persisted. The same here, on any
pair of fsspec filesystems, with a marker that makes "staged" a fact one can
test:

**A file is staged iff** ``staging.done_marker(f)`` **exists** (and names ``f.id``) --
or, for a plain file (no converters, one part) on a local target, which is
staged flat as ``<set dir>/<file id>.data``, iff a done journal of its set dir
records it and the data file has the recorded size (:mod:`.staged`; format
``copycat.distcp.done/2``, the fields below plus ``"staged"``).
The marker (the record) is written last, after every output has been renamed into place,
so no reader ever takes a partial output for a staged one. Its JSON::

    {"format": "copycat.distcp.done/1", "id": f.id, "origin": ..., "destination": ...,
     "outputs": [{"path": <relative to the target root>, "size": <bytes>}, ...],
     "checksum": "md5:<hex>" | "sha256:<hex>" | null,   # computed over the source bytes
     "source_checksum": f.checksum, "bytes_read": <source bytes read>, "size": f.size,
     "converters": [...], "parts": <k for a split file, else 1>}

Attempts: a unit may be copied by several attempts at once (a retried task
whose first attempt still runs, Spark speculation). Each attempt writes only
temporaries of its own, ``staging.file_dir(f)/_attempt-<time>-<random>-<n>``
(:mod:`.attempt`), and renames them to their final names only once the whole
file is checked (size, checksum); a final name thus only ever receives the
complete output of this file id -- the same bytes whichever attempt wrote it
(or, for ``encrypt``, an equally valid ciphertext of them) -- so attempts
committing the same name concurrently is harmless, and no attempt removes a
final name (but to replace it, where a rename does not overwrite), a marker or
another attempt's temporaries. On failure (or success) an attempt removes the
temporaries it has not renamed; those of an attempt that died stay until the
publisher drops the file's staging directory.

Whole file (``parts == 1``): the source is streamed (4 MiB reads) through the
file's converters (:mod:`.converters`) -- a file without converters from the
local disk to the local disk by :mod:`.localcopy` instead (``copy_file_range``,
each block hashed as read back from the target; the same bytes, checksums, names
and errors) -- into temporaries (:mod:`.attempt`), then renamed to
``staging.file_dir(f)/<destination>`` -- for ``untar``, to the directory's entries
below it. The checksum (``checksum``: md5, sha256 or none) of the *source bytes*
is computed while they are read and compared with ``f.checksum`` when the
listing has one; the bytes read must equal ``f.size`` (else the file changed
during the copy). What converters may expand to is bounded by ``untar.max.bytes``,
``untar.max.entries`` and ``decompress.max.ratio`` (:class:`.converters.Limits`; link
copies count too): past a bound the file fails, the error naming the archive,
the entry and the key.

Split file (``parts > 1``): part ``k`` is the byte range ``[offset, offset+length)``
copied to ``staging.part_path(f, k)``, with its record ``<part>.json``::

    {"format": "copycat.distcp.part/1", "id": f.id, "part": k, "parts": n, "offset": ..., "length": ...,
     "digest": "md5:<hex>" | null}      # ("pending": true while the part is being replaced)

A part's identity is its byte range: a part is reused only when its record names
the same range of the same file id and its size is the length -- never a part of
another cut (a changed ``block.split.size``) that happens to have the same
length. Replacing a part of another range first marks its record pending, so
a crash never leaves bytes under a record that does not describe them.
:func:`finish_split`, run by the publisher where the plan was made, checks that
the records tile ``[0, f.size)`` in order, concatenates the parts into the staged
output verifying each part's digest and the whole checksum, and writes the
marker.

Reuse: a unit whose file is staged (in either layout, whichever version staged it) is not copied again
(``status="reused"``, ``bytes_read`` 0), so a rerun after a failure copies only
what is not staged yet. The marker is trusted: publishing moves the outputs
away, so it is the publisher's log, not this module, that knows what happened
after.

Permissions and modification times are set by the publisher on the final files.

Why over 500 lines: copying one work unit is one sequence whose steps share the attempt's
state -- the attempt directory, the converters' stream, the checksum, splits and their
``_parts``, the read-back check -- and the exactly-once rules above are easier to check in one
place. The local fast path is already apart (:mod:`.localcopy`, :mod:`.staged`). Issue 15's
one-publish-engine work moves split handling (``finish_split`` and the parts) into a module of
its own.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import posixpath
import time
from typing import Any, Callable, Iterable

from ..storage import is_local
from . import converters as conv
from . import localcopy
from .attempt import Attempt as _Attempt
from .attempt import rm_quietly as _rm_quietly
from .encryption import EncryptionKeys
from .localcopy import PROGRAMMING_ERRORS as _PROGRAMMING_ERRORS
from .localcopy import SourceChanged as _SourceChanged
from .localcopy import SourceError as _SourceError
from .model import PARTS_DIR, CopyableFile, Staging, WorkUnit
from .staged import FLAT_DONE_FORMAT, Session, SetDir, data_name, flat_layout

log = logging.getLogger("airflow_copycat.distcp")

CHUNK = 4 << 20
"""Bytes per read and write."""
PROGRESS_EVERY = 64 << 20
"""``progress(bytes_so_far)`` is called after about this many source bytes (and at the end)."""
DONE_FORMAT = "copycat.distcp.done/1"
CHECKSUMS = ("md5", "sha256", "none")


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
                raise localcopy.more_than_listed(self._origin, self._limit)
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


def read_done_marker(target_fs, staging: Staging, f: CopyableFile) -> dict | None:
    """The done record of ``f`` if it is staged, in either layout (flat with a journal record, see
    :mod:`.staged`; or in its file dir, with a ``_done.json`` naming ``f.id``), else None."""
    if flat_layout(target_fs, f):
        record = SetDir.scan(staging.file_set_dir(f.file_set)).staged(f)
        if record is not None:
            return record
    return _read_marker_file(target_fs, staging, f)


def _read_marker_file(target_fs, staging: Staging, f: CopyableFile) -> dict | None:
    """The ``_done.json`` of ``f`` (layout 1) if it exists and names ``f.id``, else None."""
    try:
        marker = json.loads(target_fs.cat_file(staging.done_marker(f)))
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as e:
        log.warning("unreadable done marker of %s (%s): copying again", f.origin, e)
        return None
    return marker if isinstance(marker, dict) and marker.get("id") == f.id else None


def _done_record(f: CopyableFile, outputs: list[dict], checksum: str | None, bytes_read: int,
                 parts: int) -> dict[str, Any]:
    return {"format": DONE_FORMAT, "id": f.id, "origin": f.origin, "destination": f.destination,
            "outputs": outputs, "checksum": checksum, "source_checksum": f.checksum, "bytes_read": bytes_read,
            "size": f.size, "converters": list(f.converters), "parts": parts, "staged_at": time.time()}


def _write_marker(attempt: _Attempt, staging: Staging, f: CopyableFile, outputs: list[dict],
                  checksum: str | None, bytes_read: int, parts: int) -> None:
    marker = _done_record(f, outputs, checksum, bytes_read, parts)
    attempt.put_bytes(staging.done_marker(f), json.dumps(marker, sort_keys=True).encode("utf-8"))


def staged_record(session: Session, target_fs, staging: Staging, f: CopyableFile) -> dict | None:
    """The done record of ``f`` if it is staged, in either layout: flat with a journal record
    (:mod:`.staged`), or in its file dir with a ``_done.json`` (looked for only where the session's
    scan found the file dir, or on other filesystems)."""
    record = session.flat_record(f)
    if record is None and session.may_have_file_dir(f):
        record = _read_marker_file(target_fs, staging, f)
    return record


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


def _ancestors(path: str):
    head = posixpath.dirname(path)
    while head:
        yield head
        head = posixpath.dirname(head)


def _materialise_links(attempt: _Attempt, tree: _Tree, temps: dict[str, str], links: list[tuple[str, conv.Link]],
                       limits: conv.Limits) -> None:
    """Copy link targets (files, or directories of files) to the links' paths, following links to
    links; a link whose target is not an output of the archive fails the file. Every copy counts
    as an entry and its bytes against ``limits`` (checked before it is made).

    A link is resolved once its target is a file, or a directory with files below it (then it
    stands for the files below it at that moment), in archive order; a link whose target is not
    there yet waits until a file appears at or below its target. Each link is looked at most
    twice and each file added once to an index of the directories above it: O(outputs x depth
    + links), whatever the number of links."""
    files = tree.files
    below: dict[str, list[str]] | None = None  # directory -> the files below it, built at the first directory link
    waiting: dict[str, list[int]] = {}  # target -> links waiting for it
    resolved = [False] * len(links)

    def added(path: str) -> list[int]:
        woken = waiting.pop(path, [])
        for d in _ancestors(path):
            if below is not None:
                below.setdefault(d, []).append(path)
            if waiting:
                woken.extend(waiting.pop(d, ()))
        return woken

    queue = list(range(len(links)))
    while queue:
        woken_all: list[int] = []
        for i in queue:
            if resolved[i]:
                continue
            path, link = links[i]
            if link.target in files:
                sources = [(link.target, path)]
            else:
                if below is None:
                    below = {}
                    for p in files:
                        for d in _ancestors(p):
                            below.setdefault(d, []).append(p)
                prefix = len(link.target) + 1
                sources = [(p, path + "/" + p[prefix:]) for p in below.get(link.target, ())]
            if not sources:
                waiting.setdefault(link.target, []).append(i)
                continue
            resolved[i] = True
            for src, dst in sources:
                size = files[src]
                limits.add_entry(tree.origin, link.entry, f"{link.kind} entry")
                limits.add_bytes(size, tree.origin, link.entry, f"{link.kind} entry")
                tree.add(dst, link.entry)
                temps[dst], files[dst] = attempt.copy(temps[src], CHUNK)
                woken_all.extend(added(dst))
        queue = woken_all
    left = [i for i, done in enumerate(resolved) if not done]
    if left:
        path, link = links[left[0]]
        raise conv.ConversionError(
            f"archive {tree.origin}: {link.kind} entry {link.entry!r} -> {link.target!r}: its target is not a file or "
            "directory of the archive (or links form a cycle); links are copied as files, so it cannot be")


def _both_local(source_fs, target_fs) -> bool:
    """Whether the fast path (:mod:`.localcopy`) can copy between these filesystems: both the local disk."""
    return is_local(source_fs) and is_local(target_fs)


def _copy_whole(unit: WorkUnit, source_fs, target_fs, staging: Staging, config: dict, result: dict,
                progress, fast: bool, session: Session) -> None:
    f = unit.file
    flat = flat_layout(target_fs, f)
    if flat:  # <set dir>/<file id>.data, recorded in the session's journal (see .staged)
        file_dir = staging.file_set_dir(f.file_set)
        stage_root = posixpath.join(file_dir, data_name(f))
    else:
        file_dir = staging.file_dir(f)
        stage_root = posixpath.join(file_dir, f.destination)
    hashers, algo, expected = _hashers(config, f)
    limits = conv.Limits.from_config(config, input_bytes=f.size)
    attempt = _Attempt(target_fs, file_dir, session.dirs if flat else None)
    tree = _Tree(f.origin)
    temps: dict[str, str] = {}  # output (relative to the destination) -> this attempt's temporary
    links: list[tuple[str, conv.Link]] = []
    reader = None
    try:
        if fast and not f.converters and _both_local(source_fs, target_fs):  # the same, proven equal
            reader = localcopy.RangeCopy(f.origin, f.size, hashers.values(), progress, PROGRESS_EVERY)
            tree.add("")
            temps[""] = attempt.tmp()
            tree.files[""] = reader.run(source_fs._strip_protocol(f.origin), 0, temps[""])
        else:
            with source_fs.open(f.origin, "rb") as raw:
                reader = _SourceReader(raw, f.origin, f.size, hashers.values(), progress)
                outputs = conv.open_outputs(reader, f.origin, f.converters, EncryptionKeys.from_config(config),
                                                  limits)
                for rel, out in outputs:
                    tree.add(rel, getattr(out, "entry", None))
                    if isinstance(out, conv.Link):
                        links.append((rel, out))
                        continue
                    if rel in temps:  # an entry twice in an archive: the last one wins, as tar does
                        attempt.drop(temps[rel])
                    temps[rel], tree.files[rel] = attempt.write_stream(out, chunk=CHUNK)
                conv.drain(reader, CHUNK)
        if links:
            _materialise_links(attempt, tree, temps, links, limits)
        result["bytes_read"] = reader.count
        computed = _verify(f, reader.count, hashers, algo, expected)
        # the whole file is right: only now do its outputs take their names, then the marker
        for rel in sorted(tree.files):
            attempt.commit(temps[rel], posixpath.join(stage_root, rel) if rel else stage_root)
        outputs = [{"path": _output_path(f.destination, rel), "size": size}
                   for rel, size in sorted(tree.files.items())]
        if flat:
            session.record(f, {**_done_record(f, outputs, computed, reader.count, 1), "format": FLAT_DONE_FORMAT,
                               "staged": data_name(f)})
        else:
            _write_marker(attempt, staging, f, outputs, computed, reader.count, 1)
        result["bytes_written"] = sum(tree.files.values())
        if progress is not None:
            progress(reader.count)
    except BaseException as e:
        if reader is not None:
            result["bytes_read"] = reader.count
        if not _is_failure(e) or not isinstance(e, Exception):
            raise
        result.update(status="failed", error=_message(e, f), bytes_written=0)
    finally:
        attempt.discard()  # this attempt's temporaries only: what other attempts staged stays


# --------------------------------------------------------------------------- split files


PART_FORMAT = "copycat.distcp.part/1"


def _part_record_path(staging: Staging, f: CopyableFile, part: int) -> str:
    return staging.part_path(f, part) + ".json"


def _read_part_record(fs, path: str) -> dict | None:
    try:
        doc = json.loads(fs.cat_file(path))
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as e:
        log.warning("unreadable part record %s (%s)", path, e)
        return None
    return doc if isinstance(doc, dict) and doc.get("format") == PART_FORMAT else None


def _same_range(record: dict | None, f: CopyableFile, offset: int, length: int) -> bool:
    """Whether ``record`` says its part holds bytes ``[offset, offset + length)`` of ``f``."""
    return (record is not None and not record.get("pending") and record.get("id") == f.id
            and record.get("offset") == offset and record.get("length") == length)


def _copy_part(unit: WorkUnit, source_fs, target_fs, staging: Staging, config: dict, result: dict,
               progress, fast: bool) -> None:
    f = unit.file
    length = unit.bytes if unit.length >= 0 else f.size - unit.offset
    part = staging.part_path(f, unit.part)
    record_path = _part_record_path(staging, f, unit.part)
    record = _read_part_record(target_fs, record_path)
    if _same_range(record, f, unit.offset, length):
        try:
            if target_fs.size(part) == length:
                result.update(status="reused", bytes_reused=length)
                return
        except FileNotFoundError:
            pass
    algo = _checksum_algorithm(config)
    hasher = hashlib.new(algo) if algo else None
    attempt = _Attempt(target_fs, staging.file_dir(f))
    reader = None
    try:
        if fast and _both_local(source_fs, target_fs):  # the same, proven equal
            reader = localcopy.RangeCopy(f.origin, length, [hasher] if hasher else (), progress, PROGRESS_EVERY,
                                         strict_end=unit.offset + length >= f.size)
            tmp = attempt.tmp()
            n = reader.run(source_fs._strip_protocol(f.origin), unit.offset, tmp)
        else:
            with source_fs.open(f.origin, "rb") as raw:
                if unit.offset:
                    raw.seek(unit.offset)
                reader = _SourceReader(raw, f.origin, length, (), progress,
                                       strict_end=unit.offset + length >= f.size)
                tmp, n = attempt.write_stream(reader, [hasher] if hasher else (), CHUNK)
                conv.drain(reader, CHUNK)  # the last part: one byte more means the file grew
        result["bytes_read"] = reader.count
        if n != length:
            raise _SourceChanged(f"{f.origin} changed during the copy: part {unit.part} of {unit.parts} "
                                 f"(bytes {unit.offset}-{unit.offset + length}) has only {n} bytes")
        # A part's identity is its byte range. Unless the record already says this range (then the bytes
        # there are these), the record is first made "pending" -- so that a crash between the rename and
        # the final record never leaves a part whose record names another range, or none.
        doc = {"format": PART_FORMAT, "id": f.id, "part": unit.part, "parts": unit.parts, "offset": unit.offset,
               "length": length}
        if not _same_range(record, f, unit.offset, length):
            attempt.put_bytes(record_path, json.dumps({**doc, "pending": True}).encode("utf-8"))
        attempt.commit(tmp, part)
        doc["digest"] = f"{algo}:{hasher.hexdigest()}" if hasher else None
        attempt.put_bytes(record_path, json.dumps(doc).encode("utf-8"))
        result["bytes_written"] = n
        if progress is not None:
            progress(n)
    except BaseException as e:
        if reader is not None:
            result["bytes_read"] = reader.count
        if not _is_failure(e) or not isinstance(e, Exception):
            raise
        result.update(status="failed", error=_message(e, f), bytes_written=0)
    finally:
        attempt.discard()  # this attempt's temporaries only: parts other attempts staged stay


def _expected_parts(f: CopyableFile, config: dict, parts: int | None) -> int:
    if parts:
        return int(parts)
    split = int(config.get("block.split.size") or 0)
    if split <= 0:
        raise ValueError(f"finish_split({f.origin}): pass parts= or set block.split.size")
    return max(1, math.ceil(f.size / split))


def _legacy_records(f: CopyableFile, config: dict, n_parts: int, sizes: list[int]) -> list[dict | None]:
    """Records for parts that have none at all (staged by a copier before part records, or by
    hand): accepted only when ``block.split.size`` is known and every part has exactly the
    length of its planned range -- which, with two parts or more, means they were cut with the
    same size, so are those ranges. Else ``[None, ...]`` (the parts are copied again)."""
    split = int(config.get("block.split.size") or 0)
    if split <= 0 or n_parts != max(1, math.ceil(f.size / split)):
        return [None] * n_parts
    planned = [(k * split, min(split, f.size - k * split)) for k in range(n_parts)]
    if [length for _, length in planned] != sizes:
        return [None] * n_parts
    log.warning("%s: its %d staged parts have no records of their byte ranges (staged by an older copycat); "
                "taken as the ranges of block.split.size=%d, which their lengths match", f.origin, n_parts, split)
    return [{"format": PART_FORMAT, "id": f.id, "part": k, "offset": o, "length": n, "digest": None}
            for k, (o, n) in enumerate(planned)]


def finish_split(f: CopyableFile, target_fs, staging: Staging, config: dict, *, parts: int | None = None,
                 progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Concatenate the staged parts of split file ``f`` (run where the plan was made, before
    publishing its file set).

    ``parts``: how many parts the plan cut it into (default: ``ceil(f.size /
    block.split.size)``). Each part ``k`` must have its record (``<part>.json``, written by
    the copy after the part) naming ``f.id`` and a byte range that starts where part
    ``k-1`` ended and is as long as the part, and the ranges must end at ``f.size`` -- so
    parts of another cut (a changed ``block.split.size``) are never assembled. Streams parts
    ``0..parts-1`` in order into the staged output (temp + rename), checking each part
    against the digest in its record and the whole against ``f.checksum`` (``checksum``
    of the config) when known; writes the done marker, then removes ``_parts``. Already
    finished (marker there): ``status "reused"``. A missing part or record, a range that
    does not fit, a wrong total or checksum: ``status "failed"`` with an error naming
    the file (and the parts); the parts stay (the next run copies only what is missing or
    of another range), except a part whose bytes do not match its digest, which is removed
    so that the next run copies it again. Returns the same dict as :func:`copy_unit`
    (``part`` is None)."""
    started = time.monotonic()
    n_parts = _expected_parts(f, config, parts)
    result = _result(f, None, n_parts)
    if _read_marker_file(target_fs, staging, f) is not None:  # a split file is never staged flat
        result.update(status="reused", bytes_reused=f.size, seconds=round(time.monotonic() - started, 3))
        return result
    attempt = _Attempt(target_fs, staging.file_dir(f))
    try:
        hashers, algo, expected = _hashers(config, f)
        paths = [staging.part_path(f, k) for k in range(n_parts)]
        missing = [k for k, p in enumerate(paths) if not target_fs.exists(p)]
        if missing:
            raise conv.ConversionError(f"{f.origin}: part(s) {', '.join(map(str, missing))} of {n_parts} are not "
                                       "staged; the file cannot be assembled")
        records = [_read_part_record(target_fs, _part_record_path(staging, f, k)) for k in range(n_parts)]
        sizes = [target_fs.size(p) for p in paths]
        if not any(records):
            records = _legacy_records(f, config, n_parts, sizes)
            if not any(records):
                raise conv.ConversionError(
                    f"{f.origin}: its {n_parts} staged parts have no records of their byte ranges (staged by an "
                    "older copycat, or by hand) and their lengths are not those of the planned ranges of "
                    "block.split.size; the next run copies them again")
        offset = 0
        for k, (size, record) in enumerate(zip(sizes, records)):
            if record is None or record.get("id") != f.id or record.get("pending"):
                raise conv.ConversionError(f"{f.origin}: part {k} of {n_parts} has no record of its byte range (its "
                                           "copy did not finish); the next run copies it again")
            if record.get("offset") != offset or record.get("length") != size:
                raise conv.ConversionError(
                    f"{f.origin}: part {k} of {n_parts} holds bytes {record.get('offset')}-"
                    f"{(record.get('offset') or 0) + (record.get('length') or 0)} ({size} bytes staged), not bytes "
                    f"from {offset} on (parts of another block.split.size?); the next run copies it again")
            offset += size
        if offset != f.size:
            raise _SourceChanged(f"{f.origin}: its {n_parts} staged parts hold {offset} bytes, the listing said "
                                 f"{f.size} (the file changed during the copy)")
        tmp = attempt.tmp()
        total = 0
        with target_fs.open(tmp, "wb") as out:
            for k, (p, record) in enumerate(zip(paths, records)):
                digest = parse_checksum(record.get("digest"))
                part_hash = hashlib.new(digest[0]) if digest else None
                with target_fs.open(p, "rb") as fin:
                    reader = _SourceReader(fin, p, record["length"], list(hashers.values()) +
                                           ([part_hash] if part_hash else []), None)
                    n = conv.copy_stream(reader, out.write, CHUNK)
                total += n
                if n != record["length"]:
                    raise _SourceChanged(f"{f.origin}: part {k} of {n_parts} has {n} bytes, its record says "
                                         f"{record['length']}")
                if part_hash is not None and part_hash.hexdigest() != digest[1]:
                    _rm_quietly(target_fs, p)
                    _rm_quietly(target_fs, _part_record_path(staging, f, k))
                    raise conv.ConversionError(
                        f"{f.origin}: staged part {k} of {n_parts} does not match the digest recorded when it was "
                        f"copied ({digest[0]}:{digest[1]}, its bytes give {digest[0]}:{part_hash.hexdigest()}); "
                        "removed: the next run copies it again")
                if progress is not None:
                    progress(total)
        result["bytes_read"] = total
        computed = _verify(f, total, hashers, algo, expected)
        attempt.commit(tmp, posixpath.join(staging.file_dir(f), f.destination))
        _write_marker(attempt, staging, f, [{"path": f.destination, "size": total}], computed, total, n_parts)
        result["bytes_written"] = total
        _rm_quietly(target_fs, posixpath.join(staging.file_dir(f), PARTS_DIR), recursive=True)
    except BaseException as e:
        if not _is_failure(e) or not isinstance(e, Exception):
            raise
        result.update(status="failed", error=_message(e, f), bytes_written=0)
    finally:
        attempt.discard()
    result["seconds"] = round(time.monotonic() - started, 3)
    return result


# --------------------------------------------------------------------------- entry point


def copy_unit(unit: WorkUnit, source_fs, target_fs, staging: Staging, config: dict, *,
              progress: Callable[[int], Any] | None = None, fast: bool = True,
              session: Session | None = None) -> dict[str, Any]:
    """Copy one work unit into staging; never raises for a problem of the file's data or of the
    filesystems (bugs do raise).

    ``source_fs``/``target_fs``: fsspec filesystems; ``unit.file.origin`` is a path on
    the source, ``staging`` is rooted at the target root. ``config``: the copy job's
    (parsed) keys; used here: ``checksum`` (md5 | sha256 | none, default md5),
    ``encryption.*`` (:class:`.encryption.EncryptionKeys`), ``untar.max.bytes``, ``untar.max.entries`` and
    ``decompress.max.ratio`` (defaults when absent). ``progress(n)``: called with the unit's source bytes read so
    far about every 64 MiB, and at the end. ``fast``: a file without converters, from the local disk to the
    local disk, is copied by :mod:`.localcopy` (``copy_file_range``, each block hashed as read back from the
    target) -- the same bytes, checksums, staged names and errors as the streaming path, which ``fast=False``
    forces (the differential tests compare the two). ``session``: the :class:`.staged.Session` of the
    units copied together (:func:`.inflight.copy_units`: its scan of what is staged, its done journals);
    ``None``: one of this call's own.

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
    own = session is None
    if own:
        session = Session(target_fs, staging)
    try:
        if staged_record(session, target_fs, staging, f) is not None:
            result.update(status="reused", bytes_reused=unit.bytes)
        elif split:
            _copy_part(unit, source_fs, target_fs, staging, config, result, progress, fast)
        else:
            _copy_whole(unit, source_fs, target_fs, staging, config, result, progress, fast, session)
    finally:
        if own:
            session.close()
    result["seconds"] = round(time.monotonic() - started, 3)
    return result
