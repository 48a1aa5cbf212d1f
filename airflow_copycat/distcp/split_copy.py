"""Copying a split file: its byte ranges copied as parts, then concatenated where the plan was made.

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

Contract: ``_copy_part`` copies one part (reused when its record names the same range and its
size is the length); :func:`finish_split` assembles the parts, or says why not; both report in
the result dict of :func:`~.copier.copy_unit`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import posixpath
import time
from typing import Any, Callable

from . import localcopy
from .attempt import Attempt as _Attempt
from .attempt import rm_quietly as _rm_quietly
from .done_markers import _read_marker_file, _write_marker
from .localcopy import SourceChanged as _SourceChanged
from .model import PARTS_DIR, CopyableFile, Staging, WorkUnit
from .reading import (
    CHUNK,
    PROGRESS_EVERY,
    _both_local,
    _checksum_algorithm,
    _hashers,
    _result,
    _SourceReader,
    _verify,
    parse_checksum,
    record_failure,
)
from .streams import ConversionError, copy_stream, drain

log = logging.getLogger("airflow_copycat.distcp")

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
                drain(reader, CHUNK)  # the last part: one byte more means the file grew
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
        if not record_failure(result, e, reader, f):
            raise
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
            raise ConversionError(f"{f.origin}: part(s) {', '.join(map(str, missing))} of {n_parts} are not "
                                  "staged; the file cannot be assembled")
        records = [_read_part_record(target_fs, _part_record_path(staging, f, k)) for k in range(n_parts)]
        sizes = [target_fs.size(p) for p in paths]
        if not any(records):
            records = _legacy_records(f, config, n_parts, sizes)
            if not any(records):
                raise ConversionError(
                    f"{f.origin}: its {n_parts} staged parts have no records of their byte ranges (staged by an "
                    "older copycat, or by hand) and their lengths are not those of the planned ranges of "
                    "block.split.size; the next run copies them again")
        offset = 0
        for k, (size, record) in enumerate(zip(sizes, records)):
            if record is None or record.get("id") != f.id or record.get("pending"):
                raise ConversionError(f"{f.origin}: part {k} of {n_parts} has no record of its byte range (its "
                                      "copy did not finish); the next run copies it again")
            if record.get("offset") != offset or record.get("length") != size:
                raise ConversionError(
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
                    n = copy_stream(reader, out.write, CHUNK)
                total += n
                if n != record["length"]:
                    raise _SourceChanged(f"{f.origin}: part {k} of {n_parts} has {n} bytes, its record says "
                                         f"{record['length']}")
                if part_hash is not None and part_hash.hexdigest() != digest[1]:
                    _rm_quietly(target_fs, p)
                    _rm_quietly(target_fs, _part_record_path(staging, f, k))
                    raise ConversionError(
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
        if not record_failure(result, e, None, f):
            raise
    finally:
        attempt.discard()
    result["seconds"] = round(time.monotonic() - started, 3)
    return result
