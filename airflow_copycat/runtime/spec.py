"""The connector spec: what the plan step learnt from a connector config, typed, for every later step.

The plan step (:func:`.plan.make_plan`, where Airflow or ``copycat plan`` runs) validates a connector
config once and records the result as a :class:`ConnectorSpec` in each group of the plan
(``group["spec"]``, JSON). Later steps read the spec instead of validating the config again:

* the run operator takes the secret values of :attr:`ConnectorSpec.secret_keys` from the rendered
  connector config (it neither validates the config nor resolves its class);
* the run step (:func:`.executor.run_task`, on a Spark executor or in process) gives the source and
  sink loops the spec's typed :attr:`~ConnectorSpec.settings` and :attr:`~ConnectorSpec.offsets_name`
  (the live offsets' name, or the window's namespace), instead of parsing the framework keys and the
  window of each task config again. Only the secret values are restored there, from the rendered config.

What a spec never holds: secret *values*. It names the secret keys; their values stay in the rendered
connector config (and the Airflow connections), so a spec is safe in XCom, plan files and logs.

Who owns what: the planner makes the spec (:meth:`ConnectorSpec.of`); everything else only reads it
(:meth:`ConnectorSpec.from_json`). A group without a spec -- a plan made by an earlier version, or a
group written by hand -- is still run: :func:`spec_of_group` returns ``None`` and each step derives
what it needs from the task config, as before.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from dataclasses import dataclass
from typing import Any, Mapping

from .settings import FrameworkSettings

SPEC_FORMAT = "copycat.spec/1"
SPEC_KEY = "spec"
"""Key of the spec in each group of a plan."""


@dataclass(frozen=True)
class Window:
    """A window (backfill) of a plan: typed bounds, and where its offsets live."""

    start: dt.datetime
    """Inclusive, aware UTC."""
    end: dt.datetime
    """Exclusive, aware UTC."""
    offsets_namespace: str
    """The offset-store name of the window's offsets (:func:`.windows.window_namespace`)."""

    def to_json(self) -> dict[str, str]:
        """``{"start", "end", "offsets_namespace"}``, the shape plans have always recorded as ``window``."""
        return {"start": self.start.isoformat(), "end": self.end.isoformat(),
                "offsets_namespace": self.offsets_namespace}


@dataclass(frozen=True)
class ConnectorSpec:
    """One validated connector config, typed (see the module docstring). Immutable, JSON-serialisable."""

    name: str
    kind: str
    """``source`` or ``sink``."""
    connector_class: str
    """The resolved class, as ``module:Class``."""
    secret_keys: tuple[str, ...]
    """Config keys whose values are secrets (``[hidden]`` in the plan), sorted; never their values."""
    window: Window | None
    """The run's window, ``None`` for a live run."""
    settings: FrameworkSettings | None
    """The framework keys, typed and defaulted; ``None`` when the connector's task configs set some of them
    to other values (each task then reads its own, as before specs)."""

    @property
    def offsets_name(self) -> str:
        """The name the task's offsets are kept under: the window's namespace, else the connector's name."""
        return self.window.offsets_namespace if self.window else self.name

    @classmethod
    def of(cls, *, kind: str, connector_class: str, secret_keys, window: Window | None,
           values: Mapping[str, Any], per_task_settings: bool = False) -> "ConnectorSpec":
        """The spec of a config :func:`.connector_config.parse` gave ``values`` for (the planner's job);
        ``per_task_settings``: its task configs change framework keys, so the spec holds no settings."""
        return cls(name=str(values["name"]), kind=kind, connector_class=connector_class,
                   secret_keys=tuple(sorted(secret_keys)), window=window,
                   settings=None if per_task_settings else FrameworkSettings.from_values(values))

    def to_json(self) -> dict[str, Any]:
        return {"format": SPEC_FORMAT, "name": self.name, "kind": self.kind, "connector_class": self.connector_class,
                "secret_keys": list(self.secret_keys), "window": self.window.to_json() if self.window else None,
                "settings": dataclasses.asdict(self.settings) if self.settings is not None else None}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "ConnectorSpec":
        """The spec :meth:`to_json` wrote. Raises ``ValueError`` for another format or a spec that lacks a field
        (:func:`spec_of_group` then falls back to the task configs)."""
        if doc.get("format") != SPEC_FORMAT:
            raise ValueError(f"not a {SPEC_FORMAT} spec: format {doc.get('format')!r}")
        try:
            w = doc.get("window")
            window = Window(dt.datetime.fromisoformat(w["start"]), dt.datetime.fromisoformat(w["end"]),
                            str(w["offsets_namespace"])) if w else None
            return cls(name=str(doc["name"]), kind=str(doc["kind"]), connector_class=str(doc["connector_class"]),
                       secret_keys=tuple(doc["secret_keys"]), window=window,
                       settings=FrameworkSettings(**doc["settings"]) if doc["settings"] is not None else None)
        except (KeyError, TypeError) as e:
            raise ValueError(f"incomplete {SPEC_FORMAT} spec: {type(e).__name__}: {e}") from None


COPY_SPEC_FORMAT = "copycat.copyspec/1"


@dataclass(frozen=True)
class CopySpec:
    """A copy (Distcp) job's validated config: its typed values without the secret ones, which the run and
    publish steps put back from the rendered config (:meth:`values_with`). Immutable, JSON-serialisable."""

    name: str
    secret_keys: tuple[str, ...]
    """Config keys whose values are secrets, sorted; their values are not in :attr:`values`."""
    values: Mapping[str, Any]
    """Every other key as :func:`~airflow_copycat.distcp.config.parse_copy_config` typed it."""
    kind: str = "copy"

    @classmethod
    def of(cls, values: Mapping[str, Any], secret_keys) -> "CopySpec | None":
        """The spec of a parsed copy config (the planner's job); ``None`` when a value has no JSON form."""
        keys = tuple(sorted(secret_keys))
        kept = {k: v for k, v in values.items() if k not in keys}
        try:
            kept = json.loads(json.dumps(kept))
        except (TypeError, ValueError):
            return None
        return cls(name=str(values["name"]), secret_keys=keys, values=kept)

    def values_with(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The typed values with the secret ones taken from ``config`` (a rendered config, or a task config
        whose secrets were restored) and typed as the copy config's definition types them; the rest of
        ``config`` is not read."""
        from ..distcp.config import COPY_CONFIG

        given = {k: config[k] for k in self.secret_keys if config.get(k) not in (None, "")}
        typed, _ = COPY_CONFIG._parse(given)  # only the secrets: the other keys' problems were the plan's
        out = dict(self.values)
        for k in self.secret_keys:
            out[k] = typed[k] if k in typed else given.get(k)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"format": COPY_SPEC_FORMAT, "name": self.name, "kind": self.kind,
                "secret_keys": list(self.secret_keys), "values": dict(self.values)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "CopySpec":
        if doc.get("format") != COPY_SPEC_FORMAT:
            raise ValueError(f"not a {COPY_SPEC_FORMAT} spec: format {doc.get('format')!r}")
        try:
            return cls(name=str(doc["name"]), secret_keys=tuple(doc["secret_keys"]), values=dict(doc["values"]))
        except (KeyError, TypeError) as e:
            raise ValueError(f"incomplete {COPY_SPEC_FORMAT} spec: {type(e).__name__}: {e}") from None


def spec_of_group(group: Mapping[str, Any]) -> ConnectorSpec | CopySpec | None:
    """The spec a group of a plan carries (a connector's or a copy job's), ``None`` when it carries none
    (a plan of an earlier version) or one this version cannot read: the caller then derives from the
    task configs."""
    doc = group.get(SPEC_KEY)
    if not isinstance(doc, Mapping):
        return None
    for kind in (ConnectorSpec, CopySpec):
        try:
            return kind.from_json(doc)
        except ValueError:
            continue
    return None
