"""Plain files staged flat, and the done journals that say they are staged (staging layout 2).

The first layout (:mod:`.copier`, still used for converted and split files, and
for every file on a target that is not the local disk) stages a file under
``<set dir>/<file id>/<destination...>`` with ``<file id>/_done.json`` beside it:
for a plain file of ``d00/s0/part.bin`` that is three directories made, a marker
file created and renamed, and at publish the marker deleted and three
directories removed -- on a local disk each ``mkdir``/``rmdir`` costs more than the
copy of a small file. A *plain* file (no converters, not split) on a *local*
target is staged instead as::

    <set dir>/<file id>.data                 the staged bytes (renamed into place once checked)
    <set dir>/_done-<session>.jsonl          done journal: one JSON line per staged file

**Contract.** A plain file ``f`` is staged (layout 2) iff a done journal of its set
dir holds a valid record with ``"id": f.id`` and ``<set dir>/<file id>.data``
exists with the record's size. The data file is renamed into place only after
the whole file was checked (size, checksum), and its record is appended after
that rename, so neither a reader nor a crash ever takes a partial copy for a
staged one (a crash between the rename and the record leaves an unrecorded data
file: not staged, copied again, replaced by the rename of the next copy). The
record has the fields of a ``_done.json`` (format ``copycat.distcp.done/2``) plus
``"staged"``: the data file's name in the set dir. A line is one ``write`` of an
``O_APPEND`` file (complete or absent for the other writers and for a killed
process); a line that is not a complete JSON record (cut short by a crash of the
machine) is ignored. Each copy session (a task's :func:`.inflight.copy_units`, or
one :func:`.copier.copy_unit` called alone) appends to journals of its own, so
sessions never write one file; several records of one id (two attempts) describe
the same bytes.

Journals are removed by :func:`compact` (the publisher, after publishing, and
:meth:`.publish.Publisher.drop_stale`) once none of their records names a file still
staged; a set dir left with nothing staged is removed whole (with the
temporaries of attempts that died).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import posixpath
import secrets
import stat
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..storage import is_local
from .attempt import ATTEMPT_PREFIX
from .model import CopyableFile, Staging

log = logging.getLogger("airflow_copycat.distcp")

DATA_SUFFIX = ".data"
"""A flat staged file: ``<set dir>/<file id>.data``."""
JOURNAL_PREFIX = "_done-"
JOURNAL_SUFFIX = ".jsonl"
FLAT_DONE_FORMAT = "copycat.distcp.done/2"


def flat_layout(target_fs, f: CopyableFile, parts: int = 1) -> bool:
    """Whether ``f`` is staged flat (layout 2): a plain file (no converters, one part) on a local target."""
    return parts <= 1 and not f.converters and is_local(target_fs)


def data_name(f: CopyableFile) -> str:
    return f.id + DATA_SUFFIX


def is_journal(name: str) -> bool:
    return name.startswith(JOURNAL_PREFIX) and name.endswith(JOURNAL_SUFFIX)


def parse_journal(raw: bytes | str) -> list[dict]:
    """The valid records of a journal's bytes, in order: complete lines holding a JSON object of
    format ``copycat.distcp.done/2`` with an id and a plain ``staged`` name; anything else is skipped."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    out = []
    for line in raw.split("\n")[:-1]:  # the part after the last newline is a line cut short
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if (isinstance(doc, dict) and doc.get("format") == FLAT_DONE_FORMAT and isinstance(doc.get("id"), str)
                and doc.get("staged") == doc["id"] + DATA_SUFFIX):
            out.append(doc)
    return out


def read_records(paths, read) -> dict[str, dict]:
    """``{file id: record}`` of the journals at ``paths``, ``read(path) -> bytes`` (a journal that
    cannot be read is logged and skipped: its files count as not staged)."""
    records: dict[str, dict] = {}
    for path in sorted(paths):
        try:
            raw = read(path)
        except FileNotFoundError:
            continue
        except OSError as e:
            log.warning("unreadable done journal %s (%s): its files are copied again", path, e)
            continue
        for doc in parse_journal(raw):
            records[doc["id"]] = doc
    return records


def record_size(record: dict) -> int | None:
    outputs = record.get("outputs")
    if isinstance(outputs, list) and len(outputs) == 1 and isinstance(outputs[0], dict):
        size = outputs[0].get("size")
        return size if isinstance(size, int) else None
    return None


@dataclass
class SetDir:
    """One level of a local set dir: flat data files (id -> size), file dirs of layout 1 (ids),
    journals, attempt temporaries, and the journals' records.

    The scan reads only the directory: a data file's size is looked at (``lstat``) and the journals
    are read (:attr:`records`) when first asked for -- :meth:`staged` of a file with a data file
    there -- so a session whose files are not staged yet (another task's are) stats and parses
    nothing. Thread safe."""

    path: str
    data: dict[str, int | None] = field(default_factory=dict)  # file id -> size (None: not looked at yet)
    dirs: set[str] = field(default_factory=set)
    journals: list[str] = field(default_factory=list)
    temps: list[str] = field(default_factory=list)
    _records: dict[str, dict] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def scan(cls, path: str, with_records: bool = True) -> "SetDir":
        """The entries of the set dir ``path`` (``with_records``: kept for callers; the journals are
        read when :attr:`records` is first asked for in any case)."""
        out = cls(path)
        try:
            entries = os.scandir(path)
        except (FileNotFoundError, NotADirectoryError):
            return out
        with entries:
            for e in entries:
                name = e.name
                try:
                    if e.is_dir(follow_symlinks=False):
                        out.dirs.add(name)
                    elif is_journal(name):
                        out.journals.append(e.path)
                    elif name.startswith(ATTEMPT_PREFIX):
                        out.temps.append(e.path)
                    elif name.endswith(DATA_SUFFIX) and e.is_file(follow_symlinks=False):
                        out.data[name[:-len(DATA_SUFFIX)]] = None
                except FileNotFoundError:
                    continue
        return out

    @property
    def records(self) -> dict[str, dict]:
        """``{file id: record}`` of the journals the scan found, read at the first call."""
        if self._records is None:
            with self._lock:
                if self._records is None:
                    self._records = read_records(self.journals, _read_local) if self.journals else {}
        return self._records

    def size(self, ident: str) -> int | None:
        """The size of the data file of ``ident`` the scan found (``None``: none, or no longer a file)."""
        if ident not in self.data:
            return None
        size = self.data[ident]
        if size is None:
            try:
                st = os.lstat(posixpath.join(self.path, ident + DATA_SUFFIX))
            except OSError:
                return None
            if not stat.S_ISREG(st.st_mode):
                return None
            size = self.data[ident] = st.st_size
        return size

    def staged(self, f: CopyableFile) -> dict | None:
        """The record of ``f`` if it is staged flat (see the module docstring), else None."""
        if f.id not in self.data:
            return None
        record = self.records.get(f.id)
        if record is None or record_size(record) != self.size(f.id):
            return None
        return record


def _read_local(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


class Session:
    """What one copy session (a task's units, or one unit alone) knows and writes about staging:
    the flat records and file dirs found in each set dir (scanned once, at the set's first unit),
    the directories known to exist, and its own done journals (opened at the first record,
    closed by :meth:`close`). Thread safe: the units in flight share one session."""

    def __init__(self, target_fs, staging: Staging):
        self.fs, self.staging = target_fs, staging
        self.local = is_local(target_fs)
        self.token = f"{int(time.time())}-{secrets.token_hex(6)}"
        self._attempts = itertools.count(1)
        self.dirs: set[str] = set()  # directories known to exist (shared with the attempts)
        self._sets: dict[str, SetDir] = {}
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()

    def attempt_token(self) -> str:
        """A token for one copy attempt of this session (:class:`.attempt.Attempt`): the session's
        random token and a count, so no two attempts share temporaries, without a random draw each."""
        return f"{self.token}-{next(self._attempts)}"

    def set_dir(self, f: CopyableFile) -> SetDir:
        path = self.staging.file_set_dir(f.file_set)
        with self._lock:
            found = self._sets.get(path)
            if found is None:
                found = self._sets[path] = SetDir.scan(path) if self.local else SetDir(path)
            return found

    def flat_record(self, f: CopyableFile) -> dict | None:
        """The done record of ``f`` staged flat when the session began (local targets only)."""
        return self.set_dir(f).staged(f) if self.local else None

    def may_have_file_dir(self, f: CopyableFile) -> bool:
        """Whether ``f`` may have a file dir of layout 1 (with its ``_done.json``): always on other
        filesystems; on the local disk, when the scan found one."""
        return not self.local or f.id in self.set_dir(f).dirs

    def record(self, f: CopyableFile, record: dict) -> None:
        """Append ``record`` (a done record of ``f``, whose data file is in place) to this session's
        journal of ``f``'s set dir, in one ``write``."""
        line = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
        set_dir = self.staging.file_set_dir(f.file_set)
        with self._lock:
            fd = self._fds.get(set_dir)
            if fd is None:
                path = posixpath.join(set_dir, f"{JOURNAL_PREFIX}{self.token}{JOURNAL_SUFFIX}")
                fd = self._fds[set_dir] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            view = memoryview(line)
            while view:  # one write for any line of a sane size; the loop only for a short write
                view = view[os.write(fd, view):]

    def close(self) -> None:
        with self._lock:
            fds, self._fds = list(self._fds.values()), {}
        for fd in fds:
            try:
                os.close(fd)
            except OSError as e:
                log.warning("closing a done journal failed: %s", e)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def compact(set_dir: str, *, drop_temps: bool) -> None:
    """Tidy a local set dir after a publish or a drop (idempotent): remove the journals none of whose
    records names a file still staged (a data file or a file dir of that id); ``drop_temps``: also
    the attempt temporaries there. A set dir with nothing staged left is removed whole (journals and
    temporaries too). Failures are logged: what stays is tidied the next time."""
    scan = SetDir.scan(set_dir, with_records=False)
    live = set(scan.data) | scan.dirs
    try:
        if not live:
            for path in scan.journals + scan.temps:
                _unlink(path)
            try:
                os.rmdir(set_dir)
            except FileNotFoundError:
                pass
            except OSError:
                pass  # something new arrived: tidied the next time
            return
        for path in scan.journals:
            records = read_records([path], _read_local)
            if not set(records) & live:
                _unlink(path)
        if drop_temps:
            for path in scan.temps:
                _unlink(path)
    except OSError as e:
        log.warning("could not tidy staging %s: %s", set_dir, e)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
