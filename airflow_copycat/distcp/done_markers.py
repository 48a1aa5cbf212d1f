"""The done record of a staged file: what makes "staged" a fact one can test.

Contract: a file is staged iff its done record exists and names its id -- ``_done.json`` in its
file dir (format :data:`DONE_FORMAT`, written last by ``_write_marker``, after every output
took its name), or, staged flat on a local target, a record in a done journal of its set dir
(:mod:`.staged`). :func:`read_done_marker` and :func:`staged_record` return that record, or
``None`` (an unreadable marker is logged and read as ``None``: the file is copied again). The
record's fields are in the docstring of :mod:`.copier`.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from .attempt import Attempt as _Attempt
from .model import CopyableFile, Staging
from .staged import Session, SetDir, flat_layout

log = logging.getLogger("airflow_copycat.distcp")

DONE_FORMAT = "copycat.distcp.done/1"


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
