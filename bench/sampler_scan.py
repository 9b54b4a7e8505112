"""What the sampler's scans of the other processes cost on a host with many processes.

About once a second the OS sampler reads every other process's `/proc/<pid>/stat`
(`recadvisor.capture.sampler`, docs/trace-signals.md, "Other processes on the cores"). This bench
starts N idle processes (`sleep`) beside this one and prints two tables:

1. One scan's CPU time (median of `--repeats`): the baseline reads every file through Python's
   `open()` and parses every line (the sampler's first version, rewritten here); the sampler's
   scan reads with bare `os.open`/`os.read` and parses only the lines that changed since its last
   scan (an idle process's line repeats byte for byte).
2. The sampler run for `--seconds` against an idle process at its defaults (50 Hz, 1% of the
   machine's CPU): sweeps a second, scans made and the interval between them, and its CPU time
   as a share of the machine against the budget.
3. A sweep's CPU time (scans left out, median of `--repeats` 3 s runs) against a process with
   0, 4 and 16 child processes, which the sweeps read once a scan has found them (data loader
   workers): the baseline is the process without children.

    .venv/bin/python bench/sampler_scan.py [--counts 0 1000 2000 4000] [--repeats 9] [--seconds 6]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from recadvisor.capture.sampler import DEFAULT_CPU_BUDGET, Sampler, parse_proc_entry


def baseline_scan(own: int) -> int:
    """Every other process's stat line through `open()`, every line parsed."""
    n = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit() and entry != str(own):
            with contextlib.suppress(OSError, ValueError), open(f"/proc/{entry}/stat", "rb") as f:
                parse_proc_entry(f.read())
                n += 1
    return n


def cpu_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        c = time.thread_time()
        fn()
        times.append(time.thread_time() - c)
    return statistics.median(times) * 1e3


PARENT = ("import subprocess, sys, time\n"
          "kids = [subprocess.Popen(['sleep', '60']) for _ in range(int(sys.argv[1]))]\n"
          "print('ready', flush=True)\ntime.sleep(60)\n")


def sweep_ms(children: int) -> float:
    """CPU ms a sweep, scans left out, over 3 s at 50 Hz against a process with `children`."""
    p = subprocess.Popen([sys.executable, "-c", PARENT, str(children)], stdout=subprocess.PIPE,
                         text=True)
    try:
        p.stdout.readline()
        s = Sampler(p.pid, hz=50, cpu_budget=None).start()
        time.sleep(3.0)
        s.stop()
        return (s.sweep_cpu_s - s.others_cpu_s) / s.samples * 1e3
    finally:
        subprocess.run(["pkill", "-P", str(p.pid)])
        p.kill()
        p.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--counts", type=int, nargs="+", default=[0, 1000, 2000, 4000])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    idle = subprocess.Popen(["sleep", "3600"])  # the "job": a process with one idle thread
    sleepers: list[subprocess.Popen] = []
    scans, runs = [], []
    n_cpus = os.cpu_count() or 1
    try:
        for count in sorted(args.counts):
            while len(sleepers) < count:
                sleepers.append(subprocess.Popen(["sleep", "3600"]))
            time.sleep(1.0)
            procs = len([e for e in os.listdir("/proc") if e.isdigit()])
            base = cpu_ms(lambda: baseline_scan(idle.pid), args.repeats)
            s = Sampler(idle.pid)
            s._scan_others(time.time_ns())  # the first scan parses every line
            new = cpu_ms(lambda s=s: s._scan_others(time.time_ns()), args.repeats)
            scans.append((procs, base, new))
            s = Sampler(idle.pid)
            wall = time.perf_counter()
            s.start()
            time.sleep(args.seconds)
            s.stop()
            wall = time.perf_counter() - wall
            runs.append((procs, s.samples / wall, s.others_scans, s.others_every_s,
                         s.others_cpu_s / wall / n_cpus, s.sweep_cpu_s / wall / n_cpus))
    finally:
        for p in [idle, *sleepers]:
            p.kill()
        for p in [idle, *sleepers]:
            p.wait()
    console = Console()
    t = Table(title="One scan of the other processes: CPU ms (median)")
    for col in ("processes", "baseline: open() + parse all", "sampler", "baseline / sampler"):
        t.add_column(col, justify="right")
    for procs, base, new in scans:
        t.add_row(str(procs), f"{base:.2f}", f"{new:.2f}", f"{base / new:.2f}x")
    console.print(t)
    t = Table(title=f"The sampler for {args.seconds:g} s at its defaults on {n_cpus} CPUs "
                    f"(budget {DEFAULT_CPU_BUDGET:.0%} of the machine)")
    for col in ("processes", "sweeps/s", "scans", "scan interval s", "scans' CPU share",
                "sampler's CPU share"):
        t.add_column(col, justify="right")
    for procs, hz, n, every, scan_share, share in runs:
        t.add_row(str(procs), f"{hz:.1f}", str(n), f"{every:.2f}", f"{scan_share:.2%}",
                  f"{share:.2%}")
    console.print(t)
    kids = {n: [] for n in (0, 4, 16)}
    for _ in range(args.repeats // 3 or 1):
        for n, got in kids.items():  # interleaved: the machine's drift hits each alike
            got.append(sweep_ms(n))
    t = Table(title="A sweep's CPU ms with the job's child processes read (median)")
    for col in ("children", "sweep CPU ms", "against none"):
        t.add_column(col, justify="right")
    base = statistics.median(kids[0])
    for n, got in kids.items():
        t.add_row(str(n), f"{statistics.median(got):.3f}", f"{statistics.median(got) / base:.2f}x")
    console.print(t)


if __name__ == "__main__":
    sys.exit(main())
