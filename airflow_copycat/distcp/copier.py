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
``untar.max.entries`` and ``decompress.max.ratio`` (:class:`.limits.Limits`; link
copies count too): past a bound the file fails, the error naming the archive,
the entry and the key.

Split file (``parts > 1``): part ``k`` is a byte range of the file, copied with a record
naming that range; :func:`~.split_copy.finish_split`, run by the publisher where the plan was
made, concatenates the parts into the staged output and writes the marker (:mod:`.split_copy`).

Reuse: a unit whose file is staged (in either layout, whichever version staged it) is not copied again
(``status="reused"``, ``bytes_read`` 0), so a rerun after a failure copies only
what is not staged yet. The marker is trusted: publishing moves the outputs
away, so it is the publisher's log, not this module, that knows what happened
after.

Permissions and modification times are set by the publisher (its log's attribute steps), never
by the copy: what a published file keeps depends on the publish that publishes it (a staged copy
reused by a later run under another ``preserve`` included).

The parts, by concept: :mod:`.reading` (the source's bytes counted, hashed and checked; the
result of a unit), :mod:`.done_markers` (the done record that makes a file staged),
:mod:`.whole_copy` (a whole file through its converters, archive links as copies) and
:mod:`.split_copy` (the parts of a split file, and :func:`~.split_copy.finish_split`).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from .done_markers import staged_record
from .model import Staging, WorkUnit
from .reading import _checksum_algorithm, _result
from .split_copy import _copy_part
from .staged import Session
from .whole_copy import _copy_whole


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
