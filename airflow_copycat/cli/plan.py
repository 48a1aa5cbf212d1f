"""``copycat validate`` and ``copycat plan``: check connector configs, print a plan."""

from __future__ import annotations

import argparse
import json

from .common import UserError, _check_all, _load_worker, _out, _raise_if_invalid, _require_kafka


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
            from ..runtime import plugins

            _out(f"{c.label}: valid, {c.kind} connector {c.name!r} ({plugins.class_path(c.cls)})")
    return 1 if any(c.error or c.problems for c in checked) else 0


# ---------------------------------------------------------------------------------------------
# plan


def cmd_plan(args: argparse.Namespace) -> int:
    from ..runtime.plan import make_plan

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
    plan = make_plan(c.raw, worker, max_tasks=args.max_tasks, max_groups=args.max_groups, previous=previous,
                     validated=c.validated)
    _out(json.dumps(plan, indent=2, default=str))
    return 0
