"""Samples/s of every reference-trainer preset beside `clean`, measured in one run.

Each preset runs in its own process (logical devices are fixed per process) with `recadvisor train
--json`, without a profiler window; presets are interleaved across repeats so machine noise hits all
of them alike, and the table quotes medians. Every run measures for the same time (`--seconds`),
whatever its step time: a 60-step window is 2.6 s for `clean` but 30 s for `default`, and with
60-step windows clean's runs spread over 76-100K samples/s where 10 s windows gave 95-106K.

"Slower than clean" means every run of the preset is below every clean run: with 5 runs each that
ordering has a chance of 1 in 252 when the two do not differ (a one-sided rank test, p = 0.004).

An entry may add trainer flags to a preset, `NAME+flag=value+...`:
`string_hashing+id-hashing=integer` runs `--preset string_hashing --id-hashing integer` (a preset
beside its fix, in the same rounds).

    .venv/bin/python bench/presets.py [--repeats 5] [--presets clean,gzip,...] [--seconds 10]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import time

from rich.console import Console
from rich.table import Table

from reference_model.config import TrainConfig
from reference_model.presets import PRESETS


def entry_args(entry: str) -> tuple[str, list[str]]:
    """`NAME+flag=value+...` -> (preset name, ["--flag", "value", ...]); flags are the
    trainer's configuration flags, checked here rather than failing in every repeat."""
    name, *extra = entry.split("+")
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    flags: list[str] = []
    for item in extra:
        flag, sep, value = item.partition("=")
        if not (sep and flag and value):
            raise ValueError(f"{entry!r}: expected NAME+flag=value, got {item!r}")
        if flag.replace("-", "_") not in fields or "_" in flag:
            raise ValueError(f"{entry!r}: --{flag} is not a training configuration flag")
        flags += [f"--{flag}", value]
    return name, flags


def run_preset(entry: str, steps: int | None, seconds: float, timeout: int) -> dict:
    name, flags = entry_args(entry)
    cmd = [sys.executable, "-m", "recadvisor", "train", "--preset", name, *flags, "--json",
           "--no-progress"]
    if steps:
        cmd += ["--steps", str(steps)]
    else:
        cmd += ["--steps", "1000000", "--measure-seconds", str(seconds)]
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout} s", "wall_s": time.perf_counter() - t}
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["?"]
        return {"error": tail[0], "wall_s": wall}
    meta = json.loads(proc.stdout)
    return {
        "samples_per_s": meta["samples_per_s"],
        "wall_s": wall,
        "p50": meta["step_time_ms"]["p50"],
        "steps": meta["measured_steps"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--seconds", type=float, default=10.0, help="timed window per run")
    ap.add_argument("--steps", type=int, default=None,
                    help="a fixed number of timed steps per run instead of --seconds")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per run")
    ap.add_argument("--json", dest="json_out", help="also write the results here")
    args = ap.parse_args(argv)
    names = [n for n in args.presets.split(",") if n]
    for n in names:
        try:
            preset = entry_args(n)[0]
        except ValueError as e:
            ap.error(str(e))
        if preset not in PRESETS:
            ap.error(f"unknown preset {preset!r}")
    if "clean" not in names:
        names.insert(0, "clean")
    runs: dict[str, list[dict]] = {n: [] for n in names}
    console = Console(stderr=True)
    for r in range(args.repeats):
        for n in names:
            res = run_preset(n, args.steps, args.seconds, args.timeout)
            runs[n].append(res)
            shown = (
                f"{res['samples_per_s']:,.0f} samples/s, {res['steps']} steps"
                if "samples_per_s" in res else res["error"]
            )
            console.log(f"repeat {r + 1}/{args.repeats} {n}: {shown} ({res['wall_s']:.0f} s)")
    rows = []
    for n in names:
        ok = [x["samples_per_s"] for x in runs[n] if "samples_per_s" in x]
        rows.append(
            {
                "preset": n,
                "median_samples_per_s": statistics.median(ok) if ok else None,
                "min": min(ok) if ok else None,
                "max": max(ok) if ok else None,
                "runs": len(ok),
                "median_wall_s": statistics.median(x["wall_s"] for x in runs[n]),
                "errors": [x["error"] for x in runs[n] if "error" in x],
            }
        )
    clean = next(r["median_samples_per_s"] for r in rows if r["preset"] == "clean")
    table = Table(title=f"Reference-trainer presets ({args.repeats} runs each, medians)")
    for col in (
        "preset",
        "samples/s",
        "min-max",
        "ratio to clean",
        "slower than clean",
        "wall s",
        "expected finding",
    ):
        table.add_column(col, justify="left" if col in ("preset", "expected finding") else "right")
    for r in rows:
        med = r["median_samples_per_s"]
        ratio = med / clean if med and clean else None
        r["ratio_to_clean"] = ratio
        # "Slower" means even the fastest run of the preset is below the slowest clean run.
        clean_min = next(x["min"] for x in rows if x["preset"] == "clean")
        slower = (
            "-"
            if r["preset"] == "clean"
            else ("yes" if r["max"] and r["max"] < clean_min else "NO")
        )
        table.add_row(
            r["preset"],
            f"{med:,.0f}" if med else "failed",
            f"{r['min']:,.0f}-{r['max']:,.0f}" if med else "",
            f"{ratio:.2f}x" if ratio else "",
            slower,
            f"{r['median_wall_s']:.0f}",
            # A preset run with flags added is its fix, or some other variant: no expectation.
            "-" if "+" in r["preset"]
            else ", ".join(PRESETS[r["preset"]].expected_findings) or "(none)",
        )
    Console(width=160).print(table)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(rows, f, indent=2)
    return 0 if all(r["median_samples_per_s"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
