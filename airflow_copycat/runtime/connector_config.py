"""Connector configs: loading them and the framework's own keys.

A connector config is a flat dict, as in Kafka Connect. It may come as
Kafka Connect's connector JSON (``{"name": ..., "config": {...}}``), a plain
JSON/YAML mapping, or a ``.properties`` file as ``connect-standalone`` takes.

:data:`FRAMEWORK_CONFIG` holds the keys every connector has (Kafka Connect's
``ConnectorConfig`` plus ``copycat.*``); :func:`validate` checks those, the
connector's own :attr:`config_def`, its cross-key ``validate()`` and the
converters, and reports every problem at once.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

from ..connect.config import ConfigDef, ConfigProblem, ConfigType, in_range, non_empty, one_of
from ..connect.connector import WINDOW_END_KEY, WINDOW_START_KEY, window_bounds
from ..connect.errors import ConfigException, ConnectException
from ..connect.secrets import HIDDEN, Scrubber, has_url_password, hide_url_passwords, is_secret_key
from . import plugins
from .transforms import check_transforms
from .worker import load_properties

def _iso_timestamp(key: str, value: Any) -> str | None:
    """Per-key check of a window bound (both bounds together are checked by :func:`validate`)."""
    if value in (None, ""):
        return None
    try:
        window_bounds({WINDOW_START_KEY: value, WINDOW_END_KEY: "9999-12-31T23:59:59+00:00"})
    except ValueError:
        return "is not an ISO-8601 timestamp (e.g. 2026-11-20T10:00:00+00:00)"
    return None


def _window_problems(raw: Mapping[str, Any], reported: set[str]) -> list[ConfigProblem]:
    """A window needs both bounds, the end after the start (see :func:`window_bounds`)."""
    if reported & {WINDOW_START_KEY, WINDOW_END_KEY}:
        return []
    try:
        window_bounds(dict(raw))
    except ValueError as e:
        key = WINDOW_END_KEY if str(e).startswith(WINDOW_END_KEY) else WINDOW_START_KEY
        return [ConfigProblem(key, raw.get(key) or None, str(e).removeprefix(key).lstrip(" =:"))]
    return []


FRAMEWORK_CONFIG = (
    ConfigDef()
    .define("name", ConfigType.STRING, validator=non_empty, importance="high",
            doc="Unique connector name: keys its offsets and names its consumer group (connect-<name>).")
    .define("connector.class", ConfigType.CLASS, validator=non_empty, importance="high",
            doc="Kafka Connect class name, short alias, module:Class, or a plugin name.")
    .define("tasks.max", ConfigType.INT, 1, in_range(1), importance="high",
            doc="Most tasks (Spark tasks) the connector is split into.")
    .define("key.converter", ConfigType.CLASS, None, doc="Overrides the worker's key.converter.")
    .define("value.converter", ConfigType.CLASS, None, doc="Overrides the worker's value.converter.")
    .define("copycat.groups.max", ConfigType.INT, 1, in_range(1),
            doc="Most task groups: each group is one Spark application and one mapped Airflow task.")
    .define("copycat.run.max.records", ConfigType.LONG, -1,
            doc="Per-task record budget of one run (-1: none). The run commits and ends when reached.")
    .define("copycat.run.max.ms", ConfigType.LONG, -1,
            doc="Per-task time budget of one run in ms (-1: none). The run commits and ends when reached.")
    .define("copycat.eof.timeout.ms", ConfigType.LONG, 120000, in_range(1000),
            doc="Sinks: a run fails (to be retried) when it gets neither a record nor the end of a "
                "partition for this long; a long run that keeps reading never times out.")
    .define("copycat.put.retry.timeout.ms", ConfigType.LONG, 300000, in_range(0),
            doc="Sinks: how long put() failing with a retriable error (destination briefly unavailable) "
                "is retried with back-off before the task fails. Kafka Connect retries forever; a bounded run cannot.")
    .define("errors.tolerance", ConfigType.STRING, "none", one_of("none", "all"),
            doc="none: a bad record fails the task, naming where it is; all: it is logged, "
                "sent to the dead-letter queue if one is set, and skipped.")
    .define("errors.retry.timeout", ConfigType.LONG, 0, in_range(-1),
            doc="How long (ms) a retriable failure is retried with back-off before the task fails, naming the "
                "record or partition: conversions, transforms, a source's poll() and reaching Kafka at start "
                "(0: no retry, -1: forever).")
    .define("errors.retry.delay.max.ms", ConfigType.LONG, 60000, in_range(1),
            doc="Longest wait between two retries (the first waits 300 ms, then doubling).")
    .define("errors.log.enable", ConfigType.BOOLEAN, False, doc="Log every tolerated error.")
    .define("errors.log.include.messages", ConfigType.BOOLEAN, False,
            doc="Include the record's key and value in error logs.")
    .define("errors.deadletterqueue.topic.name", ConfigType.STRING, "",
            doc="Topic that receives records that failed with errors.tolerance=all (both sources and sinks).")
    .define("errors.deadletterqueue.topic.replication.factor", ConfigType.INT, -1,
            doc="Replication factor of the dead-letter topic when it is created.")
    .define("errors.deadletterqueue.context.headers.enable", ConfigType.BOOLEAN, False,
            doc="Add __connect.errors.* headers saying where and why a record failed.")
    .define("exactly.once.support", ConfigType.STRING, "requested", one_of("requested", "required"),
            doc="Sources: required makes the run transactional (records and offsets committed together) and fails "
                "the plan if the connector cannot promise exactly-once; requested runs transactions only when the "
                "worker has exactly.once.source.support=enabled.")
    .define("transaction.boundary", ConfigType.STRING, "poll", one_of("poll", "interval"),
            doc="Sources, exactly-once: commit a transaction after every poll() batch (poll) or every "
                "transaction.boundary.interval.ms (interval).")
    .define("transaction.boundary.interval.ms", ConfigType.LONG, None, in_range(1),
            doc="Sources, exactly-once with transaction.boundary=interval: ms between commits "
                "(default: the worker's offset.flush.interval.ms).")
    .define("topic.creation.default.partitions", ConfigType.INT, 1, in_range(1),
            doc="Sources: partitions of a destination topic the framework creates when it is missing.")
    .define("topic.creation.default.replication.factor", ConfigType.INT, -1,
            doc="Sources: replication factor of created topics (-1: the broker's default).")
    .define(WINDOW_START_KEY, ConfigType.STRING, None, _iso_timestamp,
            doc="Sources: start (inclusive) of a windowed run, ISO-8601 (UTC when it has no offset). Set by the "
                "plan operator from a backfill run's data interval; the run copies only the data whose event time "
                "lies in the window and keeps its own offsets, never moving the live ones.")
    .define(WINDOW_END_KEY, ConfigType.STRING, None, _iso_timestamp,
            doc="Sources: end (exclusive) of a windowed run, ISO-8601; must be after copycat.window.start.")
)


def load_connector_config(source: str | Mapping[str, Any]) -> dict[str, Any]:
    """A flat connector config from a dict, a JSON/YAML/``.properties`` file path, or JSON text.

    Kafka Connect's REST shape ``{"name": N, "config": {...}}`` is unwrapped
    (``name`` copied into the config).
    """
    if isinstance(source, Mapping):
        doc: Any = dict(source)
    else:
        text = str(source)
        if text.lstrip().startswith("{"):
            doc = json.loads(text)
        elif not os.path.exists(text):
            raise ConnectException(f"connector config file {text!r} does not exist")
        elif text.endswith(".properties"):
            doc = load_properties(text)
        else:
            with open(text, encoding="utf-8") as f:
                raw = f.read()
            if text.endswith(".json"):
                doc = json.loads(raw)
            else:
                import yaml

                doc = yaml.safe_load(raw)
            if not isinstance(doc, Mapping):
                raise ConnectException(f"{text}: a connector config must be a mapping, got {type(doc).__name__}")
    if isinstance(doc.get("config"), Mapping):
        inner = dict(doc["config"])
        if doc.get("name"):
            inner.setdefault("name", doc["name"])
        doc = inner
    return {str(k): v for k, v in doc.items()}


def validate(raw: Mapping[str, Any]) -> tuple[dict[str, Any], type, list[ConfigProblem]]:
    """Parse ``raw`` fully. Returns (parsed config, connector class or None, every problem).

    The parsed config holds every raw key, typed where the framework or the
    connector defines it.
    """
    values: dict[str, Any] = dict(raw)
    fw_values, problems = FRAMEWORK_CONFIG._parse(raw)
    problems += _window_problems(raw, {p.key for p in problems})
    values.update({k: v for k, v in fw_values.items() if k in FRAMEWORK_CONFIG.keys})
    cls = None
    if raw.get("connector.class"):
        try:
            cls = plugins.resolve_connector(str(raw["connector.class"]))
        except ConnectException as e:
            problems.append(ConfigProblem("connector.class", raw.get("connector.class"), str(e)))
    if cls is not None:
        own, own_problems = cls.check_config(raw)
        problems += own_problems
        values.update({k: v for k, v in own.items() if k in cls.config_def.keys})
    for side in ("key.converter", "value.converter"):
        if raw.get(side):
            try:
                plugins.make_converter(raw, {}, side == "key.converter")
            except ConnectException as e:
                problems.append(ConfigProblem(side, raw[side], str(e)))
    problems += check_transforms(raw)
    return values, cls, hide_secrets(problems, raw, secret_keys(raw, cls))


def hide_secrets(problems: list[ConfigProblem], raw: Mapping[str, Any], secrets: set[str]) -> list[ConfigProblem]:
    """Problems with secret values replaced by ``[hidden]``, in the value and in the message
    (validators may quote the value they reject)."""
    hide = Scrubber(raw[k] for k in secrets)
    out = []
    for p in problems:
        value = HIDDEN if p.key in secrets and p.value is not None else p.value
        out.append(ConfigProblem(p.key, value, hide(p.message)))
    return out


def parse(raw: Mapping[str, Any]) -> tuple[dict[str, Any], type]:
    """Like :func:`validate`, raising one :class:`ConfigException` with every problem."""
    values, cls, problems = validate(raw)
    if problems:
        raise ConfigException(problems, context=f"connector {raw.get('name')!r}" if raw.get("name") else None)
    return values, cls


def secret_keys(raw: Mapping[str, Any], cls: type | None) -> set[str]:
    """Keys whose values are secrets: the connector's PASSWORD keys, any key named like one,
    and keys holding a URL with a password."""
    keys = {k for k in raw if is_secret_key(k) or has_url_password(raw[k])}
    if cls is not None:
        keys |= {k for k in cls.config_def.secret_keys() if k in raw}
    return keys


def redact(config: Mapping[str, Any], secrets: set[str]) -> dict[str, Any]:
    """A copy of ``config`` with the values of ``secrets`` replaced by ``[hidden]``, and the
    password of any ``scheme://user:password@host`` URL too (those keys are then in
    ``secrets`` for :func:`restore_secrets`)."""
    out = {}
    for k, v in config.items():
        if has_url_password(v) and not is_secret_key(k):
            secrets.add(k)
            v = hide_url_passwords(v)
        elif k in secrets and v not in (None, ""):
            v = HIDDEN
        out[k] = v
    return out


def restore_secrets(config: Mapping[str, Any], raw: Mapping[str, Any]) -> dict[str, Any]:
    """Put secret values from ``raw`` back where ``config`` has ``[hidden]`` (whole values or URL passwords)."""
    return {k: (raw.get(k, v) if isinstance(v, str) and HIDDEN in v else v) for k, v in config.items()}
