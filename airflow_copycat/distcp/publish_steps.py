"""Applying a publish log's steps, then dropping what it published from the staging (steps 4-5
of the publish, see :mod:`.publish`).

Contract: ``PublishStepsMixin._apply(log)`` applies every step of ``log`` in order and returns
``{"steps", "renamed", "deleted"}``; each step is idempotent (a step already done is done again
or skipped), so applying a log again after a crash at any point finishes it. A step that fails
raises :class:`~.publish_log.PublishError` naming the set and the step; the log stays.
``_apply(log, known)``: the first application of a log just written, with ``known`` = ``{staged
path (relative to the root): its stat}`` taken when the staging was checked: a ``chmod`` or
``utime`` of a staged output whose stat already shows that mode or modification time is not
done again (the same file, the same outcome, without its system calls), and ``utime`` keeps the
access time that stat shows instead of taking another; a ``chown`` drops its file from
``known`` (changing the owner may clear the set-id bits a later ``chmod`` restores). A replay
(``known`` absent) applies every step.
``_finish(log, wal)`` then drops the staged file directories the log names (and a set
directory that empties) and deletes the log if it is still this one (``written``: the bytes
this process wrote it with: the same bytes are the same log, without parsing it again).
"""

from __future__ import annotations

import os
import posixpath
import stat

from .publish_log import ATTRIBUTE_OPS, PublishError
from .staged import compact


class PublishStepsMixin:
    """Applies publish logs, for :class:`~.publish.Publisher` (see the module docstring)."""

    def _apply(self, log: dict, known: dict[str, os.stat_result] | None = None) -> dict:
        counts = {"steps": 0, "renamed": 0, "deleted": 0}
        known = dict(known) if known else None  # a chown drops its file: the caller's map stays whole
        for step in log["steps"]:
            self._apply_step(step, log, known)
            counts["steps"] += 1
            counts["renamed"] += step.get("op") == "rename"
            counts["deleted"] += step.get("op") == "delete"
        return counts

    def _apply_step(self, step: dict, log: dict, known: dict[str, os.stat_result] | None = None) -> None:
        """Apply one logged step; idempotent (a step already done is done again or skipped).
        ``known``: see the module docstring."""
        op = step.get("op")
        try:
            if op == "rename":
                self._step_rename(step, log)
            elif op in ATTRIBUTE_OPS:
                self._step_attribute(step, log, known)
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
            where = f"file set {log.get('file_set')!r}, step {op} {step.get('to') or step.get('path')}"
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

    def _step_attribute(self, step: dict, log: dict, known: dict[str, os.stat_result] | None = None) -> None:
        """Set the attribute on the staged output while it is there, else on the published one. The
        staged one is tried first, without looking whether it exists (its own system call per step,
        thousands per publish): only when that fails and nothing is there is the published one taken
        -- what a look first would have chosen. ``known``: see the module docstring."""
        if not self.local:
            return  # never logged for other filesystems
        st = None
        if known:
            if step["op"] == "chown":
                known.pop(step["staged"], None)
            else:
                st = known.get(step["staged"])
                if st is not None and _already(st, step):
                    return
        staged = self.path(step["staged"])
        try:
            _set_attribute(staged, step, st)
            return
        except OSError:
            if os.path.lexists(staged):
                raise
        path = self.path(step["path"])
        if not os.path.lexists(path):
            raise PublishError(f"distcp: the publish log of file set {log.get('file_set')!r} sets attributes "
                               f"of {step['path']}, but neither it nor its staged copy exists")
        _set_attribute(path, step)

    def _finish(self, log: dict, wal: str, written: bytes | None = None) -> None:
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
        if written is not None and self.local and _read_bytes(wal) == written:
            current = log  # the bytes this process wrote: this log
        else:
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


def _mtime_ns(step: dict) -> int:
    return int(round(float(step["mtime"]) * 1e9))


def _already(st: os.stat_result, step: dict) -> bool:
    """Whether a file with the stat ``st`` already has what the ``chmod``/``utime`` step sets."""
    if step["op"] == "chmod":
        return stat.S_IMODE(st.st_mode) == int(step["mode"])
    return step["op"] == "utime" and st.st_mtime_ns == _mtime_ns(step)


def _set_attribute(path: str, step: dict, st: os.stat_result | None = None) -> None:
    """Apply the attribute step ``step`` (chown, chmod or utime) to the local ``path``; ``st``: the
    stat of ``path`` taken just before (its access time is kept), else ``utime`` takes one."""
    op = step["op"]
    if op == "chown":
        os.chown(path, int(step["uid"]), int(step["gid"]), follow_symlinks=False)
    elif op == "chmod":
        os.chmod(path, int(step["mode"]))
    else:
        st = os.stat(path) if st is None else st
        os.utime(path, ns=(st.st_atime_ns, _mtime_ns(step)))


def _read_bytes(path: str) -> bytes | None:
    """The bytes of the local file ``path``; ``None`` when it cannot be read (then it is parsed as before)."""
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None
