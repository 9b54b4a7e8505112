"""The preset matrix as a diagnosis table: what the analyzers say about each reference-trainer
preset, how much its remedy really buys, and what xprof's overview page concludes on the same trace.

For each preset P:

1. `recadvisor train --preset P --logdir OUT/P --no-progress` (under `timeout`, the trainer has a
   rare hang; one retry on a timeout);
2. `recadvisor analyze OUT/P --format json`;
3. for each expected finding of P: did it come out, at which severity, its estimated speedup; then
   the fixed run, the finding's `remedy.command` with `--logdir OUT/P-fixed-<id> --no-progress`
   (the `clean` preset where the finding has no command or did not come out); measured speedup =
   fixed samples/s / P samples/s and error = estimated / measured - 1 (goal: within +-25%);
4. xprof's overview-page conclusion on OUT/P, in a subprocess.

Other findings at medium/high are listed as false positives; `clean` passes when it has none.
Samples/s come from one run each and are noisy (about +-10% on a 2-core machine); by default over
the preset's 60 timed steps, which is a quarter of a second of `small_batches`: `--measure-seconds
S` times every run (preset, fix, clean) for S seconds instead. RECADVISOR_CACHE is passed through
to the trainer (dataset cache). The rows also go to OUT/diagnosis.json.

    .venv/bin/python bench/diagnosis.py [--presets clean,io_stall] [--out DIR] [--reuse]
        [--measure-seconds S]
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from reference_model.presets import PRESETS

RECADVISOR = [sys.executable, "-m", "recadvisor"]
GOAL = 0.25  # |estimated / measured - 1| within this counts as a good estimate
SERIOUS = ("high", "medium")
RUN_FILE = "recadvisor_run.json"

_XPROF_SCRIPT = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r
out = r.xspace_to_tool_data(sys.argv[1:], "overview_page", {})
data = out[0] if isinstance(out, tuple) else out
if isinstance(data, bytes):
    data = data.decode()
tables = json.loads(data)
props = {}
for t in tables if isinstance(tables, list) else [tables]:
    for k, v in (t.get("p") or {}).items():
        if v and k not in props:
            props[k] = v
print(json.dumps(props))
"""


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _run_json(logdir: Path) -> dict | None:
    """The newest run's recadvisor_run.json under LOGDIR/plugins/profile, or None."""
    runs = sorted((logdir / "plugins" / "profile").glob(f"*/{RUN_FILE}"))
    if not runs:
        return None
    try:
        return json.loads(runs[-1].read_text())
    except (OSError, ValueError):
        return None


def _same_command(recorded: list[str], train_args: list[str]) -> bool:
    """Whether a recorded trainer argv ran the same configuration (logdir and progress aside)."""
    return "train" in recorded and _train_args(recorded) == _train_args(["train", *train_args])


def train(train_args: list[str], logdir: Path, reuse: bool, timeout: int) -> dict:
    """Run (or reuse) one trainer job; returns {"samples_per_s"} or {"error"}."""
    if reuse:
        meta = _run_json(logdir)
        if meta and _same_command(meta.get("command") or [], train_args):
            log(f"reusing {logdir} ({meta['samples_per_s']:,.0f} samples/s)")
            return {"samples_per_s": meta["samples_per_s"], "reused": True}
        if meta:
            log(f"{logdir} ran another command; running again")
    cmd = ["timeout", str(timeout), *RECADVISOR, "train", *train_args,
           "--logdir", str(logdir), "--no-progress"]
    for attempt in (1, 2):
        if logdir.exists():
            shutil.rmtree(logdir)
        log(f"running {shlex.join(cmd[2:])}")
        t = time.perf_counter()
        with open(f"{logdir}.log", "w") as out:
            try:
                proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT,
                                      timeout=timeout + 60)
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = 124
        wall = time.perf_counter() - t
        if rc == 124 and attempt == 1:
            log(f"no result within {timeout} s, trying once more")
            continue
        meta = _run_json(logdir)
        if rc != 0 or not meta:
            return {"error": f"train exit {rc} after {wall:.0f} s (see {logdir}.log)"}
        log(f"  {meta['samples_per_s']:,.0f} samples/s ({wall:.0f} s)")
        return {"samples_per_s": meta["samples_per_s"], "reused": False}
    return {"error": f"no result within {timeout} s twice"}


def analyze(logdir: Path, timeout: int) -> dict:
    cmd = [*RECADVISOR, "analyze", str(logdir), "--format", "json"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"analyze: no result within {timeout} s"}
    try:
        return json.loads(proc.stdout)
    except ValueError:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"analyze exit {proc.returncode}: {tail}"}


def xprof_says(logdir: Path, timeout: int, width: int = 60) -> str:
    """xprof's overview-page bottleneck statement for the newest trace in LOGDIR, shortened."""
    runs = sorted((logdir / "plugins" / "profile").glob("*/"))
    traces = sorted(str(p) for p in runs[-1].glob("*.xplane.pb")) if runs else []
    if not traces:
        return "(no trace)"
    try:
        proc = subprocess.run([sys.executable, "-c", _XPROF_SCRIPT, *traces],
                              capture_output=True, text=True, timeout=timeout)
        props = json.loads(proc.stdout)
    except subprocess.TimeoutExpired:
        return f"(xprof: no result in {timeout} s)"
    except ValueError:
        return "(xprof failed)"
    return shorten_xprof(props, width)


def shorten_xprof(props: dict, width: int = 60) -> str:
    text = props.get("input_conclusion") or props.get("statement") or ""
    parts = []
    m = re.search(r"\b(HIGHLY|MODERATELY|NOT)\b.*?input-bound.*?([\d.]+)%", text)
    if m:
        parts.append(f"{m.group(1).lower()} input-bound ({m.group(2)}% input)")
    elif text:
        parts.append(text)
    flags = [k.removesuffix("_bottleneck").replace("_", " ") for k, v in sorted(props.items())
             if k.endswith("_bottleneck") and v not in ("", "no")]
    if props.get("bottleneck"):
        parts.append(f"bottleneck {props['bottleneck']}")
    if flags:
        parts.append("also " + ", ".join(flags))
    if not parts and props.get("summary_nextstep"):
        parts.append(props["summary_nextstep"])
    out = "; ".join(parts) or "(no conclusion)"
    return out if len(out) <= width else out[: width - 1] + "…"


def _train_args(argv: list[str]) -> list[str]:
    """The arguments after `train` in a trainer argv, less the logdir and progress flags."""
    out, skip = [], False
    for a in argv[argv.index("train") + 1 :]:
        if skip:
            skip = False
        elif a == "--logdir":
            skip = True
        elif a != "--no-progress" and not a.startswith("--logdir="):
            out.append(a)
    return out


def remedy_args(command: str) -> list[str]:
    """The trainer arguments of a finding's `recadvisor train ...` remedy command."""
    argv = shlex.split(command)
    if "train" not in argv:
        raise ValueError(f"not a train command: {command!r}")
    return _train_args(argv)


def _sps(v: float | None) -> str:
    return f"{v:,.0f}" if v else "-"


def fmt_x(v: float | None) -> str:
    return f"{v:.2f}x" if v else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--out", default="/tmp/recadvisor-diagnosis")
    ap.add_argument("--reuse", action="store_true",
                    help="reuse logdirs already in OUT (preset and fixed runs) instead of training")
    ap.add_argument("--timeout", type=int, default=400, help="seconds per training run")
    ap.add_argument("--xprof-timeout", type=int, default=300)
    ap.add_argument("--measure-seconds", type=float, metavar="S",
                    help="time every run's samples/s over S seconds, whatever its step time "
                    "(default: the preset's 60 steps, 0.25 s for small_batches)")
    args = ap.parse_args(argv)
    names = [n for n in args.presets.split(",") if n]
    for n in names:
        if n not in PRESETS:
            ap.error(f"unknown preset {n!r}; choose from: {', '.join(PRESETS)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    timed = (["--measure-steps", "1000000", "--measure-seconds", f"{args.measure_seconds:g}"]
             if args.measure_seconds else [])
    repro = shlex.join(["python", "bench/diagnosis.py", "--presets", ",".join(names),
                        "--out", str(out)] + (["--reuse"] if args.reuse else [])
                       + (["--measure-seconds", f"{args.measure_seconds:g}"]
                          if args.measure_seconds else []))

    clean_run: dict | None = None

    def clean_fixed() -> dict:
        nonlocal clean_run
        if clean_run is None:
            clean_run = train(["--preset", "clean", *timed], out / "clean", True,
                              args.timeout)
        return clean_run

    rows = []
    for name in names:
        preset = PRESETS[name]
        base = train(["--preset", name, *timed], out / name, args.reuse, args.timeout)
        if name == "clean" and "samples_per_s" in base:
            clean_run = base
        report = analyze(out / name, args.xprof_timeout) if "samples_per_s" in base else base
        xprof = xprof_says(out / name, args.xprof_timeout) if "samples_per_s" in base else "-"
        findings = report.get("findings", [])
        by_id = {f["id"]: f for f in findings}
        others = [f"{f['id']} ({f['severity']})" for f in findings
                  if f["severity"] in SERIOUS and f["id"] not in preset.expected_findings]
        common = {
            "preset": name,
            "samples_per_s": base.get("samples_per_s"),
            "others": others,
            "xprof": xprof,
            "error_msg": base.get("error") or report.get("error"),
        }
        if "error" in base or "error" in report:
            rows.append({**common, "expected": ",".join(preset.expected_findings) or "(none)",
                         "check": "FAIL (" + (base.get("error") or report["error"]) + ")"})
            continue
        if not preset.expected_findings:
            serious = [f"{f['id']} ({f['severity']})" for f in findings
                       if f["severity"] in SERIOUS]
            rows.append({**common, "expected": "(none)", "found": "-",
                         "check": "PASS" if not serious else "FAIL (medium/high findings)"})
            continue
        for fid in preset.expected_findings:
            f = by_id.get(fid)
            row = {**common, "expected": fid, "found": f["severity"] if f else "not found"}
            est = ((f or {}).get("impact") or {}).get("estimated_speedup")
            capped = bool(((f or {}).get("impact") or {}).get("estimate_capped"))
            cmd = ((f or {}).get("remedy") or {}).get("command")
            row["estimated"] = est
            row["estimate_capped"] = capped
            row["remedy_command"] = cmd
            if cmd:
                fixed = train([*remedy_args(cmd), *timed], out / f"{name}-fixed-{fid}",
                              args.reuse, args.timeout)
                row["fixed_by"] = "remedy"
            else:
                fixed = clean_fixed()
                row["fixed_by"] = "clean"
            base_sps, fixed_sps = base["samples_per_s"], fixed.get("samples_per_s")
            row["fixed_samples_per_s"] = fixed_sps
            measured = fixed_sps / base_sps if fixed_sps and base_sps else None
            row["measured"] = measured
            row["error"] = est / measured - 1 if est and measured else None
            problems = []
            if not f:
                problems.append("not found")
            elif f["severity"] not in SERIOUS:
                problems.append(f"only {f['severity']}")
            if "error" in fixed:
                problems.append("fixed run failed")
            elif (row["error"] is not None and abs(row["error"]) > GOAL
                  and not (capped and row["error"] < 0)):
                # A capped estimate is a floor: a larger measured speedup agrees with it.
                problems.append("estimate off")
            row["check"] = "PASS" if not problems else "FAIL (" + ", ".join(problems) + ")"
            rows.append(row)

    (out / "diagnosis.json").write_text(json.dumps({"command": repro, "rows": rows}, indent=2))
    print_table(rows, repro)
    return 0 if all(r["check"] == "PASS" for r in rows) else 1


def print_table(rows: list[dict], repro: str) -> None:
    cols = ["preset", "expected", "found (severity)", "est. speedup", "measured speedup", "error",
            "samples/s preset -> fixed", "other medium/high findings", "xprof says", "check"]
    cells = []
    for r in rows:
        err = r.get("error")
        measured = fmt_x(r.get("measured"))
        if r.get("fixed_by") == "clean" and r.get("measured"):
            measured += " (clean)"
        cells.append([
            r["preset"],
            r["expected"],
            r.get("found", "-"),
            ("≥" if r.get("estimate_capped") else "") + fmt_x(r.get("estimated")),
            measured,
            f"{err:+.0%}" if err is not None else "-",
            _sps(r.get("samples_per_s")) + (
                f" -> {_sps(r.get('fixed_samples_per_s'))}" if "fixed_by" in r else ""),
            ", ".join(r["others"]) or "-",
            r["xprof"],
            r["check"],
        ])
    title = f"Preset diagnosis: {repro}"
    note = ("speedups from one run each (samples/s noise about +-10%); "
            f"error = estimated / measured - 1, goal within +-{GOAL:.0%}")
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(title)
        print(note)
        widths = [max(len(str(x)) for x in col) for col in zip(cols, *cells, strict=False)]
        for line in [cols, *cells]:
            print("  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)))
        return
    table = Table(title=title, caption=note)
    for c in cols:
        right = c in cols[3:7]
        table.add_column(c, justify="right" if right else "left", overflow="fold")
    for line in cells:
        table.add_row(*line)
    Console(width=max(200, shutil.get_terminal_size().columns)).print(table)


if __name__ == "__main__":
    raise SystemExit(main())
