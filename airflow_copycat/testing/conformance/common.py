"""The checks and helpers both conformance suites share: config validation, planning through the
runtime's planner, stopping, and the messages the kit fails with."""

from __future__ import annotations

import base64
import json
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ...connect.assignment import canonical
from ...connect.config import ConfigDef, ConfigType, Password
from ...connect.connector import Connector, task_partitions
from ...connect.data import Struct
from ...connect.errors import ConfigException
from ...connect.records import SourceRecord


InvalidConfigs = Sequence[tuple[Mapping[str, Any], Sequence[str]]]
"""``[(changes, expected_keys), ...]``: each ``changes`` is applied to a valid config (a value
of ``None`` removes the key); validation must name every key of ``expected_keys``."""








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
    from ...runtime import plugins  # no airflow, no pyspark; kept lazy like every runtime import here

    try:
        return plugins.resolve_connector(str(raw["connector.class"])) is cls
    except Exception:
        return False


def _problems(cls: type[Connector], raw: Mapping[str, Any]) -> list[str]:
    """Every problem of ``raw``: the connector's own, and the framework's when it can resolve the class."""
    _, problems = cls.check_config(dict(raw))
    out = [str(p) for p in problems]
    if _runtime_resolves(cls, raw):
        from ...runtime import connector_config

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
        from ...runtime import connector_config

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
    """A connector started by the planner's own :func:`~airflow_copycat.runtime.plan.start_connector`, with
    the config parsed as a plan parses it (the framework's keys too) when the framework finds ``cls`` from
    its ``connector.class``, else with the connector's own parse of it."""
    from ...runtime import connector_config
    from ...runtime.plan import start_connector  # confluent-kafka, no airflow, no pyspark; lazy like the rest

    if _runtime_resolves(cls, raw):
        values, _, problems = connector_config.validate(dict(raw))
    else:
        parsed, problems = cls.check_config(dict(raw))
        values = dict(raw, **{k: v for k, v in parsed.items() if k in cls.config_def.keys})
    if problems:
        _fail(f"the config the test factory made for {cls.__name__} is invalid: {[str(p) for p in problems]}")
    return start_connector(cls, values)


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


def _task_class(cls: type[Connector]) -> type:
    task_cls = cls().task_class()
    if not isinstance(task_cls, type):
        _fail(f"{cls.__name__}.task_class() must return a Task class, got {task_cls!r}")
    return task_cls


def _task_name(cls: type[Connector]) -> str:
    return _task_class(cls).__name__


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
