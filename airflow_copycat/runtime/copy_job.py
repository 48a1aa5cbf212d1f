"""A Distcp copy job: plan -> task groups (Spark) -> publish, around :mod:`airflow_copycat.distcp`.

The same three steps as a connector run, so the same operators, PySpark
application and CLI run it:

1. :func:`make_copy_plan` (where Airflow or ``copycat copy`` runs): replay any
   leftover publish log first, then find the datasets, list their files, diff
   with the target, cut the work into units balanced by bytes over at most
   ``tasks.max`` tasks in at most ``copycat.groups.max`` groups. The plan is
   written under ``<target>/_copycat/distcp/plans/<job>/<time>/``: ``plan.json``
   (the file sets, for publishing) and one ``task-<n>.json`` per task (its work
   units: an executor reads only its own). The plan returned (and put in XCom)
   carries only counts, the plan's URL and the groups, whose tasks name their file.
   The newest few plans of a job are kept (a retried task still finds its own). A run step or
   publish in the process that made the plan (``copycat copy --in-process``) takes its part of the
   plan from memory instead of parsing the file just written (:data:`_WRITTEN`).
2. :func:`run_copy_task` (in a Spark task, or in process): copy the task's
   units into staging (:func:`airflow_copycat.distcp.copier.copy_unit`, a few
   units at a time: :func:`airflow_copycat.distcp.inflight.copy_units`); a file
   that fails is reported in the result, not raised, so the other file sets
   still publish.
3. :func:`publish_copy` (where the plan was made): publish every file set whose
   files are all staged, through its write-ahead log; summarise per dataset
   and per task. File sets with a failed file stay staged; the next run reuses
   their staged files instead of copying them again.

Task results follow :mod:`.result` (``records`` = files copied, ``bytes`` =
bytes written, ``errors`` = files that failed) plus ``datasets`` and
``failed_files``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import re
import secrets as _secrets
import time
from typing import Any, Mapping

from ..connect.config import ConfigProblem
from ..connect.errors import ConfigException
from ..connect.secrets import hide_url_passwords
from ..distcp import config as copy_config
from ..distcp.model import PLAN_FORMAT, CopyableFile, Staging, WorkUnit
from . import connector_config
from .connector_config import load_connector_config, redact
from .json_files import write_json
from .progress import TaskProgress
from .spec import SPEC_KEY, CopySpec, spec_of_group

log = logging.getLogger("airflow_copycat.distcp")

PLAN_URL_KEY = "copycat.copy.plan"
"""Task config key: URL of the plan file holding the task's work units."""

_PROGRESS_EVERY = 256 << 20


def secret_keys(raw: Mapping[str, Any]) -> set[str]:
    """Keys of a copy config whose values are secrets: the rule of connector configs
    (:func:`.connector_config.secret_keys`: keys named like a secret, keys holding a URL with a
    password) and the copy config's ``PASSWORD`` keys."""
    return connector_config.secret_keys(raw, None) | {k for k in copy_config.COPY_CONFIG.secret_keys() if k in raw}


def _options(value: Any) -> dict:
    if value is None or value == "":
        return {}
    value = getattr(value, "value", value)  # a Password
    return json.loads(value) if isinstance(value, str) else dict(value)


def _filesystems(values: Mapping[str, Any]):
    from ..distcp import listing

    src = listing.filesystem(values["source.url"], _options(values.get("source.options")))
    tgt = listing.filesystem(values["target.url"], _options(values.get("target.options")))
    return src, tgt


def is_copy_config(raw: Mapping[str, Any]) -> bool:
    """Whether ``raw`` is a copy job (``source.url``, no ``connector.class``)."""
    return "source.url" in raw and "connector.class" not in raw


def make_copy_plan(raw_config: Mapping[str, Any] | str, *, max_tasks: int | None = None,
                   max_groups: int | None = None) -> dict[str, Any]:
    """Validate (every problem at once), recover, list, diff, pack, and write the plan file.
    Returns the small plan (counts, datasets, ``plan_url``, groups)."""
    from ..distcp import diff, listing, workunits
    from ..distcp.publish import Publisher

    raw = load_connector_config(raw_config)
    values = copy_config.parse_copy_config(raw)
    name = values["name"]
    tasks_max = int(max_tasks or values["tasks.max"])
    groups_max = int(max_groups or values["copycat.groups.max"])
    policy = _policy(values)  # a policy that cannot be found fails before anything is opened or replayed
    started = time.monotonic()
    (src_fs, src_root), (tgt_fs, tgt_root) = _filesystems(values)
    _check_overlap(values, src_fs, src_root, tgt_fs, tgt_root)
    staging = Staging(tgt_root, job=name)
    publisher = Publisher(tgt_fs, staging, config=values)
    recovered = publisher.recover()  # leftover logs first: the diff sees their result
    for r in recovered:
        log.info("copy %s: replayed the publish log of file set %r left by an earlier run", name, r.get("file_set"))
    datasets = listing.find_datasets(src_fs, src_root, values["dataset.pattern"], config=values)
    files: list[CopyableFile] = []
    for d in datasets:
        files += listing.list_files(src_fs, src_root, d, values)
    result = diff.diff(files, tgt_fs, tgt_root, datasets, values, staging=staging, policy=policy)
    current: dict[str, list[str]] = {d.name: [] for d in datasets}
    listed: dict[str, list[str]] = {d.name: [] for d in datasets}
    for f in result.to_copy:
        current[f.file_set].append(f.id)
    for f in files:
        listed[f.file_set].append(f.origin)
    for path in publisher.drop_stale(current, listed=listed):
        log.info("copy %s: dropped stale staging %s", name, path)
    units = workunits.work_units(result.to_copy, int(values["block.split.size"] or 0))
    packed = [t for t in workunits.pack(units, tasks_max) if t]
    secrets = secret_keys(raw)
    redacted = redact({k: raw[k] for k in sorted(raw)}, secrets)
    created = dt.datetime.now(dt.timezone.utc)
    plans_dir = _plans_dir(staging, name)
    plan_dir = f"{plans_dir}/{created:%Y%m%dT%H%M%S%f}-{_secrets.token_hex(3)}"  # microseconds: ordered

    by_set: dict[str, dict[str, Any]] = {}
    file_sets: dict[str, dict[str, Any]] = {}  # the same, with the files themselves (for this process's publish)
    for d in datasets:
        by_set.setdefault(d.name, {"dataset": d.name, "files": [], "deletes": list(result.deletes.get(d.name, []))})
    file_dicts: dict[str, dict[str, Any]] = {}  # file id -> its dict, in plan.json and in its task's file alike
    for f in result.to_copy:
        file_dicts[f.id] = f.to_dict()
        by_set.setdefault(f.file_set, {"dataset": f.dataset, "files": [], "deletes": []})["files"].append(file_dicts[f.id])
    for file_set, entry in by_set.items():
        file_sets[file_set] = {**entry, "files": []}
    for f in result.to_copy:
        file_sets[f.file_set]["files"].append(f)
    stats = _dataset_stats(datasets, files, result)
    full = {"format": PLAN_FORMAT, "connector": name, "created_at": created.isoformat(timespec="seconds"),
            "config": redacted, "datasets": stats, "file_sets": by_set}
    # the file sets for the publish step, and one file per task with its units: an executor reads only its own
    tgt_fs.makedirs(plan_dir, exist_ok=True)
    write_json(full, f"{plan_dir}/plan.json", fs=tgt_fs, compact=True)
    plan_url = tgt_fs.unstrip_protocol(f"{plan_dir}/plan.json")
    _WRITTEN.clear()  # the newest plan only
    _WRITTEN[plan_url] = file_sets
    task_entries = []
    for i, units_of_task in enumerate(packed):
        path = f"{plan_dir}/task-{i:05d}.json"
        write_json({"task": i, "units": [u.to_dict(file_dicts[u.file.id]) for u in units_of_task]}, path, fs=tgt_fs,
                   compact=True)
        task_url = tgt_fs.unstrip_protocol(path)
        _WRITTEN[task_url] = list(units_of_task)
        task_entries.append({"task": i, "units": len(units_of_task), "bytes": sum(u.bytes for u in units_of_task),
                             "config": dict(redacted, **{PLAN_URL_KEY: task_url})})
    _prune_plans(tgt_fs, plans_dir, keep=KEEP_PLANS)
    tasks = task_entries
    n_groups = min(groups_max, len(tasks))
    # the typed config without its secrets: the tasks and the publish step read it instead of parsing again
    copy_spec = CopySpec.of(values, secrets)
    spec = copy_spec.to_json() if copy_spec is not None else None
    plan = {
        "format": PLAN_FORMAT, "connector": name, "kind": "copy", "created_at": full["created_at"],
        "config": redacted, "plan_url": plan_url, "datasets": stats,
        "files": len(files), "to_copy": len(result.to_copy), "to_copy_bytes": sum(f.size for f in result.to_copy),
        "skipped": len(result.skipped), "deletes": sum(len(v) for v in result.deletes.values()),
        "recovered": [r.get("file_set") for r in recovered], "plan_seconds": round(time.monotonic() - started, 3),
        "groups": [{"group": g, "connector": name, "kind": "copy", "tasks": task_entries[g::n_groups],
                    **({SPEC_KEY: spec} if spec is not None else {})}
                   for g in range(n_groups)],
    }
    log.info("copy %s: %d dataset(s), %d file(s): %d to copy (%d bytes), %d up to date, %d to delete; "
             "%d task(s) in %d group(s); plan %s", name, len(datasets), len(files), plan["to_copy"],
             plan["to_copy_bytes"], plan["skipped"], plan["deletes"], len(tasks), n_groups, plan_url)
    return plan


KEEP_PLANS = 5
"""Plan files kept per job (the newest): a retried run task or publish still finds its plan."""


def _policy(values: Mapping[str, Any]):
    """The job's diff policy: a name in ``diff.POLICIES``, or ``module:Class`` / ``module:function``
    (a DiffPolicy class, or a function of the dataset returning one)."""
    from ..distcp import diff

    name = str(values["diff.policy"])
    if name in diff.POLICIES:
        return name
    from .plugins import _import

    try:
        target = _import(name)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigException([ConfigProblem("diff.policy", name, f"is not a known policy ({', '.join(diff.POLICIES)}) "
                                                                  f"nor importable: {e}")]) from None
    return target() if isinstance(target, type) else target


def _check_overlap(values, src_fs, src_root: str, tgt_fs, tgt_root: str) -> None:
    """Refuse a target that is the source, and a source inside the target when deleting
    (the target's listing would hold the source, and ``delete`` would remove it)."""
    if src_fs.protocol != tgt_fs.protocol:
        return
    src, tgt = src_root.rstrip("/") + "/", tgt_root.rstrip("/") + "/"
    problem = None
    if src == tgt:
        problem = "is the source itself"
    elif src.startswith(tgt) and values.get("delete"):
        problem = "contains the source: with delete=true the copy would delete the source; copy into another tree"
    if problem:
        raise ConfigException([ConfigProblem("target.url", hide_url_passwords(str(values["target.url"])), problem)],
                              context=f"copy {values['name']!r}")


def _plans_dir(staging: Staging, name: str) -> str:
    """Where a job's plans live: one directory per job (its name, made safe, plus a hash)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:80]
    return f"{staging.control}/plans/{safe}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def _prune_plans(fs, directory: str, keep: int) -> None:
    """Drop all but the ``keep`` newest plans of one job (their directories are named by time)."""
    plans = sorted(p for p in fs.ls(directory, detail=False) if re.fullmatch(r"\d{8}T\d{12}-[0-9a-f]{6}",
                                                                              p.rstrip("/").rsplit("/", 1)[-1]))
    for old in plans[:-keep]:
        fs.rm(old, recursive=True)


def _dataset_stats(datasets, files, result) -> list[dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {d.name: {"dataset": d.name, "files": 0, "bytes": 0, "to_copy": 0,
                                               "to_copy_bytes": 0, "skipped": 0, "deletes": 0} for d in datasets}
    for f in files:
        s = out.setdefault(f.dataset, {"dataset": f.dataset, "files": 0, "bytes": 0, "to_copy": 0,
                                       "to_copy_bytes": 0, "skipped": 0, "deletes": 0})
        s["files"] += 1
        s["bytes"] += f.size
    for f in result.to_copy:
        out[f.dataset]["to_copy"] += 1
        out[f.dataset]["to_copy_bytes"] += f.size
    for f in result.skipped:
        out[f.dataset]["skipped"] += 1
    for file_set, paths in result.deletes.items():
        if file_set in out:
            out[file_set]["deletes"] = len(paths)
    return list(out.values())


_WRITTEN: dict[str, Any] = {}
"""The newest plan this process wrote, parsed: its ``plan.json`` URL -> ``{file set: {"dataset", "files":
[CopyableFile], "deletes"}}``, each task file's URL -> its ``[WorkUnit]``. A run step or publish in the
process that made the plan (``copycat copy --in-process``) takes its part from here, once, instead of
parsing the file it was just written to (the same values: a plan file is never changed once written);
any other reader (an executor, a retried task, another process) reads the file."""


def _take_written(url: str) -> Any:
    """What :data:`_WRITTEN` holds for ``url`` (taken out), or ``None``."""
    return _WRITTEN.pop(url, None)


def _load_plan(url: str, options: dict) -> dict:
    """A plan file (the file sets, or one task's units) at ``url``."""
    import fsspec

    with fsspec.open(url, "rb", **options) as f:
        return json.loads(f.read())


def run_copy_task(task: Mapping[str, Any], *, progress: TaskProgress | None = None,
                  spec: CopySpec | None = None) -> dict[str, Any]:
    """Copy the work units of one task of a copy plan into staging. Returns the task result;
    a failure is reported in it, never raised. ``progress``: watches the files copied and the
    source bytes done so far (units reused or failed included) once the units are loaded.
    ``spec``: the group's :class:`~.spec.CopySpec`: its typed values are used, with the secrets the
    task config holds (restored by the run step); ``None`` (a plan of an earlier version): the task
    config is parsed."""
    from ..distcp.inflight import copy_units
    from .result import TaskStats

    config = dict(task["config"])
    stats = TaskStats(int(task["task"]), str(config.get("name")), "copy")
    out: dict[str, Any] = {"files": 0, "bytes": 0, "bytes_read": 0, "reused": 0, "bytes_reused": 0}
    datasets: dict[str, dict[str, int]] = {}
    failed: list[dict[str, str]] = []
    try:
        values = spec.values_with(config) if spec is not None else \
            copy_config.parse_copy_config({k: v for k, v in config.items() if k != PLAN_URL_KEY})
        (src_fs, _), (tgt_fs, tgt_root) = _filesystems(values)
        units = _take_written(config[PLAN_URL_KEY])  # this process wrote the plan: its units as written
        if units is None:
            units = _load_plan(config[PLAN_URL_KEY], _options(values.get("target.options")))["units"]
            units = [WorkUnit.from_dict(u) for u in units]
        staging = Staging(tgt_root, job=values["name"])
        total = sum(unit.bytes for unit in units)
        logged = [0]  # the task's bytes at the last progress line
        seen = [0]  # the task's source bytes so far
        if progress is not None:
            progress.watch(lambda: (out["files"], seen[0]))

        def on_bytes(n: int) -> None:  # n: the task's bytes so far (called by one copying thread at a time)
            seen[0] = n
            if n - logged[0] >= _PROGRESS_EVERY:
                logged[0] = n
                log.info("copy %s task %s: %.0f of %.0f MiB (%.0f%%)", stats.connector, stats.task,
                         n / 2**20, total / 2**20, 100.0 * n / max(total, 1))

        for unit, r in copy_units(units, src_fs, tgt_fs, staging, values, progress=on_bytes):
            d = datasets.setdefault(unit.file.dataset, {"files": 0, "bytes": 0, "reused": 0, "bytes_reused": 0,
                                                        "failed": 0})
            if r["status"] == "failed":
                failed.append({"origin": unit.file.origin, "dataset": unit.file.dataset, "error": r["error"]})
                d["failed"] += 1
                log.error("copy %s task %s: %s failed: %s", stats.connector, stats.task, unit.file.origin, r["error"])
            elif r["status"] == "reused":
                out["reused"] += 1
                out["bytes_reused"] += unit.bytes
                d["reused"] += 1
                d["bytes_reused"] += unit.bytes
            else:
                out["files"] += unit.part == 0 or unit.parts == 1
                out["bytes"] += r.get("bytes_written", 0)
                out["bytes_read"] += r.get("bytes_read", 0)
                d["files"] += unit.part == 0 or unit.parts == 1
                d["bytes"] += r.get("bytes_written", 0)
    except Exception as e:  # noqa: BLE001 - reported in the result
        log.exception("copy %s task %s failed", stats.connector, stats.task)
        stats.fail(e)
    stats.errors = len(failed)
    result = stats.to_dict()
    result.update(records=out["files"], bytes=out["bytes"], bytes_read=out["bytes_read"], reused=out["reused"],
                  bytes_reused=out["bytes_reused"], datasets=datasets, failed_files=failed)
    seconds = result["duration_s"] or 0
    result["mib_per_s"] = round(out["bytes_read"] / 2**20 / seconds, 1) if seconds else None
    return result


def publish_copy(plan: Mapping[str, Any], group_results: list[Mapping[str, Any]],
                 raw_config: Mapping[str, Any] | str) -> dict[str, Any]:
    """Publish every file set of ``plan`` whose files are all staged; return the run summary.

    ``raw_config`` is the job's config with its secrets (the plan's are hidden). A file
    set with a file that failed (or whose task failed) is not published and stays staged.
    """
    from ..distcp.publish import Publisher

    raw = load_connector_config(raw_config)
    spec = spec_of_group(plan["groups"][0]) if plan.get("groups") else None
    # the plan's typed config, with the secrets of the rendered one; a plan of an earlier version: parsed
    values = spec.values_with(raw) if isinstance(spec, CopySpec) else copy_config.parse_copy_config(raw)
    _, (tgt_fs, tgt_root) = _filesystems(values)
    staging = Staging(tgt_root, job=values["name"])
    file_sets = _take_written(plan["plan_url"])  # this process wrote the plan: its file sets as written
    if file_sets is None:
        file_sets = {file_set: {**entry, "files": [CopyableFile.from_dict(f) for f in entry["files"]]}
                     for file_set, entry in _load_plan(plan["plan_url"], _options(values.get("target.options")))[
                         "file_sets"].items()}
    publisher = Publisher(tgt_fs, staging, config=values)  # publish() replays its own set's leftover log
    tasks = [t for g in group_results if g for t in g["tasks"]]
    failed_files = [f for t in tasks for f in t.get("failed_files", [])]
    datasets = {d["dataset"]: dict(d) for d in plan["datasets"]}
    work = {file_set: (entry["files"], entry["deletes"])
            for file_set, entry in sorted(file_sets.items()) if entry["files"] or entry["deletes"]}
    results = {r["file_set"]: r for r in publisher.publish_all(work)}  # one set's failure never stops another's
    published = []
    for file_set, entry in sorted(file_sets.items()):
        if file_set not in work:
            continue
        r = results[file_set]
        published.append(r)
        d = datasets.setdefault(entry["dataset"], {"dataset": entry["dataset"]})
        d.update(status=r["status"], published_files=r.get("files", 0), published_bytes=r.get("bytes", 0),
                 deleted=r.get("deleted", 0), missing=r.get("missing", []))
        log.info("copy %s: dataset %r %s: %s file(s), %s bytes, %s deleted%s", plan["connector"], entry["dataset"],
                 r["status"], r.get("files", 0), r.get("bytes", 0), r.get("deleted", 0),
                 f"; not staged: {r.get('missing')}" if r.get("missing") else "")
    failures = [f"{f['origin']}: {f['error']}" for f in failed_files]
    failures += [f"task {t['task']}: {t['error']}" for t in tasks if t["status"] != "ok"]
    failures += [f"dataset {r['file_set']!r} not published: " + (r.get("error") or
                 f"{len(r.get('missing', []))} file(s) not staged: {', '.join(r.get('missing', [])[:5])}")
                 for r in published if r["status"] != "published"]
    seconds = max((t.get("duration_s") or 0 for t in tasks), default=0)
    copied = sum(t.get("bytes_read", 0) for t in tasks)
    summary = {
        "connector": plan["connector"], "kind": "copy",
        "status": "ok" if not failures else "failed",
        "files_copied": sum(t["records"] for t in tasks), "bytes_copied": sum(t["bytes"] for t in tasks),
        "bytes_read": copied, "files_reused": sum(t.get("reused", 0) for t in tasks),
        "bytes_reused": sum(t.get("bytes_reused", 0) for t in tasks), "files_skipped": plan.get("skipped", 0),
        "deleted": sum(r.get("deleted", 0) for r in published),
        "datasets": sorted(datasets.values(), key=lambda d: d["dataset"]),
        "tasks": [{"task": t["task"], "status": t["status"], "files": t["records"], "bytes": t["bytes"],
                   "reused": t.get("reused", 0), "failed": t["errors"], "seconds": t.get("duration_s"),
                   "mib_per_s": t.get("mib_per_s")} for t in tasks],
        "published": [r["file_set"] for r in published if r["status"] == "published"],
        "not_published": [r["file_set"] for r in published if r["status"] != "published"],
        "failures": failures, "mib_per_s": round(copied / 2**20 / seconds, 1) if seconds else None,
        "target": redact({"target.url": values["target.url"]}, set())["target.url"], "plan_url": plan["plan_url"],
    }
    return summary


def summary_lines(summary: Mapping[str, Any]) -> list[str]:
    """The readable summary of a copy run (task log, CLI)."""
    lines = [f"{summary['connector']} (copy): {summary['status']}, {summary['files_copied']} file(s) copied "
             f"({summary['bytes_copied']} bytes written), {summary['files_reused']} reused from staging, "
             f"{summary['files_skipped']} up to date, {summary['deleted']} deleted"
             + (f", {summary['mib_per_s']} MiB/s" if summary.get("mib_per_s") else "")]
    for d in summary["datasets"]:
        lines.append(f"  dataset {d['dataset'] or '(root)'!s}: {d.get('status', 'nothing to publish')}, "
                     f"{d.get('to_copy', 0)} to copy, {d.get('skipped', 0)} up to date, {d.get('deleted', 0)} deleted")
    lines += [f"  failed: {f}" for f in summary["failures"]]
    return lines
