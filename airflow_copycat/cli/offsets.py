"""``copycat offsets``: list, set or delete a connector's committed source offsets."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from ..connect.assignment import canonical
from .common import UserError, _err, _json, _load_config, _load_worker, _out, _require_kafka


# ---------------------------------------------------------------------------------------------
# offsets

_DELETE_GIVEN_PARTITION = object()  # bare --delete: the partition comes from --partition


def _parse_json_arg(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise UserError(f"{what} {text!r} is not valid JSON ({e}); quote it for the shell, "
                        f"e.g. '{{\"filename\": \"/var/log/app.log\"}}'") from e


def parse_assignment(text: str) -> tuple[Any, Any]:
    """Split ``PARTITION=OFFSET`` (both JSON) at the ``=`` that ends the partition's JSON value.

    The partition is decoded first, so an ``=`` inside it (``{"file":"/a=b"}``) is no
    separator; if that fails, every ``=`` whose both sides are JSON is tried, and
    exactly one must fit.
    """
    s = text.strip()
    decoder = json.JSONDecoder()
    try:
        partition, end = decoder.raw_decode(s)
        rest = s[end:].lstrip()
        if rest.startswith("="):
            return partition, json.loads(rest[1:])
    except ValueError:
        pass
    splits = []
    for i, ch in enumerate(s):
        if ch == "=":
            try:
                splits.append((json.loads(s[:i]), json.loads(s[i + 1:])))
            except ValueError:
                continue
    if len(splits) == 1:
        return splits[0]
    if splits:
        raise UserError(f"--set {text!r} is ambiguous: it splits into PARTITION=OFFSET in {len(splits)} ways; "
                        f"use --partition JSON --offset JSON")
    raise UserError(f"--set {text!r}: expected PARTITION=OFFSET, both JSON, e.g. "
                    f"'{{\"filename\": \"/var/log/app.log\"}}={{\"position\": 0}}' "
                    f"(or use --partition JSON --offset JSON)")


def _offset_changes(args: argparse.Namespace) -> list[tuple[Any, Any]]:
    changes: list[tuple[Any, Any]] = [parse_assignment(s) for s in args.set or ()]
    deletes = list(args.delete or ())
    bare_deletes = [d for d in deletes if d is _DELETE_GIVEN_PARTITION]
    if len(bare_deletes) > 1:
        raise UserError("--delete without a PARTITION may be given once, with --partition")
    if args.partition is not None:
        partition = _parse_json_arg(args.partition, "--partition")
        if (args.offset is None) == (not bare_deletes):
            raise UserError("--partition needs exactly one of --offset JSON or --delete")
        changes.append((partition, None if bare_deletes else _parse_json_arg(args.offset, "--offset")))
    elif args.offset is not None or bare_deletes:
        raise UserError("--offset and a bare --delete need --partition JSON")
    for d in deletes:
        if d is not _DELETE_GIVEN_PARTITION:
            changes.append((_parse_json_arg(d, "--delete"), None))
    return changes


def _connector_name(spec: str) -> str:
    """CONNECTOR is a name, or a connector config file whose ``name`` is taken."""
    if os.path.isfile(spec) or spec == "-" or spec.lstrip().startswith("{"):
        label, raw = _load_config(spec)
        if not raw.get("name"):
            raise UserError(f"{label}: the connector config has no name")
        return str(raw["name"])
    return spec


def cmd_offsets(args: argparse.Namespace) -> int:
    from ..runtime.offsets import offset_store

    changes = _offset_changes(args)
    name = _connector_name(args.connector) if args.connector else None
    if changes and not name:
        raise UserError("--set / --delete need the CONNECTOR whose offsets to change")
    worker = _load_worker(args)
    if not worker.offset_file:
        _require_kafka(worker, args.kafka_timeout, args.verbose)
    store = offset_store(worker)
    try:
        if not changes:
            if name is None:
                everything = store.read_all()
                for connector in sorted(everything):
                    for _, e in sorted(everything[connector].items()):
                        _out(_json({"connector": connector, "partition": e["partition"], "offset": e["offset"]}))
                if not everything:
                    _err(f"no committed offsets in {store.describe()}")
                return 0
            offsets = store.read(name)
            for _, e in sorted(offsets.items()):
                _out(_json({"partition": e["partition"], "offset": e["offset"]}))
            if not offsets:
                _err(f"connector {name!r} has no committed offsets in {store.describe()}")
            return 0
        current = store.read(name)
        for partition, offset in changes:
            if canonical(partition) not in current:
                what = "deleting" if offset is None else "setting"
                _err(f"note: connector {name!r} had no committed offset for partition {_json(partition)}; "
                     f"{what} it anyway")
        store.write(name, changes)
        for partition, offset in changes:
            before = current.get(canonical(partition), {}).get("offset")
            _out(_json({"partition": partition, "offset": offset, "previous": before}))
        _err(f"wrote {len(changes)} offset(s) of connector {name!r} to {store.describe()}; "
             f"the next run starts there")
        return 0
    finally:
        store.close()
