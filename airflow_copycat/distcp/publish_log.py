"""The publish log of a file set: its format, and the steps that publish the set, planned.

Contract: ``PublishLogMixin._plan(file_set, staged, deletes, preserve_attrs, published=,
manifest=)`` returns ``(log, notes)``: the write-ahead log that publishes the staged files and
the deletions (``None`` when there is nothing to do), in the format :data:`LOG_FORMAT` the
docstring of :mod:`.publish` shows -- attribute steps, deletions of paths that change type,
renames, the other deletions, the manifest, in that order -- and notes for the result. It only
reads the target (the manifest; on the local filesystem what a path is); writing and applying
the log is :mod:`.publish` and :mod:`.publish_steps`. :class:`PublishError` is the error of
every part of the publish; the path rules (:func:`_bad_relative`) hold for every path a log
or a done marker names.
"""

from __future__ import annotations

import os
import posixpath
import stat
import time
from dataclasses import dataclass
from typing import Any, Mapping

from ..connect.errors import ConnectException
from ..storage import new_token
from .model import CONTROL_DIR, CopyableFile

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
    stats: dict[str, os.stat_result] | None = None  # staged path (full) -> its stat when checked (local disk)


class PublishLogMixin:
    """Plans a file set's publish log, for :class:`~.publish.Publisher` (see the module docstring)."""

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
        # (one stat per directory, and per output in a directory that exists); object stores hold "x" and
        # "x/a" side by side.
        ancestors = {a for o in outputs for a in _ancestors(o)}
        replaced_files = ancestors & delete_set
        replaced_dirs: set[str] = set()
        if self.local:
            absent = {a for a in ancestors if not os.path.lexists(self.path(a))}
            replaced_files |= {a for a in ancestors - absent if not self.files.isdir(self.path(a))}
            # an output whose parent directory is absent is absent too: no stat of its own (a fresh target)
            replaced_dirs = {o for o in outputs
                             if posixpath.dirname(o) not in absent and self.files.isdir(self.path(o))}
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
        if delete_set:
            manifest = {p: i for p, i in manifest.items()
                        if p not in delete_set and not any(a in delete_set for a in _ancestors(p))}
        else:
            manifest = dict(manifest)
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
