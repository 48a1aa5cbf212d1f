"""Distcp: copying a ~2 GB tree of 2,000 files, against ``cp -r`` of the same tree.

Input: ``../shared/bench/gen_file_tree.py`` (2,000 files, ~2 GB of incompressible
bytes over three directory levels; ``--files`` scales it), generated once into a
temp dir. Each copy goes to a fresh target on the same disk; the page cache is
warm for every contender alike (the tree is read once before timing).

* ``cp_r`` (baseline): ``cp -r SRC DST``.
* ``copy_in_process``: ``copycat copy --in-process`` (plan, copy with md5
  checksums, publish every dataset through its log), tasks.max=2.
* ``copy_spark``: the same through ``spark-submit --master local[2]``, tasks.max=2.
* ``spark_startup``: a copy of one tiny file through spark-submit: the fixed cost
  included in ``copy_spark``, reported on its own.

Every target is verified byte for byte against the source (sizes and sha256 of a
sample; all files' sizes). Datasets are the 20 top-level directories.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import fail, note, report, timed

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT.parent / "shared" / "bench" / "gen_file_tree.py"
COPYCAT = Path(sys.executable).parent / "copycat"


def files_of(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*")
            if p.is_file() and "_copycat" not in p.parts}


def verify(src: Path, dst: Path, what: str) -> None:
    a, b = files_of(src), files_of(dst)
    if a != b:
        fail(f"{what}: target differs from source ({len(a)} vs {len(b)} files)")
    for rel in random.Random(1).sample(sorted(a), min(50, len(a))):
        if hashlib.sha256((src / rel).read_bytes()).digest() != hashlib.sha256((dst / rel).read_bytes()).digest():
            fail(f"{what}: {rel} differs")
    note(f"{what}: verified {len(a)} files")


def copycat_copy(src: Path, dst: Path, tmp: Path, name: str, *args: str) -> tuple[float, dict]:
    config = tmp / f"{name}.json"
    config.write_text(json.dumps({"name": name, "source.url": str(src), "target.url": str(dst),
                                  "dataset.pattern": "*", "tasks.max": 2}))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    with timed() as t:
        r = subprocess.run([str(COPYCAT), "copy", str(config), "--json", *args], capture_output=True, text=True,
                           env=env)
    if r.returncode != 0:
        fail(f"{name}: copycat copy failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return t[0], json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="copycat-bench-distcp-") as tmp_name:
        tmp = Path(tmp_name)
        src = tmp / "src"
        with timed() as t:
            out = subprocess.run([sys.executable, str(GEN), str(src), "--files", str(args.files)],
                                 capture_output=True, text=True, check=True).stdout.strip()
        note(f"generated {out} in {t[0]:.1f}s")
        total = sum(files_of(src).values())
        with timed() as t:
            for p in src.rglob("*"):
                if p.is_file():
                    with open(p, "rb") as f:
                        while f.read(1 << 24):
                            pass
        note(f"read the tree once ({total / 2**30:.2f} GiB) in {t[0]:.1f}s")

        dst = tmp / "cp"
        with timed() as t_cp:
            subprocess.run(["cp", "-r", str(src), str(dst)], check=True)
        verify(src, dst, "cp -r")
        shutil.rmtree(dst)

        dst = tmp / "inproc"
        t_in, s_in = copycat_copy(src, dst, tmp, "bench-inproc", "--in-process")
        verify(src, dst, "copy --in-process")
        note(f"in process: {s_in['files_copied']} files, {s_in['bytes_copied']} bytes, {t_in:.1f}s")
        shutil.rmtree(dst)

        dst = tmp / "spark"
        t_sp, s_sp = copycat_copy(src, dst, tmp, "bench-spark", "--master", "local[2]")
        verify(src, dst, "copy on Spark")
        shutil.rmtree(dst)

        tiny = tmp / "tiny"
        (tiny / "d").mkdir(parents=True)
        (tiny / "d" / "f").write_bytes(b"x")
        t_start, _ = copycat_copy(tiny, tmp / "tiny-dst", tmp, "bench-startup", "--master", "local[2]")

    report("cp_r", t_cp[0], "s", 1.0, "itself")
    report("copy_in_process", t_in, "s", t_in / t_cp[0], "cp_r")
    report("copy_spark", t_sp, "s", t_sp / t_cp[0], "cp_r")
    report("copy_spark_minus_startup", t_sp - t_start, "s", (t_sp - t_start) / t_cp[0], "cp_r")
    report("spark_startup", t_start, "s", t_start / t_cp[0], "cp_r")
    report("copy_in_process_throughput", total / 2**20 / t_in, "MiB/s", t_cp[0] / t_in, "cp_r (time ratio inverted)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
