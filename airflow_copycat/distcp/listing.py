"""Finding what to copy: datasets under the source root, and each dataset's copy listing.

Gobblin Distcp's ``DatasetFinder`` + ``RecursiveCopyableDataset``, over fsspec:

* :func:`filesystem` opens ``source.url`` / ``target.url`` with their storage options;
* :func:`find_datasets` turns ``dataset.pattern`` (a glob under the root) into
  :class:`~.model.Dataset` s, each published atomically as one file set;
* :func:`list_files` lists one dataset with **one** recursive listing
  (``fs.find(..., detail=True)``: a single paginated LIST on object stores, a
  ``scandir`` walk on local disk) and turns every selected file into a
  :class:`~.model.CopyableFile`: filters (``file.pattern``, the date range of
  ``partition.date.format``, hidden names, checksum sidecars), source
  checksum, permissions and owner, and the destination name after converters.

Nothing here stats or opens files one by one; the only extra reads are the
sidecar files (one batched ``cat``) and, for symbolic links only, an ``info`` to
follow the link. Everything is linear in the number of files.

The parts, by concept: :mod:`.selection` (which files are selected: globs, date ranges,
checksum sidecars), :mod:`.entries` (what a listing entry says: checksum, modification time,
ownership; the recursive listing itself), :mod:`.destination_names` (names after converters)
and :mod:`.paths` (relative paths).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Mapping
from typing import Any

import fsspec

from ..connect.secrets import hide_url_passwords, scrub, url_passwords
from .destination_names import destination_name
from .entries import _find, _follow_link, _fs_checksum, _mtime, _ownership
from .model import CONTROL_DIR, CopyableFile, Dataset
from .paths import _ancestors, _hidden, _join, _norm_root, _relative_to, _under
from .selection import _read_sidecars, _sidecar_algorithm, date_filter, glob_matcher

# ------------------------------------------------------------------ filesystems


def filesystem(url: str, options: Mapping[str, Any] | str | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem of ``url`` and the root path on it, without protocol and trailing ``/``.

    ``options`` are fsspec storage options (``source.options`` / ``target.options``): a
    mapping, a JSON object string, or a config ``Password`` holding one. They usually hold
    credentials, so no error raised here ever shows them (nor a password in the URL).
    """
    opts = _options(url, options)
    try:
        fs, path = fsspec.core.url_to_fs(url, **opts)
    except Exception as e:
        raise ValueError(f"cannot open the filesystem of {_safe_url(url)}: {_error_text(e, opts, url)}") from None
    root = path.rstrip("/") or (fs.root_marker or "")
    return fs, root


def _options(url: str, options: Mapping[str, Any] | str | None) -> dict[str, Any]:
    if options is None:
        return {}
    options = getattr(options, "value", options)  # connect.config.Password
    if isinstance(options, Mapping):
        return dict(options)
    text = str(options).strip()
    if not text:
        return {}
    try:
        parsed = json.loads(text)
    except ValueError as e:
        raise ValueError(f"the storage options of {_safe_url(url)} are not valid JSON (line {e.lineno}, column "
                         f"{e.colno}); give a JSON object such as {{\"anon\": true}}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"the storage options of {_safe_url(url)} must be a JSON object, not "
                         f"{type(parsed).__name__}")
    return parsed


def _safe_url(url: str) -> str:
    """``url``, quoted, with its password (which may hold '/' or '@') and secret query values hidden
    (:func:`~airflow_copycat.connect.secrets.hide_url_passwords`)."""
    return repr(hide_url_passwords(str(url)))


def _error_text(error: Exception, options: Mapping[str, Any], url: str) -> str:
    """What opening ``url``'s filesystem failed with, without its secrets. urlsplit's "Port could not be cast"
    quotes what stands where the port should: the head of a password holding an unencoded '/', '?' or '#'
    (of any length, so no scrubber finds it): a fixed text replaces it."""
    if isinstance(error, ValueError) and "Port could not be cast" in str(error):
        return "ValueError: the URL's port is not a number; percent-encode '/', '?' and '#' in a password"
    return f"{type(error).__name__}: {_scrub(str(error), options, url)}"


def _scrub(message: str, options: Mapping[str, Any], url: str) -> str:
    """``message`` without the strings of ``options`` nor the URL's passwords, whole or in part."""
    return scrub(message, [*(str(v) for v in _leaves(options)), *url_passwords(str(url))])


def _leaves(value: Any) -> Iterable[Any]:
    if isinstance(value, Mapping):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    elif isinstance(value, (str, bytes)):
        yield value


# ------------------------------------------------------------------ datasets


def find_datasets(fs: fsspec.AbstractFileSystem, root: str, pattern: str,
                  exclude: Iterable[str] = (), *, config: Mapping[str, Any] | None = None) -> list[Dataset]:
    """The datasets under ``root``: every match of the glob ``pattern`` (relative to ``root``).

    A directory match is a dataset of the files below it; a file match is a one-file
    dataset. An empty pattern makes the whole root one dataset named ``""``. Matches
    with a hidden component (a name starting with ``_`` or ``.``, e.g. ``_copycat``)
    are skipped, and so are matches nested inside another match (the outermost wins,
    so every file belongs to exactly one file set) and matches at or below an
    ``exclude`` path. With ``config`` (the copy job's), the target (``target.url``) is
    excluded when it lies inside the source, as :func:`list_files` does: the target's
    own tree is never a dataset. Sorted by name.

    Raises :class:`FileNotFoundError` when ``root`` does not exist.
    """
    root = _norm_root(root)
    if not fs.exists(root):
        raise FileNotFoundError(f"the source root {root!r} does not exist (on {_fs_name(fs)}): check source.url")
    pattern = (pattern or "").strip().strip("/")
    if not pattern:
        return [Dataset("", root)]
    excluded = [_norm_root(x) for x in exclude if x]
    if config is not None:
        excluded += _overlapping_target(fs, config.get("target.url"), root)
    names = set()
    for path in fs.glob(_join(root, pattern)):
        path = fs._strip_protocol(path).rstrip("/")
        rel = _relative_to(path, root)
        if not rel or _hidden(rel) or any(_under(path, x) for x in excluded):
            continue
        names.add(rel)
    kept = []
    for name in sorted(names):  # parents sort before their children
        if not any(a in names for a in _ancestors(name)):
            kept.append(Dataset(name, _join(root, name)))
    return kept


# ------------------------------------------------------------------ listing


def list_files(fs: fsspec.AbstractFileSystem, root: str, dataset: Dataset,
               config: Mapping[str, Any]) -> list[CopyableFile]:
    """The copy listing of ``dataset``: one :class:`CopyableFile` per selected file, sorted by path.

    One recursive listing of the dataset (never a call per file). A file is selected when
    no component of its path below the dataset starts with ``_`` or ``.``; it matches
    ``file.pattern`` (a glob relative to the dataset: ``*`` and ``?`` stay within a
    directory, ``**`` crosses directories; for a one-file dataset the file's name); and,
    with ``partition.date.format``, its path (relative to the dataset, else to the root)
    contains a date in ``[date.range.start, date.range.end)``. With ``checksum.sidecar``,
    ``<file>.md5`` / ``<file>.sha256`` give the file's checksum and are not copied.

    Each file gets: ``relative`` = path below the source root; ``destination`` = the same
    path with the converters' names applied (see :func:`destination_name`); the
    converters that apply to it, with ``decompress`` resolved to ``gunzip``/``bunzip2``/
    ``unxz``/``unzstd`` by extension (or dropped when it has none); the source checksum
    when the filesystem's listing has a content hash (S3 single-part ETag, GCS md5Hash)
    or a sidecar gives one; ``mode`` (permission bits), ``owner``/``group`` (names, or
    the numeric id as a string when unknown on this host) when the listing has them.
    """
    root = _norm_root(root)
    opts = _ListingOptions.of(config, fs, root)
    listing = _find(fs, dataset.root)
    file_dataset = len(listing) == 1 and dataset.root in listing
    sidecars: dict[str, dict[str, str]] = {}  # data file path -> {algorithm: sidecar path}
    selected: list[tuple[str, str, dict]] = []  # (path, relative to the root, info)
    for path, info in sorted(listing.items()):  # fsspec sorts already: linear for timsort
        if opts.exclude and any(_under(path, x) for x in opts.exclude):
            continue
        relative = _relative_to(path, root) or posixpath.basename(path)  # a file source.url: its name
        if file_dataset:
            in_dataset = posixpath.basename(path)
        else:
            in_dataset = _relative_to(path, dataset.root)
            if not in_dataset or _hidden(in_dataset):
                continue
        if opts.sidecar:
            algorithm = _sidecar_algorithm(path)
            if algorithm:
                sidecars.setdefault(path[: -len(algorithm) - 1], {})[algorithm] = path
                continue
        if opts.pattern is not None and not opts.pattern(in_dataset):
            continue
        if opts.dates is not None and not opts.dates(in_dataset if not file_dataset else "", relative):
            continue
        selected.append((path, relative, info))

    checksums = _read_sidecars(fs, {p: sidecars[p] for p, _, _ in selected if p in sidecars}, opts.prefer)
    out = []
    for path, relative, info in selected:
        if info.get("islink"):
            info = _follow_link(fs, path, info)
            if info is None:
                continue
        destination, converters = destination_name(relative, opts.converters) if opts.converters else (relative, ())
        mode, owner, group = _ownership(info)
        out.append(CopyableFile(
            origin=path, relative=relative, destination=destination,
            size=int(info.get("size") or 0), mtime=_mtime(info), dataset=dataset.name, file_set=dataset.name,
            checksum=checksums.get(path) or _fs_checksum(info), mode=mode, owner=owner, group=group,
            preserve=opts.preserve, converters=converters,
        ))
    return out


# ------------------------------------------------------------------ selection helpers


class _ListingOptions:
    """The parts of a copy config that listing needs, compiled once per call."""

    __slots__ = ("pattern", "dates", "sidecar", "prefer", "converters", "preserve", "exclude")

    @classmethod
    def of(cls, config: Mapping[str, Any], fs: fsspec.AbstractFileSystem, root: str) -> "_ListingOptions":
        self = cls()
        self.pattern = glob_matcher(config.get("file.pattern") or "**")
        self.dates = date_filter(config.get("partition.date.format") or "", config.get("date.range.start") or "",
                                 config.get("date.range.end") or "")
        self.sidecar = bool(config.get("checksum.sidecar"))
        self.prefer = str(config.get("checksum") or "md5")
        self.converters = tuple(_names(config.get("converters")))
        self.preserve = tuple(_names(config.get("preserve", ("perm", "mtime"))))
        self.exclude = _overlapping_target(fs, config.get("target.url"), root)
        return self


def _names(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


def _fs_name(fs: fsspec.AbstractFileSystem) -> str:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return f"{protocol}://"


def _overlapping_target(fs: fsspec.AbstractFileSystem, target_url: Any, root: str) -> tuple[str, ...]:
    """Paths never listed when ``target.url`` lies on the source's filesystem: the target's
    ``_copycat`` control tree, and the whole target when it is a proper subdirectory of
    the source root (else every run would copy its own output again)."""
    if not target_url:
        return ()
    protocol, _ = fsspec.core.split_protocol(str(target_url))
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    if (protocol or "file") not in protocols:
        return ()
    try:
        target = _norm_root(fs._strip_protocol(str(target_url)))
    except Exception:  # noqa: BLE001 -- an unparsable target is reported by whoever opens it
        return ()
    control = posixpath.join(target, CONTROL_DIR.split("/")[0])
    return (control, target) if _relative_to(target, root) else (control,)
