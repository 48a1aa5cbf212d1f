"""Plans: connector config -> task configs -> task groups.

A plan is made where Airflow (or ``copycat plan``) runs, never on executors::

    {"format": "copycat.plan/1", "id": "3f9c0a1b2d4e", "connector": "logs", "kind": "source",
     "connector_class": "airflow_copycat.connectors.filestream:FileStreamSourceConnector",
     "created_at": "2026-11-22T01:00:00+00:00",
     "window": null | {"start": "2026-11-20T10:00:00+00:00", "end": "2026-11-20T11:00:00+00:00",
                       "offsets_namespace": "logs@window/2026-11-20T10:00:00Z/2026-11-20T11:00:00Z/3f9c0a1b2d4e"},
     "config": {... connector config, secrets "[hidden]" ...},
     "partitions": [{"filename": "/logs/a.log"}, ...]      # or [["topic", 0], ...] for sinks
     "offsets": [{"partition": ..., "offset": ...}, ...],   # committed at plan time (a window's: its own)
     "groups": [{"group": 0, "connector": "logs", "kind": "source",
                 "tasks": [{"task": 0, "partitions": [...], "config": {...}}],
                 "spec": {"format": "copycat.spec/1", "name": "logs", "kind": "source",
                          "connector_class": "...", "secret_keys": ["api.token"],
                          "window": null | {... as above ...}, "settings": {... typed framework keys ...}}}]}

The config is validated once, here: what the plan step learnt from it -- class, secret key
names, window, typed framework settings -- is each group's ``spec``
(:class:`~.spec.ConnectorSpec`), which the run operator and the run step read instead of
validating or parsing the config again. A group without a ``spec`` (a plan of an earlier
version) still runs: the run step then derives the same from its task configs.

Task configs in a plan never carry secret values (they read ``[hidden]``), nor does the
spec (it names the keys); the runner puts the values back from the connector config it
was given (:func:`~.connector_config.restore_secrets`). Each group is run by one Spark
application; each task of a group by one Spark task.

Every plan has an ``id`` (given, or made up), carried in each task config as
``copycat.plan.id``. A **windowed** plan -- a source connector config holding
``copycat.window.start`` / ``copycat.window.end`` -- is checked with the connector's
``window_support()`` (a ConfigException naming ``copycat.window.start`` when it
cannot), records its window, and reads its ``offsets`` from the window's own
namespace (:mod:`.windows`): the live offsets are neither read nor touched, and it
fences no live task.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any, Mapping

from confluent_kafka import Consumer, TopicPartition

from ..connect.assignment import assign
from ..connect.connector import (TASK_PARTITIONS_KEY, WINDOW_END_KEY, WINDOW_START_KEY, SinkConnector, task_partitions,
                                 window_bounds)
from ..connect.config import ConfigProblem
from ..connect.errors import ConfigException, ConnectException
from . import connector_config, plugins, transactions, windows
from .kafka import admin_client, matching_partitions, sink_topics
from .offsets import OffsetStore, offset_store
from .sink import ASSIGNED_PARTITIONS_KEY, assigned_partitions, consumer_group
from .spec import SPEC_KEY, ConnectorSpec, Window
from .worker import WorkerConfig

log = logging.getLogger("airflow_copycat.plan")

PLAN_FORMAT = "copycat.plan/1"


_NOT_SETTINGS = {"name", "connector.class", "tasks.max", "copycat.groups.max", "key.converter", "value.converter",
                 WINDOW_START_KEY, WINDOW_END_KEY}
"""Framework keys the spec's settings do not hold (converters are built from each task config where it runs)."""


def _overridden_settings(values: Mapping[str, Any], task_cfgs: list[Mapping[str, Any]]) -> list[str]:
    """The framework keys some task config sets to another value than the connector config: Kafka Connect
    reads them from the connector config, this runtime read them from each task config before the spec
    existed; a connector whose tasks change one keeps that (the spec then holds no settings)."""
    keys = sorted(set(connector_config.FRAMEWORK_CONFIG.keys) - _NOT_SETTINGS)
    return sorted({k for cfg in task_cfgs for k in keys if k in cfg and not _same(cfg[k], values.get(k))})


def _same(given: Any, parsed: Any) -> bool:
    """A task config's raw value says what the parsed one does (``"false"``/False, ``""``/None, ``"3"``/3)."""
    if given in (None, "") or parsed in (None, ""):
        return given in (None, "") and parsed in (None, "")
    return given == parsed or str(given).strip().lower() == str(parsed).strip().lower()


def make_plan(
    raw_config: Mapping[str, Any],
    worker: WorkerConfig,
    *,
    max_tasks: int | None = None,
    max_groups: int | None = None,
    previous: Mapping[str, Any] | None = None,
    store: OffsetStore | None = None,
    plan_id: str | None = None,
    validated: tuple[dict[str, Any], type] | None = None,
) -> dict[str, Any]:
    """Validate ``raw_config`` (one :class:`ConfigException` listing every problem), then
    plan it. ``max_tasks`` / ``max_groups`` override ``tasks.max`` / ``copycat.groups.max``.
    ``previous``, a plan made earlier, keeps partitions on the task they had (sticky).
    ``plan_id`` names the plan (default: a new one); a window's offsets are kept per plan id.
    A config with ``copycat.window.start`` / ``copycat.window.end`` makes a windowed plan.
    ``validated``: the ``(values, class)`` :func:`.connector_config.validate` gave for this same config
    with no problem (the ``copycat`` command checks every config before it plans any): it is not
    validated again; ``None`` (Airflow): it is validated here."""
    raw = connector_config.load_connector_config(raw_config)
    if validated is None:
        values, cls, problems = connector_config.validate(raw)
        if problems:  # with what the Kafka clients and the worker's converters reject: every problem at once
            if cls is not None:
                problems += client_problems(raw, cls, worker)
            raise ConfigException(problems, context=f"connector {raw.get('name')!r}" if raw.get("name") else None)
    else:
        values, cls = validated
    name = values["name"]
    tasks_max = int(values["tasks.max"] if max_tasks is None else max_tasks)
    groups_max = int(values["copycat.groups.max"] if max_groups is None else max_groups)
    problems = [ConfigProblem(param, n, "must be at least 1")
                for param, n in (("max_tasks", tasks_max), ("max_groups", groups_max)) if n < 1]
    secrets = connector_config.secret_keys(raw, cls)
    plan_id = str(plan_id or windows.new_plan_id())
    bounds = window_bounds(values)  # the window, read once here: every later step reads the spec's
    window = None if bounds is None else Window(bounds[0], bounds[1], windows.namespace(name, bounds, plan_id))
    if window and issubclass(cls, SinkConnector):
        problems.append(ConfigProblem(WINDOW_START_KEY, values.get(WINDOW_START_KEY),
                                      "sink connectors do not run windows (backfills): a sink copies what its "
                                      "topics hold past its committed offsets; run it without a window"))
    problems += client_problems(values, cls, worker)
    if problems:
        raise ConfigException(problems, context=f"connector {name!r}")
    connector = start_connector(cls, values, worker)
    try:
        if not issubclass(cls, SinkConnector):
            problems = transactions.check(connector, values, worker)
            if window:
                problems += _window_problems(connector, values)
            if problems:
                raise ConfigException(problems, context=f"connector {name!r}")
        if issubclass(cls, SinkConnector):
            partitions, task_cfgs, offsets = _plan_sink(connector, values, worker, tasks_max, previous)
        else:
            partitions, task_cfgs, offsets = _plan_source(connector, dict(values, **{windows.PLAN_ID_KEY: plan_id}),
                                                          worker, tasks_max, previous, store,
                                                          window.offsets_namespace if window else name)
    finally:
        connector.stop()
    overridden = _overridden_settings(values, task_cfgs)
    if overridden:
        log.warning("connector %s: its task configs set %s other than the connector config: each task reads "
                    "its own framework settings", name, ", ".join(overridden))
    # every task config carries the plan id and, in a window, the window (whatever task_configs() kept)
    extra = {windows.PLAN_ID_KEY: plan_id, **windows.bound_keys(bounds)}
    task_cfgs = [dict(cfg, **extra) for cfg in task_cfgs]
    tasks = [
        {
            "task": i,
            "partitions": task_partitions(cfg) if TASK_PARTITIONS_KEY in cfg else [list(tp) for tp in assigned_partitions(cfg)],
            "config": connector_config.redact(cfg, secrets),
        }
        for i, cfg in enumerate(task_cfgs)
    ]
    redacted = connector_config.redact({k: raw[k] for k in sorted(raw)}, secrets)  # may add URL-password keys
    spec = ConnectorSpec.of(kind=plugins.connector_kind(cls), connector_class=plugins.class_path(cls),
                            secret_keys=secrets, window=window, values=values,
                            per_task_settings=bool(overridden)).to_json()
    n_groups = min(groups_max, len(tasks))
    groups = [
        {"group": g, "connector": name, "kind": plugins.connector_kind(cls), "tasks": tasks[g::n_groups],
         SPEC_KEY: spec}
        for g in range(n_groups)
    ]
    return {
        "format": PLAN_FORMAT,
        "id": plan_id,
        "connector": name,
        "kind": plugins.connector_kind(cls),
        "connector_class": plugins.class_path(cls),
        "created_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "window": window.to_json() if window else None,
        "bootstrap_servers": worker.bootstrap_servers,
        "config": redacted,
        "partitions": partitions,
        "offsets": offsets,
        "groups": groups,
    }


def start_connector(cls: type, values: Mapping[str, Any], worker: WorkerConfig | None = None):
    """A new ``cls`` started with ``values`` (the config as :func:`.connector_config.parse` gave it), as
    every plan starts its connector; a connector that ``reads_kafka`` gets ``worker``'s client config
    first (``None``: none, as in the conformance kit, which needs no Kafka). The caller stops it."""
    connector = cls()
    if getattr(cls, "reads_kafka", False) and worker is not None:
        connector.kafka_client_config = worker.client_config()
    connector.start(dict(values))
    return connector


def assign_sink_tasks(base_cfgs: list[dict], tps, previous_assignment: list[list[Any]] | None = None) -> list[dict]:
    """The sink task configs of a plan: ``base_cfgs`` (what ``task_configs()`` returned) each with the
    topic-partitions ``tps`` assigned to it (sticky to ``previous_assignment`` where given), under
    :data:`~.sink.ASSIGNED_PARTITIONS_KEY`."""
    groups = assign([list(tp) for tp in tps], len(base_cfgs), previous_assignment)
    return [dict(base_cfgs[i], **{ASSIGNED_PARTITIONS_KEY: json.dumps(g)}) for i, g in enumerate(groups)]


def client_problems(config: Mapping[str, Any], cls: type, worker: WorkerConfig) -> list[ConfigProblem]:
    """What would fail at plan time rather than inside Spark: the worker's converters that cannot be
    configured (a converter the connector config sets was built once already, by
    :func:`.connector_config.validate`) and Kafka client settings librdkafka rejects -- each
    ``producer.override.*`` (a sink: ``consumer.override.*``) key it rejects on its own named with its
    value, else the worker's settings as a whole. Building a client checks its settings without
    waiting for a connection. ``config``: the connector's values, or its raw config when it did not
    validate. Secret values and their quotes in messages read ``[hidden]``."""
    sink = issubclass(cls, SinkConnector)
    problems: list[ConfigProblem] = []
    for is_key in (True, False):
        side = "key.converter" if is_key else "value.converter"
        if config.get(side):
            continue
        try:
            plugins.make_converter(config, worker.props, is_key)
        except Exception as e:
            problems.append(ConfigProblem(side, worker.props.get(side), f"cannot be configured: {e}"))
    prefix = "consumer.override." if sink else "producer.override."
    overrides = {k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix)}
    error = _client_error(worker, sink, overrides)
    if error is not None:
        rejected = {k: e for k, e in ((k, _client_error(worker, sink, {k: v})) for k, v in overrides.items()) if e}
        problems += [ConfigProblem(prefix + k, overrides[k], f"rejected by the Kafka client: {e}")
                     for k, e in rejected.items()]
        if not rejected:
            problems.append(ConfigProblem(prefix + "* / worker " + prefix.split(".")[0] + ".*", None,
                                          f"rejected by the Kafka client: {error}"))
    return connector_config.hide_secrets(problems, config, connector_config.secret_keys(config, cls))


def _client_error(worker: WorkerConfig, sink: bool, overrides: Mapping[str, Any]) -> str | None:
    """Why librdkafka refuses to build the connector's client with ``overrides``; ``None``: it builds."""
    from confluent_kafka import KafkaException, Producer

    try:
        if sink:
            Consumer(worker.consumer_config("copycat-config-check", dict(overrides))).close()
        else:
            Producer(worker.producer_config(dict(overrides))).flush(0)
    except (KafkaException, ValueError, TypeError) as e:
        return str(e)
    return None


def _window_problems(connector, values: Mapping[str, Any]) -> list[ConfigProblem]:
    """Plan-time problems of running ``connector`` (started with ``values``) over a window."""
    reason = connector.window_support(dict(values))
    if reason is None:
        return []
    return [ConfigProblem(WINDOW_START_KEY, values.get(WINDOW_START_KEY),
                          f"this connector cannot run a window (a backfill run): {reason}")]


def _previous_assignment(previous: Mapping[str, Any] | None) -> list[list[Any]] | None:
    if not previous:
        return None
    tasks = sorted((t for g in previous.get("groups", []) for t in g["tasks"]), key=lambda t: t["task"])
    return [t["partitions"] for t in tasks]


def _plan_source(connector, values, worker, tasks_max, previous, store, offsets_name):
    """Partitions, task configs and committed offsets of a source; ``offsets_name``: the live offsets'
    name, or the window's namespace (the spec's :attr:`~.spec.ConnectorSpec.offsets_name`)."""
    connector.previous_assignment = _previous_assignment(previous)
    partitions = connector.partitions() or []
    task_cfgs = [dict(c) for c in connector.task_configs(tasks_max)][:tasks_max]
    # only a live plan after a live plan fences: a window's task ids are not the live ones
    live = offsets_name == values["name"]
    before = len(connector.previous_assignment or []) if live and not (previous or {}).get("window") else 0
    if before > len(task_cfgs) and transactions.exactly_once(values, worker):
        prefix = "producer.override."
        transactions.fence(worker.producer_config({k[len(prefix):]: v for k, v in values.items()
                                                   if k.startswith(prefix)}),
                           worker, values["name"], range(len(task_cfgs), before))
    committed = (store or offset_store(worker)).read(offsets_name)
    offsets = [{"partition": e["partition"], "offset": e["offset"]} for _, e in sorted(committed.items())]
    return partitions, task_cfgs, offsets


def _plan_sink(connector, values, worker, tasks_max, previous):
    topics, regex = sink_topics(values)
    admin = admin_client(worker.admin_config())
    tps = matching_partitions(admin, topics=topics, regex=regex)
    missing = sorted(set(topics) - {t for t, _ in tps})
    if missing:
        raise ConnectException(f"connector {values['name']}: topic(s) {missing} do not exist")
    base_cfgs = [dict(c) for c in connector.task_configs(tasks_max)][:tasks_max]
    task_cfgs = assign_sink_tasks(base_cfgs, tps, _previous_assignment(previous))
    offsets = []
    if tps:
        consumer = Consumer(worker.consumer_config(consumer_group(values["name"])))
        try:
            for tp in consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=30):
                offsets.append({"partition": [tp.topic, tp.partition], "offset": tp.offset if tp.offset >= 0 else None})
        finally:
            consumer.close()
    return [list(tp) for tp in tps], task_cfgs, offsets


def validate_only(raw_config: Mapping[str, Any]) -> list[str]:
    """Every problem of a connector config as text lines; ``[]`` when valid. Touches no external system."""
    raw = connector_config.load_connector_config(raw_config)
    _, _, problems = connector_config.validate(raw)
    return [str(p) for p in problems]

