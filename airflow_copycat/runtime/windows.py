"""Windowed runs (Airflow backfills): where a window's offsets live, apart from the live ones.

A source run whose task configs carry ``copycat.window.start`` / ``copycat.window.end``
(:data:`~airflow_copycat.connect.connector.WINDOW_START_KEY`) copies only the data whose
event time lies in ``[start, end)``. The framework keeps such a run's offsets under its own
name in the offset store -- the *window namespace* -- and never reads or writes the
connector's live offsets::

    <connector>@window/<start>/<end>/<plan id>
    e.g. shop-orders@window/2026-11-20T10:00:00Z/2026-11-20T11:00:00Z/3f9c0a1b2d4e

(start and end in UTC, second precision unless they carry fractions). The offset
topic key stays Kafka Connect's ``[name, partition]`` with that name, so tools that
list offsets by connector see windows as connectors of their own.

Semantics that follow from the namespace:

* **a retry of a run task** (same plan, so same namespace) starts from the window's
  committed offsets: what an earlier attempt committed is not produced again;
* **a new plan of the same window** (the DAG run cleared, another backfill over the
  same interval) has a new plan id, so an empty namespace: it reads the window from
  its start and emits the same records again -- a window's records are a function of
  the window, which is what makes a rerun idempotent for consumers that key on them;
* exactly-once tasks of a window use the namespace in their ``transactional.id``
  (:func:`~.transactions.transactional_id`): a backfill never fences the live run, and
  an attempt of a window still fences earlier attempts of the same task of that plan;
* after a window's run succeeded, the finish step deletes the namespace's offsets
  (tombstones, :func:`finished`): no later plan reads them.

Nothing here imports Airflow.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Mapping

from ..connect.connector import WINDOW_END_KEY, WINDOW_START_KEY, window_bounds

PLAN_ID_KEY = "copycat.plan.id"
"""Task config key carrying the id of the plan the task belongs to (set by the planner in
every task config; it names a window's offset namespace)."""

WINDOW_SEPARATOR = "@window/"


def new_plan_id() -> str:
    """A fresh plan id: 12 hex digits, unique enough to keep the namespaces of two plans of
    one window apart."""
    return uuid.uuid4().hex[:12]


def _stamp(t: dt.datetime) -> str:
    text = t.astimezone(dt.timezone.utc).replace(tzinfo=None).isoformat(timespec="auto")
    return text + "Z"


def window_namespace(config: Mapping[str, Any]) -> str | None:
    """The offset-store name of a windowed task config's offsets, ``None`` for a live one.

    Raises ``ValueError`` when the config holds a window but no plan id (a window without a
    plan id would share its offsets with every other run of that window)."""
    bounds = window_bounds(dict(config))
    if bounds is None:
        return None
    return namespace(str(config["name"]), bounds, str(config.get(PLAN_ID_KEY) or ""))


def namespace(name: str, bounds: tuple[dt.datetime, dt.datetime], plan_id: str) -> str:
    """The offset-store name of the window ``bounds`` (aware datetimes, as
    :func:`~airflow_copycat.connect.connector.window_bounds` gives them) of connector ``name`` in plan
    ``plan_id``; raises ``ValueError`` without a plan id (see :func:`window_namespace`)."""
    if not plan_id:
        raise ValueError(f"a windowed task config needs {PLAN_ID_KEY} (set by the planner)")
    return f"{name}{WINDOW_SEPARATOR}{_stamp(bounds[0])}/{_stamp(bounds[1])}/{plan_id}"


def bound_keys(bounds: tuple[dt.datetime, dt.datetime] | None) -> dict[str, str]:
    """The window keys of ``bounds`` as ISO-8601 UTC (``{}`` for ``None``): what :func:`window_keys` gives
    for the config the bounds were read from."""
    if bounds is None:
        return {}
    return {WINDOW_START_KEY: bounds[0].isoformat(), WINDOW_END_KEY: bounds[1].isoformat()}


def offsets_name(config: Mapping[str, Any]) -> str:
    """The name the offsets of ``config`` are kept under: the window namespace of a windowed
    task config, else the connector name (the live offsets)."""
    return window_namespace(config) or str(config["name"])


def is_window_namespace(name: str) -> bool:
    """Whether an offset-store connector name is a window's namespace (not a live connector)."""
    return WINDOW_SEPARATOR in name


def describe(config: Mapping[str, Any]) -> dict[str, str] | None:
    """``{"start", "end", "offsets_namespace"}`` of a windowed config (start/end ISO-8601 UTC),
    ``None`` for a live one: what plans and run summaries record."""
    bounds = window_bounds(dict(config))
    if bounds is None:
        return None
    return {"start": bounds[0].isoformat(), "end": bounds[1].isoformat(),
            "offsets_namespace": window_namespace(config)}


def window_keys(config: Mapping[str, Any]) -> dict[str, str]:
    """The window keys of ``config`` normalised to ISO-8601 UTC (``{}`` when it holds no window)."""
    return bound_keys(window_bounds(dict(config)))


def finished(store, plan: Mapping[str, Any]) -> list[Any]:
    """Delete (tombstone) the offsets a windowed plan's namespace holds, once its run succeeded.
    Returns the partitions deleted; ``[]`` for a live plan. ``store`` is an
    :class:`~.offsets.OffsetStore`.

    Why delete: only attempts of the same plan read a namespace, and a succeeded run has no
    more attempts, so its offsets would only pile up in the offset topic (one key per
    partition per window per plan). A run task the user clears *after* this reads the
    window from its start again (the same records), like a new plan."""
    window = plan.get("window")
    if not window:
        return []
    name = window["offsets_namespace"]
    entries = store.read(name)
    partitions = [e["partition"] for _, e in sorted(entries.items())]
    if partitions:
        store.write(name, [(p, None) for p in partitions])
    return partitions
