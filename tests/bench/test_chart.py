"""bench/chart.py turns the log of a ``make bench`` run into bench/results.json and docs/images/bench.svg.

The log below is real: the start of a run as ``make bench`` logs it (header, script marker, the first
script's stderr and stdout, librdkafka's log lines included; two of them wrapped here), followed by
figures other benchmarks printed in full runs (copied from bench/README.md), so that figures with and
without targets are charted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "bench" / "chart.py"
SVG = "{http://www.w3.org/2000/svg}"

LOG = """\
bench-run: date=2026-11-25T04:17:59Z nproc=2 python=3.11.7 commit=94ef080+changes
bench-script: bench/bench_spark_startup.py
%3|1795580279.561|FAIL|rdkafka#producer-1| [thrd:127.0.0.1:52629/bootstrap]: 127.0.0.1:52629/bootstrap: \
Connect to ipv4#127.0.0.1:52629 failed: Connection refused (after 0ms in state CONNECT)
[04:17:59] embedded broker (Tansu, memory storage) at 127.0.0.1:52629
[04:18:02] in-process run_group: 0.53 s
[04:18:02] package_zip: 0.12 s
[04:18:21] spark-submit group: 18.71 s (task time inside Spark: [0.455])
[04:18:41] spark-submit trivial: 19.58 s
bench inprocess_group_10k: 0.53 s ratio=1.00 vs itself
bench spark_submit_group_10k: 18.71 s ratio=35.33 vs inprocess_group_10k
bench spark_submit_trivial: 19.58 s ratio=36.97 vs inprocess_group_10k
%6|1795580326.576|FAIL|rdkafka#producer-9| [thrd:127.0.0.1:52629/111]: 127.0.0.1:52629/111: Disconnected: \
connection closed by peer: receive 0 after POLLIN (after 46423ms in state UP)
bench-script: bench/bench_postgres_cdc.py
bench raw_producer_json_schemas: 26326 changes/s ratio=1.00 vs itself
bench cdc_json_schemas: 3515 changes/s ratio=0.13 vs raw_producer_json_schemas
bench cdc_wal_retained_after_next_run: 5169056 B ratio=4.93 vs the 1 MB target
bench-script: bench/bench_jdbc.py
bench jdbc_incrementing_1task_peak_rss: 238 MB ratio=0.48 vs the 500 MB target
bench-script: bench/bench_distcp.py
bench copy_in_process: 3.24 s ratio=0.81 vs cp_r_md5sum
bench copy_in_process: 3.24 s ratio=4.50 vs cp_r
bench copy_in_process_throughput: 643 MiB/s ratio=1.23 vs cp_r_md5sum (time ratio inverted)
"""


def _chart_module():
    spec = importlib.util.spec_from_file_location("copycat_bench_chart", CHART)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHART), *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


def _texts(svg: Path) -> list[str]:
    """Every text of the SVG, parsed as XML (a malformed document fails here)."""
    return [t.text or "" for t in ET.parse(svg).getroot().iter(f"{SVG}text")]


def test_a_runs_log_becomes_the_results_json_and_a_chart_naming_every_figure(tmp_path: Path):
    log, out_json, out_svg = tmp_path / "bench.log", tmp_path / "results.json", tmp_path / "bench.svg"
    log.write_text(LOG, encoding="utf-8")

    done = _run("--from-log", str(log), "--json", str(out_json), "--svg", str(out_svg))
    assert done.returncode == 0, done.stderr
    assert "10 figures (8 charted)" in done.stdout

    results = json.loads(out_json.read_text(encoding="utf-8"))
    run = results["run"]
    assert (run["date"], run["nproc"], run["python"], run["commit"]) == (
        "2026-11-25T04:17:59Z", 2, "3.11.7", "94ef080+changes")
    assert run["scripts"] == ["bench_spark_startup.py", "bench_postgres_cdc.py", "bench_jdbc.py", "bench_distcp.py"]
    assert "bench_file_to_kafka.py" in run["not_run"] and "bench_jdbc.py" not in run["not_run"]

    figures = {(f["name"], f["baseline"]): f for f in results["figures"]}
    assert len(figures) == len(results["figures"]) == 10  # every bench line, in the log's order, nothing else
    assert [f["name"] for f in results["figures"]][:3] == [
        "inprocess_group_10k", "spark_submit_group_10k", "spark_submit_trivial"]
    spark = figures[("spark_submit_group_10k", "inprocess_group_10k")]
    assert spark == {"script": "bench_spark_startup.py", "name": "spark_submit_group_10k", "value": 18.71,
                     "unit": "s", "ratio": 35.33, "baseline": "inprocess_group_10k", "is_baseline": False,
                     "better": "lower", "target": None, "target_met": None, "target_source": None}
    assert figures[("inprocess_group_10k", "itself")]["is_baseline"] is True
    # targets from the benchmarks' docs: missed, met, and per baseline (copy_in_process has one against
    # cp -r + md5sum only)
    cdc = figures[("cdc_json_schemas", "raw_producer_json_schemas")]
    assert (cdc["better"], cdc["target"], cdc["target_met"]) == ("higher", 0.5, False)
    wal = figures[("cdc_wal_retained_after_next_run", "the 1 MB target")]
    assert (wal["better"], wal["target"], wal["target_met"]) == ("lower", 1.0, False)
    rss = figures[("jdbc_incrementing_1task_peak_rss", "the 500 MB target")]
    assert (rss["value"], rss["unit"], rss["target"], rss["target_met"]) == (238, "MB", 1.0, True)
    assert figures[("copy_in_process", "cp_r_md5sum")]["target_met"] is True
    assert figures[("copy_in_process", "cp_r")]["target"] is None
    assert figures[("copy_in_process_throughput", "cp_r_md5sum (time ratio inverted)")]["better"] == "higher"

    texts = _texts(out_svg)
    charted = [f for f in results["figures"] if not f["is_baseline"]]
    for f in charted:  # every figure that is not a baseline has its bar, named, with its ratio and baseline
        assert f["name"] in texts, f["name"]
        assert any(t.startswith(f"{f['ratio']:.2f}x") and f"vs {f['baseline']}" in t for t in texts), f
    assert "inprocess_group_10k" not in texts  # a baseline is no bar (ratio 1 by definition)
    for script in ("bench_spark_startup.py", "bench_postgres_cdc.py", "bench_jdbc.py", "bench_distcp.py"):
        assert script in texts
    root = ET.parse(out_svg).getroot()
    bars = [g for g in root.iter(f"{SVG}g") if g.get("class") == "figure"]
    assert len(bars) == len(charted)
    markers = [p for p in root.iter(f"{SVG}path") if (p.findtext(f"{SVG}title") or "").startswith("target ")]
    assert len(markers) == sum(1 for f in charted if f["target"] is not None) == 4
    caption = "\n".join(texts)
    assert "Run of 2026-11-25T04:17:59Z, commit 94ef080+changes; nproc 2, Python 3.11.7." in caption
    assert "Scripts: bench_spark_startup.py; bench_postgres_cdc.py; bench_jdbc.py; bench_distcp.py." in caption
    assert "Not in this run: " in caption and "bench_file_to_kafka.py" in caption


def test_start_log_writes_the_header_of_this_machine_and_a_label_goes_into_the_caption(tmp_path: Path):
    log = tmp_path / "sub" / "bench.log"
    log.parent.mkdir()
    log.write_text("an older run\n", encoding="utf-8")
    done = _run("--start-log", str(log))
    assert done.returncode == 0, done.stderr
    header = log.read_text(encoding="utf-8")
    assert header.startswith("bench-run: date=") and header.count("\n") == 1, header  # truncated to the header
    assert f" nproc={os.cpu_count()} python={platform.python_version()}" in header

    with log.open("a", encoding="utf-8") as f:
        f.write("bench-script: bench/bench_spark_startup.py\n"
                "bench spark_submit_trivial: 19.58 s ratio=36.97 vs inprocess_group_10k\n")
    done = _run("--from-log", str(log), "--json", str(tmp_path / "r.json"), "--svg", str(tmp_path / "c.svg"),
                "--label", "A hand-made run.")
    assert done.returncode == 0, done.stderr
    results = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert results["run"]["nproc"] == os.cpu_count() and results["run"]["label"] == "A hand-made run."
    assert "A hand-made run." in _texts(tmp_path / "c.svg")


def test_a_log_without_figures_writes_nothing_and_fails(tmp_path: Path):
    log = tmp_path / "bench.log"
    log.write_text("bench-run: date=2026-11-25T04:17:59Z nproc=2 python=3.11.7\nBENCH VERIFICATION FAILED: x\n",
                   encoding="utf-8")
    done = _run("--from-log", str(log), "--json", str(tmp_path / "r.json"), "--svg", str(tmp_path / "c.svg"))
    assert done.returncode == 1
    assert "no 'bench <name>: ...' line" in done.stderr
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "c.svg").exists()


def test_the_committed_chart_shows_the_committed_results():
    """docs/images/bench.svg is the chart of bench/results.json, as bench/chart.py draws it: regenerate
    both with ``make bench`` (or ``bench/chart.py --from-log``), never one alone."""
    results_path, svg_path = ROOT / "bench" / "results.json", ROOT / "docs" / "images" / "bench.svg"
    if not results_path.exists():
        pytest.fail("bench/results.json is missing: run make bench (or bench/chart.py --from-log LOG)")
    results = json.loads(results_path.read_text(encoding="utf-8"))
    assert results["figures"], "bench/results.json holds no figure"
    assert svg_path.read_text(encoding="utf-8") == _chart_module().render_svg(results)
    texts = _texts(svg_path)
    for f in results["figures"]:
        if not f["is_baseline"] and f["ratio"] is not None:
            assert f["name"] in texts, f["name"]
    assert any(t.startswith(f"Run of {results['run']['date']}") for t in texts)
