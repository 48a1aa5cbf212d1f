"""The sink connector suite of the conformance kit (see the package docstring)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ...connect.connector import Connector, SinkConnector
from ...connect.records import SinkRecord
from ...connect.task import SinkTaskContext
from .common import (
    InvalidConfigs, _base_suite, _canon, _check_exactly_once, _fail, _max_tasks, _plan_configs, _preview,
    _raw, _start_for_stop, _started, _stop, _task_class, _task_configs, _task_name,
)

_BASE_TS = 1_700_000_000_000


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


def _plan_sink(configs: list[dict], tps: list[tuple[str, int]]) -> list[tuple[dict, list[tuple[str, int]]]]:
    """Task configs with their topic-partitions, assigned by the planner's own
    :func:`~airflow_copycat.runtime.plan.assign_sink_tasks`."""
    from ...runtime.plan import assign_sink_tasks  # confluent-kafka, no airflow, no pyspark
    from ...runtime.sink import assigned_partitions

    return [(cfg, [(t, int(p)) for t, p in assigned_partitions(cfg)]) for cfg in assign_sink_tasks(configs, tps)]


def _topics(cls: type[Connector], raw: Mapping[str, Any]) -> list[str]:
    given = raw.get("topics")
    names = [t.strip() for t in (given.split(",") if isinstance(given, str) else given or []) if str(t).strip()]
    if not names:
        _fail(f"the config make_sink returned for {cls.__name__} names no 'topics'; pass topics=[...] to "
              f"sink_connector_tests to say which topics the test records belong to")
    return names


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
