"""Exactly-once publishing of files: staging, a write-ahead publish log, committed-offset markers, fencing.

Everything lives under ``<root> = <store.url>/<topics.dir>``::

    <root>/<topic>/<encoded partition>/<topic>+<partition>+<startOffset><ext>   published files
    <root>/_copycat/staging/<topic>+<partition>/<attempt>/<same relative path>  files waiting to publish
    <root>/_copycat/wal/<topic>+<partition>.json                               publish log (while publishing)
    <root>/_copycat/offsets/<topic>+<partition>.json                           committed-offset marker

``_copycat`` starts with ``_``, so pyarrow.dataset, Spark, Hive and Trino skip it
when they read ``<root>`` or anything under it: readers see only published files.

An *attempt* is one opening of a topic-partition (:meth:`PublishStore.recover`)
by one task: it gets a fresh id and remembers the marker it started from, its
*base* (``offset`` and the ``attempt`` that wrote it; nothing when the partition
was never committed). The marker only ever moves forward, and only by the
attempt whose base it still is.

Protocol, per Kafka topic-partition (:meth:`PublishStore.publish`):

1. each finished file is written to the attempt's own staging directory
   (:meth:`PublishStore.stage`), on the same filesystem as its final place, so
   the later rename is cheap;
2. fence: the marker is read again; unless it is still the attempt's base,
   another attempt committed the partition meanwhile and this one stops with a
   ``fenced`` :class:`ConnectException`, having changed nothing;
3. the publish log lists every rename (staging → final), the attempt, its base
   and the new committed offset (the next offset to read); it is written to a
   temporary name and renamed into place, so it exists whole or not at all;
4. the renames are done. A staged file that is gone means another attempt
   opened the partition and dropped this attempt's staging: fenced. (Only when
   a publish log is *replayed* is "source gone, target there" a rename done
   before; then each step is idempotent);
5. fence again (as 2), then the marker ``{"topic", "partition", "offset",
   "attempt", "files"}`` is written (temporary name + rename);
6. the publish log is deleted (if it is still this attempt's).

:meth:`PublishStore.recover` (called when a task opens the partition) replays a
leftover log (steps 4-6) if it continues the current marker (its base is the
marker, or it already wrote the marker, or there is no marker: one being
replaced on a store that deletes the target first was lost in between); a log
that does not is a fenced attempt's and is deleted unapplied, so a replay never
moves the marker back. (To restart a partition from its earliest offset, delete
its marker *and* its publish log.)
It then deletes every staging directory of the partition (stale batches whose
log was never written: their records are after the marker's offset and will
be written again under the same deterministic names; a still running older
attempt finds its staging gone and fails as fenced) and returns the marker's
offset. A crash at any point thus leaves either the old offset and no new file,
or the new offset and every new file: no duplicate, no gap.

Overlapping attempts of one partition (Spark speculation, an executor declared
lost but still running, an Airflow zombie and its retry): the attempt that
opened last wins; an older one fails as fenced at its next publish and changes
nothing, and its leftovers are cleaned by the next open. Fencing is
check-then-act (fsspec stores have no compare-and-swap on an object), so it
does not exclude two attempts whose steps 2-5 run at the very same moment;
it does exclude every attempt that publishes after another opened or
committed the partition, which is what stalls, zombies and speculation produce.
There is no lock file: an exclusive create (``mode="xb"``) exists on local
disks and some object stores only, and a lock held by a dead attempt would
block its retry until a timeout; the marker check needs neither.

Atomicity of steps 3 and 5 and cheapness of step 4 come from the filesystem's
rename, done (like every write and delete here) by :class:`airflow_copycat.storage.AtomicFiles`,
the same engine as Distcp's publisher: atomic on local disks (``os.replace``, the
directory fsynced after) and on HDFS (which refuses to rename over a file: the
target is deleted first, briefly absent, never partial). On object stores (S3,
GCS) fsspec's ``mv`` is copy + delete: each object still appears whole, the log
still makes the set complete after a crash, but readers may briefly see part of
a batch.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from ...connect.errors import ConnectException, RetriableException
from ...storage import AtomicFiles, new_token
from ...storage.atomic import json_bytes

CONTROL_DIR = "_copycat"
TopicPartition = tuple[str, int]
Token = tuple["int | None", "str | None"]
"""What identifies a committed state: the marker's ``(offset, attempt)``; ``(None, None)``
when the partition was never committed (markers written before attempts existed have
``attempt`` ``None``)."""

NEVER_COMMITTED: Token = (None, None)


def tp_name(tp: TopicPartition) -> str:
    """``<topic>+<partition>``, the per-partition name of control files."""
    return f"{tp[0]}+{int(tp[1])}"


@dataclass
class Attempt:
    """This process's attempt at a topic-partition: its ``id`` and the marker it continues
    from (``base``, moved forward by each of its own commits)."""

    id: str
    base: Token


@dataclass
class Recovery:
    """What :meth:`PublishStore.recover` found: the committed ``offset`` (``None`` when the
    partition was never committed), the files a replayed log published, how many
    stale staging files were deleted, whether a fenced attempt's log was deleted
    unapplied, and the ``attempt`` id the partition is now opened as."""

    offset: int | None
    replayed: list[str] = field(default_factory=list)
    stale_deleted: int = 0
    stale_log_deleted: bool = False
    attempt: str = ""


class PublishStore:
    """Staging, publish log and markers under ``root`` on fsspec filesystem ``fs``.

    ``root`` is an fsspec path (no protocol) such as ``/data/topics`` or
    ``bucket/prefix/topics``; file paths given to and returned by this class are
    relative to it (``orders/partition=0/orders+0+0000000000.json``). A
    topic-partition must be opened with :meth:`recover` before :meth:`stage` and
    :meth:`publish`; the store then holds its :class:`Attempt`.
    """

    def __init__(self, fs, root: str):
        self.fs = fs
        self.files = AtomicFiles(fs)
        self.root = root.rstrip("/") or "/"
        self.attempts: dict[TopicPartition, Attempt] = {}

    @classmethod
    def from_url(cls, url: str, topics_dir: str, storage_options: dict | None = None) -> "PublishStore":
        """The store for ``<url>/<topics_dir>`` (any fsspec URL or local path)."""
        import fsspec

        fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
        return cls(fs, posixpath.join(path.rstrip("/"), topics_dir.strip("/")) if topics_dir.strip("/") else path)

    # ------------------------------------------------------------ paths
    def path(self, rel: str) -> str:
        return posixpath.join(self.root, rel)

    def staging_dir_rel(self, tp: TopicPartition, attempt: str | None = None) -> str:
        """The staging directory of ``tp`` (of one ``attempt`` when given), relative to the root."""
        base = posixpath.join(CONTROL_DIR, "staging", tp_name(tp))
        return posixpath.join(base, attempt) if attempt else base

    def staging_rel(self, tp: TopicPartition, attempt: str, rel: str) -> str:
        return posixpath.join(self.staging_dir_rel(tp, attempt), rel)

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
        self._io("write", path, self.files.write, path, data)

    def _write_json_atomically(self, tp: TopicPartition, path: str, doc: dict, attempt: str) -> None:
        # per attempt: overlapping attempts never share a temporary file
        tmp = self._io("write", path, self.files.write_temp, path, json_bytes(doc, indent=1), attempt)
        try:
            self._io("rename into place", path, self.files.commit_temp, tmp, path)
        except ConnectException as e:
            if not self._io("check", tmp, self.files.exists, tmp):  # deleted by another attempt's recover()
                raise self._fenced(tp, attempt, f"its temporary file {tmp} was deleted") from e
            raise

    def _delete_if_exists(self, path: str) -> None:
        self._io("delete", path, self.files.delete, path)

    def _read_json(self, path: str, what: str) -> dict | None:
        # read, not exists() + read: exists() may answer from a directory listing cached by the
        # filesystem (s3fs), and the fence must see a marker another attempt wrote a moment ago
        try:
            doc = self._io("read", path, self.files.read_json, path)
            if doc is None:
                return None
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            return doc
        except ValueError as e:
            raise ConnectException(
                f"files sink: {what} {path} is not valid JSON ({e}); it is only ever replaced whole, so it was "
                "changed outside copycat. Restore it, or delete it to make the partition start from its earliest "
                "offset (published files would then be written again, overwriting the same names)") from None

    # ------------------------------------------------------------ fencing
    def attempt(self, tp: TopicPartition) -> Attempt:
        """The attempt ``tp`` was opened as by :meth:`recover`."""
        try:
            return self.attempts[(tp[0], int(tp[1]))]
        except KeyError:
            raise ConnectException(f"files sink: {tp_name(tp)} was not opened (recover() it first)") from None

    def marker_token(self, tp: TopicPartition) -> Token:
        """``(offset, attempt)`` of the marker of ``tp`` as it is now in the store."""
        marker = self.read_marker(tp)
        if marker is None:
            return NEVER_COMMITTED
        try:
            return int(marker["offset"]), marker.get("attempt")
        except (KeyError, TypeError, ValueError):
            raise ConnectException(f"files sink: marker {self.marker_path(tp)} has no integer 'offset'; "
                                   "it was changed outside copycat: restore or delete it") from None

    def _fenced(self, tp: TopicPartition, attempt: str, why: str) -> ConnectException:
        return ConnectException(
            f"files sink: attempt {attempt} at {tp_name(tp)} is fenced: another attempt opened or committed this "
            f"partition meanwhile ({why}). This attempt stops without moving the committed-offset marker; the "
            "other attempt's files stand, and the next run resumes from the marker. (Overlapping attempts: Spark "
            "speculation, an executor declared lost but still running, an Airflow zombie and its retry)")

    def check_fence(self, tp: TopicPartition) -> None:
        """Raise the ``fenced`` :class:`ConnectException` unless the marker of ``tp`` is still
        the one this attempt started from or last wrote (nobody else committed meanwhile)."""
        att = self.attempt(tp)
        current = self.marker_token(tp)
        if current != att.base:
            def show(token):
                return "never committed" if token == NEVER_COMMITTED else f"offset {token[0]} by attempt {token[1]}"
            raise self._fenced(tp, att.id, f"the committed-offset marker {self.marker_path(tp)} is at "
                                           f"{show(current)}; this attempt continues from {show(att.base)}")

    # ------------------------------------------------------------ protocol
    def stage(self, tp: TopicPartition, rel: str, data: bytes) -> None:
        """Step 1: write ``data`` as the staged copy of the file that will be published at ``rel``."""
        self._write(self.path(self.staging_rel(tp, self.attempt(tp).id, rel)), data)

    def publish(self, tp: TopicPartition, files: list[str], offset: int) -> dict:
        """Steps 2-6: publish the staged ``files`` (paths relative to the root) and commit
        ``offset`` (the next offset to read) for ``tp``. Returns the marker written.
        Raises the ``fenced`` :class:`ConnectException` when another attempt opened or
        committed ``tp`` since this attempt's base."""
        att = self.attempt(tp)
        base_offset = att.base[0]
        if base_offset is not None and int(offset) <= base_offset:
            raise ConnectException(f"files sink: refusing to move the marker of {tp_name(tp)} from {base_offset} "
                                   f"back to {offset}")
        wal = {
            "version": 2,
            "topic": tp[0],
            "partition": int(tp[1]),
            "attempt": att.id,
            "base": {"offset": att.base[0], "attempt": att.base[1]},
            "offset": int(offset),
            "renames": [{"from": self.staging_rel(tp, att.id, rel), "to": rel} for rel in files],
        }
        self.check_fence(tp)
        self._write_json_atomically(tp, self.wal_path(tp), wal, att.id)
        marker = self._apply(tp, wal, replay=False)
        att.base = (marker["offset"], marker["attempt"])
        return marker

    def _apply(self, tp: TopicPartition, wal: dict, *, replay: bool) -> dict:
        attempt = wal.get("attempt")
        done = 0
        for step in wal["renames"]:
            src, dst = self.path(step["from"]), self.path(step["to"])
            if self._io("check", src, self.files.exists, src):
                self._io("create the directory of", dst, self.files.makedirs, posixpath.dirname(dst))
                try:
                    self._io("publish", dst, self.files.rename, src, dst)
                except ConnectException as e:
                    if replay or self._io("check", src, self.files.exists, src):
                        raise
                    raise self._fenced(tp, attempt, f"its staged file {src} vanished while it was published") from e
                done += 1
            elif not replay:
                # Our own staged file is gone: another attempt's recover() dropped it. Target or not,
                # nothing here is ours to publish; leave no log behind if nothing was renamed.
                if done == 0:
                    self._delete_wal_of(tp, attempt)
                raise self._fenced(tp, attempt, f"its staged file {src} was deleted")
            elif not self._io("check", dst, self.files.exists, dst):
                raise ConnectException(
                    f"files sink: publish log {self.wal_path(tp)} renames {src} to {dst}, but neither exists; "
                    "something outside copycat removed them. The marker still holds the last committed offset: "
                    "delete the publish log to write the batch again from there")
        if not replay:
            self.check_fence(tp)
        marker = {"topic": tp[0], "partition": int(tp[1]), "offset": int(wal["offset"]), "attempt": attempt,
                  "files": [s["to"] for s in wal["renames"]]}
        self._write_json_atomically(tp, self.marker_path(tp), marker, attempt or new_token())
        self._delete_wal_of(tp, attempt)
        return marker

    def _delete_wal_of(self, tp: TopicPartition, attempt: str | None) -> None:
        """Delete the publish log of ``tp`` if it is still ``attempt``'s (another attempt may have
        written its own since)."""
        wal = self._read_json(self.wal_path(tp), "publish log")
        if wal is not None and wal.get("attempt") == attempt:
            self._delete_if_exists(self.wal_path(tp))

    def read_marker(self, tp: TopicPartition) -> dict | None:
        """The committed-offset marker of ``tp``, or ``None`` if it was never committed."""
        return self._read_json(self.marker_path(tp), "committed-offset marker")

    def recover(self, tp: TopicPartition) -> Recovery:
        """Open ``tp`` as a new attempt: finish an interrupted publish that continues the
        marker (delete a fenced attempt's log unapplied), drop every staging directory
        and half-written temporary control file of ``tp``, return the committed offset."""
        tp = (tp[0], int(tp[1]))
        rec = Recovery(None)
        token = self.marker_token(tp)
        wal = self._read_json(self.wal_path(tp), "publish log")
        if wal is not None:
            if wal.get("topic") != tp[0] or wal.get("partition") != int(tp[1]) or "renames" not in wal:
                raise ConnectException(f"files sink: publish log {self.wal_path(tp)} is not the log of "
                                       f"{tp_name(tp)}; it was changed outside copycat: restore or delete it")
            base = wal.get("base")
            if "base" not in wal:  # version 1 (before attempts): one writer at a time, always replayed
                continues = True
            else:
                base_token = (base.get("offset"), base.get("attempt")) if isinstance(base, dict) else None
                # no marker beside a log: the marker was being replaced when the process died (a store that
                # refuses to rename over a file has it deleted first), so the log finishes that publish
                continues = token in (base_token, (wal.get("offset"), wal.get("attempt")), NEVER_COMMITTED)
            if continues:
                self._apply(tp, wal, replay=True)
                rec.replayed = [s["to"] for s in wal["renames"]]
            else:  # a fenced attempt's log: applying it would move the marker back or publish over newer files
                self._delete_if_exists(self.wal_path(tp))
                rec.stale_log_deleted = True
        for path in (self.wal_path(tp), self.marker_path(tp)):  # writes cut short, by any attempt
            directory, name = posixpath.split(path)
            if self._io("check", directory, self.files.exists, directory):
                listing = self._io("list", directory, lambda: self.fs.ls(directory, detail=False, refresh=True))
                self.fs.invalidate_cache(directory)
                for other in listing:
                    other_name = posixpath.basename(other.rstrip("/"))
                    if other_name.startswith(name + ".") and other_name.endswith(".tmp"):
                        self._delete_if_exists(other)
        staging = self.path(self.staging_dir_rel(tp))
        if self._io("check", staging, self.files.exists, staging):
            rec.stale_deleted = len(self._io("list", staging, self.files.find, staging))
            self._io("delete", staging, self.files.delete, staging)
        token = self.marker_token(tp)
        rec.offset = token[0]
        rec.attempt = new_token()
        self.attempts[tp] = Attempt(rec.attempt, token)
        return rec

    def forget(self, tp: TopicPartition) -> None:
        """``tp`` is closed: drop its attempt (a later :meth:`recover` opens a new one)."""
        self.attempts.pop((tp[0], int(tp[1])), None)

    def describe(self) -> dict[str, Any]:
        """Where things are, for logs and task results."""
        return {"root": self.root, "protocol": getattr(self.fs, "protocol", None)}
