"""Avro single-object encoding: the header, the schema fingerprint, and the schemas a reader knows.

The layout (Avro specification 1.11, "Single-object encoding"; Java's
``org.apache.avro.message.BinaryMessageEncoder`` writes it)::

    bytes 0-1   0xC3 0x01                 marker and format version 1
    bytes 2-9   fingerprint               CRC-64-AVRO (Rabin) of the writer schema's Parsing
                                          Canonical Form, 8 bytes little-endian
    bytes 10-   the value                 Avro binary encoding with that schema

The bytes carry no schema, so a reader must know the writer's schema by its
fingerprint: :class:`SchemaStore` maps fingerprints to schemas (JSON text, with the
properties -- ``logicalType``, ``connect.*`` -- that the canonical form drops). Two
schemas that differ only in what the canonical form drops (docs, logical types,
``connect.*`` properties, aliases, defaults) share a fingerprint; a store keeps the
first it was given (:meth:`SchemaStore.add`) unless told to replace it.

:data:`WRITTEN` holds the schemas the converters of this process wrote (bounded), so
a reader in the same process knows them without configuration; readers elsewhere are
told the schemas (the converter's ``known.schemas`` / ``known.schemas.files`` keys).

Pure Python; :func:`parsing_canonical_form` and :func:`fingerprint64` are checked
against Java Avro's ``SchemaNormalization`` and fastavro in the tests.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from typing import Any, Iterable

from ...connect.config import ConfigProblem
from ...connect.errors import DataException
from .names import avro_name_problems, schema_json
from .resolution import _parse

__all__ = ["SINGLE_OBJECT_MAGIC", "parsing_canonical_form", "fingerprint64", "header", "SchemaStore", "WRITTEN"]

SINGLE_OBJECT_MAGIC = b"\xc3\x01"
HEADER_SIZE = 10
KNOWN_SCHEMAS = "known.schemas"
KNOWN_SCHEMAS_FILES = "known.schemas.files"

_EMPTY64 = 0xC15D213AA4D7A795


def _table() -> list[int]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (_EMPTY64 & -(fp & 1))
        table.append(fp)
    return table


_FP_TABLE = _table()
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
_NAMED = {"record", "error", "enum", "fixed"}


def fingerprint64(data: bytes) -> int:
    """CRC-64-AVRO (the Rabin fingerprint of the Avro specification) of ``data``, as an unsigned int."""
    fp = _EMPTY64
    table = _FP_TABLE
    for b in data:
        fp = (fp >> 8) ^ table[(fp ^ b) & 0xFF]
    return fp


def parsing_canonical_form(schema: Any) -> str:
    """The Parsing Canonical Form of an Avro schema (its JSON text, or the parsed JSON): primitives
    in their simple form, full names (no ``namespace``), only ``name type fields symbols items values
    size`` kept in that order, a named type spelled out at its first use and referred to by full name
    after, no whitespace. Raises ``ValueError`` for what is not a schema."""
    if isinstance(schema, (str, bytes)) and str(schema if isinstance(schema, str) else schema.decode()).strip()[:1] \
            in ("{", "[", '"'):
        schema = json.loads(schema)
    return _pcf(schema, None, set())


def _full(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _pcf(node: Any, space: str | None, seen: set) -> str:
    if isinstance(node, list):
        return "[" + ",".join(_pcf(branch, space, seen) for branch in node) + "]"
    if isinstance(node, str):
        if node in _PRIMITIVES:
            return json.dumps(node)
        return json.dumps(_full(node, space), ensure_ascii=False)  # a reference to a named type
    if not isinstance(node, dict) or "type" not in node:
        raise ValueError(f"not an Avro schema: {str(node)[:60]}")
    kind = node["type"]
    if isinstance(kind, (dict, list)):  # {"type": {...}}: the inner schema
        return _pcf(kind, space, seen)
    if kind in _PRIMITIVES:
        return json.dumps(kind)
    if kind in _NAMED:
        name = node.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"an Avro {kind} needs a name: {str(node)[:60]}")
        ns = node.get("namespace")
        full = _full(name, ns if ns is not None else space)
        if full in seen:
            return json.dumps(full, ensure_ascii=False)
        seen.add(full)
        inner = full.rpartition(".")[0] or None
        out = '{"name":' + json.dumps(full, ensure_ascii=False) + ',"type":' + json.dumps(kind)
        if kind in ("record", "error"):
            out += ',"fields":[' + ",".join(
                '{"name":' + json.dumps(f["name"], ensure_ascii=False) + ',"type":' + _pcf(f["type"], inner, seen)
                + "}" for f in node.get("fields", [])) + "]"
        elif kind == "enum":
            out += ',"symbols":' + json.dumps(list(node.get("symbols", [])), separators=(",", ":"),
                                               ensure_ascii=False)
        else:
            out += ',"size":' + str(int(node["size"]))
        return out + "}"
    if kind == "array":
        return '{"type":"array","items":' + _pcf(node["items"], space, seen) + "}"
    if kind == "map":
        return '{"type":"map","values":' + _pcf(node["values"], space, seen) + "}"
    if isinstance(kind, str):  # a reference written as {"type": "com.x.Name"}
        return json.dumps(_full(kind, space), ensure_ascii=False)
    raise ValueError(f"not an Avro schema: {str(node)[:60]}")


def fingerprint_of(schema: Any) -> bytes:
    """The 8 fingerprint bytes of a schema as the header carries them (little-endian)."""
    return fingerprint64(parsing_canonical_form(schema).encode("utf-8")).to_bytes(8, "little")


def header(schema: Any) -> bytes:
    """The 10 bytes that start a single-object encoded value written with ``schema``."""
    return SINGLE_OBJECT_MAGIC + fingerprint_of(schema)


def describe_fingerprint(fp: bytes) -> str:
    """A fingerprint as a user compares it: the bytes in record order and Java's signed long."""
    return f"{fp.hex()} (as a Java long: {int.from_bytes(fp, 'little', signed=True)})"


class SchemaStore:
    """Fingerprint -> schema JSON text. ``size`` bounds it (least recently used go first; 0: unbounded).
    Thread-safe."""

    def __init__(self, schemas: Iterable[str] = (), size: int = 0):
        self._size = size
        self._d: OrderedDict[bytes, str] = OrderedDict()
        self._lock = threading.Lock()
        for text in schemas:
            self.add(text)

    def add(self, text: str, replace: bool = False) -> bytes:
        """Know ``text`` (an Avro schema as JSON) by its fingerprint, which is returned."""
        fp = fingerprint_of(text)
        with self._lock:
            if replace or fp not in self._d:
                self._d[fp] = text
            self._d.move_to_end(fp)
            if self._size and len(self._d) > self._size:
                self._d.popitem(last=False)
        return fp

    def get(self, fp: bytes) -> str | None:
        with self._lock:
            return self._d.get(bytes(fp))

    def __len__(self) -> int:
        return len(self._d)


def known_schemas(inline: str | None, files: Iterable[str] | None, problems: list) -> list[str]:
    """The schemas of the converter's ``known.schemas`` (``inline``: JSON, an array of schemas or one
    schema) and ``known.schemas.files`` (``files``: ``.avsc`` files, or directories of them) as compact
    JSON texts. Appends a :class:`~.config.ConfigProblem` to ``problems`` per text that is not an Avro
    schema or file that cannot be read, naming the key and the file."""
    texts: list[tuple[str, str, str]] = []  # (key, where, text)
    if inline:
        try:
            parsed = json.loads(inline)
        except ValueError as e:
            problems.append(ConfigProblem(KNOWN_SCHEMAS, inline[:80], f"is not JSON: {e}"))
            parsed = []
        for item in parsed if isinstance(parsed, list) else [parsed]:
            texts.append((KNOWN_SCHEMAS, inline[:80], json.dumps(item)))
    for entry in files or []:
        paths = sorted(os.path.join(entry, n) for n in os.listdir(entry) if n.endswith(".avsc")) \
            if os.path.isdir(entry) else [entry]
        for path in paths:
            try:
                with open(path, encoding="utf-8") as f:
                    texts.append((KNOWN_SCHEMAS_FILES, path, f.read()))
            except OSError as e:
                problems.append(ConfigProblem(KNOWN_SCHEMAS_FILES, entry, f"cannot be read: {e.strerror or e}"))
    out = []
    for key, where, text in texts:
        try:
            parsed = json.loads(text) if text.strip()[:1] in ("{", "[", '"') else text.strip()
            names = avro_name_problems(parsed)
            if names:
                raise DataException("; ".join(names))
            _parse(parsed)
            out.append(schema_json(parsed))
        except (ValueError, DataException) as e:
            problems.append(ConfigProblem(key, where, f"holds something that is not an Avro schema: {e}"))
    return out


WRITTEN = SchemaStore(size=10_000)
"""The writer schemas of the single-object records the converters of this process wrote."""
