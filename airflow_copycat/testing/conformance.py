"""Conformance kit: a standard pytest suite for any connector, from its class and a config.

Like the Singer SDK's ``get_tap_test_class``: a connector author writes a few
lines and gets the checks every connector must pass, with failures phrased in
the connector's own terms::

    from airflow_copycat.testing import source_connector_tests

    def make_source(tmp_path, n):          # set up a source holding n records; return its config
        ...
    TestMySource = source_connector_tests(MySourceConnector, make_source,
                                          invalid_configs=[({"batch.size": 0}, ["batch.size"])])

    TestMySink = sink_connector_tests(MySinkConnector, make_sink=lambda tmp_path: {...},
                                      read_back=lambda config: [...values the destination holds...])

What the generated tests check (see the test names pytest prints):

* config validation names every bad key, all problems at once, both through
  :meth:`Connector.check_config` and the framework's validation
  (bad values derived from the :class:`ConfigDef`, plus the author's
  ``invalid_configs``);
* ``task_configs(max_tasks)`` returns at most ``max_tasks`` flat string configs
  and covers every partition exactly once (sources: the partitions each task
  config declares under ``task.partitions``; sinks: the topic-partitions the
  planner assigns to the task configs), and every task config starts;
* sources: records carry JSON source partitions and offsets, tasks read every
  record once and then report caught up (``poll() -> None``), and a task
  restarted from the last committed offsets emits exactly the rest -- no
  repeat, no gap;
* sinks: a bounded run writes every record once; a batch given again after a
  crash before the commit is not written twice (sinks declaring
  ``exactly_once``) and nothing is lost (every sink); sinks declaring
  ``offsets_in_destination`` rewind to them in ``open()``;
* ``stop()`` is safe before start, after a failed start, after start, after
  work, and when called twice.

Tasks are driven directly, as the runtime drives them (``initialize``,
``start``, ``poll`` / ``open``, ``put``, ``pre_commit``, ``close``, ``stop``),
against the author's real resource: no Kafka is needed. A check that does not
apply says so as a skip (a sink that declares ``exactly_once = False`` is not
asked to write a replayed batch once).

The generated class carries ``connector_class`` and the factories
(``make_source`` and ``records``, or ``make_sink`` and ``read_back``);
subclass it to add a connector's own tests.

This module imports neither airflow nor pyspark; pytest is imported when a
suite is built, and the framework's validation and planner key
(:mod:`airflow_copycat.runtime`) when a check uses them.
"""

from __future__ import annotations

import base64
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..connect.assignment import assign, canonical
from ..connect.batch import SourceBatch
from ..connect.config import ConfigDef, ConfigType, Password
from ..connect.connector import TASK_PARTITIONS_KEY, Connector, SinkConnector, SourceConnector, task_partitions
from ..connect.data import Struct
from ..connect.errors import ConfigException
from ..connect.records import SinkRecord, SourceRecord
from ..connect.task import OffsetStorageReader, SinkTaskContext, SourceTaskContext

__all__ = ["sink_connector_tests", "source_connector_tests"]

InvalidConfigs = Sequence[tuple[Mapping[str, Any], Sequence[str]]]
"""``[(changes, expected_keys), ...]``: each ``changes`` is applied to a valid config (a value
of ``None`` removes the key); validation must name every key of ``expected_keys``."""

_POLL_TIMEOUT_S = 60.0
_MAX_POLLS = 100_000
_BASE_TS = 1_700_000_000_000


# ------------------------------------------------------------------ public factories


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


def sink_connector_tests(
    connector_class: type[SinkConnector],
    make_sink: Callable[[Path], Mapping[str, Any]],
    read_back: Callable[[Mapping[str, Any]], Iterable[Any]],
    *,
    invalid_configs: InvalidConfigs = (),
    topics: Sequence[str] | None = None,
    partitions: int = 3,
    records_per_partition: int = 5,
    make_value: Callable[[str, int, int], Any] | None = None,
    value_schema: Any = None,
) -> type:
    """A pytest test class checking ``connector_class`` against the sink connector contract.

    :param connector_class: the :class:`SinkConnector` under test.
    :param make_sink: ``make_sink(tmp_path)`` returns the config of a sink writing to an
        empty destination (under ``tmp_path``, or a fresh database...). Called once per test.
    :param read_back: ``read_back(config)`` returns the record values the destination holds
        now, in any order, as equal Python values (e.g. ``json.loads`` of each written line).
    :param invalid_configs: as for :func:`source_connector_tests`.
    :param topics: the topics records are made for; default: the config's ``topics``.
    :param partitions: Kafka partitions per topic.
    :param records_per_partition: records (offsets 0, 1, ...) in each topic-partition.
    :param make_value: ``make_value(topic, partition, offset)`` -> a record value; default a
        schemaless dict ``{"topic", "partition", "offset", "text"}``.
    :param value_schema: the value schema of every record (``None``: schemaless).
    """
    if not (isinstance(connector_class, type) and issubclass(connector_class, SinkConnector)):
        raise TypeError(f"sink_connector_tests needs a SinkConnector subclass, got {connector_class!r}")
    if records_per_partition < 2:
        raise ValueError("records_per_partition must be at least 2 (crash tests stop a run in the middle)")
    import pytest

    cls = connector_class
    value_of = make_value or _default_value

    def setup(tmp_path) -> tuple[dict, dict, dict]:
        """(raw config, {tp: records}, the value counts a destination holding each record once holds)."""
        raw = _raw(cls, make_sink(tmp_path))
        names = list(topics) if topics is not None else _topics(cls, raw)
        log = {(t, p): [SinkRecord(topic=t, kafka_partition=p, key=f"{t}-{p}-{o}", value_schema=value_schema,
                                   value=value_of(t, p, o), timestamp=_BASE_TS + o * 1000, kafka_offset=o,
                                   timestamp_type="CreateTime")
                        for o in range(records_per_partition)]
               for t in names for p in range(partitions)}
        return raw, log, Counter(_canon(r.value) for rs in log.values() for r in rs)

    def held(raw) -> Counter:
        return Counter(_canon(v) for v in read_back(raw))

    @pytest.mark.parametrize("max_tasks", ["1", "2", "partitions+1"])
    def test_task_configs_respect_max_tasks_and_cover_each_partition_once(self, tmp_path, max_tasks):
        raw, log, _ = setup(tmp_path)
        tps = list(log)
        m = _max_tasks(max_tasks, len(tps))
        connector = _started(cls, raw)
        try:
            configs = _task_configs(connector, m)
        finally:
            connector.stop()
        if not configs:
            _fail(f"{cls.__name__}.task_configs({m}) returned no task config: nothing would be copied")
        planned = _plan_sink(configs, tps)
        _check_exactly_once(f"the planner's assignment of {len(tps)} topic-partitions to {cls.__name__}"
                            f".task_configs({m})", [list(tp) for tp in tps], [[list(tp) for tp in a] for _, a in planned])

    def test_every_task_config_opens_its_assigned_partitions(self, tmp_path):
        raw, log, _ = setup(tmp_path)
        for config, assignment in _plan_sink(_plan_configs(cls, raw, 2), list(log)):
            run = _SinkRun(cls, config, assignment, {})
            run.close_and_stop()

    def test_run_writes_every_record_once(self, tmp_path):
        raw, log, expected = setup(tmp_path)
        group: dict = {}
        for config, assignment in _plan_sink(_plan_configs(cls, raw, 2), list(log)):
            run = _SinkRun(cls, config, assignment, group)
            run.deliver(log)
            run.finish()
        _check_held(cls, held(raw), expected, "after one bounded run of two tasks", once=True)

    def test_final_pre_commit_commits_everything_put(self, tmp_path):
        raw, log, _ = setup(tmp_path)
        config, assignment = _plan_sink(_plan_configs(cls, raw, 1), list(log))[0]
        run = _SinkRun(cls, config, assignment, {})
        run.deliver(log)
        committed = run.finish()
        short = {tp: (committed.get(tp), end) for tp, end in run.positions.items() if committed.get(tp) != end}
        if short:
            _fail(f"{_task_name(cls)}.pre_commit(offsets, final=True) at the end of a run returned {committed}, "
                  f"short of the positions it was given for {sorted(short)} (given: {dict(run.positions)}): a bounded "
                  f"run must make everything durable at its end, else the run reports records as not copied")

    def test_replayed_batch_is_written_once(self, tmp_path):
        if not cls.exactly_once:
            pytest.skip(f"{cls.__name__} declares exactly_once = False (at-least-once): a replayed batch may be "
                        f"written twice")
        raw, log, expected = setup(tmp_path)
        config, assignment = _plan_sink(_plan_configs(cls, raw, 1), list(log))[0]
        run = _SinkRun(cls, config, assignment, {})
        batch = [r for tp in assignment for r in log[tp]]
        positions = {tp: len(log[tp]) for tp in assignment}
        run.put(batch)
        run.pre_commit(positions)
        run.put(batch)
        run.finish()
        _check_held(cls, held(raw), expected, "after put(batch), pre_commit, then put() of the same batch again "
                    "(as after a put() retried once it had written)", once=True)

    @pytest.mark.parametrize("crash", ["mid_run", "after_final_pre_commit"])
    def test_rerun_after_crash_before_commit_loses_nothing(self, tmp_path, crash):
        raw, log, expected = setup(tmp_path)
        _crash_and_rerun(cls, raw, log, crash)
        _check_held(cls, held(raw), expected, f"after a run crashed {crash.replace('_', ' ')} (before the consumer "
                    f"group commit) and a rerun", once=False)

    @pytest.mark.parametrize("crash", ["mid_run", "after_final_pre_commit"])
    def test_rerun_after_crash_before_commit_writes_each_record_once(self, tmp_path, crash):
        if not cls.exactly_once:
            pytest.skip(f"{cls.__name__} declares exactly_once = False (at-least-once): a rerun after a crash "
                        f"writes again what the crashed run wrote")
        raw, log, expected = setup(tmp_path)
        _crash_and_rerun(cls, raw, log, crash)
        _check_held(cls, held(raw), expected, f"after a run crashed {crash.replace('_', ' ')} (before the consumer "
                    f"group commit) and a rerun", once=True)

    def test_open_rewinds_to_the_offsets_kept_in_the_destination(self, tmp_path):
        if not cls.offsets_in_destination:
            pytest.skip(f"{cls.__name__} keeps no offsets in the destination (offsets_in_destination = False): "
                        f"the consumer group's offsets say where a rerun starts")
        raw, log, _ = setup(tmp_path)
        config, assignment = _plan_sink(_plan_configs(cls, raw, 1), list(log))[0]
        fresh = _SinkRun(cls, config, assignment, {})
        if any(off != 0 for off in fresh.rewinds.values()):
            _fail(f"{_task_name(cls)}.open() on an empty destination asked to start at {fresh.rewinds}; with "
                  f"nothing committed it must ask for no offset (or 0), else records are skipped")
        fresh.deliver(log)
        committed = fresh.finish()
        again = _SinkRun(cls, config, assignment, {})
        again.close_and_stop()
        if again.rewinds != committed:
            _fail(f"{_task_name(cls)}.open() after a run that committed {committed} asked to start at "
                  f"{again.rewinds}: a sink with offsets_in_destination = True must call context.offset() in open() "
                  f"with the committed offset of every partition it owns, else the framework starts from the "
                  f"earliest offset and copies the topic again")

    def test_close_without_commit_then_reopen_resumes_at_the_committed_offset(self, tmp_path):
        if not cls.offsets_in_destination:
            pytest.skip(f"{cls.__name__} keeps no offsets in the destination (offsets_in_destination = False)")
        raw, log, expected = setup(tmp_path)
        config, assignment = _plan_sink(_plan_configs(cls, raw, 1), list(log))[0]
        run = _SinkRun(cls, config, assignment, {})
        run.deliver(log, limit=sum(len(v) for v in log.values()) // 2)
        run.task.close(assignment)  # a rebalance: the partitions go away before the end of the run
        run.reopen()
        beyond = {tp: off for tp, off in run.rewinds.items() if off > len(log[tp])}
        if beyond:
            _fail(f"{_task_name(cls)}.open() after close() asked to start past the records it was given: {beyond}")
        run.deliver(log)
        run.finish()
        _check_held(cls, held(raw), expected, "after close() half-way through a run, open() again and the rest of "
                    "the run", once=True)

    @pytest.mark.parametrize("moment", ["before_start", "after_failed_start", "after_start", "after_put"])
    def test_task_stop_is_safe_and_may_be_called_twice(self, tmp_path, moment):
        raw, log, _ = setup(tmp_path)
        config, assignment = _plan_sink(_plan_configs(cls, raw, 1), list(log))[0]
        task = _task_class(cls)()
        task.initialize(SinkTaskContext(config, assignment))
        if _start_for_stop(pytest, cls, task, config, moment):
            task.open(assignment)
        if moment == "after_put":
            task.put(log[assignment[0]])
        _stop(task, moment.replace("_", " "))
        _stop(task, f"a second time, {moment.replace('_', ' ')} (the framework may call it twice)")

    suite = _base_suite(pytest, cls, lambda tmp_path: make_sink(tmp_path), invalid_configs)
    for f in (test_task_configs_respect_max_tasks_and_cover_each_partition_once,
              test_every_task_config_opens_its_assigned_partitions, test_run_writes_every_record_once,
              test_final_pre_commit_commits_everything_put, test_replayed_batch_is_written_once,
              test_rerun_after_crash_before_commit_loses_nothing,
              test_rerun_after_crash_before_commit_writes_each_record_once,
              test_open_rewinds_to_the_offsets_kept_in_the_destination,
              test_close_without_commit_then_reopen_resumes_at_the_committed_offset,
              test_task_stop_is_safe_and_may_be_called_twice):
        suite[f.__name__] = f
    suite["make_sink"], suite["read_back"] = staticmethod(make_sink), staticmethod(read_back)
    return type(f"Test{cls.__name__}Conformance", (), suite)


# ------------------------------------------------------------------ tests every connector gets


def _base_suite(pytest, cls: type[Connector], make: Callable[[Path], Mapping[str, Any]],
                invalid_configs: InvalidConfigs) -> dict[str, Any]:
    """Config validation and connector stop(): the same for sources and sinks."""
    cases = [(dict(changes), list(keys)) for changes, keys in invalid_configs]
    ids = ["+".join(keys) or f"case{i}" for i, (_, keys) in enumerate(cases)] or ["none given"]

    def test_valid_config_passes_validation(self, tmp_path):
        raw = _raw(cls, make(tmp_path))
        problems = _problems(cls, raw)
        if problems:
            _fail(f"the config the test factory made for {cls.__name__} is rejected, so the other checks cannot run: "
                  + "; ".join(problems) + f"\n  config: {_shown(raw)}")

    def test_config_problems_name_every_bad_key(self, tmp_path):
        raw = _raw(cls, make(tmp_path))
        bad = _derived_bad_values(cls.config_def, raw)
        if not bad:
            pytest.skip(f"{cls.__name__}.config_def has no required key, no typed key and no validator to break")
        config = {k: v for k, v in dict(raw, **bad).items() if v is not None}
        what = ", ".join(f"{k} {'removed' if v is None else '= ' + repr(v)}" for k, v in bad.items())
        _check_rejected(cls, config, list(bad), f"a config with {what}")

    @pytest.mark.parametrize("case", cases or [None], ids=ids)
    def test_invalid_config_is_rejected_naming_every_bad_key(self, tmp_path, case):
        if case is None:
            pytest.skip("no invalid_configs given to the conformance kit")
        changes, keys = case
        config = {k: v for k, v in dict(_raw(cls, make(tmp_path)), **changes).items() if v is not None}
        _check_rejected(cls, config, keys, f"a config with {_shown(changes)}")

    def test_connector_stop_is_safe(self, tmp_path):
        raw = _raw(cls, make(tmp_path))
        _stop(cls(), "before start()")
        connector = _started(cls, raw)
        connector.task_configs(1)
        _stop(connector, "after start() and task_configs()")
        _stop(connector, "a second time")

    return {
        "__doc__": f"Conformance of {cls.__module__}.{cls.__qualname__} (airflow_copycat.testing).",
        "connector_class": cls,
        "test_valid_config_passes_validation": test_valid_config_passes_validation,
        "test_config_problems_name_every_bad_key": test_config_problems_name_every_bad_key,
        "test_invalid_config_is_rejected_naming_every_bad_key": test_invalid_config_is_rejected_naming_every_bad_key,
        "test_connector_stop_is_safe": test_connector_stop_is_safe,
    }


# ------------------------------------------------------------------ config helpers


def _raw(cls: type[Connector], config: Mapping[str, Any]) -> dict[str, Any]:
    """The factory's config plus the framework keys a plan always has."""
    if not isinstance(config, Mapping):
        _fail(f"the test factory for {cls.__name__} must return the connector config (a dict), got {config!r}")
    raw = dict(config)
    raw.setdefault("name", f"conformance-{cls.__name__.lower()}")
    raw.setdefault("connector.class", f"{cls.__module__}:{cls.__qualname__}")
    return raw


def _runtime_resolves(cls: type[Connector], raw: Mapping[str, Any]) -> bool:
    """Whether the framework's validation would find ``cls`` from the config's connector.class."""
    from ..runtime import plugins  # no airflow, no pyspark; kept lazy like every runtime import here

    try:
        return plugins.resolve_connector(str(raw["connector.class"])) is cls
    except Exception:
        return False


def _problems(cls: type[Connector], raw: Mapping[str, Any]) -> list[str]:
    """Every problem of ``raw``: the connector's own, and the framework's when it can resolve the class."""
    _, problems = cls.check_config(dict(raw))
    out = [str(p) for p in problems]
    if _runtime_resolves(cls, raw):
        from ..runtime import connector_config

        out += [str(p) for p in connector_config.validate(dict(raw))[2] if str(p) not in out]
    return out


def _check_rejected(cls: type[Connector], config: dict, keys: Sequence[str], what: str) -> None:
    """``config`` is rejected by check_config, parse_config and the framework, each naming every key."""
    try:
        _, problems = cls.check_config(dict(config))
    except Exception as e:
        _fail(f"{cls.__name__}.check_config() crashed on {what} instead of reporting problems: "
              f"{type(e).__name__}: {e} (validate() sees the raw value of a key that failed its own check)")
    named = {p.key for p in problems}
    missing = [k for k in keys if k not in named]
    if missing:
        _fail(f"{cls.__name__} validation of {what} does not name {missing}; it reported "
              f"{[str(p) for p in problems] or 'no problem'}. Every bad key must be reported, all at once")
    vague = [str(p) for p in problems if p.key in keys and not str(p.message or "").strip()]
    if vague:
        _fail(f"{cls.__name__} validation of {what} names a key without saying why: {vague}")
    try:
        cls.parse_config(dict(config))
    except ConfigException as e:
        text = str(e)
        unnamed = [k for k in keys if k not in text]
        if unnamed:
            _fail(f"{cls.__name__}.parse_config() error for {what} does not mention {unnamed}:\n{text}")
    else:
        _fail(f"{cls.__name__}.parse_config() accepted {what}")
    if _runtime_resolves(cls, config):
        from ..runtime import connector_config

        _, _, runtime_problems = connector_config.validate(dict(config))
        missing = [k for k in keys if k not in {p.key for p in runtime_problems}]
        if missing:
            _fail(f"the framework's validation (what plan and `copycat validate` report) of {what} does not name "
                  f"{missing}; it reported {[str(p) for p in runtime_problems]}")


_CANDIDATES = {
    ConfigType.INT: [-1, 0, -(2 ** 31), 2 ** 31, 10 ** 15],
    ConfigType.LONG: [-1, 0, -(2 ** 63), 10 ** 15],
    ConfigType.DOUBLE: [-1.0, 0.0, 1e18],
    ConfigType.STRING: ["", " ", "not a valid value (!)", "[", "-1", "0"],
    ConfigType.CLASS: ["", "not a valid value (!)"],
    ConfigType.PASSWORD: ["", "x"],
    ConfigType.LIST: ["", ",", "not a valid value (!)", "["],
}
_WRONG_TYPE = {ConfigType.INT: "not-a-number", ConfigType.LONG: "not-a-number", ConfigType.DOUBLE: "not-a-number",
               ConfigType.BOOLEAN: "maybe"}


def _derived_bad_values(config_def: ConfigDef, valid: Mapping[str, Any]) -> dict[str, Any]:
    """Up to three keys made bad in different ways (``None`` = removed): a required key the
    config sets, a typed key given a value of the wrong type, a key whose validator rejects a
    value of the right type."""
    bad: dict[str, Any] = {}
    keys = list(config_def.keys.values())
    for key in keys:
        if key.required and valid.get(key.name) is not None:
            bad[key.name] = None
            break
    for types in ((ConfigType.INT, ConfigType.LONG, ConfigType.DOUBLE), (ConfigType.BOOLEAN,)):
        key = next((k for k in keys if k.type in types and k.name not in bad), None)
        if key is not None:
            bad[key.name] = _WRONG_TYPE[key.type]
            break
    for key in keys:
        if key.validator is None or key.name in bad:
            continue
        alone = ConfigDef({key.name: key})
        value = next((c for c in _CANDIDATES.get(key.type, []) if alone.validate({key.name: c})), None)
        if value is not None:
            bad[key.name] = value
            break
    return bad


def _started(cls: type[Connector], raw: Mapping[str, Any]) -> Connector:
    """A connector started as the planner starts it: with the parsed config."""
    values, problems = cls.check_config(dict(raw))
    if problems:
        _fail(f"the config the test factory made for {cls.__name__} is invalid: {[str(p) for p in problems]}")
    connector = cls()
    connector.start(dict(raw, **{k: v for k, v in values.items() if k in cls.config_def.keys}))
    return connector


def _task_configs(connector: Connector, max_tasks: int) -> list[dict]:
    """``task_configs(max_tasks)``, checked for what the framework needs of it."""
    name = f"{type(connector).__name__}.task_configs({max_tasks})"
    configs = connector.task_configs(max_tasks)
    if not isinstance(configs, list) or not all(isinstance(c, Mapping) for c in configs):
        _fail(f"{name} must return a list of dicts, got {configs!r}")
    if len(configs) > max_tasks:
        _fail(f"{name} returned {len(configs)} task configs, more than max_tasks={max_tasks}")
    for i, c in enumerate(configs):
        odd = {k: v for k, v in c.items() if not (isinstance(k, str) and isinstance(v, str))}
        if odd:
            _fail(f"{name}: task config {i} has values that are not strings: "
                  f"{ {k: type(v).__name__ for k, v in odd.items()} }; task configs travel as JSON to the "
                  f"executors and reach the task as strings (Kafka Connect's Map<String, String>)")
    return [dict(c) for c in configs]


def _plan_configs(cls: type[Connector], raw: Mapping[str, Any], max_tasks: int) -> list[dict]:
    connector = _started(cls, raw)
    try:
        return _task_configs(connector, max_tasks)
    finally:
        connector.stop()


def _plan_source(cls: type[SourceConnector], raw: Mapping[str, Any], max_tasks: int) -> list[dict]:
    configs = _plan_configs(cls, raw, max_tasks)
    if not configs:
        _fail(f"{cls.__name__}.task_configs({max_tasks}) returned no task config for a source set up with records")
    return configs


def _plan_sink(configs: list[dict], tps: list[tuple[str, int]]) -> list[tuple[dict, list[tuple[str, int]]]]:
    """Task configs with their topic-partitions, assigned as the planner assigns them."""
    from ..runtime.sink import ASSIGNED_PARTITIONS_KEY  # the planner's key; confluent-kafka, no airflow

    groups = assign([list(tp) for tp in tps], len(configs))
    return [(dict(configs[i], **{ASSIGNED_PARTITIONS_KEY: json.dumps(g)}), [(t, int(p)) for t, p in g])
            for i, g in enumerate(groups)]


def _topics(cls: type[Connector], raw: Mapping[str, Any]) -> list[str]:
    given = raw.get("topics")
    names = [t.strip() for t in (given.split(",") if isinstance(given, str) else given or []) if str(t).strip()]
    if not names:
        _fail(f"the config make_sink returned for {cls.__name__} names no 'topics'; pass topics=[...] to "
              f"sink_connector_tests to say which topics the test records belong to")
    return names


def _max_tasks(spec: str, partitions: int) -> int:
    return partitions + 1 if spec == "partitions+1" else int(spec)


def _declared(configs: list[dict]) -> list:
    return [p for c in configs for p in task_partitions(c)]


def _check_exactly_once(what: str, partitions: Sequence[Any], per_task: Sequence[Sequence[Any]]) -> None:
    """Every partition in exactly one task, and no task with a partition that does not exist."""
    counts = Counter(canonical(p) for ps in per_task for p in ps)
    known = {canonical(p) for p in partitions}
    missing = sorted(known - set(counts))
    twice = sorted(k for k, c in counts.items() if c > 1)
    unknown = sorted(set(counts) - known)
    problems = [f"{label}: {', '.join(keys)}" for label, keys in (
        ("never assigned (not copied)", missing), ("assigned to more than one task (copied twice)", twice),
        ("assigned but not among the partitions", unknown)) if keys]
    if problems:
        _fail(f"{what}: " + "; ".join(problems))


# ------------------------------------------------------------------ driving source tasks


class _MemoryOffsetReader(OffsetStorageReader):
    """Committed offsets from a dict keyed by canonical partition, as the runtime's snapshot reader."""

    def __init__(self, offsets: Mapping[str, Any]):
        self._offsets = dict(offsets)

    def offsets(self, partitions):
        return {canonical(p): self._offsets[canonical(p)] for p in partitions if canonical(p) in self._offsets}


def _task_class(cls: type[Connector]) -> type:
    task_cls = cls().task_class()
    if not isinstance(task_cls, type):
        _fail(f"{cls.__name__}.task_class() must return a Task class, got {task_cls!r}")
    return task_cls


def _task_name(cls: type[Connector]) -> str:
    return _task_class(cls).__name__


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


# ------------------------------------------------------------------ driving sink tasks


class _SinkRun:
    """One sink task of one bounded run, driven as ``runtime/sink.py`` drives it: start at the
    offsets ``open()`` asked for, else at the consumer group's (``group``; sinks without
    destination offsets only), else at 0; ``put`` in offset order; honour rewinds; commit to
    ``group`` what ``pre_commit`` returns."""

    def __init__(self, cls: type[SinkConnector], config: dict, assignment: list[tuple[str, int]], group: dict):
        self.cls, self.config, self.assignment, self.group = cls, config, list(assignment), group
        self.task = _task_class(cls)()
        self.name = type(self.task).__name__
        self.context = SinkTaskContext(config, self.assignment)
        self.task.initialize(self.context)
        self.task.start(dict(config))
        self.reopen(first=True)

    def reopen(self, first: bool = False) -> None:
        self.task.open(list(self.assignment))
        self.rewinds = self._take_rewinds("open()")
        start = dict(self.rewinds)
        if not self.cls.offsets_in_destination:
            for tp in self.assignment:
                if tp not in start and tp in self.group:
                    start[tp] = self.group[tp]
        self.positions = {tp: start.get(tp, 0) for tp in self.assignment}

    def _take_rewinds(self, after: str) -> dict:
        rewinds = self.context.take_rewinds()
        foreign = sorted(tp for tp in rewinds if tp not in self.assignment)
        if foreign:
            _fail(f"{self.name} called context.offset() in {after} for {foreign}, which it was not assigned "
                  f"(assignment: {self.assignment})")
        return rewinds

    def put(self, batch: list[SinkRecord]) -> None:
        self.task.put(list(batch))
        for r in batch:
            tp = (r.topic, r.kafka_partition)
            self.positions[tp] = max(self.positions.get(tp, 0), r.kafka_offset + 1)
        self.positions.update(self._take_rewinds("put()"))

    def pre_commit(self, positions: Mapping, *, final: bool = False) -> dict:
        call = f"{self.name}.pre_commit({dict(positions)}{', final=True' if final else ''})"
        returned = self.task.pre_commit(dict(positions), final=final)
        if returned is None:
            _fail(f"{call} returned None; it must return the offsets that are safe to commit ({{}} for none)")
        returned = {(t, int(p)): int(o) for (t, p), o in dict(returned).items()}
        for tp, off in returned.items():
            if tp not in self.assignment:
                _fail(f"{call} returned an offset for {tp}, which the task was not assigned")
            if off > positions.get(tp, 0):
                _fail(f"{call} returned offset {off} for {tp}, past the position {positions.get(tp, 0)} it was given: "
                      f"committing it would skip records it never got")
        return returned

    def deliver(self, log: Mapping[tuple[str, int], list[SinkRecord]], *, limit: int | None = None,
                chunk: int = 2, commit: bool = True) -> None:
        """Put the records of the assigned partitions from their positions on, ``chunk`` per put,
        round-robin over partitions, each put followed by a pre_commit (committed to the group
        unless ``commit`` is false); stop after ``limit`` records."""
        given = 0
        while limit is None or given < limit:
            moved = False
            for tp in self.assignment:
                take = chunk if limit is None else min(chunk, limit - given)
                batch = log[tp][self.positions[tp]:self.positions[tp] + take]
                if not batch:
                    continue
                self.put(batch)
                given, moved = given + len(batch), True
                returned = self.pre_commit(self.positions)
                if commit:
                    self.group.update(returned)
                if limit is not None and given >= limit:
                    break
            if not moved:
                break

    def finish(self, *, commit: bool = True) -> dict:
        """The end of a bounded run: the final pre_commit, close, stop. Returns what was committed."""
        returned = self.pre_commit(self.positions, final=True)
        if commit:
            self.group.update(returned)
        self.close_and_stop()
        return returned

    def close_and_stop(self) -> None:
        self.task.close(list(self.assignment))
        _stop(self.task, "after close()")


def _crash_and_rerun(cls: type[SinkConnector], raw: dict, log: dict, crash: str) -> None:
    """A run that dies before committing to the consumer group (no close, no stop), then a
    rerun by a new task that reads from wherever the framework would start it."""
    config, assignment = _plan_sink(_plan_configs(cls, raw, 1), list(log))[0]
    group: dict = {}
    crashed = _SinkRun(cls, config, assignment, group)
    total = sum(len(log[tp]) for tp in assignment)
    if crash == "mid_run":
        crashed.deliver(log, limit=total // 2 + 1, commit=False)
    else:
        crashed.deliver(log, commit=False)
        crashed.pre_commit(crashed.positions, final=True)
    rerun = _SinkRun(cls, config, assignment, group)
    rerun.deliver(log)
    rerun.finish()


def _check_held(cls: type[SinkConnector], held: Counter, expected: Counter, when: str, *, once: bool) -> None:
    missing = {v: c - held.get(v, 0) for v, c in expected.items() if held.get(v, 0) < c}
    twice = {v: c for v, c in held.items() if v in expected and c > expected[v]}
    strange = {v: c for v, c in held.items() if v not in expected}
    problems = []
    if missing:
        problems.append(f"{sum(missing.values())} record(s) missing: {_preview(missing)}")
    if twice and once:
        problems.append(f"{len(twice)} record(s) held more than once: {_preview(twice)}")
    if strange:
        problems.append(f"{sum(strange.values())} value(s) that were never given (is read_back() returning the "
                        f"record values, and was the destination empty?): {_preview(strange)}")
    if problems:
        _fail(f"{when}, read_back() of the {cls.__name__} destination holds {sum(held.values())} record(s) for "
              f"{sum(expected.values())} given: " + "; ".join(problems))


def _default_value(topic: str, partition: int, offset: int) -> dict:
    return {"topic": topic, "partition": partition, "offset": offset, "text": f"record {offset} of {topic}-{partition}"}


# ------------------------------------------------------------------ small helpers


def _start_for_stop(pytest, cls: type[Connector], task: Any, config: dict, moment: str) -> bool:
    """Start ``task`` as the stop() check at ``moment`` needs; True when it started."""
    if moment == "before_start":
        return False
    if moment == "after_failed_start":
        bad = _derived_bad_values(cls.config_def, config)
        if not bad:
            pytest.skip(f"{cls.__name__}.config_def gives no way to break a task config")
        broken = {k: v for k, v in dict(config, **{k: None if v is None else str(v) for k, v in bad.items()}).items()
                  if v is not None}
        try:
            task.start(broken)
        except Exception:
            return False  # what the check is about: stop() after a start() that failed
        return True
    task.start(dict(config))
    return True


def _stop(obj: Any, when: str) -> None:
    try:
        obj.stop()
    except Exception as e:
        _fail(f"{type(obj).__name__}.stop() raised {type(e).__name__}: {e} when called {when}; stop() must be safe "
              f"before start(), after a failure and when called twice (the framework calls it in a finally block)")


def _json_default(value: Any) -> Any:
    if isinstance(value, Struct):
        return value.to_dict()
    if isinstance(value, Password):
        return "[hidden]"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "b64:" + base64.b64encode(bytes(value)).decode("ascii")
    return repr(value)


def _canon(value: Any) -> str:
    """A comparable, printable form of a value (dicts by sorted keys, Structs as dicts)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=_json_default)


class _Ident(str):
    """A record as comparable text: canonical JSON of ``[topic, key, value]``."""


def _ident(record: SourceRecord) -> _Ident:
    return _Ident(_canon([record.topic, record.key, record.value]))


def _shown_ident(ident: _Ident) -> str:
    topic, key, value = json.loads(ident)
    return _canon(value) + ("" if key is None else f" (key {_canon(key)})")


def _preview(items: Any, limit: int = 5) -> str:
    """``[a, b, ...] (n in all)``; a mapping of value -> count shows counts above 1. Records
    (see :func:`_ident`) show as their value, and their key when they have one."""
    if isinstance(items, Mapping):
        items = [k if c == 1 else f"{k} (x{c})" for k, c in items.items()]
    items = [_shown_ident(i) if isinstance(i, _Ident) else str(i) for i in items]
    return f"[{', '.join(items[:limit])}{', ...' if len(items) > limit else ''}] ({len(items)} in all)"


def _shown(config: Mapping[str, Any]) -> str:
    return _canon({k: ("(removed)" if v is None else v) for k, v in config.items()})


def _fail(message: str) -> None:
    import pytest

    pytest.fail(message, pytrace=False)
