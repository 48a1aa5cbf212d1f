"""docker/compose.yaml read the way Docker Compose reads it, for tests that run without a Docker engine.

:func:`load` parses the YAML (anchors and ``<<`` merge keys included) and interpolates variables as
Compose does (``$$`` -> ``$``; ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``, ``$VAR``) from
the mapping it is given -- by default an empty one, so every value is the file's own default. The
helpers below turn the parts of a service the tests look at (environment, exposed ports, command
options, volume mounts) into plain Python values. The raw, uninterpolated document is
:func:`raw`, for schema validation.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = ROOT / "docker"
COMPOSE_FILE = DOCKER_DIR / "compose.yaml"

_VARIABLE = re.compile(r"\$(?:\$|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
                       r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")


def raw(path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """The document as YAML gives it, variables not interpolated."""
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """``value`` with Compose's variable syntax replaced in every string, recursively. A required
    variable (``${VAR:?message}``) that is unset raises ``KeyError`` naming it."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def substitute(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group("braced") or m.group("bare")
        op, arg, current = m.group("op"), m.group("arg") or "", env.get(name)
        if op == ":-":
            return current if current else arg
        if op == "-":
            return arg if current is None else current
        if op == ":+":
            return arg if current else ""
        if op == "+":
            return "" if current is None else arg
        if op in (":?", "?") and (current is None or (op == ":?" and not current)):
            raise KeyError(f"required variable {name} is not set: {arg}")
        return current or ""

    return _VARIABLE.sub(substitute, value)


def load(env: Mapping[str, str] | None = None, path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """The document with variables interpolated from ``env`` (default: none set)."""
    return interpolate(raw(path), env or {})


def environment(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's environment as a dict of strings (list or mapping form)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def exposed_ports(service: Mapping[str, Any]) -> set[int]:
    """The container ports a service declares it listens on (``expose``; ``ports`` targets too)."""
    ports = {int(str(p).split("/")[0]) for p in service.get("expose") or []}
    for p in service.get("ports") or []:
        target = p.get("target") if isinstance(p, dict) else str(p).split("/")[0].rsplit(":", 1)[-1]
        ports.add(int(target))
    return ports


def command(service: Mapping[str, Any]) -> list[str]:
    """A service's command as a list of arguments (a string command is split on whitespace)."""
    cmd = service.get("command") or []
    return cmd.split() if isinstance(cmd, str) else [str(c) for c in cmd]


def option(args: list[str], name: str) -> str | None:
    """The value after ``name`` (``--port``) in ``args``; ``None`` if absent."""
    return args[args.index(name) + 1] if name in args[:-1] else None


def spark_confs(args: list[str]) -> dict[str, str]:
    """The ``--conf key=value`` settings in ``args``."""
    return dict(args[i + 1].split("=", 1) for i, a in enumerate(args[:-1]) if a == "--conf")


def mounts(service: Mapping[str, Any]) -> dict[str, str]:
    """A service's volume mounts: container path -> source (volume name or host path)."""
    out = {}
    for v in service.get("volumes") or []:
        if isinstance(v, dict):
            out[v["target"]] = v.get("source", "")
        else:
            parts = str(v).split(":")
            if len(parts) == 1:
                out[parts[0]] = ""  # an anonymous volume
            else:
                out[parts[1]] = parts[0]
    return out


def depends_on(service: Mapping[str, Any]) -> dict[str, str]:
    """The services a service waits for -> the condition (``service_started`` for the list form)."""
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {d: "service_started" for d in deps}
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}
