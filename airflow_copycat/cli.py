"""``copycat``: Kafka Connect's standalone mode on the command line.

``connect-standalone worker.properties connector.properties ...`` runs connectors
until it is stopped; ``copycat run`` runs each connector **once**, as one bounded
batch -- the same plan, task groups, PySpark application and offset commits an
Airflow DAG run uses -- and then exits, saying what it moved::

    copycat validate CONFIG...                 check configs, never contacts Kafka
    copycat plan [--worker W] CONFIG           print the plan (task groups) as JSON
    copycat run [--worker W] CONFIG...         one bounded run of each connector
    copycat run --replay-dlq [--worker W] CONFIG...   re-ingest each connector's dead-letter queue
    copycat offsets [--worker W] [CONNECTOR]   list, set or delete committed source offsets
    copycat copy [--worker W] CONFIG [--master URL | --remote sc://... | --in-process]   copy a file tree (Distcp)

``WORKER`` is a Kafka Connect worker ``.properties`` file; ``COPYCAT_*``
environment variables (``COPYCAT_BOOTSTRAP_SERVERS``, ...) override it. A
``CONFIG`` is Kafka Connect connector JSON (``{"name": ..., "config": {...}}``),
a flat JSON or YAML mapping, a connector ``.properties`` file as
``connect-standalone`` takes, inline JSON text, or ``-`` for standard input.

Runs and plans go through :mod:`airflow_copycat.runtime` only (this module never
imports Airflow). ``run`` submits each task group exactly as the Airflow run
operator does (:mod:`airflow_copycat.runtime.submit`), sends it to a running Spark
over Spark Connect with ``--remote sc://host:port`` or ``$SPARK_REMOTE`` (from this
process, as the operator does with a ``spark_connect`` connection:
:func:`spark_apps.connect.run_group_over_connect`), or runs it in this process
with ``--in-process`` (:func:`airflow_copycat.runtime.executor.run_group`). While a
group runs, ``run`` and ``copy`` print its progress to stderr every
``progress.interval.ms`` of the worker (default 30 s) and, if they printed any, a
last line of what it moved (:mod:`airflow_copycat.runtime.progress`).

User errors (an invalid config, a missing file, Kafka out of reach) print one
message to stderr and exit 1; ``--verbose`` adds tracebacks, the runtime's INFO
logs and spark-submit's output. Secret values (connector ``PASSWORD`` keys and
any key named like a password, token or secret, and the worker's) are never
printed.

This module is over 500 lines: it holds six subcommands and their shared
loading, checking and printing. It splits by subcommand -- ``validate``/``plan``,
``run`` (with the group runners: spark-submit, Spark Connect, in process),
``copy`` and ``offsets`` -- into a ``cli`` package, with the spark-submit command
built by :mod:`airflow_copycat.runtime.submit` only (issue 15, the one-shape
refactor). Why not yet: the one-shape refactor changes the plan format and the config
loading these subcommands share; splitting before it would split code that is about to change.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Iterable, Sequence
from typing import Any

from . import __version__
from .connect.assignment import canonical
from .connect.errors import ConnectException
from .runtime import connector_config
from .runtime.connector_config import HIDDEN
from .runtime.progress import SPARK_LINE_PREFIX
from .runtime.worker import WorkerConfig, is_secret_key, load_properties

PROG = "copycat"
DEFAULT_MASTER = "local[*]"
MASTER_ENV = "COPYCAT_SPARK_MASTER"
REMOTE_ENV = "SPARK_REMOTE"  # as pyspark reads it (spark_apps.connect.REMOTE_ENV; not imported: it imports pyspark)
DEFAULT_KAFKA_TIMEOUT_S = 15.0
_MIN_SECRET_LEN = 4  # shorter values would blank out unrelated text


class UserError(Exception):
    """A mistake the user can fix; printed as one line (no traceback unless --verbose)."""


# ---------------------------------------------------------------------------------------------
# Output: everything printed goes through the scrubber, which replaces every secret value seen
# (connector secret keys, worker secret keys) with "[hidden]".


class _Scrubber:
    def __init__(self) -> None:
        self.values: set[str] = set()

    def add(self, value: Any) -> None:
        if isinstance(value, str) and len(value) >= _MIN_SECRET_LEN and value != HIDDEN:
            self.values.add(value)
            dumped = json.dumps(value)[1:-1]  # as it appears inside JSON text
            if dumped != value:
                self.values.add(dumped)

    def add_config(self, raw: dict, cls: type | None) -> None:
        for key in connector_config.secret_keys(raw, cls):
            self.add(getattr(raw[key], "value", raw[key]))

    def add_worker(self, worker: WorkerConfig) -> None:
        for key, value in worker.props.items():
            if is_secret_key(key):
                self.add(str(value))

    def __call__(self, text: str) -> str:
        for v in sorted(self.values, key=len, reverse=True):
            text = text.replace(v, HIDDEN)
        return text


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
    """(label, flat raw config) of a CONFIG argument."""
    import yaml

    try:
        if spec == "-":
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
    except (ValueError, yaml.YAMLError, OSError, UnicodeDecodeError) as e:
        where = "<inline JSON>" if spec.lstrip().startswith("{") else spec
        why = str(e)
        if isinstance(e, yaml.MarkedYAMLError) and e.problem_mark is not None:
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

    @property
    def name(self) -> str:
        return str(self.raw.get("name") or "")

    @property
    def kind(self) -> str:
        from .runtime import plugins

        return plugins.connector_kind(self.cls) if self.cls else "?"

    def secrets(self) -> dict[str, Any]:
        return {k: self.raw[k] for k in connector_config.secret_keys(self.raw, self.cls)}


def _check(label: str, raw: dict[str, Any]) -> _Checked:
    """Validate one raw config (no external system is contacted); problem lines have secret values hidden."""
    _, cls, problems = connector_config.validate(raw)
    _scrub.add_config(raw, cls)
    secret = connector_config.secret_keys(raw, cls)
    lines = [
        str(dataclasses.replace(p, value=HIDDEN) if p.key in secret and p.value is not None else p)
        for p in problems
    ]
    return _Checked(label, raw, cls, lines)


def _check_all(specs: Sequence[str], *, replay_dlq: bool = False) -> list[_Checked]:
    """Load and validate every CONFIG, in order; a config that cannot be read has ``error`` set.
    Two configs with the same connector name are a problem (the name keys the offsets).
    ``replay_dlq``: check the config that replays each connector's dead-letter queue instead."""
    checked: list[_Checked] = []
    for spec in specs:
        try:
            label, raw = _load_config(spec)
            if replay_dlq:
                from .runtime.errors import replay_config

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


# ---------------------------------------------------------------------------------------------
# validate


def cmd_validate(args: argparse.Namespace) -> int:
    checked = _check_all(args.configs)
    for c in checked:
        if c.error:
            _out(c.error)
        elif c.problems:
            _out(f"{c.label}: invalid, connector {c.name or '(unnamed)'!r}: {len(c.problems)} problem(s)")
            for p in c.problems:
                _out(f"  - {p}")
        else:
            from .runtime import plugins

            _out(f"{c.label}: valid, {c.kind} connector {c.name!r} ({plugins.class_path(c.cls)})")
    return 1 if any(c.error or c.problems for c in checked) else 0


# ---------------------------------------------------------------------------------------------
# plan


def cmd_plan(args: argparse.Namespace) -> int:
    from .runtime.plan import make_plan

    checked = _check_all([args.config])
    _raise_if_invalid(checked)
    c = checked[0]
    worker = _load_worker(args)
    if c.kind == "sink" or not worker.offset_file:
        _require_kafka(worker, args.kafka_timeout, args.verbose)
    previous = None
    if args.previous:
        try:
            with open(args.previous, encoding="utf-8") as f:
                previous = json.load(f)
        except (OSError, ValueError) as e:
            raise UserError(f"cannot read the previous plan {args.previous!r}: {e}") from e
    plan = make_plan(c.raw, worker, max_tasks=args.max_tasks, max_groups=args.max_groups, previous=previous)
    _out(json.dumps(plan, indent=2, default=str))
    return 0


# ---------------------------------------------------------------------------------------------
# run


def _failed_group(group: dict, message: str) -> dict:
    from .runtime.result import group_result

    tasks = [
        {"task": t["task"], "connector": group["connector"], "kind": group["kind"], "status": "failed",
         "error": message, "records": 0, "bytes": 0, "errors": 0, "dead_lettered": 0, "duration_s": 0,
         "topics": {}, "partitions": []}
        for t in group["tasks"]
    ]
    return group_result(dict(group), tasks)


class _SparkSubmitter:
    """Runs a task group with ``spark-submit``, the way the Airflow run operator does
    (same application, ``--py-files`` zip, environment and default Spark settings)."""

    def __init__(self, master: str, spark_conf: dict[str, str], work_dir: str, verbose: bool):
        from .runtime import submit

        if not os.environ.get("JAVA_HOME") and not shutil.which("java"):
            raise UserError("spark-submit needs Java: set JAVA_HOME or put java on PATH "
                            "(or run the tasks in this process with --in-process)")
        self.submit = submit
        self.master = master
        self.conf = spark_conf
        self.work_dir = work_dir
        self.verbose = verbose
        self.py_files = submit.package_zip()

    def __call__(self, group: dict, worker_props: dict, secrets: dict, progress=None) -> dict:
        submit = self.submit
        name = f"copycat-{group['connector']}-group-{group['group']}"
        gdir = submit.new_work_dir(self.work_dir, f"group-{group['group']}-")
        group_path = submit.write_json(group, submit.join(gdir, "group.json"))
        result_path = submit.join(gdir, "result.json")
        cmd = submit.spark_submit_command(self.master, group_path, result_path, self.conf, name,
                                          deploy_mode=self.conf.get("spark.submit.deployMode"), py_files=self.py_files)
        env = {**os.environ, **submit.submit_env(worker_props, secrets)}
        if self.verbose:
            _err(f"group {group['group']}: {' '.join(cmd)}")
        tail: collections.deque[str] = collections.deque(maxlen=40)
        try:
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, errors="replace")
        except OSError as e:
            raise UserError(f"cannot start {cmd[0]}: {e}") from e
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip("\n"))
            if self.verbose:
                _err(line.rstrip("\n"))
            elif line.startswith(SPARK_LINE_PREFIX) and progress is not None:  # the driver's: Spark's tasks, no Kafka
                progress.relay(line[len(SPARK_LINE_PREFIX):].rstrip("\n"))
        rc = proc.wait()
        result = submit.read_json(result_path)
        if result is not None:
            return result
        if not self.verbose:
            _err(f"spark-submit of group {group['group']} of {group['connector']} exited with code {rc}; "
                 f"its last lines:")
            for line in tail:
                _err(f"  | {line}")
        return _failed_group(group, f"spark-submit exited with code {rc} and wrote no result "
                                    f"(--verbose shows its whole output)")


class _SparkConnectRunner:
    """Runs a task group over Spark Connect from this process, the way the Airflow run operator
    does with a ``spark_connect`` connection (:func:`spark_apps.connect.run_group_over_connect`)."""

    def __init__(self, url: str, spark_conf: dict[str, str], verbose: bool):
        from spark_apps import connect

        for secret in re.findall(r"(?i);(?:token|password|secret)[^=;]*=([^;]*)", url):
            _scrub.add(secret)
        self.connect = connect
        self.url = url
        self.conf = spark_conf
        self.verbose = verbose

    @property
    def mode(self) -> str:
        return f"Spark Connect {self.connect.display_url(self.url)}"

    def __call__(self, group: dict, worker_props: dict, secrets: dict, progress=None) -> dict:
        try:
            return self.connect.run_group_over_connect(self.url, group, worker_props, secrets, self.conf,
                                                       spark_progress=progress.spark if progress else None)
        except Exception as e:  # noqa: BLE001 -- the server, the network or the job as a whole: the group fails
            if self.verbose:
                _err(traceback.format_exc().rstrip())
            why = (str(e).strip().splitlines() or [""])[0]
            _err(f"group {group['group']} of {group['connector']} failed over {self.mode}: {type(e).__name__}: {why}")
            return _failed_group(group, f"over {self.mode}: {type(e).__name__}: {why}")


def _parse_spark_conf(items: Sequence[str]) -> dict[str, str]:
    conf: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--spark-conf {item!r}: expected KEY=VALUE, e.g. spark.executor.memory=2g")
        conf[key.strip()] = value
    return conf


def _print_summary(summary: dict, mode: str) -> None:
    status = "ok" if summary["status"] == "ok" else "FAILED"
    extra = f", {summary['dead_lettered']} dead-lettered" if summary.get("dead_lettered") else ""
    _out(f"{summary['connector']} ({summary['kind']}): {status}, {summary['records']} records, "
         f"{summary['bytes']} bytes, {summary['errors']} errors{extra}; {summary['tasks']} task(s) in "
         f"{summary['groups']} group(s), {mode}, {summary['duration_s']:.1f}s")
    for topic, n in sorted(summary["topics"].items()):
        _out(f"  topic {topic}: {n} records")
    for p in summary["partitions"]:
        _out(f"  {_json(p['partition'])}: {_json(p['offset_before'])} -> {_json(p['offset_after'])} "
             f"({p['records']} records, {p['bytes']} bytes)")
    for line in summary["failures"]:
        _out(f"  failed: {line}")


def _spark_conf(args: argparse.Namespace) -> dict[str, str]:
    spark_conf = _parse_spark_conf(args.spark_conf)
    if args.in_process and (args.master or spark_conf):
        raise UserError("--in-process runs without Spark: drop --master / --spark-conf")
    if args.remote is not None and not args.remote.startswith("sc://"):
        raise UserError(f"--remote {args.remote!r}: expected a Spark Connect URL, sc://host:port "
                        f"(optionally /;token=...;use_ssl=true)")
    return spark_conf


def _group_runner(args: argparse.Namespace, spark_conf: dict[str, str], work_dir: str):
    """(runner of one task group, how it runs): in this process, over Spark Connect (--remote, else
    $SPARK_REMOTE unless --master is given), or through spark-submit."""
    if args.in_process:
        from .runtime.executor import run_group

        def in_process(group: dict, worker_props: dict, secrets: dict, progress=None) -> dict:
            return run_group(group, worker_props, secrets, listener=progress.record if progress else None)

        return in_process, "in process"
    remote = args.remote or (None if args.master else os.environ.get(REMOTE_ENV))
    if remote:
        runner = _SparkConnectRunner(remote, spark_conf, args.verbose)
        return runner, runner.mode
    master = args.master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER
    return _SparkSubmitter(master, spark_conf, work_dir, args.verbose), f"spark-submit --master {master}"


def _run_groups(runner, args: argparse.Namespace, groups: list[dict], worker_props: dict, secrets: dict) -> list[dict]:
    """Run each group with ``runner``, printing its progress to stderr every ``progress.interval.ms``
    of the worker (default 30 s) while it runs, and its final line when it printed any
    (:mod:`airflow_copycat.runtime.progress`)."""
    from .runtime.progress import GroupProgress

    results = []
    for group in groups:
        progress = GroupProgress(group, worker_props, _err, local=bool(args.in_process))
        with progress:
            result = runner(group, progress.task_props, secrets, progress)
        if progress.lines:
            _err(progress.final_line(result))
        results.append(result)
    return results


def _work_dir(given: str | None, prefix: str) -> str:
    """The run's work directory: ``--work-dir`` (a local path, made absolute, or any fsspec URL the
    Spark driver can reach), else a new local temporary directory."""
    from .runtime import submit

    if given is None:
        return submit.new_work_dir(None, prefix)
    if "://" in given:
        return given
    os.makedirs(given, exist_ok=True)
    return os.path.abspath(given)


def _remove_work_dir(path: str) -> None:
    """Remove the temporary work directory :func:`_work_dir` made."""
    from .runtime import submit

    submit.remove_dir(path)


def cmd_run(args: argparse.Namespace) -> int:
    from .runtime.plan import make_plan
    from .runtime.result import summarize

    checked = _check_all(args.configs, replay_dlq=args.replay_dlq)
    _raise_if_invalid(checked)
    worker = _load_worker(args)
    spark_conf = _spark_conf(args)
    _require_kafka(worker, args.kafka_timeout, args.verbose)
    worker_props = worker.to_dict()

    own_dir = args.work_dir is None
    work_dir = _work_dir(args.work_dir, "copycat-run-")
    try:
        runner, mode = _group_runner(args, spark_conf, work_dir)
        failed = 0
        for c in checked:
            started = time.monotonic()
            try:
                plan = make_plan(c.raw, worker, max_tasks=args.max_tasks, max_groups=args.max_groups)
            except ConnectException as e:
                failed += 1
                _err(f"{c.label}: cannot plan connector {c.name!r}: {e}")
                continue
            if args.verbose:
                _err(f"{c.name}: {len(plan['partitions'])} partition(s), "
                     f"{sum(len(g['tasks']) for g in plan['groups'])} task(s) in {len(plan['groups'])} group(s)")
            results = _run_groups(runner, args, plan["groups"], worker_props, c.secrets())
            summary = summarize(plan, results)
            summary["duration_s"] = round(time.monotonic() - started, 3)
            if summary["status"] != "ok":
                failed += 1
            if args.json:
                _out(_json(summary))
            else:
                _print_summary(summary, mode)
        return 1 if failed else 0
    finally:
        if own_dir:
            _remove_work_dir(work_dir)


# ---------------------------------------------------------------------------------------------
# copy


def cmd_copy(args: argparse.Namespace) -> int:
    from .runtime import copy_job

    label, raw = _load_config(args.config)
    for key in copy_job.secret_keys(raw):
        _scrub.add(getattr(raw[key], "value", raw[key]))
    worker_props = _load_worker(args).to_dict() if args.worker else {}
    spark_conf = _spark_conf(args)
    own_dir = args.work_dir is None
    work_dir = _work_dir(args.work_dir, "copycat-copy-")
    try:
        started = time.monotonic()
        plan = copy_job.make_copy_plan(raw, max_tasks=args.max_tasks, max_groups=args.max_groups)
        if args.verbose:
            _err(f"{label}: {plan['to_copy']} of {plan['files']} file(s) to copy ({plan['to_copy_bytes']} bytes) in "
                 f"{sum(len(g['tasks']) for g in plan['groups'])} task(s); plan {plan['plan_url']}")
        runner, mode = _group_runner(args, spark_conf, work_dir)
        secrets = {k: raw[k] for k in copy_job.secret_keys(raw) if raw.get(k) not in (None, "")}
        results = _run_groups(runner, args, plan["groups"], worker_props, secrets)
        summary = copy_job.publish_copy(plan, results, raw)
        summary["duration_s"] = round(time.monotonic() - started, 3)
        summary["mode"] = mode
        if args.json:
            _out(_json(summary))
        else:
            for line in copy_job.summary_lines(summary):
                _out(line)
        return 0 if summary["status"] == "ok" else 1
    finally:
        if own_dir:
            _remove_work_dir(work_dir)


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
    from .runtime.offsets import offset_store

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


# ---------------------------------------------------------------------------------------------
# argument parsing and main


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if v <= 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return v


CONFIG_HELP = ("connector config: Kafka Connect JSON ({\"name\":..., \"config\":{...}}), a flat JSON/YAML "
               "mapping, a connector .properties file, inline JSON, or - for stdin")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Kafka Connect's standalone mode as bounded batch runs: validate and plan connector "
                    "configs, run each connector once (on Spark or in this process), inspect and change "
                    "committed source offsets.",
        epilog="Environment: COPYCAT_BOOTSTRAP_SERVERS, COPYCAT_OFFSET_STORAGE_TOPIC, ... override the worker "
               "file's keys; SPARK_REMOTE is run's and copy's default --remote, COPYCAT_SPARK_MASTER their "
               "default --master. "
               f"Run '{PROG} COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} (airflow-copycat) {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", default=False,
                        help="show tracebacks, INFO logs and spark-submit's output")
    parser.add_argument("--kafka-timeout", type=_seconds, default=DEFAULT_KAFKA_TIMEOUT_S, metavar="SECONDS",
                        help=f"how long to try to reach Kafka before giving up (default {DEFAULT_KAFKA_TIMEOUT_S:g})")

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks, INFO logs and spark-submit's output")
    with_worker = argparse.ArgumentParser(add_help=False)
    with_worker.add_argument("-w", "--worker", metavar="WORKER",
                             help="Kafka Connect worker .properties file (bootstrap.servers, converters, "
                                  "offset.storage.topic or offset.storage.file.filename, producer.*, ...)")
    with_worker.add_argument("--kafka-timeout", type=_seconds, default=argparse.SUPPRESS, metavar="SECONDS",
                             help=f"how long to try to reach Kafka (default {DEFAULT_KAFKA_TIMEOUT_S:g})")

    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("validate", parents=[common], help="check connector configs; never contacts Kafka",
                       description="Print every problem of each connector config (key, value given, why; "
                                   "secret values hidden). Exit 1 if any config is invalid. Contacts no "
                                   "external system.")
    p.add_argument("configs", nargs="+", metavar="CONFIG", help=CONFIG_HELP)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("plan", parents=[common, with_worker], help="print a connector's plan (task groups) as JSON",
                       description="Validate CONFIG, list its partitions, split them into task configs and task "
                                   "groups and print the plan JSON (secret values hidden). Reads committed "
                                   "offsets; writes nothing.")
    p.add_argument("config", metavar="CONFIG", help=CONFIG_HELP)
    p.add_argument("--max-tasks", type=_positive_int, metavar="N", help="overrides tasks.max")
    p.add_argument("--max-groups", type=_positive_int, metavar="N", help="overrides copycat.groups.max")
    p.add_argument("--previous", metavar="PLAN_JSON",
                   help="a plan printed earlier: partitions stay on the task they had (sticky)")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("run", parents=[common, with_worker], help="one bounded run of each connector, in order",
                       description="Plan each connector, run every task group -- with spark-submit (default; "
                                   f"master from --master, ${MASTER_ENV} or {DEFAULT_MASTER}), over Spark Connect "
                                   f"(--remote or ${REMOTE_ENV}) or in this "
                                   "process (--in-process) -- commit offsets, and print what moved: records, "
                                   "bytes, errors, offsets before -> after per partition. All configs are "
                                   "validated before anything runs; a failed connector does not stop the "
                                   "next one. Exit 1 if any task failed.")
    p.add_argument("configs", nargs="+", metavar="CONFIG", help=CONFIG_HELP)
    _spark_options(p)
    p.add_argument("--json", action="store_true", help="print each connector's run summary as one JSON line")
    p.add_argument("--replay-dlq", action="store_true",
                   help="instead of each connector, replay its dead-letter queue (errors.deadletterqueue.topic.name) "
                        "through its current transforms and converters into the topic each record belongs to")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("copy", parents=[common, with_worker],
                       help="copy a file tree (Distcp): plan, copy in task groups, publish each dataset atomically",
                       description="List the datasets under source.url, diff them with target.url, copy what "
                                   "changed in task groups -- with spark-submit (default), over Spark Connect "
                                   "(--remote) or in this process (--in-process) -- into staging, and publish every dataset whose files all "
                                   "copied through its write-ahead log. A leftover log of an interrupted run is "
                                   "replayed first, and files staged by a failed run are reused. Prints a summary; "
                                   "exit 1 if any dataset was not published.")
    p.add_argument("config", metavar="CONFIG", help="the copy job: JSON, YAML or .properties (see README, Distcp)")
    _spark_options(p)
    p.add_argument("--json", action="store_true", help="print the summary as one JSON line")
    p.set_defaults(func=cmd_copy)

    p = sub.add_parser("offsets", parents=[common, with_worker],
                       help="list, set or delete a connector's committed source offsets",
                       description="Without changes: print one JSON line per partition, "
                                   "{\"partition\": ..., \"offset\": ...} (every connector's, with a "
                                   "\"connector\" field, when CONNECTOR is omitted). --set and --delete write "
                                   "to the offset store the worker names (offset.storage.topic, or "
                                   "offset.storage.file.filename); the connector's next run starts there. "
                                   "Do not change offsets while the connector runs.")
    p.add_argument("connector", nargs="?", metavar="CONNECTOR",
                   help="connector name (or a connector config file to take the name from)")
    p.add_argument("--set", action="append", metavar="PARTITION=OFFSET",
                   help="write an offset; both JSON, e.g. '{\"filename\":\"/x.log\"}={\"position\":0}' "
                        "(repeatable; OFFSET null deletes)")
    p.add_argument("--delete", action="append", nargs="?", const=_DELETE_GIVEN_PARTITION, metavar="PARTITION",
                   help="delete a partition's offset (a tombstone): its next run starts from the beginning "
                        "(repeatable; bare --delete takes --partition)")
    p.add_argument("--partition", metavar="JSON", help="the partition to change, with --offset or --delete")
    p.add_argument("--offset", metavar="JSON", help="the offset to write for --partition")
    p.set_defaults(func=cmd_offsets)
    return parser


def _setup_logging(verbose: bool):
    logger = logging.getLogger("airflow_copycat")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LogFormatter(verbose))
    handler.setLevel(logging.INFO if verbose else logging.WARNING)
    previous_level = logger.level
    logger.addHandler(handler)
    if verbose and logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)

    def restore():
        logger.removeHandler(handler)
        logger.setLevel(previous_level)

    return restore


def _spark_options(p: argparse.ArgumentParser) -> None:
    """How ``run`` and ``copy`` run their task groups."""
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--master", metavar="URL", help=f"Spark master for spark-submit (default ${MASTER_ENV} or "
                                                     f"{DEFAULT_MASTER})")
    mode.add_argument("--remote", metavar="sc://HOST:PORT",
                      help=f"run the task groups on a running Spark over Spark Connect, from this process, no "
                           f"spark-submit (default ${REMOTE_ENV} when set and --master is not given); the URL may "
                           f"add /;token=...;use_ssl=true")
    mode.add_argument("--in-process", action="store_true", help="run the tasks one by one in this process, no Spark")
    p.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting added to the defaults (repeatable; with --remote, Spark SQL "
                        "settings of the session)")
    p.add_argument("--max-tasks", type=_positive_int, metavar="N", help="overrides tasks.max")
    p.add_argument("--max-groups", type=_positive_int, metavar="N", help="overrides copycat.groups.max")
    p.add_argument("--work-dir", metavar="DIR",
                   help="where group and result JSON files go (kept): a local path or any fsspec URL, which the "
                        "Spark driver must reach (cluster deploy mode: a shared one); default a local temporary "
                        "directory (removed)")


def main(argv: Sequence[str] | None = None) -> int:
    """The ``copycat`` console script. Returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    restore_logging = _setup_logging(args.verbose)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        _err(f"{PROG}: interrupted")
        return 130
    except (UserError, ConnectException) as e:
        if args.verbose:
            _err(traceback.format_exc().rstrip())
        _err(f"{PROG}: error: {e}")
        return 1
    except Exception as e:  # noqa: BLE001 -- an unexpected failure: still one line, unless --verbose
        if args.verbose:
            _err(traceback.format_exc().rstrip())
        _err(f"{PROG}: error: {type(e).__name__}: {e}"
             + ("" if args.verbose else " (run with --verbose for the traceback)"))
        return 1
    finally:
        restore_logging()
        _scrub.values.clear()


if __name__ == "__main__":
    sys.exit(main())
