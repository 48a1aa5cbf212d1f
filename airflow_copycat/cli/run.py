"""``copycat run``: one bounded run of each connector, its task groups run by spark-submit, over
Spark Connect or in this process (the group runners), its offsets committed, what moved printed."""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import time
import traceback
from collections.abc import Sequence

from ..connect.errors import ConnectException
from ..runtime.progress import SPARK_LINE_PREFIX
from .common import DEFAULT_MASTER, MASTER_ENV, REMOTE_ENV, UserError, _check_all, _err, _json, _load_worker, _out, _raise_if_invalid, _require_kafka, _scrub


# ---------------------------------------------------------------------------------------------
# run


def _failed_group(group: dict, message: str) -> dict:
    from ..runtime.result import group_result

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
        from ..runtime import submit

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
        from ..runtime.executor import run_group

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
    from ..runtime.progress import GroupProgress

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
    from ..runtime import submit

    if given is None:
        return submit.new_work_dir(None, prefix)
    if "://" in given:
        return given
    os.makedirs(given, exist_ok=True)
    return os.path.abspath(given)


def _remove_work_dir(path: str) -> None:
    """Remove the temporary work directory :func:`_work_dir` made."""
    from ..runtime import submit

    submit.remove_dir(path)


def cmd_run(args: argparse.Namespace) -> int:
    from ..runtime.plan import make_plan
    from ..runtime.result import summarize

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
                plan = make_plan(c.raw, worker, max_tasks=args.max_tasks, max_groups=args.max_groups,
                                 validated=c.validated)
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
