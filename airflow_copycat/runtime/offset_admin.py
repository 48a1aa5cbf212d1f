"""Offset maintenance: list a connector's committed source offsets, reset one partition's
offset, or delete it -- what Kafka Connect's ``GET/PATCH/DELETE /connectors/{name}/offsets``
(KIP-875) do, for the offset stores of :mod:`.offsets`.

Called by the maintenance DAG's operator (:mod:`airflow_copycat.operators.offsets`), the offsets
page in the Airflow UI (:mod:`airflow_copycat.plugins`) and usable from any Python process; no
Airflow import. Kafka Connect accepts offset changes only for a STOPPED connector (a run that is
in progress would overwrite the change with its own commit, or resume from offsets it read
before the change): :func:`guarded_change` is that rule, given a way to count a DAG's runs in a
state -- the Task SDK in a task, the metadata database in the API server.

Writes go through the store's own writer: in the offset topic, key ``[connector, partition]``
(byte-identical to Kafka Connect's) in the partition Java's murmur2 partitioner picks for that
key -- the partition every other value of the key is in, so the new value is the last one a
reader sees -- and ``null`` (a tombstone) to delete. Every change is read back from the store
before it is reported done.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..connect.assignment import canonical
from ..connect.config import ConfigProblem
from ..connect.errors import ConfigException, ConnectException
from .offsets import OffsetStore

ACTIONS = ("list", "reset", "delete")
"""``list`` reads; ``reset`` writes one partition's offset; ``delete`` writes its tombstone."""

IN_PROGRESS_STATES = ("queued", "running")
"""DAG run states during which a connector's offsets must not change: a queued run will read
them, a running one has read them (plan, task start) and will commit its own. Backfill runs are
DAG runs too, so they count."""

RunCounter = Callable[[str, str], int]
"""``count(dag_id, state)``: how many runs of the DAG are in that state now."""


class OffsetChangeRefused(ConnectException):
    """A change refused before anything was written: a run of the connector is queued or running.
    ``busy`` is DAG id -> {state: count} of those runs."""

    def __init__(self, message: str, busy: Mapping[str, Mapping[str, int]]):
        super().__init__(message)
        self.busy = dict(busy)


class OffsetChangeRaced(ConnectException):
    """The change was written and read back, but a run of the connector started meanwhile: it may
    have read the old offsets and may commit over the new one. ``result`` is what
    :func:`change_offset` returned, ``busy`` as in :class:`OffsetChangeRefused`."""

    def __init__(self, message: str, busy: Mapping[str, Mapping[str, int]], result: dict[str, Any]):
        super().__init__(message)
        self.busy = dict(busy)
        self.result = result


def parse_request(action: Any, partition: Any, offset: Any) -> tuple[str, Any, Any]:
    """Validate a maintenance request before anything is read or written.

    ``partition`` and ``offset`` are JSON text (as typed into a form) or already decoded values.
    Returns ``(action, partition, offset)`` decoded: partition ``None`` for ``list``, offset
    ``None`` unless ``reset``. Raises :class:`ConfigException` naming every bad parameter
    (``action``, ``partition``, ``offset``) and why.
    """
    problems: list[ConfigProblem] = []
    given_action = action
    action = str(action or "").strip().lower()
    if action not in ACTIONS:
        problems.append(ConfigProblem("action", given_action, f"must be one of {', '.join(ACTIONS)}"))
    decoded_partition = decoded_offset = None
    if action in ("reset", "delete"):
        decoded_partition, problem = _json_param("partition", partition)
        if problem:
            problems.append(problem)
        elif decoded_partition is None:
            problems.append(ConfigProblem("partition", partition, 'null is not a source partition; give it as JSON, '
                                          'e.g. {"filename": "/var/log/app/a.log"} (list the offsets to see them)'))
    if action == "reset":
        decoded_offset, problem = _json_param("offset", offset)
        if problem:
            problems.append(problem)
        elif not isinstance(decoded_offset, dict):
            problems.append(ConfigProblem("offset", offset, 'must be a JSON object, e.g. {"position": 0} '
                                          "(to remove the partition's offset, use action delete)"))
    elif action == "delete" and offset not in (None, "", {}):
        problems.append(ConfigProblem("offset", offset, "only action reset takes an offset; delete writes a "
                                      "tombstone (leave offset empty)"))
    if problems:
        raise ConfigException(problems, context="the offset request")
    return action, decoded_partition, decoded_offset


def _json_param(name: str, value: Any) -> tuple[Any, ConfigProblem | None]:
    if not isinstance(value, str):
        return value, None
    if not value.strip():
        return None, ConfigProblem(name, None, "missing; give it as JSON")
    try:
        return json.loads(value), None
    except ValueError as e:
        return None, ConfigProblem(name, value, f"not valid JSON ({e})")


def list_offsets(store: OffsetStore, connector: str) -> list[dict[str, Any]]:
    """The committed offsets of ``connector``: ``[{"partition": ..., "offset": ...}]`` sorted by the
    partition's canonical JSON. Empty when it has none (a missing offset topic holds none)."""
    entries = store.read(connector)
    return [{"partition": e["partition"], "offset": e["offset"]} for _, e in sorted(entries.items())]


def change_offset(store: OffsetStore, connector: str, action: str, partition: Any, offset: Any = None, *,
                  force: bool = False) -> dict[str, Any]:
    """Reset (``offset`` a dict) or delete (``offset`` None) one partition's committed offset of
    ``connector``, read it back, and return what changed::

        {"connector", "action", "partition", "before", "after", "store", "partitions"}

    ``before`` / ``after`` are the offsets the store returned before the write and after it
    (``None``: no offset, the next run starts the partition from scratch); ``partitions`` is the
    number of partitions with an offset after the change. Unless ``force``, the partition must
    already have a committed offset (a typo would otherwise add an offset no task ever reads);
    otherwise :class:`ConfigException` lists the partitions that do. Raises
    :class:`ConnectException` if the store does not return the new value afterwards.
    The caller first makes sure no run of the connector is in progress.
    """
    if action not in ("reset", "delete"):
        raise ValueError(f"change_offset: action must be reset or delete, not {action!r}")
    new = offset if action == "reset" else None
    current = store.read(connector)
    key = canonical(partition)
    if key not in current and not force:
        known = [e["partition"] for _, e in sorted(current.items())]
        listing = ", ".join(compact_json(p) for p in known[:20]) + (f" ... ({len(known)} in all)" if len(known) > 20 else "")
        raise ConfigException([ConfigProblem(
            "partition", compact_json(partition),
            f"has no committed offset for connector {connector!r} in {store.describe()}; "
            + (f"its partitions are: {listing}" if known else "the connector has no committed offsets at all")
            + ". Check the partition (keys and values must match exactly), or set force to write it anyway")],
            context="the offset request")
    before = current.get(key, {}).get("offset")
    # The offset topic is keyed by the JSON bytes of [connector, partition]: write under the partition
    # as the connector stored it (its key order), not as typed, or the connector's own key keeps its value.
    if key in current:
        partition = current[key]["partition"]
    store.write(connector, [(partition, new)])
    after_all = store.read(connector)
    after = after_all.get(key, {}).get("offset")
    if canonical(after) != canonical(new):
        raise ConnectException(
            f"wrote {'a tombstone' if new is None else compact_json(new)} for partition {compact_json(partition)} of connector "
            f"{connector!r} to {store.describe()}, but reading it back returned {compact_json(after)}: another writer "
            f"may have committed meanwhile; list the offsets and retry")
    return {"connector": connector, "action": action, "partition": partition, "before": before, "after": after,
            "store": store.describe(), "partitions": len(after_all)}


def runs_in_progress(dags: Sequence[str], count: RunCounter) -> dict[str, dict[str, int]]:
    """DAG id -> {state: count} of the queued or running runs of ``dags`` (only DAGs that have some)."""
    busy: dict[str, dict[str, int]] = {}
    for dag_id in dags:
        counts = {state: count(dag_id, state) for state in IN_PROGRESS_STATES}
        if any(counts.values()):
            busy[dag_id] = {state: n for state, n in counts.items() if n}
    return busy


def describe_runs(busy: Mapping[str, Mapping[str, int]]) -> str:
    """``DAG a: 1 running; DAG b: 2 queued`` for :func:`runs_in_progress`'s answer."""
    return "; ".join(f"DAG {dag_id}: " + ", ".join(f"{n} {state}" for state, n in counts.items())
                     for dag_id, counts in busy.items())


def guarded_change(store: OffsetStore, connector: str, dags: Sequence[str], action: str, partition: Any,
                   offset: Any = None, *, force: bool = False, count: RunCounter,
                   retry: str = "try the change again") -> dict[str, Any]:
    """:func:`change_offset`, allowed only while no DAG in ``dags`` (those that run ``connector``)
    has a queued or running run, as ``count`` reports them -- Kafka Connect's rule that offsets
    change only while the connector is stopped.

    Raises :class:`OffsetChangeRefused` (nothing written) when a run is in progress before the
    write, :class:`OffsetChangeRaced` (written and read back) when one started during it, and
    whatever :func:`change_offset` raises. ``retry`` ends the refusal's advice (what the user does
    once the runs finished, e.g. ``"trigger this DAG again"``). The caller validated the request
    (:func:`parse_request`) and made sure ``dags`` is every DAG that runs the connector.
    """
    busy = runs_in_progress(dags, count)
    if busy:
        raise OffsetChangeRefused(
            f"refusing to change offsets of connector {connector!r}: a run of it is in progress "
            f"({describe_runs(busy)}). Nothing was written. Wait until those runs finish (or mark them "
            f"failed), then {retry}.", busy)
    result = change_offset(store, connector, action, partition, offset, force=force)
    busy = runs_in_progress(dags, count)
    if busy:
        raise OffsetChangeRaced(
            f"the offset of connector {connector!r} was written, but a run of it started meanwhile "
            f"({describe_runs(busy)}): that run may have read the old offsets and may commit over the new one. "
            f"When it finishes, list the offsets and repeat the change if needed.", busy, result)
    return result


def format_table(rows: list[dict[str, Any]], *, width: int = 100) -> str:
    """A readable two-column table of ``[{"partition", "offset"}]`` rows (compact JSON, long cells cut)."""
    cells = [(_cut(compact_json(r["partition"]), width), _cut(compact_json(r["offset"]), width)) for r in rows]
    w = max([len("partition")] + [len(p) for p, _ in cells])
    lines = [f"{'partition'.ljust(w)} | offset", f"{'-' * w}-+-{'-' * 6}"]
    lines += [f"{p.ljust(w)} | {o}" for p, o in cells]
    return "\n".join(lines)


def compact_json(value: Any) -> str:
    """``value`` as compact JSON with sorted keys, as logs and error messages show partitions and offsets."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
