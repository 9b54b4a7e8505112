"""Tuning quality from `--preset default` (seed 000's starting job): guided search vs plain TPE vs
random, the same number of trials each, then a small grid over the most important knobs.

Each strategy is one whole `recadvisor tune` process (re-measurement of the leaders included), run
one after another on the same machine; the dataset variants are generated first so that no
strategy pays for them. "Trials to 90%" counts trials (baseline included) until one measured at
least 90% of the best median any strategy reached.

    RECADVISOR_CACHE=/tmp/rc .venv/bin/python bench/tuning.py [--trials 20] \
        [--strategies guided,tpe,random] [--no-grid] [--seed 0] [--out /tmp/tuning-bench]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tuner.space import DEFAULT_SPACE

GRID_KNOBS = 3
GRID_VALUES = 3


def _run(cmd: list[str], log: Path, timeout: int) -> tuple[int, float]:
    t = time.perf_counter()
    with log.open("w") as f:
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    return rc, time.perf_counter() - t


def pregenerate(console: Console, timeout: int) -> None:
    """Every (format, compression) variant a trial may ask for, generated once up front."""
    for fmt, comp in itertools.product(("example", "prebatched"), ("none", "gzip")):
        parse = "per_example" if fmt == "example" else "batched"
        cmd = [sys.executable, "-m", "recadvisor", "train", "--preset", "default",
               "--record-format", fmt, "--compression", comp, "--parse", parse,
               "--warmup-steps", "0", "--measure-steps", "1", "--profile-steps", "0",
               "--no-progress"]
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, timeout=timeout, check=False)
        console.print(f"dataset {fmt}/{comp} ready ({time.perf_counter() - t:.0f} s)")


def tune(out: Path, extra: list[str], timeout: int) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "recadvisor", "tune", "--out", str(out), "--no-progress",
           *extra]
    rc, wall = _run(cmd, out / "tune.log", timeout)
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    return {"rc": rc, "wall_s": wall, "summary": summary}


def trials_to(summary: dict, threshold: float) -> int | None:
    for row in sorted(summary.get("trials", []), key=lambda r: r["number"]):
        v = row.get("samples_per_s")
        if row["state"] == "COMPLETE" and v is not None and v >= threshold:
            return row["number"] + 1
    return None


def grid_space(importances: dict[str, float], best: dict, out: Path) -> tuple[Path, int]:
    """A TOML space over the most important knobs, each with the best value and its neighbours."""
    default = tomllib.loads(DEFAULT_SPACE.read_text())["params"]
    top = [k for k, _ in sorted(importances.items(), key=lambda kv: -kv[1])
           if k in default and "choices" in default[k] and "when" not in default[k]][:GRID_KNOBS]
    lines, size = [], 1
    for k in top:
        choices = list(default[k]["choices"])
        if best[k] not in choices:
            choices.append(best[k])
        i = choices.index(best[k])
        lo = max(0, min(i - 1, len(choices) - GRID_VALUES))
        values = choices[lo:lo + GRID_VALUES]
        size *= len(values)
        lines += [f"[params.{k}]", f"choices = {json.dumps(values)}", ""]
    path = out / "grid.toml"
    path.write_text("\n".join(lines))
    return path, size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="default")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--strategies", default="guided,tpe,random")
    ap.add_argument("--no-grid", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/tuning-bench"))
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per study")
    ap.add_argument("--tune-args", default="", help="extra `recadvisor tune` flags")
    args = ap.parse_args(argv)
    console = Console(highlight=False, width=170)
    strategies = [s for s in args.strategies.split(",") if s]
    args.out.mkdir(parents=True, exist_ok=True)
    pregenerate(console, args.timeout)
    results: dict[str, dict] = {}
    for name in strategies:
        out = args.out / name
        if (out / "study.db").exists():
            (out / "study.db").unlink()
        console.print(f"[bold]{name}[/]: {args.trials} trials ...")
        results[name] = tune(out, ["--preset", args.preset, "--trials", str(args.trials),
                                   "--sampler", name, "--seed", str(args.seed),
                                   *args.tune_args.split()], args.timeout)
        s = results[name]["summary"]
        console.print(f"  rc {results[name]['rc']}, {results[name]['wall_s']:.0f} s, best "
                      f"{(s.get('best') or {}).get('samples_per_s')}, speedup {s.get('speedup')}")
    ok = {n: r for n, r in results.items() if r["summary"].get("best")}
    if not ok:
        console.print("no strategy produced a result; see the tune.log files")
        return 1
    ref = max(r["summary"]["best"]["samples_per_s"] for r in ok.values())
    start = statistics.median(r["summary"]["start"]["samples_per_s"] for r in ok.values())

    grid = None
    guide = ok.get("guided") or next(iter(ok.values()))
    imp = (guide["summary"].get("importances") or {}).get("values")
    if not args.no_grid and imp:
        gdir = args.out / "grid"
        gdir.mkdir(parents=True, exist_ok=True)
        (gdir / "study.db").unlink(missing_ok=True)
        best_cfg = guide["summary"]["best"]["config"]
        space, size = grid_space(imp, best_cfg, gdir)
        (gdir / "start.json").write_text(json.dumps(best_cfg))
        console.print(f"[bold]grid[/]: {size} combinations ...")
        grid = tune(gdir, ["--config", str(gdir / "start.json"), "--space", str(space),
                           "--sampler", "grid", "--trials", str(size + 1), "--remeasure", "1"],
                    args.timeout)
        grid["knobs"] = space.read_text()

    table = Table(title=f"tuning from --preset {args.preset}: {args.trials} trials per strategy "
                  f"(start {start:,.0f} samples/s, medians)")
    for col in ("strategy", "best samples/s", "min-max (n)", "x start", "trials to 90% of best",
                "complete/pruned/failed", "wall s"):
        table.add_column(col, justify="left" if col == "strategy" else "right")
    for name, r in results.items():
        s = r["summary"]
        if not s.get("best"):
            table.add_row(name, f"failed (rc {r['rc']})", "", "", "", "", f"{r['wall_s']:.0f}")
            continue
        b, c = s["best"], s["counts"]
        t90 = trials_to(s, 0.9 * ref)
        table.add_row(name, f"{b['samples_per_s']:,.0f}",
                      f"{b['spread']['min']:,.0f}-{b['spread']['max']:,.0f} ({b['spread']['n']})",
                      f"{b['samples_per_s'] / s['start']['samples_per_s']:.2f}x",
                      str(t90) if t90 else f">{args.trials}",
                      f"{c['complete']}/{c['pruned']}/{c['fail']}", f"{r['wall_s']:.0f}")
    if grid is not None and grid["summary"].get("best"):
        gs = grid["summary"]
        table.add_row("grid (top knobs)", f"{gs['best']['samples_per_s']:,.0f}",
                      f"{gs['best']['spread']['min']:,.0f}-{gs['best']['spread']['max']:,.0f} "
                      f"({gs['best']['spread']['n']})",
                      f"{gs['best']['samples_per_s'] / start:.2f}x", "-",
                      f"{gs['counts']['complete']}/{gs['counts']['pruned']}/"
                      f"{gs['counts']['fail']}", f"{grid['wall_s']:.0f}")
    console.print(table)
    for name, r in ok.items():
        console.print(f"{name}: best trial {r['summary']['best']['trial']} "
                      f"({r['summary']['best']['source']}): "
                      f"{r['summary']['best']['changes_from_start']}", markup=False)
    if grid is not None:
        console.print("grid knobs:\n" + grid.get("knobs", ""), markup=False)
    (args.out / "results.json").write_text(json.dumps(
        {"results": results, "grid": grid, "reference_best": ref}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
