"""Publishing file sets: staged output -> the published tree, all or nothing, through a write-ahead log.

A *file set* is the files of one dataset (see :mod:`.model`); it is published
whole or not at all. The copier has staged each file under
``Staging.file_dir(f)`` (mirroring the destination) and written its done marker
``_done.json`` last::

    {"id": <file id>, "origin": ..., "outputs": [{"path": <relative to the target root>, "size": n}, ...],
     "checksum": "md5:..." | null, "bytes": n}

so a file is *staged* iff its marker exists and carries its id -- or, for a plain
file staged flat on a local target (``<set dir>/<file id>.data``, :mod:`.staged`),
iff a done journal of the set dir records it and the data file has the recorded
size; the log then renames that file, and nothing of the file is left to drop
(the journals go once no record in them names a staged file). A file set is
one job's (``Staging.job``; see :mod:`.model`): its staging, log and manifest are
keyed by the job and the dataset, so jobs sharing a target never drop or replay
each other's work; and the runs of one job (backfill windows of one dataset) drop
only the staging of the files they publish.

Protocol, per file set (:meth:`Publisher.publish`):

1. a publish log the file set left behind (a crash) is replayed first;
2. every file of the set must be staged: split files whose ``_parts`` are all
   there are concatenated first (``copier.finish_split``), each marker is read,
   and each output it names must be in the staging listing with its size. If
   any file is not staged (its copy failed), **nothing** of the set is
   published, its staging is kept -- the next run finds the already copied
   files by id and copies only the rest (Gobblin's ``RecoveryHelper``, without
   moving files: staging *is* the persist directory) -- and the result names
   the missing files by origin. A file that is not staged but already
   published -- the manifest records its id at its destination (for ``untar``:
   at its entries below the destination) and those outputs exist: a retried
   publish after a crash, whose leftover log (step 1) finished the job -- counts
   as published (it is in ``files``, ``bytes`` and ``outputs``, and no
   deletion may remove its outputs);
3. the publish log ``Staging.wal(file_set)`` lists every step (below); it is
   written to a temporary name and renamed into place, so it exists whole or
   not at all;
4. the steps are applied in order;
5. the staging directories of the files the log published are removed (the
   file set's directory too when that empties it; staged files of other runs,
   e.g. another backfill window of the same dataset, stay), then the log.

A run calls :meth:`Publisher.recover` before any new work: it replays every
leftover log of its job (steps 4-5), then :meth:`Publisher.drop_stale` drops the
staging that its plan will not publish. Each step is idempotent, so a crash at
any point -- also during a replay -- is repaired by replaying again:

``chown`` / ``chmod`` / ``utime``
    set owner, mode and modification time of a file whose destination is
    exactly one output (``preserve``: owner/group, perm, mtime); applied to
    the *staged* output while it is still there (so the file appears in the
    published tree already with its final attributes, at the same moment as
    its bytes), else to the published one; set again on replay. Only on the
    local filesystem (fsspec has no portable chmod/utime; elsewhere the result
    says so in ``notes``); ``chown`` only when running as root. Untarred
    outputs keep the attributes the copier gave them.
``rename``
    staged output -> ``Staging.final(to)``, creating parent directories. Done
    when the source is gone and the target exists (with the logged size).
``delete``
    a target path (a file, or a directory with everything below it) the
    source no longer has; a missing path is done. Deletions come after the
    renames, except where a path changes type -- the only case where a path
    is briefly absent: a file that becomes a directory (publish ``x/a`` over
    a file ``x``; logged with ``"unless": "directory"`` so that a replay
    after the renames keeps what they made) and a directory that becomes a
    file (publish ``x`` over a directory ``x``; ``"unless": "file"``) are
    deleted first, also when the diff did not list them (an update replaces
    a path whatever its type). An ``untar`` destination holds what its
    archive holds: republishing it deletes the entries of the old version
    (recorded in the manifest) that the new one does not have, and a deletion
    the diff listed below it that the new version writes is left out (a
    replacement).
``manifest``
    ``<target>/_copycat/distcp/manifest/<file set id>.json``, written whole
    (temporary name + rename): ``{destination path: file id}`` for every
    output published so far, the previous manifest minus deletions (and minus
    the old entries of a republished archive) plus this publish. The diff
    uses it to recognise converted outputs (``a.csv`` from ``a.csv.gz``, an
    untarred tree) as up to date.

The log (JSON, paths relative to the target root)::

    {"format": "copycat.distcp.publish-log/1", "file_set": "tables/orders",
     "file_set_id": "<8 hex of the job>-<24 hex>",
     "token": "<UTC time>-<12 hex>", "created": <unix time>, "files": 3, "bytes": 1234, "outputs": 4, "deleted": 1,
     "drop": ["_copycat/distcp/staging/<set id>/<file id>", ...],
     "steps": [
       {"op": "chown", "staged": "_copycat/distcp/staging/<set id>/<file id>/a/b.csv", "path": "a/b.csv",
        "uid": 1000, "gid": 1000, "owner": "u", "group": "g"},
       {"op": "chmod", "staged": "...", "path": "a/b.csv", "mode": 416},
       {"op": "utime", "staged": "...", "path": "a/b.csv", "mtime": 1700000000.5},
       {"op": "rename", "from": "_copycat/distcp/staging/<set id>/<file id>/a/b.csv", "to": "a/b.csv",
        "size": 10, "file": "<file id>"},
       {"op": "delete", "path": "a/old.csv"},  (first, with "unless": "directory"|"file", where a path changes type)
       {"op": "manifest", "path": "_copycat/distcp/manifest/<set id>.json", "entries": {"a/b.csv": "<file id>"}}
     ]}

Visibility: the published tree never holds a partial file -- only complete
staged outputs (done marker written last) are renamed, and temporary files
(log, manifest) live under ``_copycat/``, which readers skip (``_`` prefix).
On the local filesystem a rename is ``os.replace``: atomic, also when it
overwrites (readers see the old or the new file, never neither). HDFS renames
atomically too, but does not overwrite: an existing target is deleted first
(briefly absent, never partial). On object stores (S3, GCS, Azure) fsspec's
``mv`` is a server-side copy + delete: each object still appears whole and an
overwrite replaces it in one step (a reader gets the old or the new object),
but a file set does not appear at one instant -- a reader listing during the
rename phase may see part of the set; the log completes it after a crash.

File sets are independent: each has its own log and staging, and one failing
(not staged, or an I/O error mid-publish) never blocks another
(:meth:`Publisher.publish_all`). One copy job publishes a file set at a time
(Airflow ``max_active_runs=1`` for a job's DAG); two processes publishing the
*same* set concurrently are not supported.

Every write, rename, read and delete of files goes through :class:`airflow_copycat.storage.AtomicFiles`,
the engine the files sink's publish protocol uses too (so the HDFS-safe rename and the durable local
writes are one code for both).

Why over 500 lines: the Gobblin publish of a file set (staging checks, the write-ahead publish log, its
replay after a crash, both staging layouts, the manifest, the tidy-up) is one protocol over one log
format; its filesystem primitives already live in :mod:`airflow_copycat.storage.atomic`.
"""

from __future__ import annotations

import json
import os
import posixpath
import stat
import time
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..connect.errors import ConnectException
from ..storage import AtomicFiles, new_token
from .attempt import ATTEMPT_PREFIX
from .model import CONTROL_DIR, DONE_MARKER, MANIFEST_DIR, PARTS_DIR, CopyableFile, Staging
from .staged import DATA_SUFFIX, compact, data_name, is_journal, read_records, record_size

LOG_FORMAT = "copycat.distcp.publish-log/1"
ATTRIBUTE_OPS = ("chown", "chmod", "utime")


class PublishError(ConnectException):
    """A file set could not be published (or its log replayed); the message names the set and the step.
    A log that was written stays, and the next :meth:`Publisher.recover` finishes it."""






def _bad_relative(path: Any, backslash_ok: bool = True) -> str | None:
    """Why ``path`` cannot be a path relative to the target root, or ``None``. A backslash is
    an ordinary character of a name on POSIX disks, HDFS and object stores; only where it
    separates directories (``backslash_ok=False``: a local Windows disk) is it refused."""
    if not isinstance(path, str) or not path:
        return "is empty or not a string"
    if path.startswith("/") or (not backslash_ok and "\\" in path):
        return "is not a relative path"
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "is not a normalised relative path (empty, '.' or '..' component)"
    if parts[0] == CONTROL_DIR.split("/")[0]:
        return f"is inside the control directory {parts[0]}/"
    return None


def _ancestors(path: str) -> list[str]:
    """``"a/b/c"`` -> ``["a", "a/b"]``."""
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


@dataclass
class _Staged:
    file: CopyableFile
    outputs: list[dict]  # {"path", "size"}
    staged: dict[str, str] | None = None  # output path -> its staged path (full); None: in its file dir
    file_dir: str | None = None  # the file's staging directory (layout 1) to drop once published, if any


class Publisher:
    """Publishes staged file sets under ``staging.target_root`` on ``target_fs`` (any fsspec
    filesystem; ``None``: the local one).

    ``config``: the copy job's parsed config, passed to ``copier.finish_split``; its
    ``block.split.size`` tells how many parts a split file has.
    """

    def __init__(self, target_fs, staging: Staging, *, config: Mapping[str, Any] | None = None):
        if target_fs is None:
            from fsspec.implementations.local import LocalFileSystem

            target_fs = LocalFileSystem()
        self.fs = target_fs
        self.staging = staging
        self.config = dict(config or {})
        self.files = AtomicFiles(target_fs)
        self.local = self.files.local
        self.backslash_ok = not (self.local and "\\" in (os.sep, os.altsep))
        self.root = staging.target_root
        if self.local and not os.path.isabs(self.root):
            raise ValueError(f"distcp: the local target root must be an absolute path, not {self.root!r} "
                             "(fsspec lists local files by absolute path)")

    # ------------------------------------------------------------ paths
    def path(self, rel: str) -> str:
        """The full path of ``rel`` (relative to the target root)."""
        return posixpath.join(self.root, rel)

    def rel(self, path: str) -> str:
        """``path`` (under the target root) relative to the root."""
        prefix = self.root if self.root.endswith("/") else self.root + "/"
        if not path.startswith(prefix):
            raise ValueError(f"{path} is not under the target root {self.root}")
        return path[len(prefix):]

    def manifest_path(self, file_set: str) -> str:
        """``<target>/_copycat/distcp/manifest/<file set id>.json`` (:meth:`.Staging.manifest`)."""
        return self.staging.manifest(file_set)

    def read_manifest(self, file_set: str) -> dict[str, str]:
        """``{destination path: file id}`` of every output published for ``file_set`` ({} if none)."""
        path = self.manifest_path(file_set)
        doc = self._read_json(path, "manifest")
        if doc is None:
            return {}
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in doc.items()):
            raise PublishError(f"distcp: manifest {path} is not a {{path: file id}} object; it was changed outside "
                               "copycat: delete it (the next diff then compares sizes and times only)")
        return doc

    # ------------------------------------------------------------ documents
    def _read_json(self, path: str, what: str) -> Any:
        try:
            doc = self.files.read_json(path)
        except ValueError as e:
            raise PublishError(f"distcp: {what} {path} is not valid JSON ({e}); it is only ever replaced whole, "
                               "so it was changed outside copycat") from None
        if doc is not None and not isinstance(doc, dict):
            raise PublishError(f"distcp: {what} {path} is not a JSON object; it was changed outside copycat")
        return doc

    # ------------------------------------------------------------ recovery
    def _mine(self, set_id: str) -> bool:
        """Whether the file set id ``set_id`` is this job's to recover: its own sets, and (for a
        named job) the sets of no job, which runs before per-job file sets left."""
        return self.staging.owns(set_id) or (bool(self.staging.job) and Staging(self.root).owns(set_id))

    def recover(self) -> list[dict]:
        """Replay every publish log of this job left under ``staging.wal_dir()`` (a crash
        mid-publish), then delete it and the staging of the files it published (other
        jobs' logs are theirs to replay). A log whose write was cut short (temporary name,
        never renamed into place: nothing of it was applied) is deleted. Call before any
        new work. Returns one entry per log: ``{"file_set", "file_set_id", "log", "status":
        "replayed" | "discarded" | "failed", "steps", "renamed", "deleted", "seconds" | "error"}``;
        a log that fails to replay stays (and blocks only its own file set)."""
        wal_dir = self.staging.wal_dir()
        out: list[dict] = []
        for path in sorted(self.files.find(wal_dir)):
            name = posixpath.basename(path)
            if not self._mine(name.split(".", 1)[0]):
                continue
            if name.endswith(".tmp"):
                self.files.delete(path)
                out.append({"file_set": None, "file_set_id": name.split(".", 1)[0], "log": path,
                            "status": "discarded"})
            elif name.endswith(".json"):
                try:
                    out.append(self._replay(path))
                except Exception as e:  # noqa: BLE001 - each log is independent
                    try:
                        file_set = self._load_log(path).get("file_set")
                    except Exception:  # noqa: BLE001 - the error above says why
                        file_set = None
                    out.append({"file_set": file_set, "file_set_id": name[:-len(".json")], "log": path,
                                "status": "failed", "error": f"{e}"})
        manifest_dir = posixpath.join(self.staging.control, MANIFEST_DIR)
        for path in self.files.find(manifest_dir):  # manifest writes cut short (their log rewrites them)
            if path.endswith(".tmp") and self._mine(posixpath.basename(path).split(".", 1)[0]):
                self.files.delete(path)
        return out

    def _load_log(self, path: str) -> dict:
        log = self._read_json(path, "publish log")
        if log is None:
            raise PublishError(f"distcp: publish log {path} vanished while it was read")
        if log.get("format") != LOG_FORMAT or not isinstance(log.get("steps"), list):
            raise PublishError(f"distcp: {path} is not a publish log of format {LOG_FORMAT}; it was changed "
                               "outside copycat: restore it, or delete it and its file set's staging to copy the "
                               "set again")
        return log

    def _replay(self, path: str) -> dict:
        """Apply the log at ``path`` again, then drop the staged file directories it names and the log."""
        log = self._load_log(path)
        t0 = time.monotonic()
        counts = self._apply(log)
        self._finish(log, path)
        return {"file_set": log.get("file_set"), "file_set_id": log.get("file_set_id"), "log": path,
                "status": "replayed", **counts,
                "seconds": round(time.monotonic() - t0, 3)}

    # ------------------------------------------------------------ publishing
    def publish(self, file_set: str, files: list[CopyableFile], deletes: Iterable[str] = (), *,
                preserve_attrs: bool = True) -> dict:
        """Publish ``file_set`` (its ``files`` and ``deletes``, paths relative to the target
        root) if every file is staged; else publish nothing, keep the staging, and list the
        missing files by origin. See the module docstring for the steps.

        A file that is not staged but already published (the manifest records its id at its
        output(s), which exist: a retry after a crash) counts as published, see the module
        docstring. Nothing is dropped from the staging but the directories of the files this
        call publishes (the staging of other runs' files stays: :meth:`drop_stale`).

        Result: ``{"file_set", "status": "published" | "not_published", "files", "bytes",
        "outputs", "deleted", "missing": [origins], "errors": {origin: why}, "notes",
        "replayed_log", "already_published", "seconds"}`` (``files``/``bytes``/``outputs``
        count the already published files too; ``already_published``: how many there were).
        Raises :class:`PublishError` when a step fails (the log stays, the next
        :meth:`recover` finishes it) and ``ValueError`` for a request that cannot be right
        (a file of another set, a deletion of a published output)."""
        t0 = time.monotonic()
        files = list(files)
        deletes = sorted(set(deletes))
        result: dict[str, Any] = {"file_set": file_set, "status": "not_published", "files": 0, "bytes": 0,
                                  "outputs": 0, "deleted": 0, "missing": [], "errors": {}, "notes": [],
                                  "replayed_log": False, "already_published": 0, "seconds": 0.0}
        self._validate_request(file_set, files, deletes)

        wal = self.staging.wal(file_set)
        if self.files.exists(wal):  # recover() was not called, or failed on this set: finish the old publish first
            self._replay(wal)
            result["replayed_log"] = True

        if not files and not deletes:
            result.update(status="published", seconds=round(time.monotonic() - t0, 3))
            return result

        staged, errors = self._check_staged(file_set, files)
        manifest = self.read_manifest(file_set)
        published: list[_Staged] = []
        for f in files:
            if f.origin in errors:
                outputs = self._published_outputs(f, manifest)
                if outputs is not None:
                    published.append(_Staged(f, outputs, {}))
                    del errors[f.origin]
        if errors:
            result["missing"] = sorted(errors)
            result["errors"] = {origin: errors[origin] for origin in sorted(errors)}
            result["seconds"] = round(time.monotonic() - t0, 3)
            return result

        log, notes = self._plan(file_set, staged, deletes, preserve_attrs, published=published, manifest=manifest)
        if log is not None:
            self.files.write_json(wal, log, log["token"])
            self._after_log_written(wal)
            self._apply(log)
            self._finish(log, wal)
        done = [out for s in published for out in s.outputs]
        result.update(status="published", files=len(staged) + len(published),
                      bytes=(log["bytes"] if log else 0) + sum(out["size"] or 0 for out in done),
                      outputs=(log["outputs"] if log else 0) + len(done),
                      deleted=log["deleted"] if log else 0, already_published=len(published), notes=notes,
                      seconds=round(time.monotonic() - t0, 3))
        return result

    def _published_outputs(self, f: CopyableFile, manifest: Mapping[str, str]) -> list[dict] | None:
        """The outputs of ``f`` when it is already published -- the manifest records ``f.id`` at
        its destination (``untar``: at one entry below it, at least) and every such output
        exists (a plain file with its size) -- else ``None``."""
        if "untar" in f.converters:
            prefix = f.destination + "/"
            paths = sorted(p for p, ident in manifest.items() if ident == f.id and p.startswith(prefix))
        else:
            paths = [f.destination] if manifest.get(f.destination) == f.id else []
        if not paths:
            return None
        outputs = []
        for rel in paths:
            path = self.path(rel)
            try:
                if not self.files.exists(path):
                    return None
                size = self.files.size(path)
            except FileNotFoundError:
                return None
            if not f.converters and size is not None and size != f.size:
                return None
            outputs.append({"path": rel, "size": size})
        return outputs

    def publish_all(self, work: Mapping[str, tuple[list[CopyableFile], Iterable[str]]], *,
                    preserve_attrs: bool = True) -> list[dict]:
        """:meth:`publish` each ``{file_set: (files, deletes)}``; a set that raises gets
        ``status: "failed"`` and ``error`` and does not stop the others."""
        results = []
        for file_set, (files, deletes) in work.items():
            try:
                results.append(self.publish(file_set, files, deletes, preserve_attrs=preserve_attrs))
            except Exception as e:  # noqa: BLE001 - file sets are independent
                results.append({"file_set": file_set, "status": "failed", "files": 0, "bytes": 0, "deleted": 0,
                                "missing": [], "error": f"{type(e).__name__}: {e}", "seconds": 0.0})
        return results

    def _after_log_written(self, wal: str) -> None:
        """Hook between writing the log and applying it (tests kill the process here)."""

    def _validate_request(self, file_set: str, files: list[CopyableFile], deletes: list[str]) -> None:
        for f in files:
            if f.file_set != file_set:
                raise ValueError(f"distcp: {f.origin} belongs to file set {f.file_set!r}, not {file_set!r}")
            why = _bad_relative(f.destination, self.backslash_ok)
            if why:
                raise ValueError(f"distcp: destination {f.destination!r} of {f.origin} {why}")
        for d in deletes:
            why = _bad_relative(d, self.backslash_ok)
            if why:
                raise ValueError(f"distcp: deletion {d!r} of file set {file_set!r} {why}")
        ids = [f.id for f in files]
        if len(set(ids)) != len(ids):
            raise ValueError(f"distcp: file set {file_set!r} lists a file twice")

    def _check_staged(self, file_set: str, files: list[CopyableFile]) -> tuple[list[_Staged], dict[str, str]]:
        """Which files are staged (done marker with their id, every output there), and why the
        others are not (by origin)."""
        listing = self.files.find(self.staging.file_set_dir(file_set))
        errors: dict[str, str] = {}
        staged: list[_Staged] = []
        markers: dict[str, CopyableFile] = {}
        set_dir = self.staging.file_set_dir(file_set) + "/"
        split_ids = set()  # file ids with staged parts
        file_dirs = set()  # file ids with a staging directory (layout 1)
        journals = []
        for p in listing:
            file_id, _, below = p[len(set_dir):].partition("/")
            if below:
                file_dirs.add(file_id)
            elif is_journal(file_id):
                journals.append(p)
            if below.startswith(PARTS_DIR + "/"):
                split_ids.add(file_id)
        records = read_records(journals, self.fs.cat_file) if journals else {}
        for f in files:
            flat = self._flat_staged(f, records.get(f.id), listing, set_dir)
            if flat is not None:
                staged.append(_Staged(f, flat[0], flat[1], set_dir + f.id if f.id in file_dirs else None))
                continue
            marker = self.staging.done_marker(f)
            if marker in listing:
                markers[marker] = f
                continue
            if f.id in split_ids:
                why = self._finish_split(f, listing)
                if why:
                    errors[f.origin] = why
                else:
                    markers[marker] = f
                    listing.update(self.files.find(self.staging.file_dir(f)))
                continue
            errors[f.origin] = "not staged (no done marker: its copy did not finish)"
        raw = self._read_many(list(markers))
        for marker, f in markers.items():
            why, outputs = self._read_marker(f, marker, raw.get(marker), listing)
            if why:
                errors[f.origin] = why
            else:
                file_dir = self.staging.file_dir(f)
                staged.append(_Staged(f, outputs, {o["path"]: posixpath.join(file_dir, o["path"]) for o in outputs},
                                      file_dir))
        seen: dict[str, str] = {}
        for s in staged:
            for out in s.outputs:
                other = seen.setdefault(out["path"], s.file.origin)
                if other != s.file.origin:
                    errors[s.file.origin] = f"its output {out['path']} is also the output of {other}"
                    errors[other] = f"its output {out['path']} is also the output of {s.file.origin}"
        return staged, errors

    def _flat_staged(self, f: CopyableFile, record: dict | None, listing: dict[str, dict],
                     set_dir: str) -> tuple[list[dict], dict[str, str]] | None:
        """``(outputs, {output: staged path})`` when ``f`` is staged flat (:mod:`.staged`: a journal
        record of its id, its data file there with the record's size, the record's one output its
        destination), else None (then its file dir is looked at)."""
        if record is None or f.converters:
            return None
        path = set_dir + data_name(f)
        info = listing.get(path)
        size = record_size(record)
        if (info is None or info.get("type") != "file" or info.get("islink") or size is None
                or int(info.get("size", -1)) != size or record["outputs"][0].get("path") != f.destination):
            return None
        return [{"path": f.destination, "size": size}], {f.destination: path}

    def _read_many(self, paths: list[str]) -> dict[str, Any]:
        """``{path: bytes or the exception}``; concurrent on remote filesystems (one request per marker)."""
        def read(path):
            try:
                return self.fs.cat_file(path)
            except Exception as e:  # noqa: BLE001 - reported per file
                return e
        if self.local or len(paths) < 8:
            return {p: read(p) for p in paths}
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(16) as pool:
            return dict(zip(paths, pool.map(read, paths)))

    def _finish_split(self, f: CopyableFile, listing: dict[str, dict]) -> str | None:
        """Concatenate the parts of split file ``f`` (``copier.finish_split``); why not, or ``None``."""
        split = int(self.config.get("block.split.size") or 0)
        if split > 0:
            n = max(1, -(-int(f.size) // split))
            absent = [k for k in range(n) if self.staging.part_path(f, k) not in listing]
            if absent:
                return (f"split file: {len(absent)} of its {n} parts not staged (part {absent[0]} first): "
                        "their copy did not finish")
        try:
            from .copier import finish_split
        except ImportError as e:
            return f"split file: cannot concatenate its parts ({e})"
        try:
            done = finish_split(f, self.fs, self.staging, self.config)
        except Exception as e:  # noqa: BLE001 - the file is not staged; the set waits for the next run
            return f"split file: concatenating its parts failed: {type(e).__name__}: {e}"
        if isinstance(done, dict) and done.get("status") == "failed":
            return f"split file: concatenating its parts failed: {done.get('error')}"
        return None

    def _read_marker(self, f: CopyableFile, marker: str, raw: Any, listing: dict[str, dict]):
        if isinstance(raw, Exception) or raw is None:
            return f"done marker {marker} unreadable: {raw}", []
        try:
            doc = json.loads(raw)
        except ValueError as e:
            return f"done marker {marker} is not valid JSON ({e})", []
        if not isinstance(doc, dict) or doc.get("id") != f.id:
            return (f"done marker {marker} is of file id {doc.get('id') if isinstance(doc, dict) else None!r}, "
                    f"not {f.id} (another version of the file was staged)"), []
        outputs = doc.get("outputs")
        if not isinstance(outputs, list):
            return f"done marker {marker} has no list of outputs", []
        file_dir = self.staging.file_dir(f)
        checked = []
        for out in outputs:
            rel = out.get("path") if isinstance(out, dict) else None
            why = _bad_relative(rel, self.backslash_ok)
            if why:
                return f"its output {rel!r} {why}", []
            if rel != f.destination and not rel.startswith(f.destination + "/"):
                return f"its output {rel} is not its destination {f.destination} or below it", []
            staged = posixpath.join(file_dir, rel)
            if staged == marker or staged.startswith(posixpath.join(file_dir, PARTS_DIR) + "/"):
                return f"its output {rel} collides with the staging control files", []
            info = listing.get(staged)
            if info is None:
                if not self.files.exists(staged):
                    return f"staged output {staged} is missing", []
                info = {}
            size = out.get("size")
            if size is not None and info.get("type") == "file" and not info.get("islink") \
                    and info.get("size") is not None and int(info["size"]) != int(size):
                return f"staged output {staged} has {info['size']} bytes, its done marker says {size}", []
            checked.append({"path": rel, "size": None if size is None else int(size)})
        return None, checked

    def _plan(self, file_set: str, staged: list[_Staged], deletes: list[str], preserve_attrs: bool, *,
              published: list[_Staged] = (), manifest: Mapping[str, str] | None = None):
        """The log of publishing ``staged`` and ``deletes`` (``None`` when there is nothing to do),
        and notes for the result. ``published``: files of the set already published (their
        outputs are never deleted); ``manifest``: the set's current manifest (read when
        ``None``)."""
        notes: list[str] = []
        manifest = self.read_manifest(file_set) if manifest is None else manifest
        outputs = {out["path"] for s in staged for out in s.outputs}
        delete_set = set(deletes)
        # An untar destination holds what its archive holds: the entries of the old version that the new one
        # does not write are deleted (they leave the manifest with it), and a listed deletion of a path that the
        # new version writes is a replacement, not a deletion.
        archives = {s.file.destination: s.file for s in staged if "untar" in s.file.converters}
        if archives:
            ids = {s.file.id for s in [*staged, *published]}
            for path, ident in manifest.items():
                archive = next((archives[a] for a in (path, *_ancestors(path)) if a in archives), None)
                if archive is not None and path not in outputs and (ident == archive.id or ident not in ids):
                    delete_set.add(path)
            delete_set -= {d for d in delete_set & outputs if any(a in archives for a in _ancestors(d))}
        # the outputs of files already published (a retried publish) stay
        done = {out["path"] for s in published for out in s.outputs}
        delete_set -= done | {a for p in done for a in _ancestors(p)}
        deletes = sorted(delete_set)
        if not staged and not deletes:
            return None, []
        both = sorted(outputs & delete_set)
        if both:
            raise ValueError(f"distcp: file set {file_set!r} both publishes {both[0]} and deletes {both[0]}")
        # Paths that change type go before the renames: a file (or link) that becomes a directory
        # (publish "x/a" where the target has a file "x") is deleted unless it is a directory -- so a replay
        # after the renames keeps them; a directory that becomes a file (publish "x" where the target has a
        # directory "x") is deleted unless it is a file. On the local filesystem the target is looked at
        # (one stat per output and directory); object stores hold "x" and "x/a" side by side.
        ancestors = {a for o in outputs for a in _ancestors(o)}
        replaced_files = ancestors & delete_set
        replaced_dirs: set[str] = set()
        if self.local:
            replaced_files |= {a for a in ancestors if os.path.lexists(self.path(a)) and not self.files.isdir(self.path(a))}
            replaced_dirs = {o for o in outputs if self.files.isdir(self.path(o))}
        for a in sorted(replaced_files - delete_set):
            notes.append(f"the file {a} becomes a directory: replaced")
        for o in sorted(replaced_dirs):
            notes.append(f"the directory {o} becomes a file: replaced")
        emptied = {d for d in deletes if any(a in outputs for a in _ancestors(d))}
        early = replaced_files | replaced_dirs | emptied
        attrs: list[dict] = []
        renames: list[dict] = []
        is_root = hasattr(os, "geteuid") and os.geteuid() == 0
        for s in sorted(staged, key=lambda s: s.file.destination):
            f = s.file
            if s.staged is None:  # staged in its file dir (layout 1)
                s = _Staged(f, s.outputs, {o["path"]: posixpath.join(self.staging.file_dir(f), o["path"])
                                           for o in s.outputs}, self.staging.file_dir(f))
            wanted = set(f.preserve) if preserve_attrs else set()
            single = len(s.outputs) == 1 and s.outputs[0]["path"] == f.destination
            if wanted and not single and s.outputs:
                notes.append("attributes of expanded outputs (untar) are the ones the copier staged them with")
            elif wanted and single and not self.local:
                notes.append(f"attributes ({', '.join(sorted(wanted))}) not set: fsspec offers no chmod/utime/chown "
                             f"on {self.fs.protocol!r} filesystems")
            elif wanted and single:
                rel = s.outputs[0]["path"]
                common = {"staged": self.rel(s.staged[rel]), "path": rel}
                if wanted & {"owner", "group"}:
                    step = self._chown_step(f, wanted, is_root, notes)
                    if step:
                        attrs.append({"op": "chown", **common, **step})
                if "perm" in wanted and f.mode is not None:
                    attrs.append({"op": "chmod", **common, "mode": stat.S_IMODE(int(f.mode))})
                if "mtime" in wanted:
                    attrs.append({"op": "utime", **common, "mtime": float(f.mtime)})
            for out in sorted(s.outputs, key=lambda o: o["path"]):
                renames.append({"op": "rename", "from": self.rel(s.staged[out["path"]]),
                                "to": out["path"], "size": out["size"], "file": f.id})
        manifest = {p: i for p, i in manifest.items()
                    if p not in delete_set and not any(a in delete_set for a in _ancestors(p))}
        manifest.update({out["path"]: s.file.id for s in staged for out in s.outputs})
        steps = (attrs
                 + [{"op": "delete", "path": d, "unless": "directory"} for d in sorted(replaced_files)]
                 + [{"op": "delete", "path": d, "unless": "file"} for d in sorted(replaced_dirs)]
                 + [{"op": "delete", "path": d} for d in sorted(emptied - replaced_files)]
                 + renames
                 + [{"op": "delete", "path": d} for d in deletes if d not in early])
        steps.append({"op": "manifest", "path": self.rel(self.manifest_path(file_set)),
                      "entries": dict(sorted(manifest.items()))})
        log = {
            "format": LOG_FORMAT,
            "file_set": file_set,
            "file_set_id": self.staging.set_id(file_set),
            "token": new_token(),
            "created": time.time(),
            "files": len(staged),
            "bytes": sum(out["size"] or 0 for s in staged for out in s.outputs),
            "outputs": len(renames),
            "deleted": len(deletes),
            "drop": sorted({self.rel(s.file_dir if s.staged is not None else self.staging.file_dir(s.file))
                            for s in staged if s.file_dir or s.staged is None}),
            "steps": steps,
        }
        return log, sorted(set(notes))

    def _chown_step(self, f: CopyableFile, wanted: set[str], is_root: bool, notes: list[str]) -> dict | None:
        if not is_root:
            notes.append("owner/group not set: only root can change them")
            return None
        import grp
        import pwd

        uid = gid = -1
        if "owner" in wanted and f.owner:
            try:
                uid = pwd.getpwnam(f.owner).pw_uid
            except KeyError:
                if not f.owner.isdigit():
                    notes.append(f"owner {f.owner!r} unknown on this host: not set")
                else:
                    uid = int(f.owner)
        if "group" in wanted and f.group:
            try:
                gid = grp.getgrnam(f.group).gr_gid
            except KeyError:
                if not f.group.isdigit():
                    notes.append(f"group {f.group!r} unknown on this host: not set")
                else:
                    gid = int(f.group)
        if uid == -1 and gid == -1:
            return None
        return {"uid": uid, "gid": gid, "owner": f.owner, "group": f.group}

    # ------------------------------------------------------------ applying
    def _apply(self, log: dict) -> dict:
        counts = {"steps": 0, "renamed": 0, "deleted": 0}
        for step in log["steps"]:
            self._apply_step(step, log)
            counts["steps"] += 1
            counts["renamed"] += step.get("op") == "rename"
            counts["deleted"] += step.get("op") == "delete"
        return counts

    def _apply_step(self, step: dict, log: dict) -> None:
        """Apply one logged step; idempotent (a step already done is done again or skipped)."""
        op = step.get("op")
        where = f"file set {log.get('file_set')!r}, step {op} {step.get('to') or step.get('path')}"
        try:
            if op == "rename":
                self._step_rename(step, log)
            elif op in ATTRIBUTE_OPS:
                self._step_attribute(step, log)
            elif op == "delete":
                path = self.path(step["path"])
                unless = step.get("unless")
                if unless == "directory" and self.files.isdir(path):
                    pass  # a file replaced by a directory: the directory is what this publish made
                elif unless == "file" and self.files.exists(path) and not self.files.isdir(path):
                    pass  # a directory replaced by a file: the file is what this publish made
                else:
                    self.files.delete(path)
            elif op == "manifest":
                self.files.write_json(self.path(step["path"]), step["entries"], log["token"])
            else:
                raise PublishError(f"distcp: unknown step {op!r} in the publish log of {log.get('file_set')!r}")
        except PublishError:
            raise
        except OSError as e:
            raise PublishError(f"distcp: publishing {where} failed: {type(e).__name__}: {e}. The publish log "
                               f"{self.staging.wal(log.get('file_set', ''))} stays; the next run replays it") from e

    def _step_rename(self, step: dict, log: dict) -> None:
        src, dst = self.path(step["from"]), self.path(step["to"])
        if self.local:  # the usual case in one system call; anything else (done already, no parent, a
            try:        # directory in the way) as on any filesystem, below
                self.files.rename(src, dst)
                return
            except OSError:
                pass
        if self.files.exists(src):
            if self.local and os.path.isdir(dst) and not os.path.islink(dst) and not os.path.isdir(src):
                try:  # a directory that becomes a file: the deletions before emptied it
                    os.rmdir(dst)
                except OSError as e:
                    raise PublishError(
                        f"distcp: file set {log.get('file_set')!r} publishes the file {step['to']}, but the target "
                        f"has a directory there that is not empty ({e}); delete it (or list what is below it in "
                        "the deletions) and rerun") from e
            self.files.makedirs(posixpath.dirname(dst))
            try:
                self.files.rename(src, dst)
            except FileNotFoundError:  # a parent directory removed meanwhile (another set's deletion)
                self.files.makedirs(posixpath.dirname(dst))
                self.files.rename(src, dst)
            return
        if not self.files.exists(dst):
            raise PublishError(
                f"distcp: the publish log of file set {log.get('file_set')!r} renames {src} to {dst}, but neither "
                "exists: something outside copycat removed them. Delete the log "
                f"{self.staging.wal(log.get('file_set', ''))} and the set's staging; the next run copies it again")
        size = step.get("size")
        if size is not None:
            actual = self.files.size(dst)
            if actual is not None and actual != int(size):
                raise PublishError(
                    f"distcp: the publish log of file set {log.get('file_set')!r} renamed {src} to {dst} "
                    f"({size} bytes), but {dst} now has {actual} bytes: it was changed after the rename, outside "
                    "this publish. Delete the log and rerun the copy")

    def _step_attribute(self, step: dict, log: dict) -> None:
        if not self.local:
            return  # never logged for other filesystems
        path = self.path(step["staged"])
        if not os.path.lexists(path):
            path = self.path(step["path"])
            if not os.path.lexists(path):
                raise PublishError(f"distcp: the publish log of file set {log.get('file_set')!r} sets attributes "
                                   f"of {step['path']}, but neither it nor its staged copy exists")
        op = step["op"]
        if op == "chown":
            os.chown(path, int(step["uid"]), int(step["gid"]), follow_symlinks=False)
        elif op == "chmod":
            os.chmod(path, int(step["mode"]))
        else:
            st = os.stat(path)
            os.utime(path, ns=(st.st_atime_ns, int(round(float(step["mtime"]) * 1e9))))

    def _finish(self, log: dict, wal: str) -> None:
        """Drop the staged file directories the log published (and their file set's directory when
        that empties it), then the log (if it is still this one). Other staged files of the set
        stay (another run's, e.g. another backfill window's, or files of a failed run)."""
        staging_prefix = self.staging.staging_dir() + "/"
        paths = []
        for rel in log.get("drop", []):
            path = self.path(rel) if isinstance(rel, str) else ""
            parts = path[len(staging_prefix):].split("/") if path.startswith(staging_prefix) else []
            if len(parts) != 2 or any(x in ("", ".", "..") for x in parts):  # <set id>/<file id>
                raise PublishError(f"distcp: the publish log {wal} drops {rel!r}, which is not a staged file's "
                                   "directory; the log was changed outside copycat")
            paths.append(path)
        if self.local and len(paths) > 8:  # directories of different files: removed side by side
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(4) as pool:
                list(pool.map(self._drop, paths))
        else:
            for path in paths:
                self._drop(path)
        parents = {posixpath.dirname(path) for path in paths}
        set_id = log.get("file_set_id")
        if self.local and isinstance(set_id, str) and set_id and "/" not in set_id and set_id not in (".", ".."):
            parents.add(staging_prefix + set_id)  # files staged flat leave only journals there
        for parent in sorted(parents):
            if self.local:
                compact(parent, drop_temps=False)
            else:
                self._drop_if_empty(parent)
        current = self._read_json(wal, "publish log")
        if current is not None and current.get("token") == log.get("token"):
            self.files.delete(wal)
            self.files.sync_dir(posixpath.dirname(wal))

    def _drop(self, path: str) -> None:
        try:
            self.files.delete(path)
        except OSError as e:
            raise PublishError(f"distcp: could not delete staging {path}: {e}") from e

    def _drop_if_empty(self, directory: str) -> bool:
        """Remove the staging directory ``directory`` if no file is left below it."""
        if self.local:
            try:
                os.rmdir(directory)
            except OSError:
                return False
            return True
        try:
            if self.files.find(directory):
                return False
            self.fs.rm(directory, recursive=True)
        except (FileNotFoundError, OSError):
            return False
        return True

    def _ls(self, directory: str) -> list[str]:
        """The entries of ``directory`` (full paths; ``[]`` when there is no such directory)."""
        try:
            if not self.local:
                self.fs.invalidate_cache(directory)
            return sorted(p.rstrip("/") for p in self.fs.ls(directory, detail=False))
        except (FileNotFoundError, NotADirectoryError):
            return []

    # ------------------------------------------------------------ cleanup
    def drop_stale(self, current: Mapping[str, Iterable[str]], *,
                   listed: Mapping[str, Iterable[str]] | None = None) -> list[str]:
        """Drop this job's staging that no publish will use; returns the dropped directories.

        Call at plan time, after :meth:`recover` and the diff. ``current``: ``{file set: ids of
        the files the plan copies}`` for **every** file set of the plan (every dataset found;
        an empty list when nothing of it is copied). Dropped:

        * the staging of this job's file sets not in ``current`` (datasets that vanished);
        * in a set of ``current``, the staged files whose id the plan does not copy: a file
          that became up to date, an old version of a file that changed (a new id) or left
          the source. When the job selects a date range (``partition.date.format`` in the
          config), a run lists only part of each set and staged files of other windows
          must stay: then only the staged files whose done marker names an origin in
          ``listed`` (``{file set: origins this run listed}``) are dropped (without
          ``listed``, none), and the leftovers of copies that never finished (no done
          marker, no byte ranges of a split file: nothing a rerun could reuse).

        Other jobs' staging (:meth:`.Staging.owns`) and the staging of a set whose publish
        log is still there (it failed to replay and needs its files) are never touched."""
        partial = bool(self.config.get("partition.date.format"))
        wanted = {self.staging.set_id(file_set): (file_set, {str(i) for i in ids})
                  for file_set, ids in current.items()}
        logs = {posixpath.basename(p).split(".", 1)[0] for p in self._ls(self.staging.wal_dir())}
        dropped: list[str] = []
        for set_dir in self._ls(self.staging.staging_dir()):
            set_id = posixpath.basename(set_dir)
            if not self.staging.owns(set_id) or set_id in logs:
                continue
            if set_id not in wanted:
                self._drop(set_dir)
                dropped.append(set_dir)
                continue
            file_set, ids = wanted[set_id]
            entries = self._ls(set_dir)
            journals = [d for d in entries if is_journal(posixpath.basename(d))]
            temps = [d for d in entries if posixpath.basename(d).startswith(ATTEMPT_PREFIX)]
            skip = set(journals) | set(temps)
            stale = [d for d in entries if d not in skip and _entry_id(d) not in ids]
            if partial:
                origins = set((listed or {}).get(file_set, ()))
                flat = [d for d in stale if d.endswith(DATA_SUFFIX)]
                records = read_records(journals, self.fs.cat_file) if flat and journals else {}
                # a flat file: an old version of a file this run listed, or never recorded (a copy cut short)
                flat = [d for d in flat if _entry_id(d) not in records or records[_entry_id(d)].get("origin") in origins]
                in_dirs = [d for d in stale if not d.endswith(DATA_SUFFIX)]
                markers = self._read_many([posixpath.join(d, DONE_MARKER) for d in in_dirs])
                stale = flat + [d for d in in_dirs
                                if self._stale_in_window(d, markers[posixpath.join(d, DONE_MARKER)], origins)]
            for d in stale + temps:  # temporaries in the set dir: of attempts of earlier runs, which died
                self._drop(d)
            dropped += stale
            if self.local:
                compact(set_dir, drop_temps=True)
            elif stale:
                self._drop_if_empty(set_dir)
        return sorted(dropped)

    def _stale_in_window(self, file_dir: str, marker: Any, origins: set[str]) -> bool:
        """With a date range: whether the staged file at ``file_dir`` (its done marker's bytes, or
        the exception reading it) is of no use to any run -- an old version of a file this run
        listed, or an unfinished copy with nothing to reuse."""
        if isinstance(marker, FileNotFoundError):
            return not self.files.exists(posixpath.join(file_dir, PARTS_DIR))
        return _marker_origin(marker) in origins

    def stale_staging(self, known_file_sets: Iterable[str]) -> list[str]:
        """Staging directories of this job's file sets not in ``known_file_sets`` (datasets that
        vanished from the source, or a plan that changed); :meth:`drop_staging_dir` removes
        one. The staging of known sets is kept: the next run reuses its files. (See
        :meth:`drop_stale`, which also drops stale files of known sets.)"""
        known = {self.staging.set_id(s) for s in known_file_sets}
        return [p for p in self._ls(self.staging.staging_dir())
                if self.staging.owns(posixpath.basename(p)) and posixpath.basename(p) not in known]

    def drop_staging_dir(self, path: str) -> None:
        """Delete one staging directory (as listed by :meth:`stale_staging`)."""
        base = self.staging.staging_dir() + "/"
        if not path.startswith(base):
            raise ValueError(f"distcp: {path} is not a staging directory under {base}")
        self._drop(path)

    def drop_staging(self, file_set: str) -> None:
        """Delete the staging of ``file_set`` (its staged files will be copied again)."""
        self._drop(self.staging.file_set_dir(file_set))



def _entry_id(path: str) -> str:
    """The file id of an entry of a set dir: a file dir ``<id>`` or a flat data file ``<id>.data``."""
    name = posixpath.basename(path)
    return name[:-len(DATA_SUFFIX)] if name.endswith(DATA_SUFFIX) else name


def _marker_origin(raw: Any) -> str | None:
    """The ``origin`` a done marker's bytes name (``None`` when unreadable)."""
    if not isinstance(raw, (bytes, str)):
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    return doc.get("origin") if isinstance(doc, dict) else None


__all__ = ["LOG_FORMAT", "MANIFEST_DIR", "PublishError", "Publisher"]
