"""The source connector suite of the conformance kit (see the package docstring)."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Mapping

from ...connect.assignment import canonical
from ...connect.batch import SourceBatch
from ...connect.connector import TASK_PARTITIONS_KEY, SourceConnector, task_partitions
from ...connect.records import SourceRecord
from ...connect.task import OffsetStorageReader, SourceTaskContext
from .common import (
    InvalidConfigs, _base_suite, _check_exactly_once, _declared, _fail, _ident, _max_tasks, _plan_configs,
    _preview, _raw, _start_for_stop, _started, _stop, _task_class, _task_configs, _task_name,
)

_POLL_TIMEOUT_S = 60.0
_MAX_POLLS = 100_000


def source_connector_tests(
    connector_class: type[SourceConnector],
    make_source: Callable[[Path, int], Mapping[str, Any]],
    *,
    invalid_configs: InvalidConfigs = (),
    records: int = 9,
) -> type:
    """A pytest test class checking ``connector_class`` against the source connector contract.

    :param connector_class: the :class:`SourceConnector` under test.
    :param make_source: ``make_source(tmp_path, n)`` sets up the external system with exactly
        ``n`` records (spread over two or more partitions, so that tasks can share them) and
        returns the connector config that reads them. Called once per test, each time with a
        fresh ``tmp_path``.
    :param invalid_configs: ``[(changes, expected_keys), ...]``: configs made invalid by
        ``changes`` (merged into a valid config; ``None`` removes a key) and the keys the
        validation must name.
    :param records: ``n``, the number of records each test asks ``make_source`` for.

    Assign the result to a ``Test...`` name in a test module; pytest runs its methods.
    """
    if not (isinstance(connector_class, type) and issubclass(connector_class, SourceConnector)):
        raise TypeError(f"source_connector_tests needs a SourceConnector subclass, got {connector_class!r}")
    if records < 2:
        raise ValueError("records must be at least 2 (the restart test cuts a run in the middle)")
    import pytest

    cls = connector_class
    n = records
    suite = _base_suite(pytest, cls, lambda tmp_path: make_source(tmp_path, n), invalid_configs)

    @pytest.mark.parametrize("max_tasks", ["1", "2", "partitions+1"])
    def test_task_configs_respect_max_tasks_and_cover_each_partition_once(self, tmp_path, max_tasks):
        raw = _raw(cls, make_source(tmp_path, n))
        connector = _started(cls, raw)
        try:
            partitions = connector.partitions()
            if partitions is not None and sorted(map(canonical, partitions)) != sorted(map(canonical, connector.partitions())):
                _fail(f"{cls.__name__}.partitions() answered differently when called twice with nothing changed: "
                      f"partition discovery would re-plan on every check")
            known = partitions if partitions is not None else _declared(connector.task_configs(1))
            m = _max_tasks(max_tasks, len(known))
            configs = _task_configs(connector, m)
        finally:
            connector.stop()
        if known and not configs:
            _fail(f"{cls.__name__}.task_configs({m}) returned no task config for {len(known)} partition(s): "
                  f"nothing would be copied")
        if not any(TASK_PARTITIONS_KEY in c for c in configs):
            if partitions is None:
                pytest.skip(f"{cls.__name__}.partitions() is None and its task configs declare no "
                            f"'{TASK_PARTITIONS_KEY}': coverage cannot be checked")
            _fail(f"{cls.__name__}.task_configs({m}) declares no partitions under '{TASK_PARTITIONS_KEY}': the "
                  f"framework cannot tell which task copies which partition. Keep the default "
                  f"SourceConnector.task_configs, or put json.dumps(partitions) under '{TASK_PARTITIONS_KEY}'.")
        for i, c in enumerate(configs):
            if not task_partitions(c):
                _fail(f"{cls.__name__}.task_configs({m}): task config {i} declares no partition: a Spark task "
                      f"would start only to copy nothing (return at most one config per partition)")
        _check_exactly_once(f"{cls.__name__}.task_configs({m})", known, [task_partitions(c) for c in configs])

    def test_every_task_config_starts_and_stops(self, tmp_path):
        raw = _raw(cls, make_source(tmp_path, n))
        for i, config in enumerate(_plan_source(cls, raw, 2)):
            task = _source_task(cls, config, {})
            _stop(task, f"after start() of task config {i}")

    def test_records_carry_source_partition_and_offset(self, tmp_path):
        raw = _raw(cls, make_source(tmp_path, n))
        for i, config in enumerate(_plan_source(cls, raw, 2)):
            declared = {canonical(p) for p in task_partitions(config)}
            for record in _drain(cls, config, {}):
                _check_source_record(cls, record, declared, i)

    def test_tasks_read_every_record_once_then_report_caught_up(self, tmp_path):
        raw = _raw(cls, make_source(tmp_path, n))
        got = [r for config in _plan_source(cls, raw, 2) for r in _drain(cls, config, {})]
        if len(got) != n:
            _fail(f"the tasks of {cls.__name__}.task_configs(2) emitted {len(got)} record(s) in all, but the source "
                  f"holds {n} (make_source(tmp_path, {n}) set up {n}): "
                  + ("records were emitted twice" if len(got) > n else "records were lost")
                  + f". Emitted: {_preview(_ident(r) for r in got)}")

    @pytest.mark.parametrize("cut", ["after_1_record", "after_half", "after_all_but_1", "after_all"])
    def test_restart_from_committed_offsets_emits_exactly_the_rest(self, tmp_path, cut):
        raw = _raw(cls, make_source(tmp_path, n))
        configs = _plan_source(cls, raw, 1)
        if len(configs) != 1:
            _fail(f"{cls.__name__}.task_configs(1) returned {len(configs)} task configs; expected 1")
        config = configs[0]
        full = _drain(cls, config, {})
        k = {"after_1_record": 1, "after_half": len(full) // 2, "after_all_but_1": len(full) - 1,
             "after_all": len(full)}[cut]
        again = _drain(cls, config, {})

        def per_partition(records):  # the order across partitions may differ (a Kafka consumer interleaves)
            out: dict[str, list] = {}
            for r in records:
                out.setdefault(canonical(r.source_partition), []).append(_ident(r))
            return out

        if per_partition(again) != per_partition(full):
            _fail(f"two fresh {cls.__name__} tasks on the same data emitted different records (or, within a "
                  f"partition, another order): "
                  f"{_preview(_ident(r) for r in full)} then {_preview(_ident(r) for r in again)}; the restart "
                  f"check needs a source whose data does not change between reads")
        first = _drain(cls, config, {}, limit=k)
        committed: dict[str, tuple[Any, Any]] = {}
        for r in first:  # the offset of the last record seen per partition, as the runtime commits it
            committed[canonical(r.source_partition)] = (r.source_partition, r.source_offset)
        rest = _drain(cls, config, {key: offset for key, (_, offset) in committed.items()})
        by_partition: dict[str, list] = {}
        for r in full:
            by_partition.setdefault(canonical(r.source_partition), []).append(_ident(r))
        seen = Counter(canonical(r.source_partition) for r in first)
        problems = []
        for key in sorted(set(by_partition) | {canonical(r.source_partition) for r in rest}):
            want = by_partition.get(key, [])[seen[key]:]
            got = [_ident(r) for r in rest if canonical(r.source_partition) == key]
            if got == want:
                continue
            done = by_partition.get(key, [])[:seen[key]]
            where = (f"from offset {json.dumps(committed[key][1])}" if key in committed
                     else "with no committed offset")
            repeated = [g for g in got if g in done]
            missing = [w for w in want if w not in got]
            why = "; ".join(x for x in (
                f"{len(repeated)} record(s) it had emitted before that offset again" if repeated else "",
                f"{len(missing)} record(s) after that offset missing" if missing else "",
            ) if x) or "another order"
            problems.append(f"partition {key} {where}: {why}. Expected {_preview(want)}, got {_preview(got)}")
        if problems:
            _fail(f"{_task_name(cls)} restarted from the offsets of the first {k} of {len(full)} record(s) did not "
                  f"emit exactly the rest (restarted from a committed offset, a task must emit none of the records "
                  f"up to that offset again and skip none after it):\n  " + "\n  ".join(problems))

    @pytest.mark.parametrize("moment", ["before_start", "after_failed_start", "after_start", "after_poll"])
    def test_task_stop_is_safe_and_may_be_called_twice(self, tmp_path, moment):
        raw = _raw(cls, make_source(tmp_path, n))
        config = _plan_source(cls, raw, 1)[0]
        task = _task_class(cls)()
        task.initialize(SourceTaskContext(config, _MemoryOffsetReader({})))
        _start_for_stop(pytest, cls, task, config, moment)
        if moment == "after_poll":
            task.poll()
        _stop(task, moment.replace("_", " "))
        _stop(task, f"a second time, {moment.replace('_', ' ')} (the framework may call it twice)")

    for f in (test_task_configs_respect_max_tasks_and_cover_each_partition_once, test_every_task_config_starts_and_stops,
              test_records_carry_source_partition_and_offset, test_tasks_read_every_record_once_then_report_caught_up,
              test_restart_from_committed_offsets_emits_exactly_the_rest,
              test_task_stop_is_safe_and_may_be_called_twice):
        suite[f.__name__] = f
    suite["records"] = n
    suite["make_source"] = staticmethod(make_source)
    return type(f"Test{cls.__name__}Conformance", (), suite)


def _plan_source(cls: type[SourceConnector], raw: Mapping[str, Any], max_tasks: int) -> list[dict]:
    configs = _plan_configs(cls, raw, max_tasks)
    if not configs:
        _fail(f"{cls.__name__}.task_configs({max_tasks}) returned no task config for a source set up with records")
    return configs


class _MemoryOffsetReader(OffsetStorageReader):
    """Committed offsets from a dict keyed by canonical partition, as the runtime's snapshot reader."""

    def __init__(self, offsets: Mapping[str, Any]):
        self._offsets = dict(offsets)

    def offsets(self, partitions):
        return {canonical(p): self._offsets[canonical(p)] for p in partitions if canonical(p) in self._offsets}


def _source_task(cls: type[SourceConnector], config: dict, offsets: Mapping[str, Any]):
    task = _task_class(cls)()
    task.initialize(SourceTaskContext(config, _MemoryOffsetReader(offsets)))
    task.start(dict(config))
    return task


def _drain(cls: type[SourceConnector], config: dict, offsets: Mapping[str, Any], *,
           limit: int | None = None) -> list[SourceRecord]:
    """Start a task from ``offsets`` and poll it until it is caught up (``None``), or until it
    returned ``limit`` records (then the first ``limit`` count: the rest were never acknowledged)."""
    task = _source_task(cls, config, offsets)
    name = type(task).__name__
    out: list[SourceRecord] = []
    deadline = time.monotonic() + _POLL_TIMEOUT_S
    try:
        for _ in range(_MAX_POLLS):
            if limit is not None and len(out) >= limit:
                return out[:limit]
            batch = task.poll()
            if batch is None:
                return out
            if not isinstance(batch, list) or not all(isinstance(r, (SourceRecord, SourceBatch)) for r in batch):
                _fail(f"{name}.poll() must return a list of SourceRecord/SourceBatch, [] or None; got {batch!r:.300}")
            # a batch means its records (connect/batch.py): the kit checks those
            out += [r for item in batch for r in (item.to_records() if isinstance(item, SourceBatch) else [item])]
            if not batch:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.01)
        _fail(f"{name}.poll() never returned None (caught up) on a source holding a fixed set of records "
              f"({len(out)} record(s) read): a bounded run of this task would never end")
    finally:
        _stop(task, "after poll()")


def _check_source_record(cls: type[SourceConnector], record: SourceRecord, declared: set[str], task: int) -> None:
    name = _task_name(cls)
    where = f"{name} (task config {task}) emitted {_ident(record)} with"
    if not isinstance(record.topic, str) or not record.topic:
        _fail(f"{where} no topic")
    for field in ("source_partition", "source_offset"):
        value = getattr(record, field)
        if value is None:
            _fail(f"{where} {field}=None: every source record needs a source_partition and a source_offset, "
                  f"else the framework cannot commit where the task got to and a rerun starts over")
        if not isinstance(value, dict):
            _fail(f"{where} {field}={value!r}: it must be a dict (Kafka Connect's Map<String, ?>)")
        try:
            same = json.loads(json.dumps(value)) == value
        except (TypeError, ValueError) as e:
            same, value = False, f"{value!r} ({e})"
        if not same:
            _fail(f"{where} {field}={value}: it must be JSON of primitives (str, int, float, bool, None) that reads "
                  f"back equal, as the offset store keeps it")
    if declared and canonical(record.source_partition) not in declared:
        _fail(f"{where} source_partition={record.source_partition}, which is not among the partitions of its task "
              f"config: {sorted(declared)}")
