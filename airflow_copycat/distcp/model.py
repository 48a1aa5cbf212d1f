"""What a copy is made of: datasets, copyable files, work units, and where staged bytes live.

Gobblin Distcp's model, as plain data that goes into a plan (JSON) and to
executors:

* a **dataset** is one match of ``dataset.pattern`` under ``source.url`` (a
  directory, usually); everything the copy does is per dataset. A dataset's
  files form its **file set**, the unit published atomically: either every
  file of the set (and its deletions) appears in the target, or none does.
* a :class:`CopyableFile` is one source file to copy: where it comes from, where
  it goes (``destination``, relative to ``target.url``; converters may change
  it, e.g. ``a.csv.gz`` -> ``a.csv``, or make it a directory for ``untar``),
  its size, modification time, checksum when the filesystem has one, the
  permissions and owner to set, and a stable :attr:`CopyableFile.id` -- the
  hash of origin path, length, modification time and checksum -- so bytes
  staged by an earlier, failed run are recognised and reused.
* a :class:`WorkUnit` is what one task copies: a whole file, or one byte range
  (``part`` of ``parts``) of a large file when ``block.split.size`` is set.

Staging layout, under the target (same filesystem, so publishing is a rename)::

    <target>/_copycat/distcp/staging/<file set id>/<file id>.data               a plain file on a local target
    <target>/_copycat/distcp/staging/<file set id>/_done-<session>.jsonl        its done record (see .staged)
    <target>/_copycat/distcp/staging/<file set id>/<file id>/<destination...>   staged output of any other file
    <target>/_copycat/distcp/staging/<file set id>/<file id>/_done.json         written last: the output is whole
    <target>/_copycat/distcp/staging/<file set id>/<file id>/_parts/<k>         byte ranges of a split file
    <target>/_copycat/distcp/wal/<file set id>.json                             publish log (while publishing)
    <target>/_copycat/distcp/manifest/<file set id>.json                        what each output was published from

A file set belongs to one copy job: its id (:func:`file_set_id`) hashes the job's
name with the dataset's, so two jobs copying the same dataset into one target (or
sharing a target at all) never share staging, logs or manifests. The id of a named
job's set starts with a hash of the job name (``<8 hex>-<24 hex>``), which tells the
job's sets apart from other jobs' (:meth:`Staging.owns`); ``job=""`` (no job) keeps
the plain ``<24 hex>`` of the dataset name.

Names starting with ``_`` are skipped by readers (Spark, pyarrow, Hive), and
the staged tree under ``<file id>/`` mirrors the destination, so publishing a
file is a rename of ``<file id>/<destination>`` (or ``<file id>.data``) to
``<target>/<destination>``. A plain file (no converters, not split) on the local
disk is staged flat (:mod:`.staged`): no directory of its own to make and remove.
Both layouts are read by the copier (reuse) and the publisher, whichever version
of copycat staged them.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import posixpath
from dataclasses import dataclass, field
from typing import Any

CONTROL_DIR = "_copycat/distcp"
DONE_MARKER = "_done.json"
PARTS_DIR = "_parts"
MANIFEST_DIR = "manifest"

PLAN_FORMAT = "copycat.distcp.plan/1"

PRESERVABLE = ("perm", "mtime", "owner", "group")


def file_id(origin: str, size: int, mtime: float, checksum: str | None) -> str:
    """The stable id of a source file version: same path, length, modification time and
    checksum -> same id (32 hex chars)."""
    text = f"{origin}\0{int(size)}\0{float(mtime):.6f}\0{checksum or ''}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


@functools.lru_cache(maxsize=4096)  # a pure function, asked for every file staged and published
def file_set_id(dataset: str, job: str = "") -> str:
    """A file set's id as used in staging, log and manifest paths (safe on any filesystem):
    ``<24 hex>`` of the dataset name without a job, ``<8 hex of the job>-<24 hex of (job,
    dataset)>`` for a job's set (see the module docstring)."""
    if not job:
        return hashlib.sha256(dataset.encode("utf-8")).hexdigest()[:24]
    digest = hashlib.sha256(job.encode("utf-8") + b"\0" + dataset.encode("utf-8")).hexdigest()[:24]
    return f"{job_key(job)}-{digest}"


@functools.lru_cache(maxsize=256)
def job_key(job: str) -> str:
    """The prefix of a job's file set ids (8 hex chars); ``""`` for no job."""
    return hashlib.sha256(job.encode("utf-8")).hexdigest()[:8] if job else ""


@dataclass(frozen=True)
class Dataset:
    """One match of ``dataset.pattern``: ``name`` is its path relative to the source root
    (``""`` for the whole source), ``root`` its full source path."""

    name: str
    root: str


@dataclass(frozen=True)
class CopyableFile:
    """One source file to copy (see the module docstring).

    ``origin``: full path on the source filesystem. ``relative``: path relative to
    the source root. ``destination``: path relative to the target root where the
    (converted) output goes; for ``untar`` the directory the archive expands into.
    ``checksum``: ``"<algorithm>:<hex>"`` from the source filesystem (or a sidecar
    file), ``None`` when it has none. ``mode``/``owner``/``group``: what to set on
    the destination for the attributes in ``preserve``. ``converters``: names, in
    order (``gunzip``, ``untar``, ``decrypt``...).
    """

    origin: str
    relative: str
    destination: str
    size: int
    mtime: float
    dataset: str
    file_set: str
    checksum: str | None = None
    mode: int | None = None
    owner: str | None = None
    group: str | None = None
    preserve: tuple[str, ...] = ()
    converters: tuple[str, ...] = ()
    id: str = ""

    def __post_init__(self):
        if not self.id:
            object.__setattr__(self, "id", file_id(self.origin, self.size, self.mtime, self.checksum))

    def to_dict(self) -> dict[str, Any]:
        """The fields, in their order, as JSON types (``preserve`` and ``converters`` as lists)."""
        values = self.__dict__  # (dataclasses.asdict deep-copies, getattr per field: slow for a plan of many files)
        d = {name: values[name] for name in _FILE_FIELDS}
        d["preserve"], d["converters"] = list(self.preserve), list(self.converters)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CopyableFile":
        """The file :meth:`to_dict` gave ``d`` for -- equal to ``CopyableFile(**d)`` with ``preserve`` and
        ``converters`` as tuples (absent or ``None``: empty); an unknown or missing field raises its
        ``TypeError``. A dict with its ``id`` (every plan's) is taken without the dataclass ``__init__``
        (one assignment per field), which a plan of many files reads thousands of times."""
        if type(d) is dict and d.keys() <= _FILE_FIELD_SET and _REQUIRED_FIELDS <= d.keys() and d.get("id"):
            values = {name: d[name] if name in d else default for name, default in _FILE_DEFAULTS}
            values["preserve"], values["converters"] = tuple(values["preserve"] or ()), tuple(values["converters"] or ())
            f = object.__new__(cls)
            f.__dict__.update(values)
            return f
        d = dict(d)
        d["preserve"], d["converters"] = tuple(d.get("preserve") or ()), tuple(d.get("converters") or ())
        return cls(**d)


_FILE_FIELDS = tuple(f.name for f in dataclasses.fields(CopyableFile))
_FILE_FIELD_SET = frozenset(_FILE_FIELDS)
_REQUIRED_FIELDS = frozenset(f.name for f in dataclasses.fields(CopyableFile) if f.default is dataclasses.MISSING)
_FILE_DEFAULTS = tuple((f.name, None if f.default is dataclasses.MISSING else f.default)
                       for f in dataclasses.fields(CopyableFile))


@dataclass(frozen=True)
class WorkUnit:
    """Bytes one task copies: the whole ``file`` (``parts == 1``), or byte range
    ``[offset, offset + length)``, part ``part`` of ``parts``, of a split file."""

    file: CopyableFile
    part: int = 0
    parts: int = 1
    offset: int = 0
    length: int = -1  # -1: to the end of the file

    @property
    def bytes(self) -> int:
        return self.file.size if self.length < 0 else self.length

    def to_dict(self, file_dict: dict[str, Any] | None = None) -> dict[str, Any]:
        """The fields as JSON types; ``file_dict``: ``self.file.to_dict()`` when the caller has it already."""
        return {"file": self.file.to_dict() if file_dict is None else file_dict, "part": self.part,
                "parts": self.parts, "offset": self.offset, "length": self.length}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "WorkUnit":
        return cls(CopyableFile.from_dict(d["file"]), int(d.get("part", 0)), int(d.get("parts", 1)),
                   int(d.get("offset", 0)), int(d.get("length", -1)))


@dataclass
class Staging:
    """Paths of staged output, publish logs and manifests of one copy job (``job``: its
    name; ``""`` for none) under a target root (a path on the target filesystem, no
    protocol). All methods return paths joined with ``/``."""

    target_root: str
    job: str = ""
    control: str = field(init=False)

    def __post_init__(self):
        self.target_root = self.target_root.rstrip("/") or "/"
        self.job = self.job or ""
        self.control = posixpath.join(self.target_root, CONTROL_DIR)

    def set_id(self, file_set: str) -> str:
        """The id of this job's file set ``file_set`` (:func:`file_set_id`)."""
        return file_set_id(file_set, self.job)

    def owns(self, set_id: str) -> bool:
        """Whether ``set_id`` (a name in the staging, log or manifest directory, without
        ``.json``) is the id of one of this job's file sets."""
        if self.job:
            return set_id.startswith(job_key(self.job) + "-")
        return len(set_id) == 24 and "-" not in set_id

    def staging_dir(self) -> str:
        """The directory holding every file set's staging (of all jobs)."""
        return posixpath.join(self.control, "staging")

    def file_set_dir(self, file_set: str) -> str:
        return _file_set_dir(self.control, self.job, file_set)

    def file_dir(self, f: CopyableFile) -> str:
        """Where ``f``'s output is staged: ``<file id>/<destination...>`` mirrors the destination."""
        return posixpath.join(self.file_set_dir(f.file_set), f.id)

    def done_marker(self, f: CopyableFile) -> str:
        return posixpath.join(self.file_dir(f), DONE_MARKER)

    def part_path(self, f: CopyableFile, part: int) -> str:
        return posixpath.join(self.file_dir(f), PARTS_DIR, f"{part:05d}")

    def wal(self, file_set: str) -> str:
        return posixpath.join(self.control, "wal", f"{self.set_id(file_set)}.json")

    def manifest(self, file_set: str) -> str:
        """``<target>/_copycat/distcp/manifest/<file set id>.json``: what each output of the
        file set was published from (written by the publisher, read by the diff)."""
        return posixpath.join(self.control, MANIFEST_DIR, f"{self.set_id(file_set)}.json")

    def wal_dir(self) -> str:
        return posixpath.join(self.control, "wal")

    def final(self, relative: str) -> str:
        return posixpath.join(self.target_root, relative)


@functools.lru_cache(maxsize=4096)  # a pure function, asked several times for every file staged and published
def _file_set_dir(control: str, job: str, file_set: str) -> str:
    """:meth:`Staging.file_set_dir`: ``<control>/staging/<file set id>``."""
    return posixpath.join(control, "staging", file_set_id(file_set, job))
