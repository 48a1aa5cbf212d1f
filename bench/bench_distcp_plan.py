"""Plan time of a distcp job on large trees of small files: must grow linearly, not quadratically.

Input: for each size N (``--sizes``, default 10k and 100k), a tree of N files of
16-24 bytes in 100 directories on local disk (each directory one dataset,
``dataset.pattern=*``), and a target holding hard links of the files of every
other directory (same size and mtime: up to date), so the diff really compares.

* baseline ``walk_stat_<n>``: a plain ``os.walk`` of the source + ``os.stat`` of every file.
* ``distcp_plan_<n>``: what the plan step does -- ``filesystem`` + ``find_datasets`` +
  ``list_files`` of every dataset + ``diff`` (update and delete, one target listing
  and one manifest read per dataset) + ``work_units`` + ``pack`` into 8 tasks.
* ``copy_job_plan_<n>``: the whole plan step of a copy job (``make_copy_plan``): the
  above plus replaying leftover logs and writing the plan files under the target.
* ``distcp_plan_<big>_vs_<small>``: the largest size's plan time again, as a ratio
  against the smallest size's: linear planning gives about big/small (10).

Each figure is the best of ``--repeat`` runs (default 3) on a warm page cache, after an
``os.sync()`` so that writing back the fresh tree does not overlap the timings.
Verification: the plan lists exactly N files, skips exactly the linked half,
copies the other half, packs every unit once and deletes nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import fail, note, profiled, report, timed

from airflow_copycat.distcp.config import parse_copy_config
from airflow_copycat.distcp.diff import diff
from airflow_copycat.distcp.listing import filesystem, find_datasets, list_files
from airflow_copycat.distcp.workunits import pack, work_units
from airflow_copycat.runtime.copy_job import make_copy_plan

DIRS = 100
TASKS = 8


def make_tree(base: str, n: int) -> tuple[str, str, int]:
    """Source and target trees of ``n`` files; returns (source, target, files linked into the target)."""
    src, dst = os.path.join(base, "src"), os.path.join(base, "dst")
    linked = 0
    for d in range(DIRS):
        sd, td = os.path.join(src, f"d{d:03d}"), os.path.join(dst, f"d{d:03d}")
        os.makedirs(sd)
        os.makedirs(td)
        for i in range(d, n, DIRS):
            path = os.path.join(sd, f"part-{i:07d}.json")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, b'{"n": %d}\n' % i + b" " * (i % 9))
            os.close(fd)
            if d % 2 == 0:
                os.link(path, os.path.join(td, f"part-{i:07d}.json"))
                linked += 1
    return src, dst, linked


def walk_stat(src: str) -> int:
    n = 0
    for dirpath, _dirs, files in os.walk(src):
        for name in files:
            os.stat(os.path.join(dirpath, name))
            n += 1
    return n


def plan(src: str, dst: str) -> dict:
    cfg = parse_copy_config({"name": "bench", "source.url": src, "target.url": dst, "dataset.pattern": "*",
                             "update": True, "delete": True, "tasks.max": TASKS})
    fs, root = filesystem(cfg["source.url"], cfg["source.options"])
    datasets = find_datasets(fs, root, cfg["dataset.pattern"])
    files = [f for d in datasets for f in list_files(fs, root, d, cfg)]
    tfs, troot = filesystem(cfg["target.url"], cfg["target.options"])
    result = diff(files, tfs, troot, datasets, cfg)
    tasks = pack(work_units(result.to_copy, cfg["block.split.size"]), cfg["tasks.max"])
    return {"datasets": len(datasets), "files": len(files), "skipped": len(result.skipped),
            "to_copy": len(result.to_copy), "packed": sum(len(t) for t in tasks), "tasks": len(tasks),
            "deletes": sum(len(v) for v in result.deletes.values())}


def verify(n: int, linked: int, got: dict) -> None:
    want = {"datasets": DIRS, "files": n, "skipped": linked, "to_copy": n - linked, "packed": n - linked,
            "tasks": TASKS, "deletes": 0}
    if got != want:
        fail(f"plan of {n} files: got {got}, expected {want}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000", help="comma-separated file counts (default 10000,100000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure; the best is reported (default 3)")
    ap.add_argument("--profile", action="store_true", help="also run the largest plan under cProfile (stderr)")
    args = ap.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    plan_times: dict[int, float] = {}
    for n in sizes:
        base = tempfile.mkdtemp(prefix=f"copycat-bench-plan-{n}-")
        try:
            with timed() as t:
                src, dst, linked = make_tree(base, n)
                os.sync()  # no write-back of the new tree during the measurements
            note(f"{n} files in {DIRS} directories (+{linked} hard links in the target) created in {t[0]:.1f} s")
            walks, plans = [], []
            for _ in range(max(1, args.repeat)):
                with timed() as t:
                    seen = walk_stat(src)
                walks.append(t[0])
                if seen != n:
                    fail(f"os.walk saw {seen} files, expected {n}")
                with timed() as t:
                    got = plan(src, dst)
                plans.append(t[0])
                verify(n, linked, got)
            jobs = []
            for _ in range(max(1, args.repeat)):
                with timed() as t:
                    job = make_copy_plan({"name": "bench", "source.url": src, "target.url": dst,
                                          "dataset.pattern": "*", "update": True, "delete": True, "tasks.max": TASKS})
                jobs.append(t[0])
                if job["to_copy"] != n - linked:
                    fail(f"make_copy_plan of {n} files: {job['to_copy']} to copy, expected {n - linked}")
            note(f"{n} files: walk+stat {', '.join(f'{x:.2f}' for x in walks)} s; "
                 f"plan {', '.join(f'{x:.2f}' for x in plans)} s; plan result {got}")
            if args.profile and n == sizes[-1]:
                profiled(lambda: plan(src, dst), f"the plan of {n} files")
            label = f"{n // 1000}k" if n % 1000 == 0 else str(n)
            baseline, best = min(walks), min(plans)
            plan_times[n] = best
            report(f"walk_stat_{label}", baseline, "s", 1.0, "itself")
            report(f"distcp_plan_{label}", best, "s", best / baseline, f"walk_stat_{label}")
            report(f"copy_job_plan_{label}", min(jobs), "s", min(jobs) / baseline, f"walk_stat_{label}")
        finally:
            shutil.rmtree(base, ignore_errors=True)
    if len(sizes) > 1:
        small, big = sizes[0], sizes[-1]
        lab = {n: f"{n // 1000}k" if n % 1000 == 0 else str(n) for n in (small, big)}
        ratio = plan_times[big] / plan_times[small]
        note(f"plan time grows {ratio:.1f}x for {big / small:.0f}x the files (linear: ~{big / small:.0f})")
        report(f"distcp_plan_{lab[big]}_vs_{lab[small]}", plan_times[big], "s", ratio, f"distcp_plan_{lab[small]}")


if __name__ == "__main__":
    main()
