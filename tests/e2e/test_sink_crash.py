"""A files sink killed in the middle of publishing, then rerun: no duplicate, no gap.

The whole path is real: lines go into Kafka through the file source, the sink
reads them from the broker through the runtime's sink loop, and the process is
SIGKILLed for real half-way through moving a flush's files into place.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from airflow_copycat.runtime.executor import run_group
from airflow_copycat.runtime.plan import make_plan
from airflow_copycat.runtime.worker import WorkerConfig

# Runs one plan group in a child process that SIGKILLs itself after its N-th file rename.
_KILLER = textwrap.dedent("""
    import json, os, signal, sys
    from airflow_copycat.runtime.executor import run_group
    from airflow_copycat.storage import AtomicFiles
    group, worker, kill_after = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
    real_rename, seen = AtomicFiles.rename, [0]
    def rename(self, src, dst):
        real_rename(self, src, dst)
        if "/_copycat/staging/" in str(src):
            seen[0] += 1
            if seen[0] == kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
    AtomicFiles.rename = rename
    print(json.dumps(run_group(group, worker)))
""")


def test_sink_killed_mid_publish_then_rerun_has_no_duplicate_and_no_gap(worker_props, unique, tmp_path):
    # Given 5,000 lines in a 2-partition topic
    lines = [f"event {i}" for i in range(5000)]
    (tmp_path / "in.log").write_text("\n".join(lines) + "\n")
    topic = f"crash-{unique}"
    source = {"name": f"crash-src-{unique}", "connector.class": "FileStreamSource", "file": str(tmp_path / "in.log"),
              "topic": topic, "topic.creation.default.partitions": 2}
    worker = WorkerConfig(worker_props, env={})
    for g in make_plan(source, worker)["groups"]:
        assert run_group(g, worker_props)["records"] == 5000
    # And a JSON files sink that publishes every 700 records per partition
    out = tmp_path / "out"
    sink = {"name": f"crash-sink-{unique}", "connector.class": "FilesSink", "topics": topic, "store.url": str(out),
            "format.class": "json", "flush.size": 700}
    (group,) = make_plan(sink, worker)["groups"]
    # When the sink process is killed right after the 3rd file of a publish was moved into place
    proc = subprocess.run([sys.executable, "-c", _KILLER, json.dumps(group), json.dumps(worker_props), "3"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    published = list((out / "topics" / topic).rglob("*.json"))
    assert 0 < len(published) < 8, "the kill must land in the middle of the run"
    # And the sink is run again
    (group,) = make_plan(sink, worker)["groups"]
    result = run_group(group, worker_props)
    assert result["status"] == "ok", result
    # Then every line is in the output exactly once
    written = [json.loads(line) for f in sorted((out / "topics" / topic).rglob("*.json")) for line in f.read_text().splitlines()]
    assert len(written) == 5000
    assert sorted(written) == sorted(lines)
    # And the rerun resumed where the destination said, so it did not re-read everything
    assert result["records"] < 5000
    # And a third run finds nothing to do
    (group,) = make_plan(sink, worker)["groups"]
    assert run_group(group, worker_props)["records"] == 0
