"""Offset maintenance: list a connector's committed source offsets, reset one partition's
offset, or delete it -- what Kafka Connect's ``GET/PATCH/DELETE /connectors/{name}/offsets``
(KIP-875) do, for the offset stores of :mod:`.offsets`.

Called by the maintenance DAG's operator (:mod:`airflow_copycat.operators.offsets`) and usable
from any Python process; no Airflow import. The caller owns the "is the connector running?"
check: Kafka Connect accepts offset changes only for a STOPPED connector, and so must the
caller (a run that is in progress would overwrite the change with its own commit, or resume
from offsets it read before the change).

Writes go through the store's own writer: in the offset topic, key ``[connector, partition]``
(byte-identical to Kafka Connect's) in the partition Java's murmur2 partitioner picks for that
key -- the partition every other value of the key is in, so the new value is the last one a
reader sees -- and ``null`` (a tombstone) to delete. Every change is read back from the store
before it is reported done.
"""

from __future__ import annotations

import json
from typing import Any

from ..connect.assignment import canonical
from ..connect.config import ConfigProblem
from ..connect.errors import ConfigException, ConnectException
from .offsets import OffsetStore

ACTIONS = ("list", "reset", "delete")
"""``list`` reads; ``reset`` writes one partition's offset; ``delete`` writes its tombstone."""


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
