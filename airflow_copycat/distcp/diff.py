"""Diff a copy listing with the target: what to copy, what is already there, what to delete.

Gobblin's ``RecursiveCopyableDataset`` / ``distcp -update -delete``, per dataset:

* the target is listed **once per dataset** (one recursive ``find`` of the dataset's
  destination prefix ``<target>/<dataset name>``), never stat-ed per file;
* a :class:`DiffPolicy` decides, for one dataset, which files to copy, which are
  up to date and which target files to delete; :class:`UpdatePolicy` (the default,
  ``"update"`` in :data:`POLICIES`) implements ``update`` / ``delete``;
* whatever a policy returns, deletions are confined to the dataset's destination
  prefix and the job's scope (``file.pattern``, the date range), and never touch a
  hidden name (``_copycat/``, ``_SUCCESS``, ``.hidden``), a checksum sidecar (with
  ``checksum.sidecar``) or a path the copy itself writes.

An ``untar`` destination is a directory that holds exactly what its archive holds.
Below it, with ``delete``, the scope is the archive's (it was selected, so its entries
are in scope); a target file there is kept when the archive is up to date and the
manifest records the file as one of its entries, and is otherwise deletable: when
the archive is copied again, the publisher leaves out the deletion of every path the
new version writes (a replacement, not a deletion). Without ``delete``, the publisher
still deletes the outputs of an archive's old version that the new one does not
have (the manifest knows them), so the destination always equals the archive.

The manifest
------------
Converted outputs (``gunzip``, ``untar``, ``encrypt``...) have neither the source's
size nor its checksum, so size/mtime cannot tell whether they are current. The
publisher therefore records, per file set, which source version each published
output came from, in ``<target>/_copycat/distcp/manifest/<file set id>.json``
(:meth:`.Staging.manifest`, per job): one JSON object ``{output path: file id}``::

    {"tables/a/x.csv": "<CopyableFile.id of tables/a/x.csv.gz>",
     "tables/a/bundle/inner/1.txt": "<id of tables/a/bundle.tar>",
     "tables/a/bundle/inner/2.txt": "<id of tables/a/bundle.tar>"}

Output paths are relative to the target root: a file's ``destination``, or for
``untar`` every file expanded below the destination directory. The publisher
writes it whole (temporary name + rename) as the last step of publishing a file
set, **merged** with the previous one: entries of published outputs set, deleted
paths removed (and the entries of an archive's old version below its destination
that the new version does not have), the others kept. The diff reads it once per
dataset: a converted file is up to date when its destination's entry (for
``untar``: every entry below the destination directory, at least one) holds the
file's current id and those outputs exist in the target. For a plain file whose
size matches, the manifest decides when it has an entry for the destination: the
file's current id means up to date (a target that cannot keep modification times,
such as S3, skips unchanged files), another id means a different version, copied
whatever the times say. Only without an entry do checksums, then modification
times, decide. A missing or unreadable manifest means "nothing known": converted
files are copied again, never wrongly skipped.
"""

from __future__ import annotations

import json
import logging
import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import fsspec

from .destination_names import source_name_candidates
from .entries import _find, _fs_checksum, _mtime
from .model import CONTROL_DIR, CopyableFile, Dataset, Staging
from .paths import _ancestors, _hidden, _join, _norm_root, _relative_to
from .selection import date_filter, glob_matcher, is_sidecar

log = logging.getLogger(__name__)

_CONTROL_TOP = CONTROL_DIR.split("/", 1)[0]  # "_copycat"
MTIME_TOLERANCE_S = 1.0
"""Modification times within this many seconds are equal when one of them is a whole number of
seconds (a filesystem that keeps seconds only, such as S3); see :func:`mtime_tolerance`."""
FINE_MTIME_TOLERANCE_S = 0.002
"""The tolerance between two modification times that both have fractions of a second (local
disks keep ns, HDFS ms; floats lose a little): 2 ms."""


def mtime_tolerance(a: float, b: float) -> float:
    """How far apart two modification times may be and still be equal: 1 s when one of them is
    a whole number of seconds (its filesystem may keep no more), else 2 ms."""
    return MTIME_TOLERANCE_S if float(a).is_integer() or float(b).is_integer() else FINE_MTIME_TOLERANCE_S


# ------------------------------------------------------------------ manifest


def manifest_path(staging: Staging, file_set: str) -> str:
    """``<target>/_copycat/distcp/manifest/<file set id>.json``: what each destination of a
    file set was published from (see the module docstring); :meth:`.Staging.manifest`."""
    return staging.manifest(file_set)


def read_manifest(fs: fsspec.AbstractFileSystem, staging: Staging, file_set: str) -> dict[str, str]:
    """``{output path: file id}`` of a file set; ``{}`` when there is none yet or it cannot be
    read (logged: the files are then copied again, never wrongly skipped)."""
    path = manifest_path(staging, file_set)
    try:
        data = fs.cat_file(path)
    except FileNotFoundError:
        return {}
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
            raise ValueError("not a JSON object of {output path: file id}")
        return dict(doc)
    except ValueError as e:
        log.warning("ignoring the unreadable manifest %s of file set %r (%s): its converted files are copied again",
                    path, file_set, e)
        return {}


# ------------------------------------------------------------------ target state


@dataclass(frozen=True, slots=True)
class TargetFile:
    """A file found in the target: ``path`` relative to the target root."""

    path: str
    size: int
    mtime: float
    checksum: str | None = None


@dataclass
class TargetState:
    """What the target holds for one dataset: ``files`` by path relative to the target root
    (``_copycat/`` left out; other hidden names kept, an untarred tree may have some), and the file set's ``manifest`` (``{}`` when not read)."""

    files: dict[str, TargetFile]
    manifest: dict[str, str] = field(default_factory=dict)
    _recorded_dirs: dict[str, str | None] | None = field(default=None, repr=False)

    def recorded(self, destination: str, directory: bool = False) -> str | None:
        """The file id the manifest records for the output ``destination`` when that output
        exists; with ``directory``, the id recorded for every entry below the directory
        ``destination`` when they all agree and all exist. ``None`` otherwise."""
        if not directory:
            recorded = self.manifest.get(destination)
            return recorded if recorded is not None and destination in self.files else None
        if self._recorded_dirs is None:  # one pass over the manifest: {directory: its entries' one id, or None}
            index: dict[str, str | None] = {}
            for path, ident in self.manifest.items():
                ok = ident if path in self.files else None
                for a in _ancestors(path):
                    index[a] = ok if index.get(a, ok) == ok else None
            self._recorded_dirs = index
        return self._recorded_dirs.get(destination)


@dataclass
class DatasetDiff:
    """A policy's verdict for one dataset. ``deletes``: target paths relative to the target root."""

    to_copy: list[CopyableFile] = field(default_factory=list)
    skipped: list[CopyableFile] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)


@dataclass
class DiffResult:
    """The diff of a whole job: files to copy, files already up to date, and per file set
    (dataset name) the target paths to delete when it is published (only with ``delete``)."""

    to_copy: list[CopyableFile] = field(default_factory=list)
    skipped: list[CopyableFile] = field(default_factory=list)
    deletes: dict[str, list[str]] = field(default_factory=dict)


# ------------------------------------------------------------------ policies


@runtime_checkable
class DiffPolicy(Protocol):
    """Decides, for one dataset, what to copy, skip and delete.

    Called once per dataset with its copy listing (``files``), what the target holds
    under the dataset's destination prefix (``target``; empty when neither ``update``
    nor ``delete`` is set) and the job's config. Every file of ``files`` must end up in
    exactly one of ``to_copy`` / ``skipped``. ``deletes`` are filtered afterwards (see
    the module docstring), so a policy cannot delete outside its dataset.
    """

    name: str

    def diff(self, dataset: Dataset, files: Sequence[CopyableFile], target: TargetState,
             config: Mapping[str, Any]) -> DatasetDiff: ...


class UpdatePolicy:
    """``distcp -update [-delete]``: with ``update``, a converted file is skipped when the
    manifest records its id and its output exists; a plain file whose target has the same
    size is skipped when the manifest records its id there, copied when the manifest
    records another id there, and otherwise skipped on equal checksums when both sides
    know one (of the same algorithm), else on equal modification times (within
    :func:`mtime_tolerance`; when ``mtime`` is not preserved, a target not older than
    the source). Without ``update`` everything is copied. With ``delete``, target files
    not produced by any source file are deleted (see the module docstring for what is
    below an ``untar`` destination)."""

    name = "update"

    def diff(self, dataset: Dataset, files: Sequence[CopyableFile], target: TargetState,
             config: Mapping[str, Any]) -> DatasetDiff:
        out = DatasetDiff()
        update = _flag(config, "update", True)
        for f in files:
            (out.skipped if update and self.up_to_date(f, target) else out.to_copy).append(f)
        if _flag(config, "delete", False):
            kept = _Kept(files, out.to_copy, target)
            out.deletes = [path for path in target.files if not kept.keeps(path)]
        return out

    @staticmethod
    def up_to_date(f: CopyableFile, target: TargetState) -> bool:
        if f.converters:
            return target.recorded(f.destination, directory="untar" in f.converters) == f.id
        t = target.files.get(f.destination)
        if t is None or t.size != f.size:
            return False
        recorded = target.manifest.get(f.destination)
        if recorded is not None:  # the manifest knows which version the output is: times say less
            return recorded == f.id
        if f.checksum and t.checksum and f.checksum.split(":", 1)[0] == t.checksum.split(":", 1)[0]:
            return f.checksum == t.checksum
        tolerance = mtime_tolerance(t.mtime, f.mtime)
        if "mtime" in f.preserve:
            return abs(t.mtime - f.mtime) <= tolerance
        return t.mtime >= f.mtime - tolerance  # the target's mtime is when it was copied


POLICIES: dict[str, Callable[[], DiffPolicy]] = {"update": UpdatePolicy}
"""Diff policies by name (a config key may choose one per job or dataset)."""


def policy_for(name: str) -> DiffPolicy:
    try:
        return POLICIES[name]()
    except KeyError:
        raise ValueError(f"unknown diff policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None


PolicyChoice = DiffPolicy | str | Callable[[Dataset], DiffPolicy] | None


# ------------------------------------------------------------------ diff


def diff(files: Iterable[CopyableFile], target_fs: fsspec.AbstractFileSystem, target_root: str,
         datasets: Sequence[Dataset], config: Mapping[str, Any], policy: PolicyChoice = None, *,
         staging: Staging | None = None) -> DiffResult:
    """Diff ``files`` (the listings of ``datasets``) with ``target_root`` on ``target_fs``.

    ``policy``: a :class:`DiffPolicy` for every dataset, its name in :data:`POLICIES`, a
    function choosing one per dataset, or ``None`` for :class:`UpdatePolicy`. ``staging``:
    the job's :class:`.Staging` (whose manifests are read; pass the publisher's),
    ``Staging(target_root)`` when ``None``. The target is listed once per dataset (and
    only when ``update`` or ``delete`` needs it), the manifest read once per dataset with
    ``update``. ``deletes`` has an entry for each file set with something
    to delete, sorted.
    """
    target_root = _norm_root(target_root)
    if staging is None:
        staging = Staging(target_root)
    elif staging.target_root != target_root:
        raise ValueError(f"diff: the staging is under {staging.target_root!r}, not the target root {target_root!r}")
    update, delete = _flag(config, "update", True), _flag(config, "delete", False)
    by_dataset: dict[str, list[CopyableFile]] = {d.name: [] for d in datasets}
    for f in files:
        try:
            by_dataset[f.dataset].append(f)
        except KeyError:
            raise ValueError(f"{f.origin!r} belongs to dataset {f.dataset!r}, which is not among the datasets "
                             f"given to diff") from None
    scope = _Scope(config)
    result = DiffResult()
    for dataset in datasets:
        listing = by_dataset[dataset.name]
        single = any(f.origin == dataset.root for f in listing)
        target = TargetState({})
        if update or delete:
            target = _target_state(target_fs, target_root, dataset, listing, single)
            if update and listing:
                target.manifest = read_manifest(target_fs, staging, dataset.name)
        chosen = _choose(policy, dataset)
        verdict = chosen.diff(dataset, listing, target, config)
        if len(verdict.to_copy) + len(verdict.skipped) != len(listing):
            raise ValueError(f"diff policy {getattr(chosen, 'name', type(chosen).__name__)!r} lost or duplicated "
                             f"files of dataset {dataset.name!r}")
        result.to_copy.extend(verdict.to_copy)
        result.skipped.extend(verdict.skipped)
        if delete and not single:
            safe = scope.deletable(dataset, listing, verdict.deletes, to_copy=verdict.to_copy, target=target)
            if safe:
                result.deletes[dataset.name] = safe
    return result


def _choose(policy: PolicyChoice, dataset: Dataset) -> DiffPolicy:
    if policy is None:
        return UpdatePolicy()
    if isinstance(policy, str):
        return policy_for(policy)
    if hasattr(policy, "diff"):
        return policy  # type: ignore[return-value]
    return policy(dataset)


def _target_state(fs: fsspec.AbstractFileSystem, target_root: str, dataset: Dataset,
                  listing: Sequence[CopyableFile], single: bool) -> TargetState:
    """One recursive listing of the dataset's destination prefix (of each destination for a
    one-file dataset, whose prefix would be the file itself)."""
    prefixes = sorted({f.destination for f in listing}) if single else [dataset.name]
    files: dict[str, TargetFile] = {}
    for prefix in prefixes:
        for name, info in _find(fs, _join(target_root, prefix)).items():
            rel = _relative_to(name, target_root)
            if not rel or rel.split("/", 1)[0] == _CONTROL_TOP:
                continue
            files[rel] = TargetFile(rel, int(info.get("size") or 0), _mtime(info), _fs_checksum(info))
    return TargetState(files)


class _Scope:
    """Which target paths a job may delete (see :meth:`deletable`)."""

    def __init__(self, config: Mapping[str, Any]):
        self.pattern = glob_matcher(config.get("file.pattern") or "**")
        self.dates = date_filter(config.get("partition.date.format") or "", config.get("date.range.start") or "",
                                 config.get("date.range.end") or "")
        self.sidecar = _flag(config, "checksum.sidecar", False)
        conv = config.get("converters") or ()
        self.converters = tuple(c.strip() for c in conv.split(",") if c.strip()) if isinstance(conv, str) else \
            tuple(conv)

    def deletable(self, dataset: Dataset, listing: Sequence[CopyableFile], paths: Iterable[str], *,
                  to_copy: Iterable[CopyableFile] | None = None, target: TargetState | None = None) -> list[str]:
        """``paths`` (relative to the target root) that lie below the dataset's prefix, are in the
        job's scope (``file.pattern`` -- matched against the names a source file may have had
        before converters --, the date range; below an ``untar`` destination, its archive's
        scope), have no hidden component (so never ``_copycat/``), are not sidecars (with
        ``checksum.sidecar``) and are not written or kept by this copy (:class:`_Kept`;
        ``to_copy``: the files the copy writes, ``None``: none -- an archive's tree is then
        kept whole unless ``target``'s manifest vouches for its entries; ``target``: the
        dataset's target state). Sorted."""
        kept = _Kept(listing, to_copy or (), target or TargetState({}))
        out = []
        for rel in set(paths):
            in_dataset = _relative_to(rel, dataset.name) if dataset.name else rel
            if not in_dataset or _hidden(rel) or rel.split("/", 1)[0] == _CONTROL_TOP:
                continue
            if kept.keeps(rel):
                continue
            if self.sidecar and is_sidecar(rel):
                continue
            if kept.in_archive(rel):
                out.append(rel)  # in its archive's scope
                continue
            if self.dates is not None and not self.dates(in_dataset, rel):
                continue
            if self.pattern is not None:
                head, name = posixpath.split(in_dataset)
                candidates = source_name_candidates(name, self.converters)
                if not any(self.pattern(posixpath.join(head, c) if head else c) for c in candidates):
                    continue
            out.append(rel)
        return sorted(out)


class _Kept:
    """What deletions leave alone in a dataset whose listing is ``files``, of which ``to_copy``
    are copied: every file's destination; below the destination of an ``untar`` archive
    that is up to date, the entries the manifest records with the archive's id (the
    others there are strays: deletable); below the destination of an archive that is
    copied again, nothing (the publisher does not delete what the new version writes);
    below the destination of an archive that a policy skipped without the manifest's
    word, everything."""

    def __init__(self, files: Iterable[CopyableFile], to_copy: Iterable[CopyableFile], target: TargetState):
        files = list(files)
        copied = {f.id for f in to_copy}
        self.expected = {f.destination for f in files}
        self.archives: set[str] = set()  # untar destinations
        self.whole: set[str] = set()  # untar destinations kept whole
        for f in files:
            if "untar" not in f.converters:
                continue
            self.archives.add(f.destination)
            if f.id in copied:
                continue
            if target.recorded(f.destination, directory=True) == f.id:
                prefix = f.destination + "/"
                self.expected |= {p for p, i in target.manifest.items() if i == f.id and p.startswith(prefix)}
            else:
                self.whole.add(f.destination)

    def keeps(self, path: str) -> bool:
        if path in self.expected:
            return True
        return bool(self.whole) and any(a in self.whole for a in _ancestors(path))

    def in_archive(self, path: str) -> bool:
        """Whether ``path`` lies below an ``untar`` destination."""
        return bool(self.archives) and any(a in self.archives for a in _ancestors(path))


def _flag(config: Mapping[str, Any], key: str, default: bool) -> bool:
    value = config.get(key, default)
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return bool(value)
