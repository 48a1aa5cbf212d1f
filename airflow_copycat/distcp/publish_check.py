"""Which files of a file set are staged (step 2 of the publish, see :mod:`.publish`).

Contract: ``StagingCheckMixin._check_staged(file_set, files)`` returns ``(staged, errors)``:
a ``_Staged`` per file whose copy finished -- its done marker carries its id and every output
it names is in the staging listing with its size, or (staged flat, :mod:`.staged`) a done
journal records it and its data file has the recorded size -- and ``{origin: why not}`` for
the others. On the local disk each ``_Staged`` also carries the stat the listing took of its
staged outputs (``stats``), which the publish uses to skip attribute steps already true. A split file whose parts are all staged is concatenated first
(``split_copy.finish_split``). It reads the staging and never changes the published tree.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from .model import PARTS_DIR, CopyableFile
from .publish_log import _bad_relative, _Staged
from .staged import data_name, is_journal, read_records, record_size


def _stats(listing: dict[str, dict], paths) -> dict[str, Any] | None:
    """``{path: stat}`` of the staged ``paths`` the listing stat-ed (a local listing: regular files,
    not links), or ``None``."""
    out = {}
    for path in paths:
        info = listing.get(path)
        st = info.get("stat") if info is not None and info.get("type") == "file" and not info.get("islink") else None
        if st is not None:
            out[path] = st
    return out or None


class StagingCheckMixin:
    """Finds the staged files of a set, for :class:`~.publish.Publisher` (see the module docstring)."""

    def _check_staged(self, file_set: str, files: list[CopyableFile]) -> tuple[list[_Staged], dict[str, str]]:
        """Which files are staged (done marker with their id, every output there), and why the
        others are not (by origin)."""
        listing = self.files.find(self.staging.file_set_dir(file_set))
        errors: dict[str, str] = {}
        staged: list[_Staged] = []
        markers: dict[str, CopyableFile] = {}
        set_dir = self.staging.file_set_dir(file_set) + "/"
        split_ids = set()  # file ids with staged parts
        file_dirs = set()  # file ids with a staging directory (layout 1)
        journals = []
        for p in listing:
            file_id, _, below = p[len(set_dir):].partition("/")
            if below:
                file_dirs.add(file_id)
            elif is_journal(file_id):
                journals.append(p)
            if below.startswith(PARTS_DIR + "/"):
                split_ids.add(file_id)
        records = read_records(journals, self.fs.cat_file) if journals else {}
        for f in files:
            flat = self._flat_staged(f, records.get(f.id), listing, set_dir)
            if flat is not None:
                staged.append(_Staged(f, flat[0], flat[1], set_dir + f.id if f.id in file_dirs else None,
                                      _stats(listing, flat[1].values())))
                continue
            marker = self.staging.done_marker(f)
            if marker in listing:
                markers[marker] = f
                continue
            if f.id in split_ids:
                why = self._finish_split(f, listing)
                if why:
                    errors[f.origin] = why
                else:
                    markers[marker] = f
                    listing.update(self.files.find(self.staging.file_dir(f)))
                continue
            errors[f.origin] = "not staged (no done marker: its copy did not finish)"
        raw = self._read_many(list(markers))
        for marker, f in markers.items():
            why, outputs = self._read_marker(f, marker, raw.get(marker), listing)
            if why:
                errors[f.origin] = why
            else:
                file_dir = self.staging.file_dir(f)
                paths = {o["path"]: posixpath.join(file_dir, o["path"]) for o in outputs}
                staged.append(_Staged(f, outputs, paths, file_dir, _stats(listing, paths.values())))
        seen: dict[str, str] = {}
        for s in staged:
            for out in s.outputs:
                other = seen.setdefault(out["path"], s.file.origin)
                if other != s.file.origin:
                    errors[s.file.origin] = f"its output {out['path']} is also the output of {other}"
                    errors[other] = f"its output {out['path']} is also the output of {s.file.origin}"
        return staged, errors

    def _flat_staged(self, f: CopyableFile, record: dict | None, listing: dict[str, dict],
                     set_dir: str) -> tuple[list[dict], dict[str, str]] | None:
        """``(outputs, {output: staged path})`` when ``f`` is staged flat (:mod:`.staged`: a journal
        record of its id, its data file there with the record's size, the record's one output its
        destination), else None (then its file dir is looked at)."""
        if record is None or f.converters:
            return None
        path = set_dir + data_name(f)
        info = listing.get(path)
        size = record_size(record)
        if (info is None or info.get("type") != "file" or info.get("islink") or size is None
                or int(info.get("size", -1)) != size or record["outputs"][0].get("path") != f.destination):
            return None
        return [{"path": f.destination, "size": size}], {f.destination: path}

    def _read_many(self, paths: list[str]) -> dict[str, Any]:
        """``{path: bytes or the exception}``; concurrent on remote filesystems (one request per marker)."""
        def read(path):
            try:
                return self.fs.cat_file(path)
            except Exception as e:  # noqa: BLE001 - reported per file
                return e
        if self.local or len(paths) < 8:
            return {p: read(p) for p in paths}
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(16) as pool:
            return dict(zip(paths, pool.map(read, paths)))

    def _finish_split(self, f: CopyableFile, listing: dict[str, dict]) -> str | None:
        """Concatenate the parts of split file ``f`` (``split_copy.finish_split``); why not, or ``None``."""
        split = int(self.config.get("block.split.size") or 0)
        if split > 0:
            n = max(1, -(-int(f.size) // split))
            absent = [k for k in range(n) if self.staging.part_path(f, k) not in listing]
            if absent:
                return (f"split file: {len(absent)} of its {n} parts not staged (part {absent[0]} first): "
                        "their copy did not finish")
        try:
            from .split_copy import finish_split
        except ImportError as e:
            return f"split file: cannot concatenate its parts ({e})"
        try:
            done = finish_split(f, self.fs, self.staging, self.config)
        except Exception as e:  # noqa: BLE001 - the file is not staged; the set waits for the next run
            return f"split file: concatenating its parts failed: {type(e).__name__}: {e}"
        if isinstance(done, dict) and done.get("status") == "failed":
            return f"split file: concatenating its parts failed: {done.get('error')}"
        return None

    def _read_marker(self, f: CopyableFile, marker: str, raw: Any, listing: dict[str, dict]):
        if isinstance(raw, Exception) or raw is None:
            return f"done marker {marker} unreadable: {raw}", []
        try:
            doc = json.loads(raw)
        except ValueError as e:
            return f"done marker {marker} is not valid JSON ({e})", []
        if not isinstance(doc, dict) or doc.get("id") != f.id:
            return (f"done marker {marker} is of file id {doc.get('id') if isinstance(doc, dict) else None!r}, "
                    f"not {f.id} (another version of the file was staged)"), []
        outputs = doc.get("outputs")
        if not isinstance(outputs, list):
            return f"done marker {marker} has no list of outputs", []
        file_dir = self.staging.file_dir(f)
        checked = []
        for out in outputs:
            rel = out.get("path") if isinstance(out, dict) else None
            why = _bad_relative(rel, self.backslash_ok)
            if why:
                return f"its output {rel!r} {why}", []
            if rel != f.destination and not rel.startswith(f.destination + "/"):
                return f"its output {rel} is not its destination {f.destination} or below it", []
            staged = posixpath.join(file_dir, rel)
            if staged == marker or staged.startswith(posixpath.join(file_dir, PARTS_DIR) + "/"):
                return f"its output {rel} collides with the staging control files", []
            info = listing.get(staged)
            if info is None:
                if not self.files.exists(staged):
                    return f"staged output {staged} is missing", []
                info = {}
            size = out.get("size")
            if size is not None and info.get("type") == "file" and not info.get("islink") \
                    and info.get("size") is not None and int(info["size"]) != int(size):
                return f"staged output {staged} has {info['size']} bytes, its done marker says {size}", []
            checked.append({"path": rel, "size": None if size is None else int(size)})
        return None, checked
