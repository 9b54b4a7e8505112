"""Dashboard: opening a run the first time vs reopening it (the analysis cache), per trace size.

Each row drives the real Diagnosis page under Streamlit's AppTest (in this process):
- first open: the page with `?run=` on a run not analyzed yet (decode, event table, steps,
  detectors, then the page's charts and timeline);
- reopen: another session opening the same run afterwards (what a second visitor, a page
  switch or a browser reload does): the analysis comes from the cache, only the page renders;
- no cache (baseline): the same reopen with the cache cleared first, i.e. what every visit
  would cost without it.
Ratios: reopen / first open, and reopen / no cache. Medians over --repeats; generated traces
come from bench/analyzer_speed.py (TF-like host traces, cached under /tmp/recadvisor_bench).

    .venv/bin/python bench/dashboard_cache.py [--events 100000,1000000] [--repeats 3] [LOGDIR ...]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).parent
APP = HERE.parent / "dashboard" / "app.py"


def _analyzer_bench():
    spec = importlib.util.spec_from_file_location("analyzer_speed", HERE / "analyzer_speed.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _open(root: Path, key: str) -> float:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=1800)
    at.query_params["run"] = key
    t = time.perf_counter()
    at.switch_page("views/diagnosis.py").run()
    elapsed = time.perf_counter() - t
    if at.exception or at.error:
        raise SystemExit(f"{key}: the page failed: "
                         f"{[e.value for e in (*at.exception, *at.error)]}")
    return elapsed


def measure(root: Path, key: str, repeats: int) -> dict[str, float]:
    from dashboard import ui

    first, again, cold = [], [], []
    for _ in range(repeats):
        ui._cached_view.clear()
        first.append(_open(root, key))
        again.append(_open(root, key))
        ui._cached_view.clear()
        cold.append(_open(root, key))
    return {"first": statistics.median(first), "reopen": statistics.median(again),
            "no_cache": statistics.median(cold)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logdirs", nargs="*", type=Path)
    ap.add_argument("--events", default="100000,1000000",
                    help="generated trace sizes, comma-separated ('' for none)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    os.environ.setdefault("STREAMLIT_BROWSER_GATHER_USAGE_STATS", "false")
    os.environ.setdefault("STREAMLIT_LOGGER_LEVEL", "error")  # AppTest's bare-mode warnings
    gen = _analyzer_bench()
    targets: list[tuple[str, Path]] = [(str(p), p) for p in args.logdirs]
    for n in [int(x) for x in args.events.split(",") if x.strip()]:
        targets.append((f"generated {n:,} events", gen.generated_logdir(n)))
    console = Console(width=150)
    table = Table(title="Diagnosis page: first open vs reopen (s, median of "
                  f"{args.repeats})")
    for col in ("trace", "events", "first open", "reopen (cached)", "no cache (baseline)",
                "reopen / first", "reopen / baseline"):
        table.add_column(col, justify="right" if col != "trace" else "left")
    for label, logdir in targets:
        from analyzers.ingest.logdir import find_runs

        run = find_runs(logdir)[-1]
        os.environ["RECADVISOR_DASHBOARD_ROOT"] = str(run.parent)
        files = [f for f in run.iterdir() if f.suffix == ".pb"]
        events = gen.count_events(files) if files else 0
        console.print(f"measuring {label} ...")
        m = measure(run.parent, run.name, args.repeats)
        table.add_row(label, f"{events:,}", f"{m['first']:.2f}", f"{m['reopen']:.2f}",
                      f"{m['no_cache']:.2f}", f"{m['reopen'] / m['first']:.2f}",
                      f"{m['reopen'] / m['no_cache']:.2f}")
    console.print(table)
    console.print("goal: reopening a run with a million events takes seconds (reopen column)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
