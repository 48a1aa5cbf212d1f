"""What every ``copycat`` subcommand shares: user errors, output that never shows a secret
(:class:`_Scrubber`), loading worker and connector configs, checking them, and reaching Kafka."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from ..connect.errors import ConnectException
from ..connect.secrets import HIDDEN, Scrubber, is_secret_key
from ..runtime import connector_config
from ..runtime.worker import WorkerConfig, load_properties


PROG = "copycat"
DEFAULT_MASTER = "local[*]"
MASTER_ENV = "COPYCAT_SPARK_MASTER"
REMOTE_ENV = "SPARK_REMOTE"  # as pyspark reads it (spark_apps.connect.REMOTE_ENV; not imported: it imports pyspark)
DEFAULT_KAFKA_TIMEOUT_S = 15.0


class UserError(Exception):
    """A mistake the user can fix; printed as one line (no traceback unless --verbose)."""


# ---------------------------------------------------------------------------------------------
# Output: everything printed goes through the scrubber, which hides every secret value seen
# (connector secret keys, worker secret keys) as the package's one Scrubber does.


class _Scrubber(Scrubber):
    def add_config(self, raw: dict, cls: type | None) -> None:
        for key in connector_config.secret_keys(raw, cls):
            self.add(getattr(raw[key], "value", raw[key]))

    def add_worker(self, worker: WorkerConfig) -> None:
        for key, value in worker.props.items():
            if is_secret_key(key):
                self.add(str(value))



_scrub = _Scrubber()


def _out(text: str = "") -> None:
    sys.stdout.write(_scrub(text) + "\n")
    sys.stdout.flush()


def _err(text: str) -> None:
    sys.stderr.write(_scrub(text) + "\n")
    sys.stderr.flush()


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


class _LogFormatter(logging.Formatter):
    """Scrubs secrets; drops tracebacks unless verbose."""

    def __init__(self, verbose: bool):
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s" if verbose else "%(levelname)s: %(message)s")
        self.verbose = verbose

    def format(self, record: logging.LogRecord) -> str:
        if not self.verbose and (record.exc_info or record.exc_text or record.stack_info):
            record = logging.makeLogRecord(record.__dict__)
            record.exc_info = record.exc_text = record.stack_info = None
        return _scrub(super().format(record))


# ---------------------------------------------------------------------------------------------
# Loading worker and connector configs


def _load_worker(args: argparse.Namespace) -> WorkerConfig:
    path = getattr(args, "worker", None)
    if path and not os.path.isfile(path):
        raise UserError(f"worker properties file {path!r} does not exist")
    try:
        worker = WorkerConfig.from_file(path)
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read worker properties file {path!r}: {e}") from e
    if worker.offset_file:
        # relative to the working directory (as Kafka Connect), made absolute so Spark tasks agree
        worker.props["offset.storage.file.filename"] = os.path.abspath(worker.offset_file)
    _scrub.add_worker(worker)
    if getattr(args, "verbose", False):
        _err(f"worker: {_json(worker.public_dict())}")
    return worker


def _looks_like_properties(path: str) -> bool:
    with open(path, encoding="utf-8") as f:
        for line in f:
            s = line.strip()
            if not s or s[0] in "#!":
                continue
            return "=" in s and (":" not in s or s.index("=") < s.index(":"))
    return False


def _load_config(spec: str) -> tuple[str, dict[str, Any]]:
    """(label, flat raw config) of a CONFIG argument. YAML is imported only to read YAML (standard
    input, or a file that is neither ``.json`` nor ``.properties``)."""
    try:
        if spec == "-":
            import yaml

            label = "<stdin>"
            doc = yaml.safe_load(sys.stdin.read())
            if not isinstance(doc, dict):
                raise UserError(f"{label}: a connector config must be a JSON or YAML mapping")
            return label, connector_config.load_connector_config(doc)
        if spec.lstrip().startswith("{"):
            return "<inline JSON>", connector_config.load_connector_config(spec)
        label = spec
        if not os.path.exists(spec):
            raise UserError(f"connector config file {spec!r} does not exist")
        if os.path.isdir(spec):
            raise UserError(f"connector config {spec!r} is a directory, not a file")
        if not spec.endswith((".json", ".yaml", ".yml", ".properties")) and _looks_like_properties(spec):
            return label, connector_config.load_connector_config(load_properties(spec))
        return label, connector_config.load_connector_config(spec)
    except UserError:
        raise
    except ConnectException as e:
        raise UserError(str(e)) from e
    except Exception as e:
        yaml = sys.modules.get("yaml")  # a YAML error comes only from a YAML read, which imported it
        if not isinstance(e, (ValueError, OSError, UnicodeDecodeError)) and not (
                yaml is not None and isinstance(e, yaml.YAMLError)):
            raise
        where = "<inline JSON>" if spec.lstrip().startswith("{") else spec
        why = str(e)
        if yaml is not None and isinstance(e, yaml.MarkedYAMLError) and e.problem_mark is not None:
            # not str(e): it quotes the offending line, which may hold a secret
            why = f"invalid YAML: {e.problem} at line {e.problem_mark.line + 1}, column {e.problem_mark.column + 1}"
        raise UserError(f"{where}: cannot read the connector config: {why}") from e


@dataclasses.dataclass
class _Checked:
    label: str
    raw: dict[str, Any]
    cls: type | None
    problems: list[str]
    error: str | None = None  # the config could not be read at all
    values: dict[str, Any] | None = None  # as validated: the plan of a config without problems reuses them

    @property
    def validated(self) -> tuple[dict[str, Any], type] | None:
        """``(values, class)`` for :func:`~airflow_copycat.runtime.plan.make_plan`, so it does not validate
        the config again; ``None`` when the config had problems."""
        return (self.values, self.cls) if self.values is not None and self.cls and not self.problems else None

    @property
    def name(self) -> str:
        return str(self.raw.get("name") or "")

    @property
    def kind(self) -> str:
        from ..runtime import plugins

        return plugins.connector_kind(self.cls) if self.cls else "?"

    def secrets(self) -> dict[str, Any]:
        return {k: self.raw[k] for k in connector_config.secret_keys(self.raw, self.cls)}


def _check(label: str, raw: dict[str, Any]) -> _Checked:
    """Validate one raw config (no external system is contacted); problem lines have secret values hidden."""
    values, cls, problems = connector_config.validate(raw)
    _scrub.add_config(raw, cls)
    secret = connector_config.secret_keys(raw, cls)
    lines = [
        str(dataclasses.replace(p, value=HIDDEN) if p.key in secret and p.value is not None else p)
        for p in problems
    ]
    return _Checked(label, raw, cls, lines, values=values)


def _check_all(specs: Sequence[str], *, replay_dlq: bool = False) -> list[_Checked]:
    """Load and validate every CONFIG, in order; a config that cannot be read has ``error`` set.
    Two configs with the same connector name are a problem (the name keys the offsets).
    ``replay_dlq``: check the config that replays each connector's dead-letter queue instead."""
    checked: list[_Checked] = []
    for spec in specs:
        try:
            label, raw = _load_config(spec)
            if replay_dlq:
                from ..runtime.errors import replay_config

                label, raw = f"{label} (dead-letter replay)", replay_config(raw)
        except (UserError, ConnectException) as e:
            checked.append(_Checked(spec, {}, None, [], error=str(e)))
            continue
        checked.append(_check(label, raw))
    seen: dict[str, str] = {}
    for c in checked:
        if not c.name:
            continue
        if c.name in seen:
            c.problems.append(f"name={c.name!r}: also the name of the connector in {seen[c.name]}; "
                              f"every connector needs its own name (it keys its offsets)")
        else:
            seen[c.name] = c.label
    return checked


def _raise_if_invalid(checked: Iterable[_Checked]) -> None:
    lines: list[str] = []
    for c in checked:
        if c.error:
            lines.append(c.error)
        elif c.problems:
            lines.append(f"{c.label}: invalid configuration of connector {c.name or '(unnamed)'!r}, "
                         f"{len(c.problems)} problem(s):")
            lines += [f"  - {p}" for p in c.problems]
    if lines:
        raise UserError("\n".join(lines))


# ---------------------------------------------------------------------------------------------
# Kafka


def _require_kafka(worker: WorkerConfig, timeout_s: float, verbose: bool) -> None:
    """Fail with one clear message if the worker's Kafka cannot be reached."""
    try:
        cfg = dict(worker.admin_config())
    except ValueError as e:
        raise UserError(str(e)) from e
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    kafka_log = logging.getLogger("airflow_copycat.cli.librdkafka")
    kafka_log.propagate = verbose
    kafka_log.disabled = not verbose
    cfg["logger"] = kafka_log
    try:
        AdminClient(cfg).list_topics(timeout=timeout_s)
    except KafkaException as e:
        err = e.args[0] if e.args else e
        why = err.str() if hasattr(err, "str") else str(err)
        raise UserError(f"cannot reach Kafka at {worker.bootstrap_servers} (bootstrap.servers) within "
                        f"{timeout_s:g}s: {why}") from e
