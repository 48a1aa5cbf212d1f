"""Exactly-once publishing of files: staging, a write-ahead publish log, committed-offset markers.

Everything lives under ``<root> = <store.url>/<topics.dir>``::

    <root>/<topic>/<encoded partition>/<topic>+<partition>+<startOffset><ext>   published files
    <root>/_copycat/staging/<topic>+<partition>/<same relative path>           files waiting to publish
    <root>/_copycat/wal/<topic>+<partition>.json                               publish log (while publishing)
    <root>/_copycat/offsets/<topic>+<partition>.json                           committed-offset marker

``_copycat`` starts with ``_``, so pyarrow.dataset, Spark, Hive and Trino skip it
when they read ``<root>`` or anything under it: readers see only published files.

Protocol, per Kafka topic-partition (:meth:`PublishStore.publish`):

1. each finished file is written to staging (:meth:`PublishStore.stage`), on the
   same filesystem as its final place, so the later rename is cheap;
2. the publish log lists every rename (staging → final) and the new committed
   offset (the next offset to read); it is written to a temporary name and
   renamed into place, so it exists whole or not at all;
3. the renames are done; a rename whose source is gone but whose target exists
   was done before (a replay), so each step is idempotent;
4. the marker ``{"topic", "partition", "offset", "files"}`` is written (temporary
   name + rename);
5. the publish log is deleted.

:meth:`PublishStore.recover` (called when a task opens the partition) replays a
leftover log (steps 3-5), deletes stale staging files (a batch whose log was
never written: its records are after the marker's offset and will be written
again under the same deterministic names) and returns the marker's offset.
A crash at any point thus leaves either the old offset and no new file, or the
new offset and every new file: no duplicate, no gap.

Atomicity of steps 2 and 4 and cheapness of step 3 come from the filesystem's
rename: atomic on local disks and HDFS. On object stores (S3, GCS) fsspec's
``mv`` is copy + delete: each object still appears whole, the log still makes
the set complete after a crash, but readers may briefly see part of a batch.
There is no fencing: two tasks must never own the same partition at once (the
framework's assignment guarantees it).
"""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass, field
from typing import Any

from ...connect.errors import ConnectException, RetriableException

CONTROL_DIR = "_copycat"
TopicPartition = tuple[str, int]


def rename(fs, src: str, dst: str) -> None:
    """Move ``src`` to ``dst`` on ``fs`` (replacing ``dst``). Every rename of this module goes here."""
    fs.mv(src, dst)


def tp_name(tp: TopicPartition) -> str:
    """``<topic>+<partition>``, the per-partition name of control files."""
    return f"{tp[0]}+{int(tp[1])}"


@dataclass
class Recovery:
    """What :meth:`PublishStore.recover` found: the committed ``offset`` (``None`` when the
    partition was never committed), the files a replayed log published, and how many
    stale staging files were deleted."""

    offset: int | None
    replayed: list[str] = field(default_factory=list)
    stale_deleted: int = 0


class PublishStore:
    """Staging, publish log and markers under ``root`` on fsspec filesystem ``fs``.

    ``root`` is an fsspec path (no protocol) such as ``/data/topics`` or
    ``bucket/prefix/topics``; file paths given to and returned by this class are
    relative to it (``orders/partition=0/orders+0+0000000000.json``).
    """

    def __init__(self, fs, root: str):
        self.fs = fs
        self.root = root.rstrip("/") or "/"

    @classmethod
    def from_url(cls, url: str, topics_dir: str, storage_options: dict | None = None) -> "PublishStore":
        """The store for ``<url>/<topics_dir>`` (any fsspec URL or local path)."""
        import fsspec

        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
        return cls(fs, posixpath.join(path.rstrip("/"), topics_dir.strip("/")) if topics_dir.strip("/") else path)

    # ------------------------------------------------------------ paths
    def path(self, rel: str) -> str:
        return posixpath.join(self.root, rel)

    def staging_rel(self, tp: TopicPartition, rel: str) -> str:
        return posixpath.join(CONTROL_DIR, "staging", tp_name(tp), rel)

    def wal_path(self, tp: TopicPartition) -> str:
        return self.path(posixpath.join(CONTROL_DIR, "wal", tp_name(tp) + ".json"))

    def marker_path(self, tp: TopicPartition) -> str:
        return self.path(posixpath.join(CONTROL_DIR, "offsets", tp_name(tp) + ".json"))

    # ------------------------------------------------------------ primitives
    def _io(self, what: str, path: str, fn, *args):
        try:
            return fn(*args)
        except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as e:
            raise ConnectException(f"files sink: could not {what} {path}: {e}") from e
        except OSError as e:  # network filesystems: usually transient
            raise RetriableException(f"files sink: could not {what} {path}: {e}") from e

    def _write(self, path: str, data: bytes) -> None:
        def write():
            self.fs.makedirs(posixpath.dirname(path), exist_ok=True)
            with self.fs.open(path, "wb") as f:
                f.write(data)
                f.flush()
                try:
                    os.fsync(f.fileno())
                except (AttributeError, OSError, ValueError, NotImplementedError):
                    pass  # not a local file: the store makes the object durable on close
        self._io("write", path, write)

    def _write_json_atomically(self, path: str, doc: dict) -> None:
        tmp = path + ".tmp"
        self._write(tmp, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())
        self._io("rename into place", path, rename, self.fs, tmp, path)

    def _read_json(self, path: str, what: str) -> dict | None:
        if not self._io("check", path, self.fs.exists, path):
            return None
        raw = self._io("read", path, self.fs.cat_file, path)
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            return doc
        except ValueError as e:
            raise ConnectException(
                f"files sink: {what} {path} is not valid JSON ({e}); it is only ever replaced whole, so it was "
                "changed outside copycat. Restore it, or delete it to make the partition start from its earliest "
                "offset (published files would then be written again, overwriting the same names)") from None

    # ------------------------------------------------------------ protocol
    def stage(self, tp: TopicPartition, rel: str, data: bytes) -> None:
        """Step 1: write ``data`` as the staged copy of the file that will be published at ``rel``."""
        self._write(self.path(self.staging_rel(tp, rel)), data)

    def publish(self, tp: TopicPartition, files: list[str], offset: int) -> dict:
        """Steps 2-5: publish the staged ``files`` (paths relative to the root) and commit
        ``offset`` (the next offset to read) for ``tp``. Returns the marker written."""
        wal = {
            "version": 1,
            "topic": tp[0],
            "partition": int(tp[1]),
            "offset": int(offset),
            "renames": [{"from": self.staging_rel(tp, rel), "to": rel} for rel in files],
        }
        self._write_json_atomically(self.wal_path(tp), wal)
        return self._apply(tp, wal)

    def _apply(self, tp: TopicPartition, wal: dict) -> dict:
        for step in wal["renames"]:
            src, dst = self.path(step["from"]), self.path(step["to"])
            if self._io("check", src, self.fs.exists, src):
                self._io("create the directory of", dst,
                         lambda: self.fs.makedirs(posixpath.dirname(dst), exist_ok=True))
                self._io("publish", dst, rename, self.fs, src, dst)
            elif not self._io("check", dst, self.fs.exists, dst):
                raise ConnectException(
                    f"files sink: publish log {self.wal_path(tp)} renames {src} to {dst}, but neither exists; "
                    "something outside copycat removed them. The marker still holds the last committed offset: "
                    "delete the publish log to write the batch again from there")
        marker = {"topic": tp[0], "partition": int(tp[1]), "offset": int(wal["offset"]),
                  "files": [s["to"] for s in wal["renames"]]}
        self._write_json_atomically(self.marker_path(tp), marker)
        self._io("delete", self.wal_path(tp), self.fs.rm_file, self.wal_path(tp))
        return marker

    def read_marker(self, tp: TopicPartition) -> dict | None:
        """The committed-offset marker of ``tp``, or ``None`` if it was never committed."""
        return self._read_json(self.marker_path(tp), "committed-offset marker")

    def recover(self, tp: TopicPartition) -> Recovery:
        """Finish an interrupted publish of ``tp``, drop stale staging (and half-written
        temporary control files), return the committed offset."""
        rec = Recovery(None)
        wal = self._read_json(self.wal_path(tp), "publish log")
        if wal is not None:
            if wal.get("topic") != tp[0] or wal.get("partition") != int(tp[1]) or "renames" not in wal:
                raise ConnectException(f"files sink: publish log {self.wal_path(tp)} is not the log of "
                                       f"{tp_name(tp)}; it was changed outside copycat: restore or delete it")
            self._apply(tp, wal)
            rec.replayed = [s["to"] for s in wal["renames"]]
        for tmp in (self.wal_path(tp) + ".tmp", self.marker_path(tp) + ".tmp"):  # a write cut short
            if self._io("check", tmp, self.fs.exists, tmp):
                self._io("delete", tmp, self.fs.rm_file, tmp)
        staging = self.path(posixpath.join(CONTROL_DIR, "staging", tp_name(tp)))
        if self._io("check", staging, self.fs.exists, staging):
            rec.stale_deleted = len(self._io("list", staging, self.fs.find, staging))
            self._io("delete", staging, lambda: self.fs.rm(staging, recursive=True))
        marker = self.read_marker(tp)
        if marker is not None:
            try:
                rec.offset = int(marker["offset"])
            except (KeyError, TypeError, ValueError):
                raise ConnectException(f"files sink: marker {self.marker_path(tp)} has no integer 'offset'; "
                                       "it was changed outside copycat: restore or delete it") from None
        return rec

    def describe(self) -> dict[str, Any]:
        """Where things are, for logs and task results."""
        return {"root": self.root, "protocol": getattr(self.fs, "protocol", None)}
