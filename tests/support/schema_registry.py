"""A stand-in Confluent Schema Registry, for the tests and the demo -- not for production.

It exists because no real schema registry can run on these machines: Confluent's
is a Java service that cannot be installed here, and Karapace (Aiven's Python
registry) is not published on PyPI and needs Python 3.12+, a patched ``avro``
fetched from a GitHub archive URL and a Go toolchain at build time. So the tests
run against this small server, which speaks the REST subset confluent-kafka's
``SchemaRegistryClient`` uses, for Avro schemas only; set ``SCHEMA_REGISTRY_URL``
and the same tests run against a real registry instead.

Endpoints (Confluent's paths, bodies, status and error codes)::

    GET  /                                      {}
    GET  /schemas/types                         ["AVRO"]
    GET  /schemas/ids/{id}                      {"schema": ...}                      404 / 40403
    GET  /schemas/ids/{id}/versions             [{"subject": s, "version": v}]
    GET  /subjects                              [subject, ...]
    GET  /subjects/{s}/versions                 [1, 2, ...]                          404 / 40401
    GET  /subjects/{s}/versions/{v|latest}      {"subject","version","id","schema"}  404 / 40401, 40402
    POST /subjects/{s}/versions                 {"id": id}        409 / 409 incompatible, 422 / 42201 invalid
    POST /subjects/{s}                          {"subject","version","id","schema"}  404 / 40401, 40403
    DELETE /subjects/{s}[?permanent=true]       [versions]
    DELETE /subjects/{s}/versions/{v}           v
    POST /compatibility/subjects/{s}/versions/{v|latest}   {"is_compatible": b[, "messages": [...]]}
    POST /compatibility/subjects/{s}/versions              (against the versions the level names)
    GET  /config, /config/{s}[?defaultToGlobal=true]       {"compatibilityLevel": L}   404 / 40408
    PUT  /config, /config/{s}                   {"compatibility": L}                 422 / 42203
    DELETE /config/{s}                          {"compatibilityLevel": L}

Compatibility levels NONE, BACKWARD (the default), BACKWARD_TRANSITIVE, FORWARD,
FORWARD_TRANSITIVE, FULL, FULL_TRANSITIVE are checked with Avro's schema
resolution rules (:func:`airflow_copycat.converters.avro.data.compatibility_problems`):
BACKWARD means the new schema reads data written with the latest one (the
latest only; ``_TRANSITIVE``: every version); FORWARD that the latest reads the
new schema's data; FULL both. One schema gets one id in every subject, as in
Confluent's registry, which compares schemas as Java's Avro prints them: names
resolved to full names, ``{"type": "string"}`` as ``"string"``, JSON formatting and
key order aside -- but docs, defaults, aliases and other properties (``connect.*``,
``logicalType``) kept, so schemas differing in them get different ids. (Avro's
Parsing Canonical Form would drop those, and give a new default an old id.) A
schema with a name Avro does not allow (``my-field``) is refused as Java's Avro
refuses it: 422, code 42201. With ``users={"name": "password"}`` every request needs
HTTP basic auth. State lives in memory and is gone when the server stops.

Command line (for the demo)::

    python -m tests.support.schema_registry [--port 8081]
"""

from __future__ import annotations

import argparse
import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Mapping
from urllib.parse import parse_qs, unquote, urlsplit

from airflow_copycat.connect.errors import DataException
from airflow_copycat.converters.avro.names import avro_name_problems
from airflow_copycat.converters.avro.resolution import _named_types, _parse, _resolve, compatibility_problems

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class _Error(Exception):
    def __init__(self, status: int, code: int, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class RegistryState:
    """Subjects, versions, schemas by id and compatibility levels, behind one lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.schemas: list[str] = []  # id - 1 -> schema text
        self.ids: dict[str, int] = {}  # canonical text -> id
        self.subjects: dict[str, list[dict]] = {}  # subject -> [{"version", "id", "deleted"}]
        self.levels: dict[str, str] = {"": "BACKWARD"}

    @staticmethod
    def canonical(text: str) -> str:
        """What decides that two schema texts are one schema (see the module doc)."""
        schema = json.loads(text)
        return json.dumps(_normalized(schema, None, _named_types(schema)), sort_keys=True, separators=(",", ":"))

    def live(self, subject: str) -> list[dict]:
        return [v for v in self.subjects.get(subject, []) if not v["deleted"]]

    def version(self, subject: str, version: str) -> dict:
        versions = self.live(subject)
        if not versions:
            raise _Error(404, 40401, f"Subject '{subject}' not found.")
        if version in ("latest", "-1"):
            return versions[-1]
        try:
            n = int(version)
        except ValueError:
            raise _Error(422, 42202, f"The specified version '{version}' is not a valid version id. Allowed values "
                                     "are between [1, 2^31-1] and the string \"latest\"") from None
        for v in versions:
            if v["version"] == n:
                return v
        raise _Error(404, 40402, f"Version {n} not found.")

    def level(self, subject: str) -> str:
        return self.levels.get(subject) or self.levels[""]

    def problems(self, subject: str, text: str, against: list[dict] | None = None) -> list[str]:
        """Why ``text`` may not join ``subject`` (empty when it may), per the subject's level."""
        level = self.level(subject)
        versions = self.live(subject) if against is None else against
        if level == "NONE" or not versions:
            return []
        others = versions if level.endswith("_TRANSITIVE") else versions[-1:]
        out = []
        for v in others:
            old = self.schemas[v["id"] - 1]
            if level.startswith(("BACKWARD", "FULL")):
                out += [f"version {v['version']}: the new schema cannot read its data: {p}"
                        for p in compatibility_problems(text, old)]
            if level.startswith(("FORWARD", "FULL")):
                out += [f"version {v['version']}: its schema cannot read the new schema's data: {p}"
                        for p in compatibility_problems(old, text)]
        return out


_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


def _normalized(node: Any, space: str | None, names: dict) -> Any:
    """An Avro schema with every name a full name (``namespace`` folded in), every reference the
    full name it resolves to, a primitive without properties as its name: what Java's Avro
    prints, up to key order."""
    if isinstance(node, list):
        return [_normalized(m, space, names) for m in node]
    if isinstance(node, str):
        if node in _PRIMITIVES:
            return node
        try:
            definition, own = _resolve(node, space, names)
        except DataException:
            return node
        return _full(definition, own)
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if isinstance(kind, (dict, list)) and len(node) == 1:
        return _normalized(kind, space, names)
    out = dict(node)
    if kind in _PRIMITIVES and len(node) == 1:
        return kind
    if kind in ("record", "error", "enum", "fixed") and isinstance(node.get("name"), str):
        full = _full(node, space)
        out.pop("namespace", None)
        out["name"] = full
        space = full.rpartition(".")[0] or None
        if "fields" in node and isinstance(node["fields"], list):
            out["fields"] = [dict(f, type=_normalized(f.get("type"), space, names)) if isinstance(f, dict) else f
                             for f in node["fields"]]
        return out
    if isinstance(kind, str) and kind not in _PRIMITIVES and kind not in ("array", "map"):
        out["type"] = _normalized(kind, space, names)  # a reference with properties
    elif isinstance(kind, (dict, list)):
        out["type"] = _normalized(kind, space, names)
    for key in ("items", "values"):
        if key in node:
            out[key] = _normalized(node[key], space, names)
    return out


def _full(node: dict, space: str | None) -> str:
    name = node.get("name", "")
    ns = node["namespace"] if "namespace" in node else space
    return name if "." in name else (f"{ns}.{name}" if ns else name)


def _schema_of(body: Any) -> str:
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise _Error(422, 42201, "Invalid schema: the request needs a \"schema\" string")
    kind = (body.get("schemaType") or "AVRO").upper()
    if kind != "AVRO":
        raise _Error(422, 42201, f"Invalid schema: this stand-in registry stores AVRO schemas only, not {kind}")
    if body.get("references"):
        raise _Error(422, 42201, "Invalid schema: schema references are not supported by this stand-in registry")
    text = body["schema"]
    try:
        schema = json.loads(text)
        problems = avro_name_problems(schema)
        if problems:
            raise DataException("Illegal name: " + "; ".join(problems))
        _parse(schema)
    except (ValueError, DataException) as e:
        raise _Error(422, 42201, f"Invalid schema {text[:80]}: {e}") from None
    return text


class _Handler(BaseHTTPRequestHandler):
    server_version = "copycat-schema-registry-standin/1"
    state: RegistryState
    users: Mapping[str, str] | None

    def log_message(self, format, *args):  # noqa: A002 - quiet: tests run many requests
        pass

    def _send(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", _CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        if not self.users:
            return True
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(auth[6:]).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        return self.users.get(user) == password

    def _handle(self, method: str) -> None:
        if not self._authorized():
            self._send(401, {"error_code": 401, "message": "Unauthorized"}, {"WWW-Authenticate": 'Basic realm="registry"'})
            return
        url = urlsplit(self.path)
        parts = [unquote(p) for p in url.path.split("/") if p]
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        body = None
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            try:
                body = json.loads(self.rfile.read(length))
            except ValueError:
                self._send(400, {"error_code": 400, "message": "the request body is not JSON"})
                return
        try:
            with self.state.lock:
                status, result = self._route(method, parts, query, body)
        except _Error as e:
            self._send(e.status, {"error_code": e.code, "message": e.message})
            return
        self._send(status, result)

    def do_GET(self):  # noqa: N802 - http.server's names
        self._handle("GET")

    def do_POST(self):  # noqa: N802
        self._handle("POST")

    def do_PUT(self):  # noqa: N802
        self._handle("PUT")

    def do_DELETE(self):  # noqa: N802
        self._handle("DELETE")

    def _route(self, method: str, p: list[str], q: dict, body: Any) -> tuple[int, Any]:
        s = self.state
        n = len(p)
        if n == 0 and method == "GET":
            return 200, {}
        if p[0] == "schemas":
            if n == 2 and p[1] == "types" and method == "GET":
                return 200, ["AVRO"]
            if n >= 3 and p[1] == "ids" and method == "GET":
                try:
                    schema_id = int(p[2])
                    text = s.schemas[schema_id - 1] if schema_id > 0 else None
                except (ValueError, IndexError):
                    text = None
                if text is None:
                    raise _Error(404, 40403, f"Schema {p[2]} not found")
                if n == 3:
                    return 200, {"schema": text}
                pairs = [{"subject": sub, "version": v["version"]} for sub, vs in s.subjects.items()
                         for v in vs if v["id"] == schema_id and not v["deleted"]]
                if p[3] == "versions":
                    return 200, pairs
                if p[3] == "subjects":
                    return 200, sorted({x["subject"] for x in pairs})
        if p[0] == "subjects":
            if n == 1 and method == "GET":
                return 200, sorted(sub for sub in s.subjects if s.live(sub))
            subject = p[1]
            if n == 2 and method == "POST":
                return 200, self._lookup(subject, _schema_of(body))
            if n == 2 and method == "DELETE":
                versions = s.subjects.get(subject, [])
                if not versions:
                    raise _Error(404, 40401, f"Subject '{subject}' not found.")
                gone = [v["version"] for v in versions if q.get("permanent") == "true" or not v["deleted"]]
                if q.get("permanent") == "true":
                    del s.subjects[subject]
                    s.levels.pop(subject, None)
                else:
                    for v in versions:
                        v["deleted"] = True
                return 200, gone
            if n == 3 and p[2] == "versions":
                if method == "GET":
                    if not s.live(subject):
                        raise _Error(404, 40401, f"Subject '{subject}' not found.")
                    return 200, [v["version"] for v in s.live(subject)]
                if method == "POST":
                    return 200, {"id": self._register(subject, _schema_of(body))}
            if n == 4 and p[2] == "versions":
                v = s.version(subject, p[3])
                if method == "GET":
                    return 200, {"subject": subject, "version": v["version"], "id": v["id"],
                                 "schema": s.schemas[v["id"] - 1]}
                if method == "DELETE":
                    v["deleted"] = True
                    return 200, v["version"]
        if p[0] == "compatibility" and n >= 4 and p[1] == "subjects" and p[3] == "versions" and method == "POST":
            subject = p[2]
            text = _schema_of(body)
            against = [s.version(subject, p[4])] if n == 5 else None
            problems = s.problems(subject, text, against)
            out: dict[str, Any] = {"is_compatible": not problems}
            if q.get("verbose", "").lower() == "true":
                out["messages"] = problems
            return 200, out
        if p[0] == "config":
            subject = p[1] if n > 1 else ""
            if method == "GET":
                if subject and subject not in s.levels and q.get("defaultToGlobal", "").lower() != "true":
                    raise _Error(404, 40408, f"Subject '{subject}' does not have subject-level compatibility "
                                             "configured")
                return 200, {"compatibilityLevel": s.level(subject)}
            if method == "PUT":
                level = str((body or {}).get("compatibility", "")).upper()
                if level not in LEVELS:
                    raise _Error(422, 42203, f"Invalid compatibility level. Valid values are {', '.join(LEVELS)}")
                s.levels[subject] = level
                return 200, {"compatibility": level}
            if method == "DELETE" and subject:
                if subject not in s.levels:
                    raise _Error(404, 40401, f"Subject '{subject}' not found.")
                return 200, {"compatibilityLevel": s.levels.pop(subject)}
        raise _Error(404, 404, f"HTTP 404 Not Found: {method} {'/'.join(p)} is not served by this stand-in registry")

    def _lookup(self, subject: str, text: str) -> dict:
        s = self.state
        versions = s.live(subject)
        if not versions:
            raise _Error(404, 40401, f"Subject '{subject}' not found.")
        key = s.canonical(text)
        for v in versions:
            if s.canonical(s.schemas[v["id"] - 1]) == key:
                return {"subject": subject, "version": v["version"], "id": v["id"], "schema": s.schemas[v["id"] - 1]}
        raise _Error(404, 40403, "Schema not found")

    def _register(self, subject: str, text: str) -> int:
        s = self.state
        key = s.canonical(text)
        for v in s.live(subject):
            if s.canonical(s.schemas[v["id"] - 1]) == key:
                return v["id"]
        problems = s.problems(subject, text)
        if problems:
            raise _Error(409, 409, f"Schema being registered is incompatible with an earlier schema for subject "
                                   f"\"{subject}\", details: {problems}")
        schema_id = s.ids.get(key)
        if schema_id is None:
            s.schemas.append(text)
            schema_id = s.ids[key] = len(s.schemas)
        versions = s.subjects.setdefault(subject, [])
        versions.append({"version": max((v["version"] for v in versions), default=0) + 1, "id": schema_id,
                         "deleted": False})
        return schema_id


class SchemaRegistryServer:
    """The stand-in registry on ``127.0.0.1`` in a background thread; ``url`` once started.

    Use as a context manager (``with SchemaRegistryServer() as registry: registry.url``).
    ``users`` (name -> password) turns on HTTP basic auth."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, users: Mapping[str, str] | None = None):
        self.state = RegistryState()
        handler = type("Handler", (_Handler,), {"state": self.state, "users": dict(users) if users else None})
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "SchemaRegistryServer":
        self._thread = threading.Thread(target=self._server.serve_forever, name="schema-registry-standin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> "SchemaRegistryServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A stand-in Confluent Schema Registry (Avro only, in memory).")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    args = parser.parse_args(argv)
    server = SchemaRegistryServer(args.host, args.port)
    print(server.url, flush=True)
    try:
        server._server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._server.server_close()


if __name__ == "__main__":
    main()
