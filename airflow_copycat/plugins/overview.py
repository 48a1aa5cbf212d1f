"""The offsets page's content: every connector with its committed offsets, the run that last moved
each, the runs in progress, and a sink's consumer lag -- one plain dict, rendered as HTML by
:mod:`.page` and returned as JSON by ``/copycat/offsets.json``.

Nothing here holds a secret: the store is described by topic and bootstrap servers (or file
path), connectors by name, kind and DAG ids; partitions and offsets are the connectors' own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..connect.assignment import canonical
from ..runtime import offset_admin
from ..runtime.offsets import OffsetStore
from ..runtime.windows import is_window_namespace
from .catalog import KnownConnector, Move

LagReader = Callable[[str, list[str]], list[dict[str, Any]]]
"""``lag(connector, topics)``: :func:`.lag.sink_lag` bound to the page's Kafka connection."""


def overview(store: OffsetStore, known: Mapping[str, KnownConnector], moves: Mapping[str, Mapping[str, Move]],
             count: offset_admin.RunCounter, lag: LagReader, *, only: str | None = None,
             can_read: Callable[[KnownConnector], bool] = lambda c: False,
             can_read_runs: Callable[[str], bool] = lambda dag_id: False,
             can_change: Callable[[KnownConnector], bool] = lambda c: False) -> dict[str, Any]:
    """The page's content::

        {"store": "kafka topic copycat-offsets at broker:9092",
         "connectors": [{"name", "kind", "dags", "runs_in_progress", "changeable", "why_not",
                         "offsets": [{"partition", "offset", "last_move"}],
                         "lag": [{"topic", "partition", "committed", "end", "lag"}] | None,
                         "lag_error": str | None}]}

    Connectors are those the deployed DAGs run (``known``) and those with committed offsets in
    ``store`` (windows' offset namespaces left out) that the user may read (``can_read``; one of
    the store only comes as a :class:`KnownConnector` without DAGs), sorted by name; ``only`` keeps
    one. ``last_move`` is ``{"dag_id", "run_id", "when", "before", "after", "records", "current"}``
    (``current``: the committed offset is still what that run left) or ``None`` when no finish
    result in the metadata database moved the partition, or that run's DAG is one whose runs the
    user may not read (``can_read_runs(dag_id)``). ``changeable`` says whether the page
    offers reset/delete: a source connector whose DAGs are known, with no run in progress, and a
    user allowed to edit those DAGs (``can_change``); otherwise ``why_not`` says why.
    """
    committed = {name: entries for name, entries in store.read_all().items()
                 if entries and not is_window_namespace(name)}
    names = sorted(set(committed) | set(known))
    if only is not None:
        names = [n for n in names if n == only]
    rows = []
    for name in names:
        info = known.get(name) or KnownConnector(name, kind="source" if name in committed else None)
        if not can_read(info):
            continue
        kind = info.kind or ("source" if name in committed else None)
        busy = offset_admin.runs_in_progress(info.dags, count)
        offsets = []
        for key, entry in sorted(committed.get(name, {}).items()):
            move = (moves.get(name) or {}).get(key)
            move = move if move is not None and can_read_runs(move.dag_id) else None
            offsets.append({"partition": entry["partition"], "offset": entry["offset"],
                            "last_move": _move(move, entry["offset"])})
        row: dict[str, Any] = {"name": name, "kind": kind, "dags": list(info.dags), "runs_in_progress": busy,
                               "offsets": offsets, "lag": None, "lag_error": None}
        row["why_not"] = _why_not(info, kind, busy, can_change)
        row["changeable"] = row["why_not"] is None
        if kind == "sink":
            try:
                row["lag"] = lag(name, list(info.topics))
            except Exception as e:  # the broker refused: say so on the page, keep the rest
                row["lag_error"] = f"{type(e).__name__}: {e}"
        rows.append(row)
    return {"store": store.describe(), "connectors": rows}


def _move(move: Move | None, offset: Any) -> dict[str, Any] | None:
    if move is None:
        return None
    return {"dag_id": move.dag_id, "run_id": move.run_id, "when": move.when.isoformat() if move.when else None,
            "before": move.before, "after": move.after, "records": move.records,
            "current": canonical(move.after) == canonical(offset)}


def _why_not(info: KnownConnector, kind: str | None, busy: Mapping[str, Any],
             can_change: Callable[[KnownConnector], bool]) -> str | None:
    if kind == "sink":
        return "a sink's positions live in its destination and its consumer group, not in the offset store"
    if not info.dags:
        return ("no deployed DAG runs this connector or names it in an offsets maintenance task's map, so "
                "whether it is running cannot be checked")
    if busy:
        return f"a run is in progress ({offset_admin.describe_runs(busy)})"
    if not can_change(info):
        return f"changing offsets needs permission to edit DAG(s) {', '.join(info.dags)}"
    return None
