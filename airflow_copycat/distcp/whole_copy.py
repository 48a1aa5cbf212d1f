"""Copying a whole file into staging: streamed through its converters, checked, then named.

Contract: ``_copy_whole`` copies one unit of a whole file (``parts == 1``): the source through
the file's converters (:mod:`.converters`) -- or, without converters from the local disk to the
local disk, by :mod:`.localcopy` -- into this attempt's temporaries (their attributes are the
publish's to set: what it sets depends on the publish, not on the copy); archive links become
copies of their targets (``_materialise_links``, bounded by the file's :class:`~.limits.Limits`);
a path that is both a file and a directory fails the file (``_Tree``). Only when size and
checksum match the listing do the outputs take their names, then the done record is written.
A problem of the data or the filesystems sets ``status "failed"`` in ``result``; bugs raise.
The attempt's own temporaries are always removed.
"""

from __future__ import annotations

import posixpath

from . import converters as conv
from . import localcopy
from .attempt import Attempt as _Attempt
from .done_markers import _done_record, _write_marker
from .encryption import EncryptionKeys
from .limits import Limits
from .model import Staging, WorkUnit
from .reading import (
    CHUNK,
    PROGRESS_EVERY,
    _both_local,
    _hashers,
    _output_path,
    _SourceReader,
    _verify,
    record_failure,
)
from .staged import FLAT_DONE_FORMAT, Session, data_name, flat_layout
from .streams import ConversionError, drain
from .untar import Link


class _Tree:
    """The outputs of one file (paths relative to its destination), checked for a path that is
    both a file and a directory (possible in an archive; on a filesystem one would land inside
    the other)."""

    def __init__(self, origin: str):
        self.origin = origin
        self.files: dict[str, int] = {}
        self.dirs: set[str] = set()

    def add(self, rel: str, entry: str | None = None) -> None:
        parents = []
        head = posixpath.dirname(rel)
        while head:
            parents.append(head)
            head = posixpath.dirname(head)
        clash = rel if rel in self.dirs else next((p for p in parents if p in self.files), None)
        if clash is not None:
            raise ConversionError(f"archive {self.origin}: entry {entry or rel!r} needs {clash!r} to be both a "
                                  "file and a directory; refused")
        self.dirs.update(parents)


def _ancestors(path: str):
    head = posixpath.dirname(path)
    while head:
        yield head
        head = posixpath.dirname(head)


def _materialise_links(attempt: _Attempt, tree: _Tree, temps: dict[str, str], links: list[tuple[str, Link]],
                       limits: Limits) -> None:
    """Copy link targets (files, or directories of files) to the links' paths, following links to
    links; a link whose target is not an output of the archive fails the file. Every copy counts
    as an entry and its bytes against ``limits`` (checked before it is made).

    A link is resolved once its target is a file, or a directory with files below it (then it
    stands for the files below it at that moment), in archive order; a link whose target is not
    there yet waits until a file appears at or below its target. Each link is looked at most
    twice and each file added once to an index of the directories above it: O(outputs x depth
    + links), whatever the number of links."""
    files = tree.files
    below: dict[str, list[str]] | None = None  # directory -> the files below it, built at the first directory link
    waiting: dict[str, list[int]] = {}  # target -> links waiting for it
    resolved = [False] * len(links)

    def added(path: str) -> list[int]:
        woken = waiting.pop(path, [])
        for d in _ancestors(path):
            if below is not None:
                below.setdefault(d, []).append(path)
            if waiting:
                woken.extend(waiting.pop(d, ()))
        return woken

    queue = list(range(len(links)))
    while queue:
        woken_all: list[int] = []
        for i in queue:
            if resolved[i]:
                continue
            path, link = links[i]
            if link.target in files:
                sources = [(link.target, path)]
            else:
                if below is None:
                    below = {}
                    for p in files:
                        for d in _ancestors(p):
                            below.setdefault(d, []).append(p)
                prefix = len(link.target) + 1
                sources = [(p, path + "/" + p[prefix:]) for p in below.get(link.target, ())]
            if not sources:
                waiting.setdefault(link.target, []).append(i)
                continue
            resolved[i] = True
            for src, dst in sources:
                size = files[src]
                limits.add_entry(tree.origin, link.entry, f"{link.kind} entry")
                limits.add_bytes(size, tree.origin, link.entry, f"{link.kind} entry")
                tree.add(dst, link.entry)
                temps[dst], files[dst] = attempt.copy(temps[src], CHUNK)
                woken_all.extend(added(dst))
        queue = woken_all
    left = [i for i, done in enumerate(resolved) if not done]
    if left:
        path, link = links[left[0]]
        raise ConversionError(
            f"archive {tree.origin}: {link.kind} entry {link.entry!r} -> {link.target!r}: its target is not a file or "
            "directory of the archive (or links form a cycle); links are copied as files, so it cannot be")


def _copy_whole(unit: WorkUnit, source_fs, target_fs, staging: Staging, config: dict, result: dict,
                progress, fast: bool, session: Session) -> None:
    f = unit.file
    flat = flat_layout(target_fs, f)
    if flat:  # <set dir>/<file id>.data, recorded in the session's journal (see .staged)
        file_dir = staging.file_set_dir(f.file_set)
        stage_root = posixpath.join(file_dir, data_name(f))
    else:
        file_dir = staging.file_dir(f)
        stage_root = posixpath.join(file_dir, f.destination)
    hashers, algo, expected = _hashers(config, f)
    limits = Limits.from_config(config, input_bytes=f.size)
    attempt = _Attempt(target_fs, file_dir, session.dirs if flat else None, token=session.attempt_token())
    tree = _Tree(f.origin)
    temps: dict[str, str] = {}  # output (relative to the destination) -> this attempt's temporary
    links: list[tuple[str, Link]] = []
    reader = None
    try:
        if fast and not f.converters and _both_local(source_fs, target_fs):  # the same, proven equal
            reader = localcopy.RangeCopy(f.origin, f.size, hashers.values(), progress, PROGRESS_EVERY)
            tree.add("")
            temps[""] = attempt.tmp()
            tree.files[""] = reader.run(source_fs._strip_protocol(f.origin), 0, temps[""])
        else:
            with source_fs.open(f.origin, "rb") as raw:
                reader = _SourceReader(raw, f.origin, f.size, hashers.values(), progress)
                outputs = conv.open_outputs(reader, f.origin, f.converters, EncryptionKeys.from_config(config),
                                                  limits)
                for rel, out in outputs:
                    tree.add(rel, getattr(out, "entry", None))
                    if isinstance(out, Link):
                        links.append((rel, out))
                        continue
                    if rel in temps:  # an entry twice in an archive: the last one wins, as tar does
                        attempt.drop(temps[rel])
                    temps[rel], tree.files[rel] = attempt.write_stream(out, chunk=CHUNK)
                drain(reader, CHUNK)
        if links:
            _materialise_links(attempt, tree, temps, links, limits)
        result["bytes_read"] = reader.count
        computed = _verify(f, reader.count, hashers, algo, expected)
        # the whole file is right: only now do its outputs take their names, then the marker
        for rel in sorted(tree.files):
            attempt.commit(temps[rel], posixpath.join(stage_root, rel) if rel else stage_root)
        outputs = [{"path": _output_path(f.destination, rel), "size": size}
                   for rel, size in sorted(tree.files.items())]
        if flat:
            session.record(f, {**_done_record(f, outputs, computed, reader.count, 1), "format": FLAT_DONE_FORMAT,
                               "staged": data_name(f)})
        else:
            _write_marker(attempt, staging, f, outputs, computed, reader.count, 1)
        result["bytes_written"] = sum(tree.files.values())
        if progress is not None:
            progress(reader.count)
    except BaseException as e:
        if not record_failure(result, e, reader, f):
            raise
    finally:
        attempt.discard()  # this attempt's temporaries only: what other attempts staged stays
