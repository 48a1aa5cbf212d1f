"""JSON documents on local paths, fsspec URLs or a filesystem the caller holds: the one writer and
reader of the group, result and plan files that cross from the Airflow side to Spark and back.

A document is written under a temporary name (``<path>.tmp``) and then renamed over ``path`` by
:class:`~airflow_copycat.storage.AtomicFiles` (durably on the local disk): readers never see half a
document where the filesystem renames atomically (local disks, HDFS); on object stores the rename
is a copy, still never a prefix of the document being written.
"""

from __future__ import annotations

import json
from typing import Any

from ..storage import AtomicFiles


def _is_url(path: str) -> bool:
    return "://" in path


def write_json(doc: Any, path: str, *, fs=None, compact: bool = False) -> str:
    """Write ``doc`` to ``path`` -- a local path, an fsspec URL, or a path of ``fs`` (an fsspec
    filesystem) -- through a temporary name; returns ``path``. ``compact``: no indentation (large
    plans); otherwise one key per line, for people reading a kept work directory. Values JSON does
    not know are written as their ``str()``."""
    data = json.dumps(doc, default=str, **({"separators": (",", ":")} if compact else {"indent": 1})).encode("utf-8")
    if fs is None and _is_url(path):
        import fsspec

        fs, target = fsspec.core.url_to_fs(path)  # written through its filesystem; ``path`` is returned as given
    else:
        target = path
    AtomicFiles(fs).write_whole(target, data)
    return path


def read_json(path: str) -> Any | None:
    """The JSON document at ``path`` (a local path or an fsspec URL); ``None`` when there is none, or
    only part of one (a writer that died before its rename leaves none on atomic filesystems)."""
    try:
        if _is_url(path):
            import fsspec

            with fsspec.open(path, "r", encoding="utf-8") as f:
                return json.load(f)
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None
