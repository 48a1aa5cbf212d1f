"""Whole-or-nothing files on any fsspec filesystem: the one way the package writes, renames, reads and deletes
the files readers must never see half of (published data, publish logs, markers, plans, results).

What each operation promises, by filesystem:

* :meth:`AtomicFiles.write` -- the bytes, durable when it returns: on the local disk after ``fsync``;
  elsewhere when the store's ``close()`` returned (HDFS, object stores make the file durable there).
  Parent directories are made first. Not atomic by itself: write a temporary name, then rename.
* :meth:`AtomicFiles.rename` -- ``src`` replaces ``dst``. Local disk: ``os.replace``, atomic also when it
  overwrites. HDFS and some other stores refuse to rename over an existing file: on that refusal only,
  the target is deleted and the rename done again (briefly absent, never partial; a crash in between
  leaves the temporary file, which the publish protocols recover from). Object stores: a server-side
  copy and a delete, each object whole. Every rename of the package goes through here, so a fix for one store reaches every writer.
* :meth:`AtomicFiles.write_whole` / :meth:`write_json` -- a temporary name (``<path>.<token>.tmp``;
  per writer, so two overlapping writers never share one), then the rename, then (local disk) an
  ``fsync`` of the directory so the rename survives a power loss. Readers see the old document or the
  new one.
* :meth:`AtomicFiles.read_json` -- ``None`` when there is no such file (read, never ``exists()`` then
  read: some stores answer ``exists()`` from a cached listing); :class:`ValueError` for bytes that are
  not JSON. What a missing or broken document means is the caller's to say.
* :meth:`AtomicFiles.delete` -- a file or a directory tree; ``False`` when nothing was there.

Errors other than these are the filesystem's own (``OSError`` and its subclasses): callers decide which
are retriable. Paths are the filesystem's (no protocol); on the local disk they are the operating
system's.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import posixpath
import secrets
import stat
import time
from typing import Any, Iterator


def is_local(fs) -> bool:
    """Whether the fsspec filesystem ``fs`` is the local disk (its paths are the operating system's)."""
    protocol = getattr(fs, "protocol", None)
    protocols = protocol if isinstance(protocol, (tuple, list)) else (protocol,)
    return "file" in protocols or "local" in protocols


def new_token() -> str:
    """A fresh writer id for temporary names and attempts: UTC time (for people reading a store) and
    48 random bits."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(6)


def json_bytes(doc: Any, *, indent: int | None = None) -> bytes:
    """``doc`` as UTF-8 JSON with sorted keys and a final newline: one line by json's C encoder
    (``indent=None``; large logs name thousands of files), else ``indent`` spaces per level."""
    return (json.dumps(doc, sort_keys=True, indent=indent) + "\n").encode("utf-8")


class AtomicFiles:
    """The operations of the module docstring on one fsspec filesystem ``fs`` (``None``: the local disk)."""

    def __init__(self, fs=None):
        if fs is None:
            from fsspec.implementations.local import LocalFileSystem

            fs = LocalFileSystem()
        self.fs = fs
        self.local = is_local(fs)
        self._deferred: set[str] | None = None  # directories whose sync is deferred (deferring_dir_syncs)

    # ------------------------------------------------------------ questions
    def exists(self, path: str) -> bool:
        """Whether anything is at ``path`` (on the local disk also a dangling link)."""
        return os.path.lexists(path) if self.local else self.fs.exists(path)

    def isdir(self, path: str) -> bool:
        """Whether ``path`` is a directory (a link to one is not)."""
        if self.local:
            return os.path.isdir(path) and not os.path.islink(path)
        return self.fs.isdir(path)

    def size(self, path: str) -> int | None:
        """The size of the regular file at ``path``; ``None`` for anything else (links, directories).
        ``FileNotFoundError`` when there is nothing."""
        if self.local:
            st = os.lstat(path)
            return st.st_size if stat.S_ISREG(st.st_mode) else None
        info = self.fs.info(path)
        return info.get("size") if info.get("type") == "file" else None

    def find(self, directory: str) -> dict[str, dict]:
        """Every file below ``directory`` -> its fsspec info (``{}`` when there is no such directory);
        on the local disk in one ``scandir`` walk (:func:`find_local`), elsewhere fresh, not from a
        cached listing."""
        if self.local:
            try:
                return find_local(directory.rstrip("/") or "/")
            except NotADirectoryError:
                pass  # a file: as fsspec lists it, below
        try:
            if not self.local:
                self.fs.invalidate_cache(directory)
            found = self.fs.find(directory, detail=True)
        except FileNotFoundError:
            return {}
        return {p.rstrip("/"): info for p, info in found.items()}

    # ------------------------------------------------------------ changes
    def makedirs(self, path: str) -> None:
        if self.local:
            os.makedirs(path, exist_ok=True)
        else:
            self.fs.makedirs(path, exist_ok=True)

    def write(self, path: str, data: bytes) -> None:
        """Write ``data`` to ``path`` (replacing it), durably; see the module docstring."""
        parent = posixpath.dirname(path)
        if parent:
            self.makedirs(parent)
        if self.local:
            with open(path, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        else:
            with self.fs.open(path, "wb") as fh:
                fh.write(data)

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``, replacing ``dst``; see the module docstring."""
        if self.local:
            os.replace(src, dst)
            return
        try:
            self.fs.mv(src, dst)
        except OSError as e:
            # HDFS (and some other stores) refuse to rename over an existing file: delete it, then rename.
            # Only for that refusal: any other error (a throttled object store, a lost connection) must not
            # delete a good target first.
            if _refused_as_existing(e) and self.fs.exists(src) and self.fs.exists(dst):
                self.fs.rm_file(dst)
                self.fs.mv(src, dst)
            else:
                raise

    def sync_dir(self, path: str) -> None:
        """On the local disk, make the entries of directory ``path`` durable (a rename into it);
        elsewhere nothing (the store did it). Inside :meth:`deferring_dir_syncs`: only noted, and
        made durable when that ends."""
        if not self.local:
            return
        if self._deferred is not None:
            self._deferred.add(path)
            return
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def deferring_dir_syncs(self) -> Iterator[None]:
        """Within the block, :meth:`sync_dir` only notes its directory; when the block ends (also by an
        exception) each directory noted is synced once. For a caller that renames into one directory
        many times and needs the renames durable only at the end of the block (nothing in it may rely
        on one of them being durable, e.g. delete what it replaces)."""
        if self._deferred is not None:  # nested: the outer block syncs
            yield
            return
        self._deferred = noted = set()
        try:
            yield
        finally:
            self._deferred = None
            for path in sorted(noted):
                self.sync_dir(path)

    @contextlib.contextmanager
    def syncing_dirs_now(self) -> Iterator[None]:
        """Within a :meth:`deferring_dir_syncs` block, a block whose :meth:`sync_dir` calls sync at once
        (a write what follows relies on, such as a write-ahead log)."""
        deferred, self._deferred = self._deferred, None
        try:
            yield
        finally:
            self._deferred = deferred

    @staticmethod
    def temp_name(path: str, token: str = "") -> str:
        """The temporary name :meth:`write_whole` writes ``path`` under first."""
        return f"{path}.{token}.tmp" if token else f"{path}.tmp"

    def write_temp(self, path: str, data: bytes, token: str = "") -> str:
        """First half of :meth:`write_whole`: ``data`` written to the temporary name, returned."""
        tmp = self.temp_name(path, token)
        self.write(tmp, data)
        return tmp

    def commit_temp(self, tmp: str, path: str) -> None:
        """Second half of :meth:`write_whole`: the temporary file renamed over ``path``, durably."""
        self.rename(tmp, path)
        self.sync_dir(posixpath.dirname(path) or ".")

    def write_whole(self, path: str, data: bytes, token: str = "") -> None:
        """Replace ``path`` with ``data`` so that readers see the old or the new bytes, never part."""
        self.commit_temp(self.write_temp(path, data, token), path)

    def write_json(self, path: str, doc: Any, token: str = "", *, indent: int | None = None) -> None:
        """:meth:`write_whole` of ``doc`` as :func:`json_bytes`."""
        self.write_whole(path, json_bytes(doc, indent=indent), token)

    def read_json(self, path: str) -> Any:
        """The JSON document at ``path``; ``None`` when there is no such file. ``ValueError`` for
        bytes that are not JSON."""
        try:
            raw = self.fs.cat_file(path)
        except FileNotFoundError:
            return None
        return json.loads(raw)

    def delete(self, path: str) -> bool:
        """Delete the file or directory tree at ``path``; ``False`` when there was nothing."""
        if not self.exists(path):
            return False
        try:
            if self.isdir(path):
                self.fs.rm(path, recursive=True)
            elif self.local:
                os.unlink(path)
            else:
                self.fs.rm_file(path)
        except FileNotFoundError:
            return False
        return True


def _refused_as_existing(error: OSError) -> bool:
    """Whether a failed rename was refused because its target exists: ``FileExistsError``, ``EEXIST``, or a
    store's own words for it in the error's message (never in the file name the error also carries)."""
    if isinstance(error, FileExistsError) or getattr(error, "errno", None) == errno.EEXIST:
        return True
    message = str(error.strerror if error.strerror is not None else (error.args[0] if error.args else "")).lower()
    return "already exists" in message or "filealreadyexistsexception" in message


def find_local(directory: str) -> dict[str, dict]:
    """What fsspec's local ``find(detail=True)`` gives for the files below the directory
    ``directory`` (path -> ``{"name", "size", "type": "file" | "other", "islink", "stat"}``; a link is
    an entry of its own, "other", with its target's size, never followed into a directory), in one
    ``scandir`` walk without fsspec's cost per entry. ``"stat"``: the entry's ``os.stat_result`` (of
    the link itself for a link), taken by the walk -- mode and times without another system call.
    ``{}`` when there is no such directory; ``NotADirectoryError`` when it is a file."""
    out: dict[str, dict] = {}
    try:
        stack = [os.scandir(directory)]
    except FileNotFoundError:
        return out
    while stack:
        with stack.pop() as entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(os.scandir(entry.path))
                        continue
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                link, size = stat.S_ISLNK(st.st_mode), st.st_size
                if link:
                    try:
                        size = os.stat(entry.path).st_size
                    except OSError:
                        size = 0
                out[entry.path] = {"name": entry.path, "size": size, "islink": link,
                                   "type": "file" if stat.S_ISREG(st.st_mode) else "other", "stat": st}
    return dict(sorted(out.items()))
