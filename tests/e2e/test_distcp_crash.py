"""Distcp end to end: a copy killed in the middle of copying, and in the middle of publishing, then rerun.

The runs are real ``copycat copy`` processes (spark-submit on local[1] for the copy
kill), SIGKILLed as a crash would. A watcher walks the published tree the whole
time: no file in it may ever be partial. After the rerun the target must be
byte-identical to the source, and the byte counters must show that nothing staged
before the crash was copied again.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
COPYCAT = Path(sys.executable).parent / "copycat"


def make_tree(root: Path, datasets: int, files: int, size: int) -> dict[str, bytes]:
    """``datasets`` directories of ``files`` files of about ``size`` bytes each; returns rel path -> sha256."""
    out = {}
    rnd = hashlib.sha256(b"seed").digest() * (size // 32 + 1)
    for d in range(datasets):
        for i in range(files):
            rel = f"ds{d}/part-{i:03d}.bin"
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            data = bytes([d, i % 256]) + rnd[: size - i * 97]
            path.write_bytes(data)
            out[rel] = hashlib.sha256(data).digest()
    return out


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).digest()
            for p in root.rglob("*") if p.is_file() and "_copycat" not in p.parts}


class Watcher(threading.Thread):
    """Walks the published tree until stopped; records every file seen with a size other than its source's."""

    def __init__(self, source: Path, target: Path):
        super().__init__(daemon=True)
        self.source, self.target = source, target
        self.partial: list[str] = []
        self.looks = 0
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.is_set():
            try:
                seen = [p for p in self.target.rglob("*") if "_copycat" not in p.parts]
            except FileNotFoundError:  # a directory vanished while walking (staging is cleaned up)
                seen = []
            for p in seen:
                rel = p.relative_to(self.target)
                try:
                    if p.is_file() and p.stat().st_size != (self.source / rel).stat().st_size:
                        self.partial.append(str(rel))
                except FileNotFoundError:
                    pass
            self.looks += 1
            time.sleep(0.005)

    def stop(self):
        self.stopped.set()
        self.join(10)


def job(tmp_path: Path, **extra) -> Path:
    config = {"name": "crash", "source.url": str(tmp_path / "src"), "target.url": str(tmp_path / "dst"),
              "dataset.pattern": "*", "tasks.max": 1, **extra}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(config))
    return path


def env():
    e = dict(os.environ)
    e["PATH"] = f"{Path(sys.executable).parent}:{e.get('PATH', '')}"
    e.setdefault("PYSPARK_PYTHON", sys.executable)
    return e


def staged_markers(target: Path) -> list[dict]:
    """The done records of the staged files, in both layouts: ``<file id>/_done.json``, and the done
    journals' records of files staged flat (``<file id>.data`` there)."""
    from airflow_copycat.distcp.staged import SetDir

    staging = target / "_copycat" / "distcp" / "staging"
    records = []
    for path in staging.rglob("_done.json"):
        try:
            records.append(json.loads(path.read_text()))
        except (FileNotFoundError, ValueError):
            continue
    for set_dir in (staging.iterdir() if staging.is_dir() else ()):
        scan = SetDir.scan(str(set_dir))
        records += [r for i, r in scan.records.items() if i in scan.data]
    return records


def test_killed_mid_copy_then_rerun_copies_only_what_was_not_staged(tmp_path):
    # Given 3 datasets of 60 files (about 2 MB each), copied by one Spark task
    files = 3 * 60
    source = make_tree(tmp_path / "src", 3, 60, 2 << 20)
    target = tmp_path / "dst"
    config = job(tmp_path)
    watcher = Watcher(tmp_path / "src", target)
    watcher.start()
    # When the copy is killed (the whole process group: CLI, spark-submit, JVM, Python workers) once some files
    # are staged
    proc = subprocess.Popen([str(COPYCAT), "copy", str(config), "--master", "local[1]", "--json"], env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, cwd=ROOT)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and len(staged_markers(target)) < 5 and proc.poll() is None:
        time.sleep(0.005)
    assert proc.poll() is None, "the copy ended before it could be killed: make the tree larger"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    # PySpark's Python worker runs in a process group of its own: like a real orphaned executor it may finish the
    # file in hand before it notices its JVM is gone. Count what is staged once that has settled.
    count, settled = -1, time.monotonic()
    while time.monotonic() - settled < 3:
        if len(staged_markers(target)) != count:
            count, settled = len(staged_markers(target)), time.monotonic()
        time.sleep(0.1)
    staged = staged_markers(target)
    staged_bytes = sum(m["bytes_read"] for m in staged)
    assert 5 <= len(staged) < files, f"the kill should land in the middle of the copy, {len(staged)} of {files} staged"
    # Then nothing is published: publishing starts only once every task finished
    assert (tree(target) if target.exists() else {}) == {}
    # When the copy runs again to the end
    rerun = subprocess.run([str(COPYCAT), "copy", str(config), "--master", "local[1]", "--json"], env=env(),
                           capture_output=True, text=True, cwd=ROOT, timeout=600)
    watcher.stop()
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    summary = json.loads(rerun.stdout.strip().splitlines()[-1])
    # Then the target is byte-identical to the source, no partial file was ever visible, and the rerun read only
    # the bytes that were not staged when the first run died
    assert tree(target) == source
    assert watcher.partial == [] and watcher.looks > 10
    total = sum((tmp_path / "src" / rel).stat().st_size for rel in source)
    assert summary["files_reused"] == len(staged)
    assert summary["bytes_reused"] == staged_bytes
    assert summary["bytes_read"] == total - staged_bytes
    # And a third run finds everything up to date
    again = subprocess.run([str(COPYCAT), "copy", str(config), "--in-process", "--json"], env=env(),
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert json.loads(again.stdout.strip().splitlines()[-1])["files_skipped"] == files


KILL_IN_PUBLISH = textwrap.dedent("""
    import os, signal, sys
    from airflow_copycat.storage import AtomicFiles

    renames = [0]
    real = AtomicFiles.rename
    def rename(*args, **kwargs):
        renames[0] += 1
        if renames[0] > int(os.environ["KILL_AFTER_RENAMES"]):
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    AtomicFiles.rename = rename
    from airflow_copycat import cli
    sys.exit(cli.main(sys.argv[1:]))
""")


def test_killed_mid_publish_then_rerun_finishes_the_publish_from_its_log(tmp_path):
    from airflow_copycat.storage import AtomicFiles

    if not callable(getattr(AtomicFiles, "rename", None)):
        pytest.fail("the test kills the publish at its renames: AtomicFiles.rename is gone, adapt the test")
    # Given two datasets of 40 small files, copied in process
    source = make_tree(tmp_path / "src", 2, 40, 20000)
    target = tmp_path / "dst"
    config = job(tmp_path)
    watcher = Watcher(tmp_path / "src", target)
    watcher.start()
    # When the copying process is SIGKILLed after 50 renames of the publish (the second dataset half published)
    script = tmp_path / "kill_in_publish.py"
    script.write_text(KILL_IN_PUBLISH)
    first = subprocess.run([sys.executable, str(script), "copy", str(config), "--in-process", "--json"],
                           env=dict(env(), KILL_AFTER_RENAMES="50"), capture_output=True, text=True, cwd=ROOT,
                           timeout=300)
    assert first.returncode == -signal.SIGKILL, first.stdout + first.stderr
    # Then its publish log is there, and the half-published dataset shows only whole files
    assert list((target / "_copycat" / "distcp" / "wal").glob("*.json"))
    half = tree(target)
    assert 40 < len(half) < 80 and all(source[rel] == digest for rel, digest in half.items())
    # When the copy runs again
    rerun = subprocess.run([str(COPYCAT), "copy", str(config), "--in-process", "--json"], env=env(),
                           capture_output=True, text=True, cwd=ROOT, timeout=300)
    watcher.stop()
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    summary = json.loads(rerun.stdout.strip().splitlines()[-1])
    # Then the log was replayed, the target equals the source, nothing was copied again, no partial file was seen
    assert tree(target) == source
    assert summary["bytes_read"] == 0 and summary["files_copied"] == 0
    assert watcher.partial == []
    assert not list((target / "_copycat" / "distcp" / "wal").glob("*.json"))
    assert not staged_markers(target)
