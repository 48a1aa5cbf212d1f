"""Distcp: copying a ~2 GB tree of 2,000 files, against ``cp -r`` (and ``cp -r`` + ``md5sum``) of the same tree.

Input: ``../shared/bench/gen_file_tree.py`` (2,000 files, ~2 GB of incompressible
bytes over three directory levels; ``--files`` scales it), generated once into a
temp dir (``--tree DIR``: an already generated tree, kept). Each copy goes to a
fresh target on the same disk. Before every timed contender the tree is read
once (a warm page cache for every contender alike) and ``sync`` writes back what
the previous contender left dirty, so no contender pays for another's writes.

A verified target is emptied (each file truncated to 0 bytes), not deleted, until
the end of the run: the page cache its bytes held is free again, and no contender
creates its files just after thousands of files were deleted -- ext4 without a
journal skips the inodes freed in the last minute when it allocates one, which
cost about 1 ms per created file here right after a 2,000-file target was
removed, 2 s for the whole tree, on whichever contender came next.

Python bytecode: copycat runs as installed, with its modules compiled once
(an untimed copy of a tiny tree before the rounds, into a cache in the temp dir),
also where the environment sets ``PYTHONDONTWRITEBYTECODE`` -- else each timed
run compiles about 100 modules (0.15 s here), which no installed package does.

* ``cp_r`` (baseline): ``cp -r SRC DST``.
* ``cp_r_md5sum`` (baseline): ``cp -r SRC DST`` then ``md5sum`` of every file of
  DST (``find -print0 | xargs -0 md5sum``: one process per few thousand files),
  timed as one program: what a hand-written checked copy costs.
* ``copy_in_process_nochecksum``: ``copycat copy --in-process`` (plan, copy with
  ``checksum=none``, publish every dataset through its log), tasks.max=2; vs ``cp_r``.
* ``copy_in_process``: the same with md5 checksums (the default); vs ``cp_r_md5sum``
  (and vs ``cp_r``).
* ``copy_spark``: the md5 copy through ``spark-submit --master local[2]``,
  tasks.max=2 (``--no-spark``: skipped, with the two figures below).
* ``spark_startup``: a copy of one tiny file through spark-submit: the fixed cost
  included in ``copy_spark``, reported on its own.

``--rounds N`` (default 2) runs the baselines and the in-process copies N times,
interleaved, and reports each one's best time (the machine is shared: the best of
a few runs is the least disturbed one, for every contender alike).

Every target is verified byte for byte against the source (sizes of all files;
sha256 of a sample). Datasets are the 20 top-level directories.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
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


def empty(root: Path) -> None:
    """Truncate every file below ``root`` (its page cache freed, its inodes kept until the run ends)."""
    for dirpath, _, names in os.walk(root):
        for name in names:
            os.truncate(os.path.join(dirpath, name), 0)


def python_env(tmp: Path) -> dict[str, str]:
    """The environment of copycat: the venv's PATH, bytecode compiled once into a cache in ``tmp``."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
               PYTHONPYCACHEPREFIX=str(tmp / "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    return env


def warm(src: Path) -> None:
    """Read the tree (page cache warm for the next contender) and write back dirty pages."""
    for p in src.rglob("*"):
        if p.is_file():
            with open(p, "rb") as f:
                while f.read(1 << 24):
                    pass
    os.sync()


def copycat_copy(src: Path, dst: Path, tmp: Path, name: str, *args: str, checksum: str = "md5") -> tuple[float, dict]:
    config = tmp / f"{name}.json"
    config.write_text(json.dumps({"name": name, "source.url": str(src), "target.url": str(dst),
                                  "dataset.pattern": "*", "tasks.max": 2, "checksum": checksum}))
    with timed() as t:
        r = subprocess.run([str(COPYCAT), "copy", str(config), "--json", *args], capture_output=True, text=True,
                           env=python_env(tmp))
    if r.returncode != 0:
        fail(f"{name}: copycat copy failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return t[0], json.loads(r.stdout.strip().splitlines()[-1])


def cp_r(src: Path, dst: Path) -> float:
    with timed() as t:
        subprocess.run(["cp", "-r", str(src), str(dst)], check=True)
    return t[0]


def cp_r_md5sum(src: Path, dst: Path) -> float:
    script = 'cp -r "$1" "$2" && find "$2" -type f -print0 | xargs -0 md5sum > /dev/null'
    with timed() as t:
        subprocess.run(["sh", "-c", script, "sh", str(src), str(dst)], check=True)
    return t[0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--tree", type=Path, help="an already generated tree to copy (kept); default: generate one")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-spark", action="store_true", help="skip copy_spark and spark_startup")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="copycat-bench-distcp-") as tmp_name:
        tmp = Path(tmp_name)
        src = args.tree.resolve() if args.tree else tmp / "src"
        if not args.tree:
            with timed() as t:
                out = subprocess.run([sys.executable, str(GEN), str(src), "--files", str(args.files)],
                                     capture_output=True, text=True, check=True).stdout.strip()
            note(f"generated {out} in {t[0]:.1f}s")
        total = sum(files_of(src).values())
        best: dict[str, float] = {}
        tiny = tmp / "tiny"
        (tiny / "d").mkdir(parents=True)
        (tiny / "d" / "f").write_bytes(b"x")
        for checksum in ("none", "md5"):  # untimed: compiles copycat's modules once
            copycat_copy(tiny, tmp / f"warm-up-{checksum}", tmp, f"bench-warm-up-{checksum}", "--in-process",
                         checksum=checksum)
        runs = 0

        def target(name: str) -> Path:
            nonlocal runs
            runs += 1
            return tmp / f"{name}-{runs}"

        def keep(name: str, seconds: float) -> None:
            best[name] = min(seconds, best.get(name, seconds))
            note(f"round {r + 1}: {name} {seconds:.2f}s")

        for r in range(args.rounds):
            warm(src)
            dst = target("cp")
            keep("cp_r", cp_r(src, dst))
            verify(src, dst, "cp -r")
            empty(dst)

            warm(src)
            dst = target("cp")
            keep("cp_r_md5sum", cp_r_md5sum(src, dst))
            verify(src, dst, "cp -r + md5sum")
            empty(dst)

            for checksum, name in (("none", "copy_in_process_nochecksum"), ("md5", "copy_in_process")):
                warm(src)
                dst = target("inproc")
                t_in, s_in = copycat_copy(src, dst, tmp, f"bench-inproc-{checksum}", "--in-process",
                                          checksum=checksum)
                keep(name, t_in)
                verify(src, dst, f"copy --in-process (checksum={checksum})")
                note(f"in process, checksum={checksum}: {s_in['files_copied']} files, {s_in['bytes_copied']} bytes")
                empty(dst)

        if not args.no_spark:
            warm(src)
            dst = target("spark")
            t_sp, _ = copycat_copy(src, dst, tmp, "bench-spark", "--master", "local[2]")
            verify(src, dst, "copy on Spark")
            empty(dst)

            t_start, _ = copycat_copy(tiny, tmp / "tiny-dst", tmp, "bench-startup", "--master", "local[2]")

    t_cp, t_cp_md5 = best["cp_r"], best["cp_r_md5sum"]
    t_none, t_in = best["copy_in_process_nochecksum"], best["copy_in_process"]
    report("cp_r", t_cp, "s", 1.0, "itself")
    report("cp_r_md5sum", t_cp_md5, "s", 1.0, "itself")
    report("copy_in_process_nochecksum", t_none, "s", t_none / t_cp, "cp_r")
    report("copy_in_process", t_in, "s", t_in / t_cp_md5, "cp_r_md5sum")
    report("copy_in_process", t_in, "s", t_in / t_cp, "cp_r")
    if not args.no_spark:
        report("copy_spark", t_sp, "s", t_sp / t_cp_md5, "cp_r_md5sum")
        report("copy_spark_minus_startup", t_sp - t_start, "s", (t_sp - t_start) / t_cp_md5, "cp_r_md5sum")
        report("spark_startup", t_start, "s", t_start / t_cp, "cp_r")
    report("copy_in_process_throughput", total / 2**20 / t_in, "MiB/s", t_cp_md5 / t_in,
           "cp_r_md5sum (time ratio inverted)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
