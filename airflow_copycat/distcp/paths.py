"""Paths in a copy listing: roots, relative paths, ancestors, hidden names (``/``-separated).

Contract: pure functions of strings. ``_relative_to(path, root)`` is ``path`` below ``root``
(``""`` when equal or not below); ``_ancestors("a/b/c")`` yields ``"a/b"``, ``"a"``;
``_hidden`` is true when a component starts with ``_`` or ``.`` (``_copycat`` among them).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable


def _hidden(rel: str) -> bool:
    """Whether any component of a relative path starts with ``_`` or ``.``."""
    return rel[:1] in ("_", ".") or "/_" in rel or "/." in rel


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
