"""The figures of one ``make bench`` run as JSON and as a chart (standard library only).

``make bench`` writes one log of the whole run (every script's stdout and stderr) under
``.copycat/`` and then calls ``--from-log`` on it::

    python bench/chart.py --start-log LOG                  # truncates LOG to the run's header line
    echo "bench-script: bench/bench_x.py [args]" >> LOG    # before each script (the Makefile does)
    python bench/bench_x.py 2>&1 | tee -a LOG
    python bench/chart.py --from-log LOG [--json PATH] [--svg PATH] [--label TEXT]

Contract of the log (a file of text lines; every other line is ignored):

* ``bench-run: date=<ISO-8601 UTC> nproc=<n> python=<version> [commit=<id>]`` -- the run's
  header, written by ``--start-log``. Without one the log file's modification time and this
  machine's nproc and Python version stand in (the caption says so).
* ``bench-script: <path> [args]`` -- the figures after it come from that script.
* ``bench <name>: <value> <unit> ratio=<r> vs <baseline>`` -- a figure, exactly as
  ``_common.report`` prints it (``vs itself``: a baseline of the same run).

Writes (defaults relative to the repository, so ``make bench`` updates the committed files):

* ``bench/results.json``: ``{"run": {date, nproc, python, commit, header, scripts, not_run,
  label}, "figures": [{script, name, value, unit, ratio, baseline, is_baseline, better,
  target, target_met, target_source}, ...]}`` in the log's order. ``better`` is ``higher``
  for rates (units ending in ``/s``) and ``lower`` for times, sizes and memory; ``target``
  is the ratio a figure should reach (at least it when ``better`` is ``higher``, at most
  it otherwise) where :data:`TARGETS` names one, else ``null``; ``target_met`` likewise.
  A ratio the log prints as ``inf``/``nan`` is ``null``.
* ``docs/images/bench.svg``: a horizontal bar per figure that is not a baseline (its ratio
  on a log scale, drawn from 1 = its baseline), the target marked on the bars that have one
  (green: met, red: missed; grey bars: no target), grouped by script, and a caption naming
  the run: date, commit, nproc, Python version, scripts run and those missing.

Exits 1 (writing nothing) when the log holds no figure.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

FIGURE = re.compile(r"^bench (?P<name>[^\s:]+): (?P<value>-?[0-9.]+|inf|nan) (?P<unit>\S+) "
                    r"ratio=(?P<ratio>-?[0-9.]+|inf|nan) vs (?P<baseline>.+?)\s*$")
HEADER = re.compile(r"^bench-run: (?P<fields>.*)$")
SCRIPT = re.compile(r"^bench-script: (?P<script>\S+)(?P<args>.*)$")


@dataclass(frozen=True)
class Target:
    """The ratio a figure should reach: names and baselines are regular expressions (whole match)."""

    name: str
    baseline: str
    ratio: float
    source: str


# Only targets the benchmarks' own docs state; the ratio is the figure's ratio against that baseline.
TARGETS = [
    Target(r"jdbc_[a-z+_]*_1task", "raw_producer_json", 0.7, "bench/README.md, Targets"),
    Target(r"jdbc_[a-z+_]*_1task_schemas", "raw_producer_json_schemas", 0.7, "bench/README.md, Targets"),
    Target(r"jdbc_[a-z+_]*_1task_avro_registry", "raw_producer_avro_registry", 0.5, "bench/README.md, Targets"),
    Target("jdbc_incremental_10k_inprocess", "psql_copy_binary_10k", 10.0, "bench/README.md, Targets"),
    Target("file_to_kafka_string", "raw_producer", 0.85, "bench/README.md, Targets"),
    Target("file_to_kafka_json", "raw_producer", 0.7, "bench/README.md, Targets"),
    Target("source_json_3_transforms", "source_json", 0.8, "bench/README.md, Targets"),
    Target(r"kafka_to_parquet_(string|struct)", r"raw_consumer_pyarrow_json_(string|struct)", 0.9,
           "bench/README.md, Targets"),
    Target("copy_in_process", "cp_r_md5sum", 1.2,
           "bench/README.md (bench_distcp): md5 copy target <= 1.2x cp -r + md5sum"),
    Target("copy_in_process_nochecksum", "cp_r", 1.2,
           "bench/README.md (bench_distcp): checksum=none target <= 1.2x cp -r"),
    Target(r"cdc_(json_schemas|json|avro)", r"raw_producer_.*", 0.5,
           "bench/README.md (bench_postgres_cdc): throughput target 0.5x of the raw producer"),
    Target(r"cdc_wal_.*", r"the 1 MB target", 1.0,
           "bench_postgres_cdc: under 1 MB of WAL after a run that caught up"),
    Target(r"jdbc_.*_1task_peak_rss", r"the 500 MB target", 1.0,
           "bench_jdbc: peak resident memory of the 1-task import under 500 MB"),
    Target("jdbc_sink_upsert", "psql_copy_from", 0.5,
           "bench/README.md (bench_jdbc_sink), docs/limits.md: 0.5x of psql \\copy FROM"),
]


def target_for(name: str, baseline: str) -> Target | None:
    for t in TARGETS:
        if re.fullmatch(t.name, name) and re.fullmatch(t.baseline, baseline):
            return t
    return None


def better(unit: str) -> str:
    """``higher`` for rates (``msg/s``, ``rows/s``, ``MiB/s``...), ``lower`` for s, B, MB."""
    return "higher" if unit.endswith("/s") else "lower"


def _number(text: str) -> float | None:
    x = float(text)
    return x if math.isfinite(x) else None


# ------------------------------------------------------------------ the log


def start_log(path: Path) -> str:
    """Truncate ``path`` to the header line of a run starting now; return that line."""
    fields = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "nproc": str(os.cpu_count() or 0), "python": platform.python_version()}
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
        if commit:
            fields["commit"] = commit + ("+changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    line = "bench-run: " + " ".join(f"{k}={v}" for k, v in fields.items())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(line + "\n", encoding="utf-8")
    return line


def read_log(path: Path) -> dict:
    """The run and its figures as ``results.json`` holds them (see the module docstring)."""
    run: dict = {"header": False, "scripts": []}
    figures: list[dict] = []
    script = None
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if m := HEADER.match(line):
            if not run["header"]:  # the first header is the run's
                run["header"] = True
                run.update(dict(kv.split("=", 1) for kv in m.group("fields").split() if "=" in kv))
        elif m := SCRIPT.match(line):
            script = Path(m.group("script")).name
            run["scripts"].append((script + m.group("args")).strip())
        elif m := FIGURE.match(line):
            name, unit, baseline = m.group("name"), m.group("unit"), m.group("baseline")
            ratio = _number(m.group("ratio"))
            target = target_for(name, baseline)
            met = None
            if target is not None and ratio is not None:
                met = ratio >= target.ratio if better(unit) == "higher" else ratio <= target.ratio
            figures.append({
                "script": script, "name": name, "value": _number(m.group("value")), "unit": unit,
                "ratio": ratio, "baseline": baseline, "is_baseline": baseline == "itself",
                "better": better(unit), "target": target.ratio if target else None, "target_met": met,
                "target_source": target.source if target else None})
    if not run["header"]:
        run.update(date=dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc)
                   .strftime("%Y-%m-%dT%H:%M:%SZ"), nproc=str(os.cpu_count() or 0), python=platform.python_version())
    run["nproc"] = int(run["nproc"]) if str(run.get("nproc", "")).isdigit() else run.get("nproc")
    ran = {s.split()[0] for s in run["scripts"]}
    run["not_run"] = sorted(p.name for p in BENCH.glob("bench_*.py") if p.name not in ran) if ran else []
    return {"run": run, "figures": figures}


# ------------------------------------------------------------------ the chart

ROW, GROUP_ROW, PLOT, TOP, CHAR = 20, 24, 420, 56, 6.7  # CHAR: width of a character at 11 px, monospace
COLORS = {True: "#2e8b57", False: "#c0392b", None: "#7f8c8d"}
FONT = "font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\""


def _axis(ratios: list[float]) -> tuple[float, float]:
    """Log-scale bounds (powers of 10) holding 1, every ratio and every target."""
    positive = [r for r in ratios if r > 0] + [1.0]
    lo = math.floor(math.log10(min(positive)) + 1e-9)
    return 10.0 ** lo, 10.0 ** max(math.ceil(math.log10(max(positive)) - 1e-9), lo + 1)


def _fmt_ratio(r: float) -> str:
    return f"{r:.2f}" if r < 100 else f"{r:.0f}"


def _fmt_value(v: float | None) -> str:
    if v is None:
        return "?"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.2f}"


def caption(run: dict, label: str | None = None) -> list[str]:
    """The lines under the chart: which run it shows, on which machine."""
    commit = f", commit {run['commit']}" if run.get("commit") else ""
    machine = f"nproc {run.get('nproc')}, Python {run.get('python')}"
    if not run.get("header"):
        machine += " (no run header in the log: the date is the log's, the machine the chart's)"
    lines = [f"Run of {run.get('date')}{commit}; {machine}."]
    if label:
        lines.append(label)
    if run["scripts"]:
        lines.append("Scripts: " + "; ".join(run["scripts"]) + ".")
    if run["not_run"]:
        lines.append("Not in this run: " + ", ".join(run["not_run"]) + ".")
    lines.append("Each bar: a figure's ratio against a baseline measured in the same run (log scale, from 1).")
    lines.append("Rates (/s): right of 1 is faster than the baseline; times and sizes: left of 1 is better.")
    return lines


def _detail(f: dict) -> str:
    """The text right of a bar: ratio, value, baseline, target."""
    target = f"  (target {'>=' if f['better'] == 'higher' else '<='} {f['target']}x)" if f["target"] else ""
    return f"{_fmt_ratio(f['ratio'])}x  {_fmt_value(f['value'])} {f['unit']}  vs {f['baseline']}{target}"


def render_svg(results: dict) -> str:
    """The chart of :func:`read_log`'s ``results`` as an SVG document (see the module docstring); the same
    results give the same bytes, so a committed ``results.json`` and its chart can be checked to agree."""
    bars = [f for f in results["figures"] if not f["is_baseline"] and f["ratio"] is not None]
    left = int(max([len(f["name"]) for f in bars] + [24]) * CHAR) + 20
    right = int(max([len(_detail(f)) for f in bars] + [40]) * CHAR) + 20
    lo, hi = _axis([f["ratio"] for f in bars] + [f["target"] for f in bars if f["target"]])
    span = math.log10(hi) - math.log10(lo)

    def x(r: float) -> float:
        return left + PLOT * (math.log10(max(r, lo)) - math.log10(lo)) / span

    rows: list[tuple[str, object]] = []
    script = object()
    for f in bars:
        if f["script"] != script:
            script = f["script"]
            if script is not None:
                rows.append(("group", script))
        rows.append(("bar", f))
    notes = caption(results["run"], results["run"].get("label"))
    width = max(left + PLOT + right, int(max(len(n) for n in notes) * CHAR) + 20)
    plot_h = sum(GROUP_ROW if kind == "group" else ROW for kind, _ in rows)
    height = TOP + plot_h + 40 + 16 * len(notes) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" {FONT} font-size="11">',
           f'<title>copycat benchmarks: {escape(str(results["run"].get("date")))}</title>',
           f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
           '<text x="10" y="22" font-size="15" font-weight="bold">copycat benchmarks: '
           'each figure against its baseline of the same run</text>',
           '<g font-size="10" fill="#555555">'
           f'<rect x="{left}" y="32" width="10" height="10" fill="{COLORS[True]}"/>'
           f'<text x="{left + 14}" y="41">target met</text>'
           f'<rect x="{left + 90}" y="32" width="10" height="10" fill="{COLORS[False]}"/>'
           f'<text x="{left + 104}" y="41">target missed</text>'
           f'<rect x="{left + 200}" y="32" width="10" height="10" fill="{COLORS[None]}"/>'
           f'<text x="{left + 214}" y="41">no target</text>'
           f'<path d="M{left + 300},31 l5,6 l-5,6 l-5,-6 z" fill="#000000"/>'
           f'<text x="{left + 310}" y="41">target ratio</text></g>']
    # grid: powers of ten, 1 (the baseline) bold
    decade = lo
    while decade <= hi * 1.0001:
        gx = x(decade)
        strong = abs(decade - 1.0) < 1e-9
        out.append(f'<line x1="{gx:.1f}" y1="{TOP - 4}" x2="{gx:.1f}" y2="{TOP + plot_h}" '
                   f'stroke="{"#333333" if strong else "#dddddd"}" stroke-width="{1.5 if strong else 1}"/>')
        out.append(f'<text x="{gx:.1f}" y="{TOP + plot_h + 14}" text-anchor="middle" fill="#555555">'
                   f'{decade:g}x</text>')
        decade *= 10
    y = TOP
    for kind, item in rows:
        if kind == "group":
            out.append(f'<text x="10" y="{y + 16}" font-weight="bold" fill="#1f3a5f">{escape(str(item))}</text>')
            y += GROUP_ROW
            continue
        f = item
        r = f["ratio"]
        color = COLORS[f["target_met"]]
        x0, x1 = sorted((x(1.0), x(r)))
        out.append(f'<g class="figure" data-name={quoteattr(f["name"])}>')
        out.append(f'<text x="{left - 6}" y="{y + 14}" text-anchor="end">{escape(f["name"])}</text>')
        out.append(f'<rect x="{x0:.1f}" y="{y + 4}" width="{max(x1 - x0, 1.5):.1f}" height="{ROW - 8}" '
                   f'fill="{color}"><title>{escape(f["name"])}: ratio {_fmt_ratio(r)} vs '
                   f'{escape(f["baseline"])}</title></rect>')
        if f["target"]:
            tx, ty = x(f["target"]), y + ROW / 2
            out.append(f'<path d="M{tx:.1f},{ty - 7:.1f} l5,7 l-5,7 l-5,-7 z" fill="#000000">'
                       f'<title>target {f["target"]}x: {escape(f["target_source"])}</title></path>')
        out.append(f'<text x="{left + PLOT + 8}" y="{y + 14}">{escape(_detail(f))}</text></g>')
        y += ROW
    y += 40
    for line in notes:
        out.append(f'<text x="10" y="{y}" fill="#333333">{escape(line)}</text>')
        y += 16
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--start-log", type=Path, metavar="FILE", help="truncate FILE to a new run's header line")
    mode.add_argument("--from-log", type=Path, metavar="FILE", help="read a run's log, write the JSON and the SVG")
    ap.add_argument("--json", type=Path, default=BENCH / "results.json", help="default: bench/results.json")
    ap.add_argument("--svg", type=Path, default=ROOT / "docs" / "images" / "bench.svg",
                    help="default: docs/images/bench.svg")
    ap.add_argument("--label", help="one more caption line saying which run this is")
    args = ap.parse_args(argv)
    if args.start_log:
        print(start_log(args.start_log))
        return 0
    results = read_log(args.from_log)
    if not results["figures"]:
        print(f"no 'bench <name>: ...' line in {args.from_log}: nothing written", file=sys.stderr)
        return 1
    if args.label:
        results["run"]["label"] = args.label
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    args.svg.parent.mkdir(parents=True, exist_ok=True)
    args.svg.write_text(render_svg(results), encoding="utf-8")
    shown = sum(1 for f in results["figures"] if not f["is_baseline"] and f["ratio"] is not None)
    print(f"{len(results['figures'])} figures ({shown} charted) -> {args.json}, {args.svg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
