"""Does `recadvisor train` always finish? Runs presets back to back under a watchdog and counts
the runs that hang (TF 2.21's iterator-teardown deadlock, reference_model/train.py).

Each run is `python -m recadvisor train --preset P --no-progress`; one that is still alive after
--timeout seconds counts as hung: its stacks are dumped with py-spy when it is on PATH (or
--py-spy PATH), then it is killed. Prints a table: runs, finished, hung, median wall time.

    RECADVISOR_CACHE=/tmp/rc .venv/bin/python bench/trainer_exit.py \
        [--presets small_ops_no_xla,too_many_devices] [--runs 20] [--timeout 75] [--out DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table


def one_run(preset: str, timeout: float, dump: Path, py_spy: str | None) -> tuple[str, float]:
    """("finished" | "failed" | "hung", wall seconds): a failed run exited on its own, which is
    not what this bench counts."""
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "recadvisor", "train", "--preset", preset,
                             "--no-progress"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        proc.wait(timeout=timeout)
        return "finished" if proc.returncode == 0 else "failed", time.perf_counter() - t
    except subprocess.TimeoutExpired:
        if py_spy:
            with open(dump, "w") as f:
                subprocess.run([py_spy, "dump", "--native", "--pid", str(proc.pid)], stdout=f,
                               stderr=subprocess.STDOUT, timeout=60, check=False)
        proc.kill()
        proc.wait()
        return "hung", time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="small_ops_no_xla,too_many_devices")
    ap.add_argument("--runs", type=int, default=20, help="runs per preset (interleaved)")
    ap.add_argument("--timeout", type=float, default=75.0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/recadvisor-trainer-exit"))
    ap.add_argument("--py-spy", default=shutil.which("py-spy"))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    presets = [p for p in args.presets.split(",") if p]
    done: dict[str, list[float]] = {p: [] for p in presets}
    failed: dict[str, int] = dict.fromkeys(presets, 0)
    hung: dict[str, int] = dict.fromkeys(presets, 0)
    console = Console()
    for i in range(args.runs):
        for p in presets:
            outcome, wall = one_run(p, args.timeout, args.out / f"{p}.{i}.txt", args.py_spy)
            if outcome == "finished":
                done[p].append(wall)
            else:
                (hung if outcome == "hung" else failed)[p] += 1
            console.print(f"run {i + 1}/{args.runs} {p}: {outcome} in {wall:.0f} s")
    table = Table(title=f"recadvisor train under a {args.timeout:.0f} s watchdog")
    for col in ("preset", "runs", "finished", "failed", "hung", "median wall s"):
        table.add_column(col, justify="left" if col == "preset" else "right")
    for p in presets:
        table.add_row(p, str(args.runs), str(len(done[p])), str(failed[p]), str(hung[p]),
                      f"{statistics.median(done[p]):.1f}" if done[p] else "-")
    console.print(table)
    return 1 if any(hung.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
