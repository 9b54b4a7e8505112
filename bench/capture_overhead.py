"""What capture costs the job: reference-trainer samples/s with and without the OS sampler and the
TF profiler window, and (second table) a Python-bound loop with the sampler as a thread of the job
versus a separate process.

Trainer table: `recadvisor train --preset clean` in its own process per run, configurations
interleaved across repeats, medians:

- `plain`: RECADVISOR_SAMPLER=0, so no sampler anywhere; gives the timed window (samples/s as the
  trainer reports it, no profiler) and the profiled window's throughput with the TF profiler alone.
- `sampler`: as `plain`, plus `python -m recadvisor.capture.sampler` (defaults: 50 Hz within a
  1% CPU budget) run from outside against the trainer's pid for its whole life (so over the timed
  window); no trainer change.
- `window`: the default: the sampler runs over the profiled window (ProfileWindow's own).

The profiled window's throughput is batch x profile steps / (window end - start), from the
metadata file. The sampler's own CPU time is reported too: on a machine whose cores the job keeps
busy, that is what the sampler can take from it, and unlike samples/s it is not buried in
run-to-run noise.

    .venv/bin/python bench/capture_overhead.py [--repeats 3] [--steps 200] [--no-gil]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from recadvisor.capture.sampler import DEFAULT_HZ, SamplerProcess, sampler_paths

CONFIGS = ("plain", "sampler", "window")


def run_trainer(config: str, steps: int, profile_steps: int, timeout: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="capture-bench-") as tmp:
        env = {**os.environ, "RECADVISOR_SAMPLER": "1" if config == "window" else "0"}
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        cmd = [
            sys.executable, "-m", "recadvisor", "train", "--preset", "clean", "--json",
            "--no-progress", "--steps", str(steps), "--profile-steps", str(profile_steps),
            "--logdir", str(Path(tmp) / "logdir"),
        ]  # fmt: skip
        t = time.perf_counter()
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        sampler = None
        if config == "sampler":
            sampler = SamplerProcess(proc.pid, *sampler_paths(tmp, "bench"), hz=DEFAULT_HZ)
            sampler.start()
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            if sampler:
                sampler.stop()
            return {"error": f"no result within {timeout} s", "wall_s": time.perf_counter() - t}
        summary = sampler.stop() if sampler else None
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            tail = err.strip().splitlines()[-1:] or ["?"]
            return {"error": tail[0], "wall_s": wall}
    meta = json.loads(out)
    w = meta["profile_window"]
    window_s = (w["end_unix_ns"] - w["start_unix_ns"]) / 1e9
    batch = meta["config"]["batch_size"]
    res = {
        "timed": meta["samples_per_s"],
        "profiled": batch * (w["last_step"] - w["first_step"] + 1) / window_s,
        "wall_s": wall,
        "window_sampler": w.get("sampler"),
    }
    if summary:
        span = (summary["end_ns"] - summary["start_ns"]) / 1e9
        res["sampler_cpu_ms_per_s"] = 1e3 * summary["sweep_cpu_s"] / span
        res["sampler_process_cpu_s"] = summary["cpu_s"]
        res["sampler_hz"] = summary["achieved_hz"]
        res["threads_per_sweep"] = summary["thread_rows"] / summary["samples"]
    return res


# A Python-bound job: tiny eager ops, the GIL held between them. argv: mode seconds.
GIL_JOB = textwrap.dedent(
    """
    import json, os, subprocess, sys, tempfile, time
    import tensorflow as tf
    mode, secs = sys.argv[1], float(sys.argv[2])
    x = tf.ones((8,))
    for _ in range(200):
        x = x + 1.0
    tmp = tempfile.mkdtemp()
    sampler = None
    if mode == "thread":
        from recadvisor.capture.sampler import Sampler
        sampler = Sampler(os.getpid(), 50).start()
    elif mode == "process":
        from recadvisor.capture.sampler import SamplerProcess, sampler_paths
        sampler = SamplerProcess(os.getpid(), *sampler_paths(tmp, "g")).start()
    n, t = 0, time.perf_counter()
    while time.perf_counter() - t < secs:
        x = x + 1.0
        n += 1
    rate = n / (time.perf_counter() - t)
    if sampler is not None:
        sampler.stop()
    print(json.dumps({"ops_per_s": rate}))
    """
)


def run_gil(mode: str, seconds: float, timeout: int) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", GIL_JOB, mode, str(seconds)],
            capture_output=True, text=True, env=env, timeout=timeout,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout} s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _fmt(v: float | None, spec: str = ",.0f") -> str:
    return format(v, spec) if v is not None else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200, help="timed steps per trainer run")
    ap.add_argument("--profile-steps", type=int, default=30)
    ap.add_argument("--timeout", type=int, default=300, help="seconds per run")
    ap.add_argument("--no-gil", action="store_true", help="skip the thread-vs-process table")
    ap.add_argument("--gil-seconds", type=float, default=8.0)
    ap.add_argument("--json", dest="json_out", help="also write the raw results here")
    args = ap.parse_args(argv)
    console = Console(stderr=True)
    runs: dict[str, list[dict]] = {c: [] for c in CONFIGS}
    for r in range(args.repeats):
        for c in CONFIGS:
            res = run_trainer(c, args.steps, args.profile_steps, args.timeout)
            runs[c].append(res)
            shown = (
                f"timed {res['timed']:,.0f}, profiled {res['profiled']:,.0f} samples/s"
                if "timed" in res
                else res["error"]
            )
            console.log(f"repeat {r + 1}/{args.repeats} {c}: {shown} ({res['wall_s']:.0f} s)")

    def col(config: str, key: str) -> list[float]:
        return [x[key] for x in runs[config] if x.get(key) is not None]

    rows = [
        ("timed window, no sampler", col("plain", "timed")),
        ("timed window, sampler (separate process)", col("sampler", "timed")),
        ("profiled window, TF profiler only", col("plain", "profiled")),
        ("profiled window, TF profiler + sampler", col("window", "profiled")),
    ]
    base = _median(rows[0][1])
    table = Table(title=f"Capture overhead, reference trainer clean ({args.repeats} runs, medians)")
    for name in ("configuration", "samples/s", "min-max", "ratio to no sampler", "runs"):
        table.add_column(name, justify="left" if name == "configuration" else "right")
    out_rows = []
    for name, vals in rows:
        med = _median(vals)
        ratio = med / base if med and base else None
        table.add_row(
            name,
            _fmt(med),
            f"{min(vals):,.0f}-{max(vals):,.0f}" if vals else "",
            _fmt(ratio, ".3f") + ("x" if ratio else ""),
            str(len(vals)),
        )
        out_rows.append({"configuration": name, "median": med, "runs": vals, "ratio": ratio})
    prof_only = _median(rows[2][1])
    prof_samp = _median(rows[3][1])
    Console(width=160).print(table)
    cpu = _median(col("sampler", "sampler_cpu_ms_per_s"))
    threads = _median(col("sampler", "threads_per_sweep"))
    hz = _median(col("sampler", "sampler_hz"))
    n_cpus = os.cpu_count() or 1
    if cpu is not None:
        print(
            f"sampler cost: {cpu:.1f} ms CPU per s of sampling at {hz:.1f} Hz over "
            f"{threads:.0f} threads = {cpu / 10:.2f}% of one core, {cpu / 10 / n_cpus:.2f}% of "
            f"this {n_cpus}-core machine (sampling loop only; start-up and the Parquet write "
            f"come after the window)"
        )
    if prof_only and prof_samp:
        print(f"profiled window, sampler on / off: {prof_samp / prof_only:.3f}x")
    result = {"trainer": out_rows, "raw": runs, "sampler_cpu_ms_per_s": cpu}
    if not args.no_gil:
        gil: dict[str, list[dict]] = {m: [] for m in ("none", "thread", "process")}
        for r in range(args.repeats):
            for m in gil:
                res = run_gil(m, args.gil_seconds, args.timeout)
                gil[m].append(res)
                shown = f"{res['ops_per_s']:,.0f} ops/s" if "ops_per_s" in res else res["error"]
                console.log(f"repeat {r + 1}/{args.repeats} GIL job, sampler {m}: {shown}")
        t2 = Table(title="Python-bound job (tiny eager ops): sampler thread in the job vs process")
        for name in ("sampler", "eager ops/s", "min-max", "ratio to none"):
            t2.add_column(name, justify="left" if name == "sampler" else "right")
        base_g = _median([x["ops_per_s"] for x in gil["none"] if "ops_per_s" in x])
        label = {
            "none": "none",
            "thread": "thread in the job's process",
            "process": "separate process",
        }
        for m, res in gil.items():
            vals = [x["ops_per_s"] for x in res if "ops_per_s" in x]
            med = _median(vals)
            ratio = med / base_g if med and base_g else None
            t2.add_row(
                label[m],
                _fmt(med),
                f"{min(vals):,.0f}-{max(vals):,.0f}" if vals else "",
                _fmt(ratio, ".3f") + ("x" if ratio else ""),
            )
        Console(width=160).print(t2)
        result["gil"] = gil
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=2)
    return 0 if all(v for _, v in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
