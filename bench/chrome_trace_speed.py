"""Chrome trace JSON speed and memory: `recadvisor analyze DIR --format json` on PyTorch profiler
(Kineto) traces, against HolisticTraceAnalysis (HTA), cold.

The traces are the committed rank-0 trace of a 2-GPU DDP job (tests/analyzers/data/pytorch-gpu,
3 profiled steps, 27K complete events) repeated COPIES times, each copy shifted past the last
and its ProfilerStep markers renumbered: the same mix of CPU ops, CUDA launches, kernels,
memcpys and NCCL at any size. Written once (gzipped, as `tensorboard_trace_handler(use_gzip=True)`
writes them) and cached under /tmp/recadvisor_bench.

Each measurement is a fresh process, its peak RSS the child's own (analyzer_speed's launcher):
- ours: the whole `recadvisor analyze` (imports, JSON parse, event table, steps, detectors, JSON);
- HTA: `TraceAnalysis(trace_dir=DIR)` (its parser: one DataFrame per rank) and
  `get_temporal_breakdown()` (idle/compute/non-compute time per rank, the closest of its
  analyses to our step breakdown), run by --hta-python (HTA needs no GPU or torch:
  `python3 -m venv /tmp/hta && /tmp/hta/bin/pip install HolisticTraceAnalysis`);
- with --baseline-repo, ours again from another checkout of this repository (an earlier commit:
  `git worktree add /tmp/base <commit>`), side by side.

    .venv/bin/python bench/chrome_trace_speed.py [--copies 1,10,40] [--repeats 3]
        [--hta-python /tmp/hta/bin/python] [--baseline-repo /tmp/base] [--json out.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

import analyzer_speed  # bench/, on sys.path when this script runs
from analyzer_speed import WORK, Measured, quiet_env, run_measured
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "tests" / "analyzers" / "data" / "pytorch-gpu" / "ddp_cnn_rank0.json.gz"
CLI = REPO / ".venv" / "bin" / "recadvisor"
HTA_CHILD = (
    "import logging, sys\n"
    "logging.disable(logging.CRITICAL)\n"
    "from hta.trace_analysis import TraceAnalysis\n"
    "a = TraceAnalysis(trace_dir=sys.argv[1])\n"
    "a.get_temporal_breakdown(visualize=False)\n"
)
# Another checkout's CLI, run from its own tree (its packages first on the path).
OTHER_CLI = (
    "import sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "from recadvisor.cli import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


def scaled_trace(copies: int) -> tuple[Path, int]:
    """The folder of a trace of `copies` copies of SOURCE, and its complete events."""
    folder = WORK / f"kineto_{copies}"
    path = folder / "rank0.pt.trace.json.gz"
    count_path = folder / "events.txt"
    if path.exists() and count_path.exists():
        return folder, int(count_path.read_text())
    doc = json.loads(gzip.decompress(SOURCE.read_bytes()))
    records = doc["traceEvents"]
    meta = [e for e in records if e.get("ph") == "M"]
    body = [e for e in records if e.get("ph") != "M"]
    timed = [e for e in body if "ts" in e]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000
    steps = 100  # ProfilerStep#N of copy k: N + 100 k
    out = list(meta)
    for k in range(copies):
        for e in body:
            c = dict(e)
            if "ts" in c:
                c["ts"] = c["ts"] + k * span
            name = c.get("name")
            if isinstance(name, str) and name.startswith("ProfilerStep#"):
                c["name"] = f"ProfilerStep#{int(name.split('#')[1]) + steps * k}"
            out.append(c)
    doc["traceEvents"] = out
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with gzip.open(tmp, "wt", compresslevel=1) as f:
        json.dump(doc, f)
    tmp.replace(path)
    events = sum(1 for e in out if e.get("ph") == "X")
    count_path.write_text(str(events))
    return folder, events


@dataclass
class Row:
    copies: int
    folder: Path
    events: int
    file_mb: float
    json_mb: float
    runs: dict[str, list[Measured]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def commands(folder: Path, args) -> dict[str, list[str]]:
    out = {"ours": [str(CLI), "analyze", str(folder), "--format", "json"]}
    if args.baseline_repo:
        python = str(Path(args.baseline_repo) / ".venv" / "bin" / "python")
        python = python if Path(python).exists() else sys.executable
        out["baseline"] = [python, "-c", OTHER_CLI, str(args.baseline_repo), "analyze",
                           str(folder), "--format", "json"]
    if args.hta_python:
        out["hta"] = [args.hta_python, "-c", HTA_CHILD, str(folder)]
    return out


def measure(rows: list[Row], args, console: Console) -> None:
    env = quiet_env()
    # Interleaved: each repeat runs every tool on every size, so machine noise hits all alike.
    for r in range(args.repeats):
        for row in rows:
            line = []
            for tool, cmd in commands(row.folder, args).items():
                analyzer_speed.warm([row.folder / "rank0.pt.trace.json.gz"])
                m = run_measured(cmd, args.timeout, env)
                if m.rc not in (0, 3):
                    tail = (m.stderr.strip().splitlines() or [f"exit {m.rc}"])[-1][:120]
                    row.errors.append(f"{tool}: {tail}")
                    continue
                row.runs.setdefault(tool, []).append(m)
                line.append(f"{tool} {m.wall_s:.2f} s {m.peak_rss_mb:.0f} MB")
            console.log(f"[{r + 1}/{args.repeats}] {row.copies} copies: " + ", ".join(line))


def median(row: Row, tool: str) -> tuple[float | None, float | None]:
    runs = row.runs.get(tool, [])
    if not runs:
        return None, None
    return statistics.median(m.wall_s for m in runs), max(m.peak_rss_mb for m in runs)


def results(rows: list[Row]) -> list[dict]:
    out = []
    for row in rows:
        r = {"copies": row.copies, "events": row.events, "file_mb": round(row.file_mb, 2),
             "json_mb": round(row.json_mb, 1), "errors": row.errors}
        for tool in ("ours", "baseline", "hta"):
            s, rss = median(row, tool)
            r[f"{tool}_s"], r[f"{tool}_rss_mb"] = s, rss
        ours = r["ours_s"]
        r["events_per_s"] = row.events / ours if ours else None
        for tool in ("baseline", "hta"):
            r[f"{tool}_over_ours"] = r[f"{tool}_s"] / ours if ours and r[f"{tool}_s"] else None
        out.append(r)
    return out


def print_table(rows: list[dict], args) -> None:
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    against = ["HTA TraceAnalysis + get_temporal_breakdown" if args.hta_python else "no HTA"]
    if args.baseline_repo:
        against.append(f"the checkout {args.baseline_repo}")
    title = (f"Chrome trace JSON (Kineto) speed: recadvisor analyze --format json against "
             f"{' and '.join(against)}, fresh process each, median of {args.repeats}; "
             f"{os.cpu_count()} CPUs, load average {load}")
    table = Table(title=title)
    cols = ["copies", "events", "gz MB", "JSON MB", "ours s", "events/s", "ours RSS MB"]
    if args.baseline_repo:
        cols += ["baseline s", "baseline RSS MB", "baseline / ours"]
    if args.hta_python:
        cols += ["HTA s", "HTA RSS MB", "HTA / ours"]
    for c in cols:
        table.add_column(c, justify="right")

    def num(v, fmt):
        return "-" if v is None else fmt.format(v)

    for r in rows:
        cells = [str(r["copies"]), f"{r['events']:,}", f"{r['file_mb']:.1f}",
                 f"{r['json_mb']:.0f}", num(r["ours_s"], "{:.2f}"),
                 num(r["events_per_s"], "{:,.0f}"), num(r["ours_rss_mb"], "{:.0f}")]
        if args.baseline_repo:
            cells += [num(r["baseline_s"], "{:.2f}"), num(r["baseline_rss_mb"], "{:.0f}"),
                      num(r["baseline_over_ours"], "{:.2f}x")]
        if args.hta_python:
            cells += [num(r["hta_s"], "{:.2f}"), num(r["hta_rss_mb"], "{:.0f}"),
                      num(r["hta_over_ours"], "{:.2f}x")]
        table.add_row(*cells)
    Console(width=200).print(table)
    for r in rows:
        for e in r["errors"]:
            print(f"{r['copies']} copies: {e}", file=sys.stderr)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--copies", default="1,10,40",
                   help="sizes: copies of the 27K-event trace, comma-separated")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--hta-python", help="a Python with HolisticTraceAnalysis installed")
    p.add_argument("--baseline-repo", type=Path,
                   help="another checkout of this repository, measured side by side")
    p.add_argument("--timeout", type=float, default=600, help="seconds per process")
    p.add_argument("--json", dest="json_out", type=Path, help="also write the rows here")
    args = p.parse_args()
    try:
        copies = [int(c) for c in args.copies.split(",") if c]
    except ValueError:
        p.error(f"--copies: not a list of integers: {args.copies!r}")
    if args.hta_python and not Path(args.hta_python).exists():
        p.error(f"--hta-python: no such file: {args.hta_python}")
    if args.baseline_repo and not (args.baseline_repo / "recadvisor" / "cli.py").exists():
        p.error(f"--baseline-repo: not a checkout of this repository: {args.baseline_repo}")
    console = Console(stderr=True)
    analyzer_speed.compile_project()
    rows = []
    for c in copies:
        folder, events = scaled_trace(c)
        f = folder / "rank0.pt.trace.json.gz"
        json_mb = len(gzip.decompress(f.read_bytes())) / 1e6
        rows.append(Row(c, folder, events, f.stat().st_size / 1e6, json_mb))
    measure(rows, args, console)
    out = results(rows)
    print_table(out, args)
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
