"""Expanding a tar archive: its regular files and links, checked, one after the other.

Contract: ``_untar(stream, label, limits)`` yields ``(path, output)`` for each regular file
(a readable stream with its size as ``.size``) and each link (a :class:`Link`) of the tar read
from ``stream``, in archive order, paths normalised and relative; a compressed tar is
decompressed first (told by its magic bytes). Absolute paths, ``..`` components, links that
leave the archive root, a tar that ends without its end-of-archive blocks and headers past
``TAR_MAX_HEADER`` / ``TAR_MAX_CHAINED_HEADERS`` raise :class:`~.streams.ConversionError` naming
the archive and the entry; every entry counts against ``limits``. Each output must be read to
its end before the next is asked for. The full contract, as the ``untar`` converter, is in the
docstring of :mod:`.converters`.
"""

from __future__ import annotations

import posixpath
import re
import tarfile
from dataclasses import dataclass
from typing import BinaryIO, Iterator, Union

from .decompress import _CODEC_ERRORS, _decompress, _Guard, _sniff_compression
from .limits import Limits
from .streams import ConversionError, _Counter, _describe, _Prefixed, _read_exact, drain

TAR_MAX_HEADER = 1 << 20
"""Largest GNU long-name/long-link or pax header accepted (tarfile holds it in memory)."""
TAR_MAX_CHAINED_HEADERS = 16
"""Most extension headers (pax, long names) before one entry."""


@dataclass(frozen=True)
class Link:
    """An archive entry that is a link to another output of the same archive.

    ``target``: the path of the output it points to -- a file, or a directory whose
    outputs it stands for -- relative to the same destination as the link's own
    path (never absolute, never outside). ``kind``: ``"symlink"`` or ``"hardlink"``.
    ``entry``: the entry as named in the archive, for messages."""

    target: str
    kind: str
    entry: str


Output = Union[BinaryIO, Link]


_EXTENSION_HEADERS = {tarfile.GNUTYPE_LONGNAME: "GNU long-name", tarfile.GNUTYPE_LONGLINK: "GNU long-link",
                      tarfile.XHDTYPE: "pax", tarfile.XGLTYPE: "pax global", tarfile.SOLARIS_XHDTYPE: "pax"}


class _CheckedTarInfo(tarfile.TarInfo):
    """Records how a tar ended: tarfile takes a missing, cut or invalid header after the first
    one for the end of the archive; only the zero block of a real end is accepted here.

    Also bounds what tarfile reads into memory for one entry's headers: an extension header
    (GNU long name/link, pax) whose size field is over ``TAR_MAX_HEADER`` is refused before it is
    read, the bytes read for one entry's headers in all (GNU sparse maps) are bounded by
    ``_budget`` (a :class:`_Counter` under the tar stream), and extension headers are chained at
    most ``TAR_MAX_CHAINED_HEADERS`` deep. :func:`_untar` makes a subclass per archive setting
    ``_label`` and ``_budget``."""

    _label = "<archive>"
    _budget: _Counter | None = None

    def _proc_member(self, tf):
        kind = _EXTENSION_HEADERS.get(self.type)
        if kind is not None and self.size > TAR_MAX_HEADER:
            raise ConversionError(f"archive {self._label}: entry {self.name!r} is a {kind} header of {self.size} "
                                  f"bytes, more than {TAR_MAX_HEADER} (1 MiB); refused (this bound is fixed: "
                                  "no archive needs such a header)")
        return super()._proc_member(tf)

    @classmethod
    def fromtarfile(cls, tf):
        depth = getattr(tf, "_copycat_depth", 0)
        if depth >= TAR_MAX_CHAINED_HEADERS:
            raise ConversionError(f"archive {cls._label}: more than {TAR_MAX_CHAINED_HEADERS} extension headers "
                                  "(pax, GNU long names) before one entry; refused")
        budget = cls._budget
        if depth == 0 and budget is not None:
            budget.limit = budget.count + TAR_MAX_HEADER + 2 * tarfile.RECORDSIZE
            budget.error = lambda: ConversionError(
                f"archive {cls._label}: the headers of one entry take more than {TAR_MAX_HEADER} bytes (1 MiB); "
                "refused (this bound is fixed)")
        tf._copycat_depth = depth + 1
        try:
            return cls._fromtarfile(tf)
        finally:
            tf._copycat_depth = depth
            if depth == 0 and budget is not None:
                budget.limit = None

    @classmethod
    def _fromtarfile(cls, tf):
        try:
            return super().fromtarfile(tf)
        except (IndexError, OverflowError) as e:  # tarfile's parsing of a cut GNU sparse header
            tf._copycat_end = f"invalid tar header ({type(e).__name__}: {e})"
            raise tarfile.InvalidHeaderError(str(e)) from e
        except tarfile.EOFHeaderError:
            tf._copycat_end = None
            raise
        except (tarfile.EmptyHeaderError, tarfile.TruncatedHeaderError) as e:
            tf._copycat_end = f"the archive ends without its end-of-archive blocks ({e})"
            raise
        except tarfile.InvalidHeaderError as e:
            tf._copycat_end = f"invalid tar header ({e})"
            raise


_DRIVE = re.compile(r"^[A-Za-z]:")


def _entry_path(name: str, archive: str, what: str = "entry") -> str:
    """The normalised relative path of an entry, or a ConversionError."""
    if name.startswith(("/", "\\")) or _DRIVE.match(name):
        raise ConversionError(f"archive {archive}: {what} {name!r} has an absolute path; refused")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ConversionError(f"archive {archive}: {what} {name!r} has a '..' component "
                              "(it would be written outside the destination); refused")
    return "/".join(parts)


def _link_target(member: tarfile.TarInfo, path: str, archive: str) -> str:
    kind = "symlink" if member.issym() else "hard link"
    target = member.linkname
    if not target or target.startswith(("/", "\\")) or _DRIVE.match(target):
        raise ConversionError(f"archive {archive}: {kind} entry {member.name!r} -> {target!r} points outside the "
                              "archive root (absolute target); refused")
    # a symlink resolves against its own directory, a hard link against the archive root
    joined = posixpath.join(posixpath.dirname(path), target) if member.issym() else target
    resolved = posixpath.normpath(joined)
    if resolved == ".." or resolved.startswith("../") or resolved.startswith("/"):
        raise ConversionError(f"archive {archive}: {kind} entry {member.name!r} -> {target!r} points outside the "
                              "archive root; refused")
    if resolved == ".":
        raise ConversionError(f"archive {archive}: {kind} entry {member.name!r} -> {target!r} points at the "
                              "archive root itself; refused")
    return resolved


def _untar(stream, label: str, limits: Limits | None = None) -> Iterator[tuple[str, Output]]:
    """The regular files and (checked) links of the tar read from ``stream``, in order. Each
    entry counts against ``limits`` (entries); a regular file's stream has its size as
    ``.size``."""
    limits = limits if limits is not None else Limits()

    def fail(e: BaseException, where: str) -> ConversionError:
        return ConversionError(f"corrupt or truncated tar archive {label}{where}: {_describe(e)}")

    head = _read_exact(stream, 10)
    stream = _Prefixed(head, stream)
    codec = _sniff_compression(head)
    if codec:  # a compressed tar given to untar alone
        stream = _decompress(stream, codec, label, limits)
    budget = stream = _Counter(stream)
    info = type("_ArchiveTarInfo", (_CheckedTarInfo,), {"_label": label, "_budget": budget})
    try:
        tf = tarfile.open(fileobj=stream, mode="r|", tarinfo=info)
    except ConversionError:
        raise
    except tarfile.ReadError as e:
        raise ConversionError(f"{label} is not a tar archive ({e})") from e
    except _CODEC_ERRORS as e:
        raise fail(e, "") from e
    if not hasattr(tf, "_copycat_end"):  # (opening read the first header, which may have been the end)
        tf._copycat_end = "no end"
    last = ""
    while True:
        try:
            member = tf.next()
        except ConversionError:
            raise
        except _CODEC_ERRORS as e:
            raise fail(e, f" after entry {last!r}" if last else "") from e
        tf.members = []  # tarfile keeps every member it read; an archive can hold millions
        if member is None:
            break
        last = member.name
        limits.add_entry(label, member.name)
        path = _entry_path(member.name, label)
        if member.isdir() or not path:
            continue
        if member.issym() or member.islnk():
            yield path, Link(_link_target(member, path, label), "symlink" if member.issym() else "hardlink",
                             member.name)
        elif member.isreg():
            data = _Guard(tf.extractfile(member), f"{label}[{member.name}]", "tar")
            data.size = member.size
            yield path, data
        # character and block devices, FIFOs: no data to copy
    if tf._copycat_end is not None:
        raise ConversionError(f"corrupt or truncated tar archive {label}: {tf._copycat_end}"
                              + (f" after entry {last!r}" if last else ""))
    # read the rest (the padding after the end-of-archive blocks): a compressor verifies its checksum at its end
    drain(stream)
    stream.close()
