"""``copycat copy``: a Distcp copy job -- plan, copy in task groups, publish each dataset."""

from __future__ import annotations

import argparse
import time

from .common import _err, _json, _load_config, _load_worker, _out, _scrub
from .run import _group_runner, _remove_work_dir, _run_groups, _spark_conf, _work_dir


# ---------------------------------------------------------------------------------------------
# copy


def cmd_copy(args: argparse.Namespace) -> int:
    from ..runtime import copy_job

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
