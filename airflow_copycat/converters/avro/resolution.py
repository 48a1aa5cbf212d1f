"""Parsing Avro schemas, Avro's schema resolution (a writer's schema read as a reader's schema), and the
compatibility check the converter runs before it registers a schema or reads with one.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from ...connect.errors import DataException
from .names import _COMPLEX, _PRIMITIVES, AVRO_TYPE_ANYTHING, _split, schema_json

# ---------------------------------------------------------------- values

_fastavro_module = None


def _fastavro():
    """fastavro, imported once (on first use: importing this module does not need it)."""
    global _fastavro_module
    if _fastavro_module is None:
        import fastavro

        _fastavro_module = fastavro
    return _fastavro_module


def _strip_logical(node: Any) -> Any:
    """A copy of an Avro schema without ``logicalType`` (the binary encoding is the same): fastavro
    then reads and writes the primitive values, which the compiled converters map as Connect does."""
    if isinstance(node, list):
        return [_strip_logical(n) for n in node]
    if isinstance(node, dict):
        return {k: (_strip_logical(v) if k in ("type", "items", "values", "fields") else v)
                for k, v in node.items() if k != "logicalType"}
    return node


def _resolve(node: Any, space: str | None, names: dict) -> tuple[Any, str | None]:
    """``(definition, its namespace)`` of what ``node`` stands for: a reference resolved (a name
    without a dot in the enclosing namespace, else -- as Java's Avro does -- without namespace),
    ``{"type": <schema>}`` unwrapped; any other node as it is."""
    while True:
        if isinstance(node, str) and node not in _PRIMITIVES:
            full = node if "." in node or not space else f"{space}.{node}"
            if full not in names and node in names:
                full = node
            if full not in names:
                raise DataException(f"Avro schema refers to unknown type {node!r}")
            node, space = names[full]
        elif isinstance(node, dict) and (isinstance(node.get("type"), (dict, list)) or (
                isinstance(node.get("type"), str) and node["type"] not in _PRIMITIVES and node["type"] not in _COMPLEX)):
            node = node["type"]
        else:
            return node, space


def _null_namespace_refs(schema: Any) -> list[tuple[str, str]]:
    """References that only Java's lenient lookup resolves: a name without a dot, used inside a
    namespace ``ns``, for a type defined without namespace (``ns.Name`` not being defined).
    ``[(ns.Name, Name), ...]``; the Avro spec (and fastavro) would look for ``ns.Name``."""
    names = _named_types(schema)
    out: list[tuple[str, str]] = []

    def ref(name, space):
        if isinstance(name, str) and name not in _PRIMITIVES and name not in _COMPLEX and "." not in name and space:
            full = f"{space}.{name}"
            if full not in names and name in names and (full, name) not in out:
                out.append((full, name))

    def walk(node, space):
        if isinstance(node, str):
            ref(node, space)
        elif isinstance(node, list):
            for n in node:
                walk(n, space)
        elif isinstance(node, dict):
            kind = node.get("type")
            if isinstance(kind, (dict, list)):
                walk(kind, space)
                return
            if isinstance(kind, str) and kind not in _PRIMITIVES and kind not in _COMPLEX:
                ref(kind, space)
                return
            if kind in ("record", "error", "enum", "fixed") and isinstance(node.get("name"), str):
                name = node["name"]
                ns = node["namespace"] if "namespace" in node else space
                space = _split(name if "." in name else (f"{ns}.{name}" if ns else name))[0]
            for f in node.get("fields", []) if kind in ("record", "error") else []:
                walk(f.get("type"), space)
            if kind == "array":
                walk(node.get("items"), space)
            if kind == "map":
                walk(node.get("values"), space)

    walk(schema, None)
    return out


def _parse(avro_schema: Any):
    """fastavro's parsed form of an Avro schema (without logical types, see :func:`_strip_logical`).
    A name that only Java's lenient lookup resolves (see :func:`_null_namespace_refs`) is
    registered under the name fastavro looks for, so such schemas (which Confluent's Java
    converter writes for a struct without namespace used twice in a namespaced one) parse."""
    fastavro = _fastavro()
    schema = _strip_logical(avro_schema)
    try:
        refs = _null_namespace_refs(schema)
        if not refs:
            return fastavro.parse_schema(schema)
        probe: dict = {full: {} for full, _ in refs}
        fastavro.parse_schema(schema, named_schemas=probe)  # parses every definition
        return fastavro.parse_schema(schema, named_schemas={full: probe[name] for full, name in refs})
    except DataException:
        raise
    except Exception as e:  # fastavro raises several kinds for a bad schema
        raise DataException(f"invalid Avro schema: {e}") from None


# Reading a general union (more than one non-null branch) with fastavro gives the value alone, so
# int vs long, float vs double, an enum vs a string could not be told apart. Readers therefore
# decode with a view of the schema in which every such union's branch j is a record
# "__cc_u<k>_<j>" of one field "__cc_b<j>": a record of one field is encoded as that field, so
# the bytes are the same, and fastavro returns {"__cc_b<j>": value} -- the branch. With a reader
# schema, the writer's branches get records of their own names that the reader's branch records
# list as aliases (the branch Avro schema resolution picks), so resolution still works.
_WRAP_RECORD = "__cc_u{}_{}"
_WRAP_WRITER = "__cc_w{}"
_WRAP_FIELD = "__cc_b{}"


def _is_general_union(node: Any) -> bool:
    return isinstance(node, list) and sum(1 for m in node if m != "null") >= 2


def _kind(node: Any) -> str:
    k = node if isinstance(node, str) else ("union" if isinstance(node, list) else node.get("type"))
    return "record" if k == "error" else k


def _full_name(node: dict, space: str | None) -> str:
    name = node.get("name", "")
    ns = node["namespace"] if "namespace" in node else space
    return name if "." in name else (f"{ns}.{name}" if ns else name)


def _names_match(r: dict, rs: str | None, w: dict, ws: str | None) -> bool:
    wf, rf = _full_name(w, ws), _full_name(r, rs)
    aliases = r.get("aliases") or []
    return _split(wf)[1] == _split(rf)[1] or wf in aliases or _split(wf)[1] in aliases


class _Views:
    """The read views (see above) of a writer schema and, if given, a reader schema."""

    def __init__(self, writer: Any, reader: Any):
        self.writer, self.reader = writer, reader
        self.w_names = _named_types(writer)
        self.r_names = _named_types(reader) if reader is not None else self.w_names
        self.k = 0
        self.union_k: dict[int, int] = {}  # id(reader union) -> k
        self.aliases: dict[tuple[int, int], list[str]] = {}  # (k, j) -> writer records read as branch j
        self.w_wraps: dict[tuple[int | None, Any], tuple[int, str]] = {}  # writer position -> (j, record name)
        self.seen: set[tuple[int, int]] = set()
        self.keep: list = []  # nodes whose id() is a key above stay alive

    def build(self) -> tuple[Any, Any]:
        if self.reader is None:
            return self.copy_reader(self.writer), None
        self.pair((None, None), self.writer, None, self.reader, None)
        return self.copy_writer(self.writer, (None, None)), self.copy_reader(self.reader)

    # --- pairing writer and reader nodes (as Avro schema resolution does)
    def k_of(self, union: list) -> int:
        k = self.union_k.get(id(union))
        if k is None:
            k = self.union_k[id(union)] = self.k
            self.keep.append(union)
            self.k += 1
        return k

    def branch(self, w: Any, ws: str | None, union: list, rs: str | None) -> int | None:
        """The reader union's non-null branch (its index among those) that reads the writer's ``w``."""
        wd, ws = _resolve(w, ws, self.w_names)
        wk = _kind(wd)
        candidates = []
        for m in union:
            if m == "null":
                continue
            rd, rds = _resolve(m, rs, self.r_names)
            candidates.append((rd, rds, _kind(rd)))
        for j, (rd, rds, rk) in enumerate(candidates):
            if rk == wk and (wk not in ("record", "enum", "fixed") or _names_match(rd, rds, wd, ws)) and \
                    (wk != "fixed" or rd.get("size") == wd.get("size")):
                return j
        for j, (_, _, rk) in enumerate(candidates):
            if (wk, rk) in _PROMOTIONS:
                return j
        return None

    def wrap_writer(self, pos: tuple, k: int, j: int) -> str:
        name = _WRAP_WRITER.format(len(self.w_wraps))
        self.w_wraps[pos] = (j, name)
        self.aliases.setdefault((k, j), []).append(name)
        return name

    def pair(self, wpos: tuple, w: Any, ws: str | None, r: Any, rs: str | None) -> None:
        wd, wds = _resolve(w, ws, self.w_names)
        rd, rds = _resolve(r, rs, self.r_names)
        if _is_general_union(rd):
            k = self.k_of(rd)
            r_members = [m for m in rd if m != "null"]
            if isinstance(wd, list):
                self.keep.append(wd)
                for i, wm in enumerate(wd):
                    if wm == "null":
                        continue
                    j = self.branch(wm, wds, rd, rds)
                    if j is not None:
                        self.wrap_writer((id(wd), i), k, j)
                        self.pair((id(wd), i), wm, wds, r_members[j], rds)
            else:
                j = self.branch(w, ws, rd, rds)
                if j is not None:
                    self.wrap_writer(wpos, k, j)
                    self.pair(wpos, w, ws, r_members[j], rds)
            return
        if isinstance(rd, list):  # [null, T], [T]: read as they are
            r_members = [m for m in rd if m != "null"]
            if isinstance(wd, list):
                self.keep.append(wd)
                for i, wm in enumerate(wd):
                    if wm != "null" and r_members:
                        self.pair((id(wd), i), wm, wds, r_members[0], rds)
            elif r_members:
                self.pair(wpos, w, ws, r_members[0], rds)
            return
        if isinstance(wd, list):
            self.keep.append(wd)
            for i, wm in enumerate(wd):
                if wm != "null":
                    self.pair((id(wd), i), wm, wds, rd, rds)
            return
        wk, rk = _kind(wd), _kind(rd)
        if wk != rk:
            return
        self.keep += [wd, rd]
        if wk == "array":
            self.pair((id(wd), "items"), wd.get("items"), wds, rd.get("items"), rds)
        elif wk == "map":
            self.pair((id(wd), "values"), wd.get("values"), wds, rd.get("values"), rds)
        elif wk == "record":
            if (id(wd), id(rd)) in self.seen:
                return
            self.seen.add((id(wd), id(rd)))
            w_space = _split(_full_name(wd, wds))[0]
            r_space = _split(_full_name(rd, rds))[0]
            w_fields = {f.get("name"): f for f in wd.get("fields", [])}
            for f in rd.get("fields", []):
                wf = w_fields.get(f.get("name"))
                if wf is None:
                    wf = next((w_fields[a] for a in f.get("aliases") or [] if a in w_fields), None)
                if wf is not None:
                    self.pair((id(wf), "type"), wf.get("type"), w_space, f.get("type"), r_space)

    # --- copies
    def copy_writer(self, node: Any, pos: tuple) -> Any:
        out = self._copy(node, self.copy_writer)
        wrap = self.w_wraps.get(pos)
        if wrap is not None:
            j, name = wrap
            out = {"type": "record", "name": name, "fields": [{"name": _WRAP_FIELD.format(j), "type": out}]}
        return out

    def _copy(self, node: Any, again: Callable) -> Any:
        if isinstance(node, list):
            return [again(m, (id(node), i)) for i, m in enumerate(node)]
        if not isinstance(node, dict):
            return node
        out = dict(node)
        if isinstance(node.get("type"), (dict, list)):
            out["type"] = again(node["type"], (id(node), "type"))
        if "fields" in node and isinstance(node["fields"], list):
            out["fields"] = [dict(f, type=again(f.get("type"), (id(f), "type"))) if isinstance(f, dict) else f
                             for f in node["fields"]]
        for key in ("items", "values"):
            if key in node:
                out[key] = again(node[key], (id(node), key))
        return out

    def copy_reader(self, node: Any, pos: tuple = (None, None)) -> Any:
        if _is_general_union(node):
            k = self.k_of(node)
            out = []
            j = 0
            for m in node:
                if m == "null":
                    out.append(m)
                    continue
                wrapper = {"type": "record", "name": _WRAP_RECORD.format(k, j)}
                if self.aliases.get((k, j)):
                    wrapper["aliases"] = self.aliases[(k, j)]
                wrapper["fields"] = [{"name": _WRAP_FIELD.format(j), "type": self._copy(m, self.copy_reader)}]
                out.append(wrapper)
                j += 1
            return out
        out = self._copy(node, self.copy_reader)
        if isinstance(node, dict) and "fields" in node and isinstance(node["fields"], list):
            for f, g in zip(node["fields"], out["fields"]):
                # a union's default is its first branch's value: in the view, that branch's record
                if isinstance(f, dict) and "default" in f and _is_general_union(f.get("type")) and f["type"][0] != "null":
                    g["default"] = {_WRAP_FIELD.format(0): f["default"]}
        return out


def _read_views(writer: Any, reader: Any | None) -> tuple[Any, Any]:
    """``(writer view, reader view)`` to decode with (see above); the schemas themselves when
    they hold no union of more than one non-null branch."""
    if not _has_general_union(writer) and (reader is None or not _has_general_union(reader)):
        return writer, reader
    return _Views(writer, reader).build()


def _has_general_union(node: Any) -> bool:
    if isinstance(node, list):
        return _is_general_union(node) or any(_has_general_union(m) for m in node)
    if isinstance(node, dict):
        return any(_has_general_union(node.get(k)) for k in ("type", "items", "values")) or any(
            isinstance(f, dict) and _has_general_union(f.get("type")) for f in node.get("fields") or [])
    return False


_ANYTHING_KEY = ("anything",)


def _is_anything(avro_schema: Any) -> bool:
    if not isinstance(avro_schema, dict) or avro_schema.get("type") != "record":
        return False
    name = avro_schema.get("name", "")
    full = name if "." in name else f"{avro_schema.get('namespace', '')}.{name}"
    return full == AVRO_TYPE_ANYTHING


def _named_types(schema: Any) -> dict[str, tuple[dict, str | None]]:
    """Every named type defined in an Avro schema: full name -> (definition, its namespace)."""
    out: dict[str, tuple[dict, str | None]] = {}

    def walk(node, space):
        if isinstance(node, list):
            for n in node:
                walk(n, space)
        elif isinstance(node, dict):
            kind = node.get("type")
            if isinstance(kind, (dict, list)):
                walk(kind, space)
                return
            if kind in ("record", "error", "enum", "fixed") and isinstance(node.get("name"), str):
                name = node["name"]
                ns = node["namespace"] if "namespace" in node else space
                full = name if "." in name else (f"{ns}.{name}" if ns else name)
                space = _split(full)[0]
                out.setdefault(full, (node, space))
            for f in node.get("fields", []) if kind in ("record", "error") else []:
                walk(f.get("type"), space)
            if kind == "array":
                walk(node.get("items"), space)
            if kind == "map":
                walk(node.get("values"), space)

    walk(schema, None)
    return out


_PROMOTIONS = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
               ("float", "double"), ("string", "bytes"), ("bytes", "string")}


def compatibility_problems(reader: Any, writer: Any) -> list[str]:
    """Why data written with the Avro schema ``writer`` cannot be read with ``reader`` (Avro's
    schema resolution rules); an empty list when it can. Both are JSON text or as Python.

    This is the check behind a registry's compatibility levels: BACKWARD asks whether the
    new schema (reader) reads data of the latest (writer), FORWARD the other way round."""
    reader = json.loads(reader) if isinstance(reader, str) and reader not in _PRIMITIVES else reader
    writer = json.loads(writer) if isinstance(writer, str) and writer not in _PRIMITIVES else writer
    r_names, w_names = _named_types(reader), _named_types(writer)
    problems: list[str] = []
    seen: set[tuple[str, str]] = set()

    def resolve(node, space, names):
        while True:
            if isinstance(node, str) and node not in _PRIMITIVES:
                full = node if "." in node or not space else f"{space}.{node}"
                if full not in names:
                    full = node
                if full not in names:
                    raise DataException(f"Avro schema refers to unknown type {node!r}")
                node, space = names[full]
            elif isinstance(node, dict) and isinstance(node.get("type"), (dict, list)):
                node = node["type"]
            elif isinstance(node, dict) and node.get("type") not in _PRIMITIVES | _COMPLEX and isinstance(node.get("type"), str):
                node = node["type"]
            else:
                return node, space

    def kind(node):
        k = node if isinstance(node, str) else node.get("type")
        return "record" if k == "error" else k

    def full_name(node, space):
        name = node.get("name", "")
        ns = node["namespace"] if "namespace" in node else space
        return name if "." in name else (f"{ns}.{name}" if ns else name)

    def names_match(r, rs, w, ws) -> bool:
        wf, rf = full_name(w, ws), full_name(r, rs)
        aliases = r.get("aliases") or []
        return _split(wf)[1] == _split(rf)[1] or wf in aliases or _split(wf)[1] in aliases

    def check(r, rs, w, ws, path) -> list[str]:
        r, rs = resolve(r, rs, r_names)
        w, ws = resolve(w, ws, w_names)
        if isinstance(w, list):
            out = []
            for i, branch in enumerate(w):
                out += check(r, rs, branch, ws, f"{path}/union[{i}]")
            return out
        if isinstance(r, list):
            wk = kind(w)
            candidates = [b for b in r if kind(resolve(b, rs, r_names)[0]) == wk] or r
            for b in candidates:
                if not check(b, rs, w, ws, path):
                    return []
            return [f"{path}: the reader's union {schema_json(r)[:120]} has no branch for the writer's "
                    f"{wk if wk in _PRIMITIVES else schema_json(w)[:80]}"]
        rk, wk = kind(r), kind(w)
        if rk != wk:
            if (wk, rk) in _PROMOTIONS:
                return []
            return [f"{path}: the writer's {wk} cannot be read as {rk}"]
        if rk in _PRIMITIVES:
            return []
        if rk == "array":
            return check(r.get("items"), rs, w.get("items"), ws, f"{path}/items")
        if rk == "map":
            return check(r.get("values"), rs, w.get("values"), ws, f"{path}/values")
        if not names_match(r, rs, w, ws):
            return [f"{path}: the writer's {rk} {full_name(w, ws)!r} has another name than the reader's "
                    f"{full_name(r, rs)!r} (and is not one of its aliases)"]
        if rk == "fixed":
            if r.get("size") != w.get("size"):
                return [f"{path}: fixed {full_name(r, rs)!r} has size {w.get('size')} in the writer, "
                        f"{r.get('size')} in the reader"]
            return []
        if rk == "enum":
            missing = [s for s in w.get("symbols", []) if s not in r.get("symbols", [])]
            if missing and r.get("default") is None:
                return [f"{path}: the reader's enum {full_name(r, rs)!r} lacks the writer's symbols {missing} "
                        "and has no default"]
            return []
        pair = (full_name(r, rs), full_name(w, ws))
        if pair in seen:
            return []
        seen.add(pair)
        r_space, w_space = _split(pair[0])[0], _split(pair[1])[0]
        w_fields = {f["name"]: f for f in w.get("fields", [])}
        out = []
        for f in r.get("fields", []):
            wf = w_fields.get(f["name"])
            if wf is None:
                wf = next((w_fields[a] for a in f.get("aliases") or [] if a in w_fields), None)
            if wf is None:
                if "default" not in f:
                    out.append(f"{path}/fields/{f['name']}: the reader's field {f['name']!r} is missing from the "
                               "writer's schema and has no default")
                continue
            out += check(f["type"], r_space, wf["type"], w_space, f"{path}/fields/{f['name']}")
        return out

    try:
        problems = check(reader, None, writer, None, "")
    except DataException as e:
        problems = [str(e)]
    return [p if not p.startswith(": ") else p[2:] for p in problems]
