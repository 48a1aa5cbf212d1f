"""FileStream source: the lines of local text files (Kafka Connect's ``FileStreamSource``).

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
* Batches: ``poll`` returns, per partition, one :class:`SourceBatch` of lines
  (value schema ``Schema.STRING``, column ``value``; its ``to_records()`` are
  exactly the records described here, with the same offsets); a line that does
  not decode splits it (the lines before it, the error, the lines after it).
  ``batch.size`` bounds the lines of one poll, as it bounds records.
* Rotation: if the file at the path is not the committed one (other inode, or
  the fingerprint no longer matches), the committed file is looked up in the
  same directory by inode and fingerprint (``mv`` rotation), else by
  fingerprint alone among files at least ``position`` bytes long
  (``copytruncate`` rotation). It is read from the committed position to its
  end before the new file is read from byte 0. During a run, the old file is
  drained to end of file before switching to the new file at the path. A
  file that shrank below the position restarts at 0. Every loss is logged as a
  warning naming the file and position.
* A glob that also matches the rotated names (``app.log*``): the rotated file
  (``app.log.1``) is finished by the partition that was reading it
  (``app.log``) from its committed position; the partition of its new name
  reads none of it and commits a hand-off offset instead (the identity plus
  ``"read.as": "<that partition's filename>"``), which names the file for its
  next rotation (``app.log.2``). So each file is read once, whatever names it
  passes through, as long as the offsets of the partitions involved carry an
  identity (position-only offsets do not).
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
(detected only when the reader reaches end of file); a rotation during a run
that moves a file onto the name of a partition of *another* task (with a glob
matching rotated names) while that file was not yet read in a previous run:
that task does not know the file was read, and reads it again.

Delivery: the offsets alone define what was read, so with the framework's
transactional producer a run is exactly-once; otherwise at-least-once.
"""

from __future__ import annotations

import codecs
import glob
import logging
import os
from typing import Any

from airflow_copycat.connect import (
    ConfigDef,
    ConfigProblem,
    ConfigType,
    SourceBatch,
    SourceConnector,
    SourceRecord,
    SourceTask,
)
from airflow_copycat.connect.assignment import canonical
from airflow_copycat.connect.config import in_range, non_empty
from airflow_copycat.connect.connector import TASK_PARTITIONS_KEY, task_partitions

from .files import MAX_OPEN_FILES_CONFIG, FilePool
from .identity import (
    FILENAME_FIELD,
    FINGERPRINT_FIELD,
    FINGERPRINT_LENGTH_FIELD,
    INODE_FIELD,
    POSITION_FIELD,
    READ_AS_FIELD,
    Identity,
)
from .lines import ENCODING_CONFIG, LineBatcher
from .partition import TrackedPartition
from .rotation import SiblingOffsets, find_previous

log = logging.getLogger(__name__)

FILE_CONFIG = "file"
FILES_CONFIG = "files"
TOPIC_CONFIG = "topic"
BATCH_SIZE_CONFIG = "batch.size"
FINGERPRINT_BYTES_CONFIG = "fingerprint.bytes"
ROTATION_GRACE_MS_CONFIG = "rotation.grace.ms"

DEFAULT_BATCH_SIZE = 2000
DEFAULT_FINGERPRINT_BYTES = 1024
DEFAULT_MAX_OPEN_FILES = 64
DEFAULT_ROTATION_GRACE_MS = 5000
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


# ------------------------------------------------------------------ the task


class FileStreamSourceTask(SourceTask):
    """Reads the files of its partitions (see the module docstring).

    ``poll`` returns up to ``batch.size`` lines, visiting partitions round-robin so one
    busy file does not starve the others: one :class:`SourceBatch` per partition read
    (plus, where a file is handed off, a batch of no rows carrying that offset), or --
    with :attr:`batches` off -- one record per line; ``None`` once every file is at its end.
    """

    batches: bool = True
    """Return :class:`SourceBatch`\\ es (the fast path). ``False`` returns one record per line,
    the same rows and offsets (kept for comparison and for runtimes without batches)."""

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
        self._next = 0
        if not filenames:
            self._partitions = []
            return
        # The offsets of every file beside ours: which of our files another partition reads.
        near = SiblingOffsets.partitions_near(filenames, self._pool)
        committed = self.context.offset_storage_reader.offsets(near)
        by_name = {p[FILENAME_FIELD]: committed[canonical(p)] for p in near if canonical(p) in committed}
        siblings = SiblingOffsets(by_name, fingerprint_bytes, self._pool)
        self._partitions = [TrackedPartition(f, fingerprint_bytes, self._pool, values[ROTATION_GRACE_MS_CONFIG],
                                             siblings) for f in filenames]
        for p in self._partitions:
            p.resume(by_name.get(p.filename))

    def poll(self) -> list[SourceBatch | SourceRecord] | None:
        parts = getattr(self, "_partitions", [])
        if not parts:
            return None
        out: list = []
        processed = 0
        many = self.batches
        for k in range(len(parts)):
            part = parts[(self._next + k) % len(parts)]
            lines = LineBatcher(self.topic, part.partition, self.encoding, self.context, out, records=not many)
            processed += part.read(self.batch_size - processed, lines.lines, lines.mark, many=many)
            lines.flush()
            if processed >= self.batch_size:
                break
        self._next = (self._next + 1) % len(parts)
        if out:
            return out
        # Below budget means every partition stopped at its end; at budget, only
        # undecodable lines were skipped: call again.
        return None if processed < self.batch_size else []

    def stop(self) -> None:
        for p in getattr(self, "_partitions", []):
            p.close()


__all__ = [
    "CONFIG_DEF", "FILENAME_FIELD", "FINGERPRINT_FIELD", "FINGERPRINT_LENGTH_FIELD", "INODE_FIELD", "POSITION_FIELD",
    "READ_AS_FIELD", "FileStreamSourceConnector", "FileStreamSourceTask", "Identity", "expand", "find_previous",
]
