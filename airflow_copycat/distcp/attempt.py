"""One copy attempt's temporaries under a file's staging directory (see :mod:`.copier`).

Everything an attempt writes goes first to temporaries of its own,
``<file dir>/_attempt-<time>-<random>-<n>`` -- or ``_attempt-<time>-<random>-<k>-<n>``
for the ``k``-th attempt of a copy session, whose random token it shares (so no two
attempts ever write the same temporary file); :meth:`Attempt.commit` renames a temporary into its final
place only when the whole file is known to be right. A final name is only ever
given the complete, checked output of the same file id -- the same bytes
whichever attempt wrote them -- so two attempts committing the same name is
harmless, and no attempt removes a final name (but to replace it with its own,
where a rename does not overwrite). :meth:`Attempt.discard` removes the
temporaries this attempt has not renamed -- nothing else; those of an attempt
that died stay until the publisher drops the file's staging directory.

Temporaries sit beside the outputs (for a file staged flat, :mod:`.staged`, in its
set dir) rather than in a directory per attempt: on a
local disk making and removing two directories per file cost more than the
copy of a small file (0.1-0.3 ms per ``mkdir`` on the benchmark machines). On the
local disk the steps are plain system calls (``os.makedirs``, ``open``,
``os.replace``, ``os.unlink``) instead of fsspec's: the same names and the same
outcome, at a fraction of the cost per file.
"""

from __future__ import annotations

import logging
import os
import posixpath
import secrets
import time
from typing import Iterable

from ..storage import is_local
from .localcopy import PROGRAMMING_ERRORS
from .streams import CHUNK, copy_stream

ATTEMPT_PREFIX = "_attempt-"
"""The names of temporaries in a file's staging directory: ``_attempt-<time>-<random>-<n>``."""

log = logging.getLogger("airflow_copycat.distcp")


def rm_quietly(fs, path: str, recursive: bool = False) -> None:
    """Remove ``path`` (a directory tree with ``recursive``) if it is there; other failures are logged."""
    try:
        if fs.exists(path):
            fs.rm(path, recursive=recursive)
    except FileNotFoundError:
        pass
    except Exception as e:  # noqa: BLE001 - cleanup is best effort
        if isinstance(e, PROGRAMMING_ERRORS):
            raise
        log.warning("could not remove %s: %s", path, e)


class Attempt:
    """One attempt's writes under a file's staging directory (see the module docstring)."""

    def __init__(self, fs, file_dir: str, dirs: set[str] | None = None, token: str | None = None):
        """``file_dir``: where the temporaries go; ``dirs``: directories known to exist, shared
        with other attempts of the same session (and added to), so each is made once; ``token``:
        this attempt's own ``<time>-<random>...`` (:meth:`.staged.Session.attempt_token`: no two
        attempts anywhere get the same), else a fresh one."""
        self.fs = fs
        self.local = is_local(fs)
        self.file_dir = file_dir
        token = token or f"{int(time.time())}-{secrets.token_hex(6)}"
        self.prefix = posixpath.join(file_dir, f"{ATTEMPT_PREFIX}{token}-")
        self._n = 0
        self._dirs: set[str] = set() if dirs is None else dirs  # directories known to exist
        self._pending: set[str] = set()  # temporaries written and not renamed yet

    def _makedirs(self, d: str) -> None:
        if d and d not in self._dirs:
            if self.local:
                os.makedirs(d, exist_ok=True)
            else:
                self.fs.makedirs(d, exist_ok=True)
            self._dirs.add(d)

    def tmp(self) -> str:
        """A fresh temporary path of this attempt."""
        self._makedirs(self.file_dir)
        self._n += 1
        path = f"{self.prefix}{self._n}"
        self._pending.add(path)
        return path

    def drop(self, tmp: str) -> None:
        """Remove one temporary (an archive entry overwritten by a later one of the same name)."""
        rm_quietly(self.fs, tmp)
        self._pending.discard(tmp)

    def write_stream(self, src, hashers: Iterable = (), chunk: int = CHUNK) -> tuple[str, int]:
        """``src`` (to its end, in reads of ``chunk`` bytes) into a temporary: (its path, its bytes)."""
        tmp = self.tmp()
        hashers = list(hashers)
        with (open(tmp, "wb") if self.local else self.fs.open(tmp, "wb")) as out:
            def write(b):
                for h in hashers:
                    h.update(b)
                out.write(b)
            n = copy_stream(src, write, chunk)
        return tmp, n

    def write_bytes(self, data: bytes) -> str:
        tmp = self.tmp()
        if self.local:
            with open(tmp, "wb") as out:
                out.write(data)
        else:
            self.fs.pipe_file(tmp, data)
        return tmp

    def copy(self, src: str, chunk: int = CHUNK) -> tuple[str, int]:
        with self.fs.open(src, "rb") as fin:
            return self.write_stream(fin, chunk=chunk)

    def commit(self, tmp: str, final: str) -> None:
        """Rename ``tmp`` to ``final``, replacing what is there (filesystems whose rename does not
        overwrite, such as HDFS: remove and rename again)."""
        self._makedirs(posixpath.dirname(final))
        if self.local:
            try:
                os.replace(tmp, final)  # atomic, and replaces a file
                self._pending.discard(tmp)
                return
            except OSError:
                pass  # (a directory in the way...): as on any filesystem, below
        try:
            self.fs.mv(tmp, final)
        except Exception as e:  # noqa: BLE001 - retried once below
            if isinstance(e, PROGRAMMING_ERRORS) or not self.fs.exists(final) or not self.fs.exists(tmp):
                raise
            self.fs.rm(final)
            self.fs.mv(tmp, final)
        self._pending.discard(tmp)

    def put_bytes(self, final: str, data: bytes) -> None:
        self.commit(self.write_bytes(data), final)

    def discard(self) -> None:
        """Remove this attempt's temporaries that were not renamed -- nothing else."""
        for tmp in sorted(self._pending):
            if self.local:
                try:
                    os.unlink(tmp)
                    continue
                except FileNotFoundError:
                    continue
                except OSError:
                    pass  # logged below
            rm_quietly(self.fs, tmp)
        self._pending.clear()
