"""What a listing entry of any fsspec filesystem says about a file, and the listing itself.

Contract: ``_find(fs, path)`` is the one recursive listing of a dataset: ``{path: info}`` of the
files at or below ``path`` (directories, sockets, FIFOs and devices left out), with one
``info`` call only for an entry listed without details; ``_follow_link`` gives a symbolic
link's target's details. From an entry: ``_fs_checksum`` (an S3 single-part ETag or a GCS
``md5Hash`` as ``md5:<hex>``, else ``None``), ``_mtime`` (seconds, whatever key and type the
filesystem uses), ``_ownership`` (permission bits, owner and group names; cached).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import fsspec

from .selection import parse_instant


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
