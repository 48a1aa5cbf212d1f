"""Recovery and cleanup of a copy job's publishing: leftover publish logs, stale staging.

Contract: ``RecoveryMixin.recover()`` replays every publish log of this job left by a crash
(and deletes logs whose write was cut short); a run calls it before any new work.
``drop_stale(current, listed=)`` then drops the staging the plan will not publish;
``stale_staging`` / ``drop_staging_dir`` / ``drop_staging`` drop staging explicitly. Other
jobs' logs and staging are never touched, nor the staging of a set whose log still waits.
"""

from __future__ import annotations

import json
import posixpath
import time
from typing import Any, Iterable, Mapping

from .attempt import ATTEMPT_PREFIX
from .model import DONE_MARKER, MANIFEST_DIR, PARTS_DIR, Staging
from .publish_log import LOG_FORMAT, PublishError
from .staged import DATA_SUFFIX, compact, is_journal, read_records


class RecoveryMixin:
    """Replays leftover logs and drops stale staging, for :class:`~.publish.Publisher` (see the module docstring)."""

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
