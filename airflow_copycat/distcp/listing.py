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

Why over 500 lines: one listing pass (datasets, the recursive listing, the filters, sidecar
checksums, names after converters) whose helpers all read the same listing entries; the date
patterns and the glob dialect are already apart (fsspec's translation).
"""

from __future__ import annotations

import base64
import binascii
import json
import posixpath
import re
from collections.abc import Iterable, Mapping
from datetime import date, datetime, timezone
from typing import Any, Callable

import fsspec
from fsspec.utils import glob_translate

from ..connect.secrets import scrub
from .converters import converted_name
from .model import CONTROL_DIR, CopyableFile, Dataset

DECOMPRESSORS = ("gunzip", "bunzip2", "unxz", "unzstd")
"""The explicit decompress converters; ``decompress`` picks one of them by extension."""

# per decompressor: (extensions it drops, compressed-tar extensions it turns into .tar), as in .converters
_EXTENSIONS = {
    "gunzip": ((".gz", ".gzip"), (".tgz",)),
    "bunzip2": ((".bz2",), (".tbz2", ".tbz")),
    "unxz": ((".xz", ".lzma"), (".txz",)),
    "unzstd": ((".zst", ".zstd"), (".tzst",)),
}
_TAR_SUFFIXES = (".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst", ".tgz", ".tbz2", ".tbz", ".txz", ".tzst", ".tar")
SIDECAR_ALGORITHMS = ("md5", "sha256")
_HEX_LENGTH = {"md5": 32, "sha256": 64}


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
        raise ValueError(f"cannot open the filesystem of {_safe_url(url)}: {type(e).__name__}: "
                         f"{_scrub(str(e), opts, url)}") from None
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
    """``url`` without a ``user:password@`` part."""
    return repr(re.sub(r"(//)[^/@]*@", r"\1[hidden]@", str(url)))


def _scrub(message: str, options: Mapping[str, Any], url: str) -> str:
    secrets = [str(v) for v in _leaves(options)]
    userinfo = re.search(r"//([^/@]*)@", str(url))
    if userinfo:
        secrets.append(userinfo.group(1))
    return scrub(message, secrets)


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


def destination_name(relative: str, converters: Iterable[str]) -> tuple[str, tuple[str, ...]]:
    """``(destination, converters that apply)`` of a file at ``relative`` with the job's converters.

    A converter applies to the files whose names it fits -- a decompressor to its
    extension, ``untar`` to tar archives, ``decrypt`` to ``.enc``, ``encrypt`` to all --
    and other files are copied as they are.

    Only the last path component changes, by :func:`.converters.converted_name` (one set of
    naming rules for the listing and the copier), converter by converter: a decompressor
    drops its extension when present (``gunzip``: ``.gz``, ``.tgz`` -> ``.tar``...);
    ``decompress`` becomes the decompressor of the current extension, or is left out
    when there is none; ``untar`` drops ``.tar``/``.tar.gz``/``.tgz``... -- the destination
    is the directory the archive expands into -- and the converters after it, which
    convert the archive's entries, are kept as given and leave the name alone;
    ``encrypt`` adds ``.enc``; ``decrypt`` drops it.
    """
    head, name = posixpath.split(relative)
    chain = list(converters)
    applied: list[str] = []
    for i, conv in enumerate(chain):
        if conv == "decompress":
            conv = next((d for d in DECOMPRESSORS if converted_name(name, d) != name), None)
            if conv is None:
                continue
        elif conv != "encrypt" and converted_name(name, conv) == name:
            continue  # a converter applies to the files whose names it fits: .gz, tar archives, .enc
        name = converted_name(name, conv)
        applied.append(conv)
        if conv == "untar":
            applied.extend(chain[i + 1:])
            break
    return (posixpath.join(head, name) if head else name), tuple(applied)


def source_name_candidates(name: str, converters: Iterable[str]) -> set[str]:
    """Names a source file may have had for :func:`destination_name` to give ``name``
    (a superset; used to decide whether a target file is in a job's scope)."""
    chain = list(converters)
    if "untar" in chain:
        chain = chain[: chain.index("untar") + 1]
    names = {name}
    for conv in reversed(chain):
        more = set()
        for n in names:
            if conv in DECOMPRESSORS or conv == "decompress":
                for d in (DECOMPRESSORS if conv == "decompress" else (conv,)):
                    more.update(n + e for e in _EXTENSIONS[d][0])
                    if n.lower().endswith(".tar"):
                        more.update(n[:-4] + e for e in _EXTENSIONS[d][1])
            elif conv == "untar":
                more.update(n + s for s in _TAR_SUFFIXES)
            elif conv == "encrypt" and n.endswith(".enc"):
                more.add(n[:-4])
            elif conv == "decrypt":
                more.add(n + ".enc")
        names |= more
    return names


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


def glob_matcher(pattern: str) -> Callable[[str], bool] | None:
    """A predicate matching paths (relative, ``/``-separated) against a glob, or ``None`` for
    ``**`` (everything). The dialect is fsspec's, the one ``fs.glob`` uses for ``dataset.pattern``
    (``fsspec.utils.glob_translate``): ``*``/``?``/``[...]`` stay within a component, ``**`` is a
    whole component that crosses them, ``**/`` also matches no directory. ``ValueError`` for a
    pattern that is not a glob (the config check reports it first)."""
    pattern = pattern.strip().strip("/")
    if pattern in ("", "**"):
        return None
    return re.compile(glob_translate(pattern)).match  # type: ignore[return-value]  # ends in \Z: whole paths


_DIRECTIVES = {
    "Y": r"\d{4}", "y": r"\d{2}", "m": r"\d{2}", "d": r"\d{2}", "H": r"\d{2}", "M": r"\d{2}", "S": r"\d{2}",
    "j": r"\d{3}", "U": r"\d{2}", "W": r"\d{2}", "w": r"\d", "u": r"\d", "b": r"[A-Za-z]{3}", "B": r"[A-Za-z]+",
    "a": r"[A-Za-z]{3}", "A": r"[A-Za-z]+", "%": "%",
}


def parse_instant(text: str, key: str = "date") -> float:
    """Seconds since the epoch of an ISO date or datetime (``2026-11-21``,
    ``2026-11-21T05:00:00+02:00``, ``...Z``); naive means UTC."""
    text = str(text).strip()
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise ValueError(f"{key} {text!r} is not an ISO date or datetime (e.g. 2026-11-21 or "
                         f"2026-11-21T00:00:00+00:00)") from None
    if isinstance(dt, date) and not isinstance(dt, datetime):  # pragma: no cover - fromisoformat gives datetime
        dt = datetime(dt.year, dt.month, dt.day)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def date_filter(fmt: str, start: str, end: str) -> Callable[[str, str], bool] | None:
    """A predicate ``(path relative to the dataset, path relative to the root) -> bool``: true
    when the first path (or, when it has none, the second) contains a date of ``fmt``
    within ``[start, end)``. ``None`` when ``fmt`` is empty (no date selection).

    The date is found where it is not surrounded by digits (``2026/11/21/``,
    ``dt=2026-11-21/``, ``2026-11-21.log``); a partition's time is the start of the period
    it names, naive = UTC. Parsed dates are cached: a strptime per partition, not per file.
    """
    if not fmt:
        return None
    if not (start and end):
        raise ValueError("partition.date.format needs date.range.start and date.range.end")
    lo, hi = parse_instant(start, "date.range.start"), parse_instant(end, "date.range.end")
    body, i = [], 0
    while i < len(fmt):
        if fmt[i] == "%" and i + 1 < len(fmt):
            d = fmt[i + 1]
            if d not in _DIRECTIVES:
                raise ValueError(f"partition.date.format {fmt!r}: %{d} is not supported "
                                 f"(use %{', %'.join(k for k in _DIRECTIVES if k != '%')})")
            body.append(_DIRECTIVES[d])
            i += 2
        else:
            body.append(re.escape(fmt[i]))
            i += 1
    regex = re.compile(r"(?<![0-9])(" + "".join(body) + r")(?![0-9])")
    parse_fmt, suffix = fmt, ""
    if re.search(r"%[UW]", fmt) and not re.search(r"%[aAwu]", fmt):
        parse_fmt, suffix = fmt + " %w", " 1"  # a week number needs a weekday: its Monday
    cache: dict[str, float | None] = {}

    def instant(text: str) -> float | None:
        if text not in cache:
            try:
                cache[text] = datetime.strptime(text + suffix, parse_fmt).replace(tzinfo=timezone.utc).timestamp()
            except ValueError:
                cache[text] = None
        return cache[text]

    def find(path: str) -> float | None:
        for m in regex.finditer(path):
            t = instant(m.group(1))
            if t is not None:
                return t
        return None

    def keep(in_dataset: str, relative: str) -> bool:
        t = find(in_dataset) if in_dataset else None
        if t is None:
            t = find(relative)
        return t is not None and lo <= t < hi

    return keep


def _hidden(rel: str) -> bool:
    """Whether any component of a relative path starts with ``_`` or ``.``."""
    return rel[:1] in ("_", ".") or "/_" in rel or "/." in rel


def _sidecar_algorithm(path: str) -> str | None:
    for algorithm in SIDECAR_ALGORITHMS:
        if path.endswith("." + algorithm) and len(posixpath.basename(path)) > len(algorithm) + 1:
            return algorithm
    return None


def is_sidecar(path: str) -> bool:
    """Whether ``path`` names a checksum sidecar (``<file>.md5`` / ``<file>.sha256``)."""
    return _sidecar_algorithm(path) is not None


def _read_sidecars(fs: fsspec.AbstractFileSystem, wanted: dict[str, dict[str, str]], prefer: str) -> dict[str, str]:
    """``{data file: "<algorithm>:<hex>"}`` from the sidecars, read in one batched ``cat``."""
    if not wanted:
        return {}
    choice = {}
    for path, by_algorithm in wanted.items():
        algorithm = prefer if prefer in by_algorithm else sorted(by_algorithm)[0]
        choice[path] = (algorithm, by_algorithm[algorithm])
    contents = fs.cat([p for _, p in choice.values()], on_error="return")
    out = {}
    for path, (algorithm, sidecar) in choice.items():
        data = contents.get(sidecar)
        if data is None:
            data = contents.get(fs._strip_protocol(sidecar))
        if isinstance(data, BaseException) or data is None:
            raise OSError(f"cannot read the checksum sidecar {sidecar!r}: {data!r}")
        token = data.decode("ascii", "replace").split()[:1]
        digest = token[0].lower() if token else ""
        if len(digest) != _HEX_LENGTH[algorithm] or not re.fullmatch(r"[0-9a-f]+", digest):
            raise ValueError(f"the checksum sidecar {sidecar!r} does not start with a {algorithm} hex digest "
                             f"({_HEX_LENGTH[algorithm]} hex characters); fix or remove it, or set "
                             f"checksum.sidecar=false")
        out[path] = f"{algorithm}:{digest}"
    return out


def _fs_checksum(info: Mapping[str, Any]) -> str | None:
    """A content hash from a listing entry: an S3 ETag of a single-part upload without SSE-KMS/SSE-C
    (32 hex chars, no ``-``) or a GCS ``md5Hash``; otherwise ``None``."""
    etag = info.get("ETag") or info.get("etag") or info.get("e_tag")
    if isinstance(etag, str):
        etag = etag.strip().strip('"').lower()
        encrypted = str(info.get("ServerSideEncryption") or "").lower() == "aws:kms" or info.get(
            "SSECustomerAlgorithm")
        if len(etag) == 32 and "-" not in etag and not encrypted and re.fullmatch(r"[0-9a-f]{32}", etag):
            return f"md5:{etag}"
    md5 = info.get("md5Hash")
    if isinstance(md5, str):
        try:
            raw = base64.b64decode(md5, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) == 16:
            return f"md5:{raw.hex()}"
    return None


_MTIME_KEYS = ("mtime", "LastModified", "last_modified", "updated", "modified", "created")


def _mtime(info: Mapping[str, Any]) -> float:
    """Modification time in seconds from a listing entry of any fsspec filesystem."""
    ms = info.get("modificationTime")  # webhdfs: milliseconds
    if isinstance(ms, (int, float)):
        return float(ms) / 1000.0
    for key in _MTIME_KEYS:
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, datetime):
            return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()
        if isinstance(value, str):
            try:
                return parse_instant(value)
            except ValueError:
                continue
    return 0.0


_USERS: dict[int, str] = {}
_GROUPS: dict[int, str] = {}


_OWNERSHIP: dict[tuple, tuple[int | None, str | None, str | None]] = {}


def _ownership(info: Mapping[str, Any]) -> tuple[int | None, str | None, str | None]:
    """``(permission bits, owner name, group name)`` of a listing entry (each ``None`` if unknown)."""
    key = (info.get("mode"), info.get("permission"), info.get("uid"), info.get("gid"), info.get("owner"),
           info.get("group"))
    try:
        return _OWNERSHIP[key]
    except KeyError:
        pass
    except TypeError:  # unhashable values
        return _ownership_of(info)
    if len(_OWNERSHIP) > 4096:
        _OWNERSHIP.clear()
    _OWNERSHIP[key] = value = _ownership_of(info)
    return value


def _ownership_of(info: Mapping[str, Any]) -> tuple[int | None, str | None, str | None]:
    mode = info.get("mode")
    if isinstance(mode, str):  # webhdfs "permission"-like octal strings
        try:
            mode = int(mode, 8)
        except ValueError:
            mode = None
    if mode is None and isinstance(info.get("permission"), str):
        try:
            mode = int(info["permission"], 8)
        except ValueError:
            mode = None
    mode = int(mode) & 0o7777 if isinstance(mode, int) else None
    owner = info.get("owner") if isinstance(info.get("owner"), str) else None
    group = info.get("group") if isinstance(info.get("group"), str) else None
    if owner is None and isinstance(info.get("uid"), int):
        owner = _name_of(info["uid"], _USERS, "pwd", "getpwuid", "pw_name")
    if group is None and isinstance(info.get("gid"), int):
        group = _name_of(info["gid"], _GROUPS, "grp", "getgrgid", "gr_name")
    return mode, owner, group


def _name_of(ident: int, cache: dict[int, str], module: str, function: str, attr: str) -> str:
    name = cache.get(ident)
    if name is None:
        try:
            mod = __import__(module)
            name = getattr(getattr(mod, function)(ident), attr)
        except (ImportError, KeyError, OverflowError):
            name = str(ident)
        cache[ident] = name
    return name


# ------------------------------------------------------------------ paths and raw listings


def _find(fs: fsspec.AbstractFileSystem, path: str) -> dict[str, dict]:
    """``{path: info}`` of the files at or below ``path`` in one recursive listing (``{}`` if
    absent). Entries a filesystem returns without details (fsspec gives ``{}`` for a
    path that is itself a file) get one ``info`` call."""
    try:
        found = fs.find(path, detail=True, withdirs=False)
    except FileNotFoundError:
        return {}
    out = {}
    for name, info in found.items():
        name = name.rstrip("/")
        if not info or "size" not in info:
            try:
                info = fs.info(name)
            except FileNotFoundError:
                continue
        if info.get("type") == "directory":
            continue
        if info.get("type") not in (None, "file") and not info.get("islink"):
            continue  # sockets, fifos, devices
        out[name] = info
    return out


def _follow_link(fs: fsspec.AbstractFileSystem, path: str, info: dict) -> dict | None:
    """A symbolic link's target's details (``None``: a link to a directory, or dangling)."""
    try:
        target = fs.info(path)  # follows the link
    except (FileNotFoundError, OSError):
        return None
    if target.get("type") != "file":
        return None
    return {**target, "islink": False}


def _norm_root(root: str) -> str:
    if root.startswith("/"):
        return root.rstrip("/") or "/"
    return root.rstrip("/")


def _join(root: str, rel: str) -> str:
    if not rel:
        return root
    return posixpath.join(root, rel) if root else rel


def _relative_to(path: str, root: str) -> str:
    """``path`` below ``root`` (``""`` when equal or not below)."""
    if root in ("", "/"):
        return path.lstrip("/") if path.startswith(root) else ""
    if path.startswith(root) and path[len(root):len(root) + 1] == "/":
        return path[len(root) + 1:]
    return ""


def _under(path: str, ancestor: str) -> bool:
    return path == ancestor or path.startswith(ancestor.rstrip("/") + "/")


def _ancestors(rel: str) -> Iterable[str]:
    i = rel.rfind("/")
    while i > 0:
        rel = rel[:i]
        yield rel
        i = rel.rfind("/")


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
