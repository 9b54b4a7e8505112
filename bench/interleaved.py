"""Variants of one job timed in their own processes, interleaved over rounds, and the table of
their medians against a baseline: what the remedy benches (`pydataset_fixes.py`,
`custom_loop_fetch.py`) share. A bench's child mode prints `step_ms=<ms>`."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from collections.abc import Callable

from rich.console import Console
from rich.table import Table


def bench_main(argv: list[str] | None, *, script: str, doc: str, variants: tuple[str, ...],
               child: Callable[[str, int], float], steps: int, title: str, baseline: str,
               unit: str, digits: int = 2) -> int:
    """A remedy bench's command line: `--child V` times one variant (`child(V, steps)`, ms) and
    prints it; otherwise every variant over `--repeats` interleaved rounds, then the table.
    `title` is formatted with the run's `steps` and `repeats`."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--child", choices=variants, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(f"step_ms={child(args.child, args.steps):.4f}", flush=True)
        return 0
    times = measure(script, variants, args.repeats, ["--steps", str(args.steps)])
    print_table(title.format(steps=args.steps, repeats=args.repeats), times, baseline, unit,
                digits)
    return 0


def measure(script: str, variants: tuple[str, ...], repeats: int, args: list[str]
            ) -> dict[str, list[float]]:
    """Per variant, the `step_ms` its child printed in each round (`script --child V *args`)."""
    times: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(repeats):
        for v in variants:
            out = subprocess.run([sys.executable, script, "--child", v, *args],
                                 capture_output=True, text=True, timeout=600, check=True).stdout
            times[v].append(float(out.rsplit("step_ms=", 1)[1]))
    return times


def print_table(title: str, times: dict[str, list[float]], baseline: str, unit: str,
                digits: int = 2) -> None:
    base = statistics.median(times[baseline])
    table = Table(title=title)
    for col in ("variant", f"{unit} (median)", "min-max", f"speedup vs {baseline}"):
        table.add_column(col, justify="left" if col == "variant" else "right")
    for v, runs in times.items():
        med = statistics.median(runs)
        table.add_row(v, f"{med:.{digits}f}", f"{min(runs):.{digits}f}-{max(runs):.{digits}f}",
                      f"{base / med:.2f}x")
    Console().print(table)
