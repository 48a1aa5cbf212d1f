"""FileStream source: one record per line of local text files (Kafka Connect's ``FileStreamSource``).

Compatible with ``org.apache.kafka.connect.file.FileStreamSourceConnector``:
keys ``file``, ``topic`` and ``batch.size`` (default 2000) mean the same, and
every record looks like Kafka's -- key ``None``, value schema ``Schema.STRING``,
value the line without its line ending, ``source_partition``
``{"filename": <path>}`` and ``source_offset`` ``{"position": <byte offset
after the line>}``. Beyond Kafka's version:

* ``file`` may be a glob (``/var/log/app/*.log``) and ``files`` a comma list of
  paths and globs. Every matched regular file is one partition; the default
  :meth:`SourceConnector.task_configs` spreads them over ``tasks.max`` tasks. A
  file that appears later is picked up by the next plan (partition discovery),
  not by a task that is already running. A literal path (no ``*?[``) is a
  partition even while the file does not exist yet; it is read once it appears.
* Offsets are byte offsets (Kafka counts characters) and carry the file's
  identity so that log rotation loses and duplicates nothing::

      {"position": 1234, "inode": 5521, "fingerprint": "<sha256 hex>", "fingerprint.length": 1024}

  ``fingerprint`` is the SHA-256 of the first ``fingerprint.length`` bytes
  (``min(size, fingerprint.bytes)`` when it was taken). An offset with only
  ``position`` (as Kafka Connect commits it) is accepted and resumed without
  the identity checks.
* Rotation: if the file at the path is not the committed one (other inode, or
  the fingerprint no longer matches), the committed file is looked up in the
  same directory by inode and fingerprint (``mv`` rotation), else by
  fingerprint alone among files at least ``position`` bytes long
  (``copytruncate`` rotation). It is read from the committed position to its
  end before the new file is read from byte 0. During a run, the old file is
  drained to end of file before switching to the new file at the path. A
  file that shrank below the position restarts at 0. Every loss is logged as a
  warning naming the file and position.
* Lines end with ``\\n``; a trailing ``\\r`` is stripped. A last line without
  its ``\\n`` is held back (the position stays before it) until the writer
  completes it. In a rotated-away file too: a writer that still has it open may
  yet append the rest of the line, so the file stays "draining" (read again on
  later polls and runs, the committed offset staying at its identity and
  position, the new file at the path waiting behind it) until the line is
  completed or the file was last modified more than ``rotation.grace.ms``
  (default 5000) ago; only then is the partial line emitted as its last line.
* Open files: a file is opened when it is read and closed as soon as it is read
  to its end, and a task keeps at most ``max.open.files`` (default 64) open at
  once, closing the least recently read one beyond that. A file reopened later
  is checked by inode and fingerprint, as at the start of a run (so a rotation
  while it was closed is handled the same way). If the process still runs out
  of descriptors, the error says so (raise ``ulimit -n`` or lower
  ``max.open.files``).
* ``encoding`` (default utf-8, any charset that writes ``\\n`` as one byte). A
  line that does not decode is handed to
  :meth:`SourceTaskContext.report_error` (which fails the task unless the
  runtime runs with ``errors.tolerance=all``), never dropped silently.

Not supported: reading standard input when ``file`` is empty (a bounded batch
run cannot read stdin meaningfully); rotated files moved to another directory;
a file rotated more than once between two runs (the intermediate file is not
read: plan runs more often than files rotate); bytes written to a file after
the source closed it (caught up or evicted) when the file is then rotated away
and deleted before it is reopened (logged as lost); complete lines a writer
appends to a rotated file after the source finished it (reached its end with
no partial line pending); a file rewritten in place while being read
(detected only when the reader reaches end of file). A glob that also
matches the rotated names (``app.log*``) makes every rotated file a partition of
its own, so its lines are read twice: match only the live names.

Delivery: the offsets alone define what was read, so with the framework's
transactional producer a run is exactly-once; otherwise at-least-once.
"""

from __future__ import annotations

import codecs
import errno
import glob
import hashlib
import logging
import os
import resource
import stat
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

from airflow_copycat.connect import (
    ConfigDef,
    ConfigProblem,
    ConfigType,
    ConnectException,
    DataException,
    Schema,
    SourceConnector,
    SourceRecord,
    SourceTask,
)
from airflow_copycat.connect.assignment import canonical
from airflow_copycat.connect.config import in_range, non_empty
from airflow_copycat.connect.connector import TASK_PARTITIONS_KEY, task_partitions

log = logging.getLogger(__name__)

FILE_CONFIG = "file"
FILES_CONFIG = "files"
TOPIC_CONFIG = "topic"
BATCH_SIZE_CONFIG = "batch.size"
ENCODING_CONFIG = "encoding"
FINGERPRINT_BYTES_CONFIG = "fingerprint.bytes"
MAX_OPEN_FILES_CONFIG = "max.open.files"
ROTATION_GRACE_MS_CONFIG = "rotation.grace.ms"

FILENAME_FIELD = "filename"
POSITION_FIELD = "position"
INODE_FIELD = "inode"
FINGERPRINT_FIELD = "fingerprint"
FINGERPRINT_LENGTH_FIELD = "fingerprint.length"

DEFAULT_BATCH_SIZE = 2000
DEFAULT_FINGERPRINT_BYTES = 1024
DEFAULT_MAX_OPEN_FILES = 64
DEFAULT_ROTATION_GRACE_MS = 5000
_CHUNK = 64 * 1024
_GLOB_CHARS = "*?["


def line_encoding(key: str, value: Any) -> str | None:
    """Validator: a known charset that writes ``\\n`` as the single byte 0x0A."""
    if value is None:
        return None
    try:
        info = codecs.lookup(str(value))
    except LookupError:
        return "is not a known character encoding (examples: utf-8, latin-1, cp1252)"
    if "\n".encode(info.name) != b"\n":
        return "must write a newline as the single byte 0x0A (utf-16 and utf-32 cannot be split into lines)"
    return None


line_encoding.describe = "a charset that writes \\n as one byte"


CONFIG_DEF = (
    ConfigDef()
    .define(FILE_CONFIG, ConfigType.STRING, None, importance="high",
            doc="The file to read: a path or a glob such as /var/log/app/*.log. Each matched file is one "
                "partition. Kafka Connect reads stdin when this is empty; Copycat does not (set file or files).")
    .define(FILES_CONFIG, ConfigType.LIST, [], importance="high",
            doc="More files to read: a comma-separated list of paths and globs, in addition to 'file'.")
    .define(TOPIC_CONFIG, ConfigType.STRING, validator=non_empty, importance="high",
            doc="The Kafka topic to publish the lines to.")
    .define(BATCH_SIZE_CONFIG, ConfigType.INT, DEFAULT_BATCH_SIZE, validator=in_range(1, None), importance="low",
            doc="The maximum number of records a task returns from one poll.")
    .define(ENCODING_CONFIG, ConfigType.STRING, "utf-8", validator=line_encoding, importance="low",
            doc="Character set of the files. A line that does not decode goes to the framework's error "
                "handling (errors.tolerance).")
    .define(FINGERPRINT_BYTES_CONFIG, ConfigType.INT, DEFAULT_FINGERPRINT_BYTES,
            validator=in_range(1, 1024 * 1024), importance="low",
            doc="How many leading bytes of a file identify it (with its inode) across rotation. Raise it when "
                "files start with an identical header longer than this.")
    .define(MAX_OPEN_FILES_CONFIG, ConfigType.INT, DEFAULT_MAX_OPEN_FILES, validator=in_range(2, None),
            importance="low",
            doc="The most files a task keeps open at once. Files are opened when read and closed once read to "
                "their end; beyond this many, the least recently read one is closed (and reopened later after "
                "checking it is still the same file). Must stay well below the process's open-file limit "
                "(ulimit -n).")
    .define(ROTATION_GRACE_MS_CONFIG, ConfigType.INT, DEFAULT_ROTATION_GRACE_MS, validator=in_range(0, None),
            importance="low",
            doc="How long (ms) after its last write a rotated-away file whose last line has no newline yet is "
                "still expected to be completed by its writer. Until then the partial line is held back and "
                "the file is read again (in this run and the next ones) before the new file at the path; after "
                "that the partial line is emitted as the file's last line.")
)


# ------------------------------------------------------------------ discovery


def _patterns(config: dict[str, Any]) -> list[str]:
    """The paths and globs named by ``file`` and ``files``, in order, ``~`` expanded."""
    files = config.get(FILES_CONFIG) or []
    given = [str(config.get(FILE_CONFIG) or "")] + (files.split(",") if isinstance(files, str) else list(files))
    return [os.path.expanduser(str(p).strip()) for p in given if str(p).strip()]


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in _GLOB_CHARS)


def expand(patterns: list[str]) -> list[str]:
    """Absolute paths of the files ``patterns`` name now, sorted and unique.

    A glob contributes the regular files it matches (none is fine); a literal
    path contributes itself unless it is a directory, even if it does not exist yet.
    """
    found: set[str] = set()
    for pattern in patterns:
        if _is_glob(pattern):
            found.update(os.path.abspath(p) for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
        elif not os.path.isdir(pattern):
            found.add(os.path.abspath(pattern))
    return sorted(found)


class FileStreamSourceConnector(SourceConnector):
    """Reads lines of local text files into one Kafka topic: one partition per file."""

    config_def = CONFIG_DEF

    def task_class(self) -> type:
        return FileStreamSourceTask

    def exactly_once_support(self, config: dict[str, Any]) -> bool:
        """Supported: an offset is a byte position in an identified file, so a task restarted
        from it reads exactly the lines after it."""
        return True

    def validate(self, config: dict[str, Any]) -> list[ConfigProblem]:
        """Cross-key problems: no file at all, no topic, a literal path that is a directory.

        A glob that matches nothing is fine (:meth:`partitions` is then empty).
        """
        problems = []
        patterns = _patterns(config)
        if not patterns:
            problems.append(ConfigProblem(
                FILE_CONFIG, config.get(FILE_CONFIG),
                "set 'file' (a path or glob such as /var/log/app/*.log) or 'files' (a comma-separated list of "
                "paths and globs); reading standard input is not supported"))
        if not str(config.get(TOPIC_CONFIG) or "").strip():
            problems.append(ConfigProblem(TOPIC_CONFIG, config.get(TOPIC_CONFIG),
                                          "is required: the Kafka topic to publish the lines to"))
        for pattern in patterns:
            if not _is_glob(pattern) and os.path.isdir(pattern):
                key = FILE_CONFIG if pattern == os.path.expanduser(str(config.get(FILE_CONFIG) or "")) else FILES_CONFIG
                problems.append(ConfigProblem(key, pattern,
                                              f"is a directory; name its files with a glob such as {pattern}/*.log"))
        return problems

    def partitions(self) -> list[dict]:
        """``[{"filename": abs_path}, ...]`` of the files ``file``/``files`` match now, sorted."""
        return [{FILENAME_FIELD: path} for path in expand(_patterns(self.config))]


# ------------------------------------------------------------------ file identity


@dataclass(frozen=True)
class Identity:
    """Which physical file an offset belongs to: inode plus a fingerprint of its first bytes."""

    inode: int
    fingerprint: str
    length: int

    @classmethod
    def of(cls, fd: int, max_bytes: int) -> "Identity":
        """The identity of the open file ``fd``, fingerprinting ``min(size, max_bytes)`` bytes."""
        st = os.fstat(fd)
        head = os.pread(fd, min(st.st_size, max_bytes), 0)
        return cls(st.st_ino, hashlib.sha256(head).hexdigest(), len(head))

    @classmethod
    def from_offset(cls, offset: dict) -> "Identity | None":
        """The identity stored in ``offset``, or ``None`` for a position-only (Kafka Connect) offset."""
        try:
            return cls(int(offset[INODE_FIELD]), str(offset[FINGERPRINT_FIELD]), int(offset[FINGERPRINT_LENGTH_FIELD]))
        except (KeyError, TypeError, ValueError):
            return None

    def matches_content(self, fd: int) -> bool:
        """Whether the first ``length`` bytes of ``fd`` still hash to ``fingerprint``."""
        head = os.pread(fd, self.length, 0) if self.length else b""
        return len(head) == self.length and hashlib.sha256(head).hexdigest() == self.fingerprint

    def as_offset(self, position: int) -> dict:
        return {POSITION_FIELD: position, INODE_FIELD: self.inode,
                FINGERPRINT_FIELD: self.fingerprint, FINGERPRINT_LENGTH_FIELD: self.length}


# ------------------------------------------------------------------ descriptors


def _open(path: str) -> int | None:
    """A read-only descriptor of the regular file at ``path``, or ``None`` when there is none.
    Other errors are raised as :class:`OSError` (see :meth:`FilePool.open`)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def _too_many_open_files(path: str, error: OSError, limit: int) -> ConnectException:
    """The error for EMFILE/ENFILE: say what is exhausted and which knob to turn."""
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        now = "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
    except (OSError, ValueError):  # pragma: no cover - getrlimit does not fail on Linux
        now = "unknown"
    if error.errno == errno.ENFILE:
        what = ("too many open files in the whole system (ENFILE): raise the system's limit "
                "(sysctl fs.file-max) or lower")
    else:
        what = f"too many open files (EMFILE): raise ulimit -n (the process limit, now {now}) or lower"
    return ConnectException(
        f"cannot open {path}: {what} '{MAX_OPEN_FILES_CONFIG}' (now {limit}, the most files this task keeps "
        f"open at once)")


class FilePool:
    """The task's budget of open descriptors: at most ``limit`` at once.

    Every :class:`OpenFile` registers here. Before a new descriptor is opened the
    least recently used files are closed (they reopen lazily, re-checking their
    identity). The file being read (:attr:`active`) is never closed that way.
    """

    def __init__(self, limit: int):
        self.limit = max(2, int(limit))
        self.count = 0  # descriptors open now, owned by an OpenFile or not yet
        self.active: OpenFile | None = None
        self._lru: OrderedDict[OpenFile, None] = OrderedDict()

    def _evict(self, keep_below: int) -> None:
        for f in list(self._lru):
            if self.count < keep_below:
                return
            if f is not self.active:
                f.close()

    def _call(self, path: str, fn: Callable[[], Any]) -> Any:
        """``fn()`` after making room for one more descriptor; on EMFILE/ENFILE retry once with
        every evictable file closed, then fail naming the limit."""
        self._evict(self.limit)
        try:
            return fn()
        except OSError as e:
            if e.errno not in (errno.EMFILE, errno.ENFILE):
                raise
            self._evict(1)
            try:
                return fn()
            except OSError as again:
                if again.errno in (errno.EMFILE, errno.ENFILE):
                    raise _too_many_open_files(path, again, self.limit) from again
                raise

    def open(self, path: str) -> int | None:
        """:func:`_open` within the budget; other errors become a :class:`ConnectException`."""
        try:
            fd = self._call(path, lambda: _open(path))
        except ConnectException:
            raise
        except OSError as e:
            raise ConnectException(f"cannot open {path} for reading: {e.strerror}; check that the file is "
                                   f"readable by the user running the task") from e
        if fd is not None:
            self.count += 1
        return fd

    def close(self, fd: int) -> None:
        try:
            os.close(fd)
        except OSError:
            pass
        self.count -= 1

    def list_dir(self, directory: str) -> list[os.DirEntry] | None:
        """The entries of ``directory`` (its descriptor counted while listing), ``None`` if unreadable."""
        def scan() -> list[os.DirEntry]:
            with os.scandir(directory) as it:
                return list(it)
        try:  # made room for one descriptor, closed again before returning
            return self._call(directory, scan)
        except ConnectException:
            raise
        except OSError:
            return None

    def track(self, f: "OpenFile") -> None:
        self._lru[f] = None

    def use(self, f: "OpenFile") -> None:
        """``f`` is read now: the most recently used, and not to be evicted."""
        self._lru.move_to_end(f)
        self.active = f

    def untrack(self, f: "OpenFile") -> None:
        self._lru.pop(f, None)
        if self.active is f:
            self.active = None

    @property
    def open_files(self) -> int:
        return len(self._lru)


def _same_file(fd: int, path: str) -> bool | None:
    """Whether ``path`` still names the file open as ``fd``; ``None`` when nothing is at ``path``."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def find_previous(path: str, identity: Identity, position: int, fingerprint_bytes: int,
                  pool: FilePool) -> "OpenFile | None":
    """Open the file that was read as ``path`` before it was rotated away, or ``None``.

    Looks in ``path``'s directory, first for the same inode with a matching
    fingerprint (rename rotation), then -- for ``copytruncate`` rotation -- for
    another file at least ``position`` bytes long whose first bytes match the
    fingerprint (newest first). Fingerprint-only matching needs a non-empty fingerprint.
    """
    directory = os.path.dirname(path) or "."
    listed = pool.list_dir(directory)
    if listed is None:
        return None
    entries = [e for e in listed if os.path.join(directory, e.name) != path]
    by_inode, by_content = [], []
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        if st.st_ino == identity.inode:
            by_inode.append(entry.path)
        elif identity.length and st.st_size >= max(position, identity.length):
            by_content.append((st.st_mtime, entry.path))
    candidates = by_inode + [p for _, p in sorted(by_content, reverse=True)]
    for candidate in candidates:
        fd = pool.open(candidate)
        if fd is None:
            continue
        if identity.matches_content(fd):
            return OpenFile(candidate, fd, Identity.of(fd, fingerprint_bytes), 0, pool, rotated=True)
        pool.close(fd)
    return None


# ------------------------------------------------------------------ reading


class OpenFile:
    """One physical file being read: descriptor, identity, and ``position`` (the byte
    after the last line handed out). Bytes read past ``position`` that do not end
    in ``\\n`` yet are held back. A ``rotated`` file is no longer at its path and
    is finished to its end (its unterminated last line once the writer is done).

    The descriptor may be closed (``fd == -1``: caught up, or evicted by the
    :class:`FilePool`); the owner reopens it after checking its identity."""

    def __init__(self, path: str, fd: int, identity: Identity, position: int, pool: FilePool, *,
                 rotated: bool = False):
        self.path = path
        self.fd = fd
        self.identity = identity
        self.rotated = rotated
        self.pool = pool
        pool.track(self)
        self.seek(position)

    def seek(self, position: int) -> None:
        """Continue at byte ``position``, dropping held-back bytes."""
        self.position = position
        self._buf, self._start, self._scanned = b"", 0, 0

    def attach(self, fd: int) -> None:
        """Reopened as ``fd`` (the caller checked it is this file): continue at :attr:`position`."""
        self.fd = fd
        self.pool.track(self)
        self.seek(self.position)

    def offset(self) -> dict:
        return self.identity.as_offset(self.position)

    @property
    def read_pos(self) -> int:
        """Offset of the next byte to read from the file."""
        return self.position + len(self._buf) - self._start

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def next_line(self, fingerprint_bytes: int) -> tuple[bytes, int, int] | None:
        """The next complete line as ``(bytes without \\n, start, end)``, or ``None`` at end of file.

        Also widens the fingerprint once the file has grown past the bytes it covers.
        """
        while True:
            i = self._buf.find(b"\n", max(self._start, self._scanned))
            if i >= 0:
                line, start = self._buf[self._start:i], self.position
                self.position += i + 1 - self._start
                self._start = i + 1
                return line, start, self.position
            self._scanned = len(self._buf)
            chunk = os.pread(self.fd, _CHUNK, self.read_pos)
            if not chunk:
                return None
            self._buf = self._buf[self._start:] + chunk
            self._scanned -= self._start
            self._start = 0
            if self.identity.length < fingerprint_bytes and self.read_pos > self.identity.length:
                self.identity = Identity.of(self.fd, fingerprint_bytes)

    def has_tail(self) -> bool:
        """Whether bytes after the last ``\\n`` are held back (call at end of file)."""
        return len(self._buf) > self._start

    def idle_ns(self) -> int:
        """Nanoseconds since the file was last written (its mtime)."""
        return time.time_ns() - os.fstat(self.fd).st_mtime_ns

    def take_tail(self) -> tuple[bytes, int, int] | None:
        """The held-back bytes after the last ``\\n`` as a final line, or ``None`` if there are none."""
        line, start = self._buf[self._start:], self.position
        if not line:
            return None
        self.seek(start + len(line))
        return line, start, self.position

    def close(self) -> None:
        """Close the descriptor and drop held-back bytes (they are read again on reopen); safe to call twice."""
        if self.fd >= 0:
            self.pool.close(self.fd)
            self.fd = -1
        self.pool.untrack(self)
        self.seek(self.position)


Emit = Callable[[bytes, int, int, OpenFile], None]
"""Receives ``(line, start, end, file)`` for each line read."""


class TrackedPartition:
    """One partition (one path): the file now at the path, preceded by rotated-away
    files that must be finished first (:attr:`draining`).

    Files are opened when read and closed once caught up, so an idle partition
    holds no descriptor. While no file is open at the path, :attr:`_resume_offset`
    says where to continue (an offset as committed: reopening checks inode and
    fingerprint exactly as a new run does); ``None`` means byte 0 of whatever appears."""

    def __init__(self, filename: str, fingerprint_bytes: int, pool: FilePool, grace_ms: int):
        self.filename = filename
        self.partition = {FILENAME_FIELD: filename}  # handed out with every record: never mutated
        self.fingerprint_bytes = fingerprint_bytes
        self.pool = pool
        self.grace_ns = grace_ms * 1_000_000
        self.draining: list[OpenFile] = []
        self.current: OpenFile | None = None
        self.caught_up = False
        self._resume_offset: dict | None = None

    # ---- start

    def resume(self, committed: dict | None) -> None:
        """Continue at the committed offset (``None``: the start of the file). Nothing is
        opened until the partition is read; the offset's position is checked now."""
        if committed is not None:
            self._committed_position(committed)
        self._resume_offset = committed

    def _open_current(self) -> None:
        """Open the file at the path and position it per :attr:`_resume_offset`: if the path
        no longer holds the file of that offset, queue the old file (found by inode and
        fingerprint) in :attr:`draining` and start the one at the path from byte 0."""
        committed = self._resume_offset
        fd = self.pool.open(self.filename)
        if committed is None:
            self._set_current(fd, 0)
            return
        position = self._committed_position(committed)
        identity = Identity.from_offset(committed)
        if identity is None:  # a position-only offset, as Kafka Connect commits it
            if fd is not None:  # else: keep it until the file appears
                self._resume_offset = None
                self._resume_same(fd, position)
            return
        self._resume_offset = None
        same_inode = fd is not None and os.fstat(fd).st_ino == identity.inode
        if same_inode and identity.matches_content(fd):
            self._resume_same(fd, position)
            return
        self._recover_previous(identity, position, in_place=same_inode)
        self._set_current(fd, 0)

    def _resume_same(self, fd: int, position: int) -> None:
        self._set_current(fd, position)
        size = self.current.size()
        if size < position:
            self._restart_truncated(self.current, position, size)

    def _committed_position(self, committed: dict) -> int:
        value = committed.get(POSITION_FIELD)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or int(value) != value:
            raise ConnectException(
                f"{self.filename}: committed offset {committed!r} has no valid 'position' (a byte offset, a "
                f"non-negative integer); delete or correct the committed offset of partition "
                f"{canonical(self.partition)}")
        return int(value)

    def _set_current(self, fd: int | None, position: int) -> None:
        self.current = None if fd is None else OpenFile(
            self.filename, fd, Identity.of(fd, self.fingerprint_bytes), position, self.pool)

    def _locate_previous(self, identity: Identity, position: int, how: str) -> OpenFile | None:
        """The file of ``identity`` (no longer at the path), open and positioned at ``position``;
        ``None`` with a warning that what it held after ``position`` is lost."""
        previous = find_previous(self.filename, identity, position, self.fingerprint_bytes, self.pool)
        if previous is None:
            log.warning(
                "%s: the file read before (inode %d, %d bytes read) %s and no file in %s holds its content; "
                "any bytes it had after byte %d were not read and are lost (how many is unknown: the file is "
                "gone). Continuing with the next file of %s.",
                self.filename, identity.inode, position, how, os.path.dirname(self.filename), position,
                self.filename)
            return None
        size = previous.size()
        if size < position:
            log.warning("%s: its rotated file %s is shorter (%d bytes) than the %d bytes already read; "
                        "not reading it again.", self.filename, previous.path, size, position)
            previous.close()
            return None
        previous.seek(position)
        return previous

    def _recover_previous(self, identity: Identity, position: int, *, in_place: bool) -> None:
        """The committed file is no longer at the path: queue it to be finished from
        ``position``, or warn that what it held after ``position`` is lost."""
        how = "was truncated or rewritten in place" if in_place else "was rotated away"
        previous = self._locate_previous(identity, position, how)
        if previous is not None:
            log.info("%s %s; reading the %d unread bytes of %s (from byte %d) before the file now at the path.",
                     self.filename, how, previous.size() - position, previous.path, position)
            self.draining.append(previous)

    def _restart_truncated(self, f: OpenFile, position: int, size: int) -> None:
        """``f`` (same inode) shrank below ``position`` or its first bytes changed: finish a
        ``copytruncate`` copy of the old content if there is one, and read ``f`` again from 0."""
        log.warning("%s was truncated or rewritten in place (%d bytes now, %d bytes read before); "
                    "reading it again from byte 0.", self.filename, size, position)
        self._recover_previous(f.identity, position, in_place=True)
        f.seek(0)
        f.identity = Identity.of(f.fd, self.fingerprint_bytes)

    def _reopen_rotated(self, f: OpenFile) -> bool:
        """Reopen the closed rotated file ``f`` (``draining[0]``): at its last known path if the
        same inode and fingerprint are still there, else found again in the directory.
        ``False`` (and dropped from :attr:`draining`, with a warning) when it is gone."""
        fd = self.pool.open(f.path)
        if fd is not None:
            if os.fstat(fd).st_ino == f.identity.inode and f.identity.matches_content(fd):
                f.attach(fd)
                return True
            self.pool.close(fd)
        previous = self._locate_previous(f.identity, f.position, "was rotated away")
        if previous is None:
            self.draining.remove(f)
            return False
        self.draining[self.draining.index(f)] = previous
        return True

    # ---- reading

    def _active(self) -> OpenFile | None:
        """The file to read next, open: the oldest rotated one, else the one at the path
        (opened, and checked against :attr:`_resume_offset`, if it is not open)."""
        self.pool.active = None
        while True:
            if self.draining:
                f = self.draining[0]
                if f.fd < 0 and not self._reopen_rotated(f):
                    continue
                f = self.draining[0]
            else:
                if self.current is not None and self.current.fd < 0:
                    self._resume_offset, self.current = self.current.offset(), None
                if self.current is None:
                    self._open_current()
                    if self.draining:
                        continue
                f = self.current
                if f is None:
                    return None
            self.pool.use(f)
            return f

    def read(self, budget: int, emit: Emit) -> int:
        """Hand up to ``budget`` lines to ``emit`` and return how many. Sets
        :attr:`caught_up` (and closes the partition's files) when it stopped because
        every file of the partition is at its end."""
        done, self.caught_up = 0, False
        while done < budget:
            f = self._active()
            if f is None:
                break
            got = f.next_line(self.fingerprint_bytes)
            if got is None:
                if f.rotated:
                    if f.has_tail() and f.idle_ns() < self.grace_ns:
                        break  # the writer may still complete the line: hold it, and the files after it
                    got = f.take_tail()
                    self.draining.remove(f)
                    f.close()
                    if got is None:
                        continue
                elif self._at_end(f):
                    continue
                else:
                    break
            emit(got[0], got[1], got[2], f)
            done += 1
        else:
            return done
        self.caught_up = True
        self.close()
        return done

    def _at_end(self, f: OpenFile) -> bool:
        """The file at the path is at its end: check whether it was truncated or rotated.
        Returns ``True`` when there is something new to read."""
        size = f.size()
        if size < f.read_pos or not f.identity.matches_content(f.fd):
            self._restart_truncated(f, f.position, size)
            return True
        if _same_file(f.fd, self.filename) is not False:
            return False  # still the file at the path, or nothing at the path yet
        log.info("%s was rotated while being read: finishing the old file, then reading the new one from byte 0.",
                 self.filename)
        f.rotated = True
        self.draining.append(f)
        self.current, self._resume_offset = None, None
        return True

    def close(self) -> None:
        """Close every open file of the partition; each reopens when read again."""
        for f in self.draining + ([self.current] if self.current else []):
            f.close()


# ------------------------------------------------------------------ the task


class FileStreamSourceTask(SourceTask):
    """Reads the files of its partitions line by line (see the module docstring).

    ``poll`` returns up to ``batch.size`` records, visiting partitions round-robin
    so one busy file does not starve the others; ``None`` once every file is at its end.
    """

    def start(self, config: dict[str, str]) -> None:
        values = CONFIG_DEF.parse(config, context="FileStreamSourceTask")
        self.topic = values[TOPIC_CONFIG]
        self.batch_size = values[BATCH_SIZE_CONFIG]
        self.encoding = values[ENCODING_CONFIG]
        fingerprint_bytes = values[FINGERPRINT_BYTES_CONFIG]
        self._pool = FilePool(values[MAX_OPEN_FILES_CONFIG])
        if TASK_PARTITIONS_KEY in config:
            filenames = [p[FILENAME_FIELD] for p in task_partitions(config)]
        else:  # run without a plan (Kafka Connect style): all files of the config
            filenames = expand(_patterns(values))
        self._partitions = [TrackedPartition(f, fingerprint_bytes, self._pool, values[ROTATION_GRACE_MS_CONFIG])
                            for f in filenames]
        self._next = 0
        committed = self.context.offset_storage_reader.offsets([p.partition for p in self._partitions]) \
            if self._partitions else {}
        for p in self._partitions:
            p.resume(committed.get(canonical(p.partition)))

    def poll(self) -> list[SourceRecord] | None:
        parts = getattr(self, "_partitions", [])
        if not parts:
            return None
        records: list[SourceRecord] = []
        processed = 0
        for k in range(len(parts)):
            part = parts[(self._next + k) % len(parts)]
            processed += part.read(self.batch_size - processed,
                                   lambda line, start, end, f: self._emit(part, line, start, end, f, records))
            if processed >= self.batch_size:
                break
        self._next = (self._next + 1) % len(parts)
        if records:
            return records
        # Below budget means every partition stopped at its end; at budget, only
        # undecodable lines were skipped: call again.
        return None if processed < self.batch_size else []

    def _emit(self, part: TrackedPartition, raw: bytes, start: int, end: int, f: OpenFile,
              records: list[SourceRecord]) -> None:
        offset = f.identity.as_offset(end)
        line = raw[:-1] if raw.endswith(b"\r") else raw
        try:
            value = line.decode(self.encoding)
        except UnicodeDecodeError as e:
            error = DataException(
                f"line is not valid {self.encoding}: {e.reason} at byte {start + e.start}; set "
                f"'{ENCODING_CONFIG}' to the files' character set")
            self.context.report_error(error, source_partition=part.partition, source_offset=offset,
                                      raw=raw, location=f"{f.path}, bytes {start}..{end}")
            return
        records.append(SourceRecord(
            topic=self.topic, kafka_partition=None, key_schema=None, key=None,
            value_schema=Schema.STRING, value=value,
            source_partition=part.partition, source_offset=offset))

    def stop(self) -> None:
        for p in getattr(self, "_partitions", []):
            p.close()
