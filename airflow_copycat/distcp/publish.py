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
   there are concatenated first (``split_copy.finish_split``), each marker is read,
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
    its bytes), else to the published one; set again on replay. The first
    application skips a step the staged output already shows (the stat its
    staging check took: e.g. the modification time the copier gave a file
    staged flat, or a mode equal to the source's). Only on the
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

The protocol is in modules by concept, each a part of :class:`Publisher`: :mod:`.publish_check`
(step 2: which files are staged), :mod:`.publish_log` (step 3: the log's format and its steps),
:mod:`.publish_steps` (steps 4-5: applying them, dropping the staging) and
:mod:`.publish_recovery` (replaying leftover logs, dropping stale staging).
"""

from __future__ import annotations

import os
import posixpath
import time
from typing import Any, Iterable, Mapping

from ..storage import AtomicFiles
from ..storage.atomic import json_bytes
from .model import CopyableFile, Staging
from .publish_check import StagingCheckMixin
from .publish_log import PublishError, PublishLogMixin, _bad_relative, _Staged
from .publish_recovery import RecoveryMixin
from .publish_steps import PublishStepsMixin


class Publisher(RecoveryMixin, StagingCheckMixin, PublishLogMixin, PublishStepsMixin):
    """Publishes staged file sets under ``staging.target_root`` on ``target_fs`` (any fsspec
    filesystem; ``None``: the local one).

    ``config``: the copy job's parsed config, passed to ``split_copy.finish_split``; its
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
        self._prefix = self.root if self.root.endswith("/") else self.root + "/"
        if self.local and not os.path.isabs(self.root):
            raise ValueError(f"distcp: the local target root must be an absolute path, not {self.root!r} "
                             "(fsspec lists local files by absolute path)")

    # ------------------------------------------------------------ paths
    def path(self, rel: str) -> str:
        """The full path of ``rel`` (relative to the target root): ``posixpath.join(root, rel)``, by
        concatenation (thousands of calls per publish)."""
        if type(rel) is str and not rel.startswith("/"):
            return self._prefix + rel
        return posixpath.join(self.root, rel)  # an absolute path, or not a string: as join has it

    def rel(self, path: str) -> str:
        """``path`` (under the target root) relative to the root."""
        if not path.startswith(self._prefix):
            raise ValueError(f"{path} is not under the target root {self.root}")
        return path[len(self._prefix):]

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
        return self._publish_set(file_set, files, deletes, preserve_attrs, None)

    def _publish_set(self, file_set: str, files: Iterable[CopyableFile], deletes: Iterable[str],
                     preserve_attrs: bool, finishing: list | None) -> dict:
        """:meth:`publish`; with ``finishing`` (:meth:`publish_all`), a log applied is not finished here
        but appended to it as ``(log, wal, its bytes)``: the caller finishes it once the manifests of every set are
        durable. The log itself is always durable before its first step."""
        t0 = time.monotonic()
        files = list(files)
        deletes = sorted(set(deletes))
        result: dict[str, Any] = {"file_set": file_set, "status": "not_published", "files": 0, "bytes": 0,
                                  "outputs": 0, "deleted": 0, "missing": [], "errors": {}, "notes": [],
                                  "replayed_log": False, "already_published": 0, "seconds": 0.0}
        self._validate_request(file_set, files, deletes)

        wal = self.staging.wal(file_set)
        if self.files.exists(wal):  # recover() was not called, or failed on this set: finish the old publish first
            with self.files.syncing_dirs_now():
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
            written = json_bytes(log)
            with self.files.syncing_dirs_now():  # the write-ahead log is durable before its first step
                self.files.write_whole(wal, written, log["token"])
            self._after_log_written(wal)
            known = {self.rel(p): st for s in staged for p, st in (s.stats or {}).items()} if self.local else None
            self._apply(log, known)  # the staging's stats: attribute steps already true are not done again
            if finishing is None:
                self._finish(log, wal, written)
            else:
                finishing.append((log, wal, written))
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
        ``status: "failed"`` and ``error`` and does not stop the others.

        The same steps as :meth:`publish` one set after another, in the same order for each set,
        with the directory syncs shared: each set's log is durable (file and directory) before its
        first step, as alone; the manifests' directory is synced once after every set was applied,
        then the logs are removed (each set's staging dropped, :meth:`_finish`) and the logs'
        directory is synced once -- so a manifest is durable before its log is gone, and a crash
        in between leaves logs that :meth:`recover` replays. 2 syncs instead of 2 per set."""
        results: list[dict] = []
        finishing: list[tuple[int, dict, str, bytes]] = []
        with self.files.deferring_dir_syncs():  # the manifests' directory, once every set is applied
            for file_set, (files, deletes) in work.items():
                applied: list = []
                try:
                    results.append(self._publish_set(file_set, files, deletes, preserve_attrs, applied))
                except Exception as e:  # noqa: BLE001 - file sets are independent
                    results.append(_failed(file_set, e))
                finishing += [(len(results) - 1, log, wal, written) for log, wal, written in applied]
        with self.files.deferring_dir_syncs():  # the logs' directory, once every log is removed
            for i, log, wal, written in finishing:
                try:
                    self._finish(log, wal, written)
                except Exception as e:  # noqa: BLE001 - file sets are independent
                    results[i] = _failed(results[i]["file_set"], e)
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


def _failed(file_set: str, e: Exception) -> dict:
    """The result of a file set whose publish raised ``e``."""
    return {"file_set": file_set, "status": "failed", "files": 0, "bytes": 0, "deleted": 0,
            "missing": [], "error": f"{type(e).__name__}: {e}", "seconds": 0.0}


__all__ = ["PublishError", "Publisher"]
