"""Dashboard: opening a run the first time vs reopening it (the analysis cache), per trace size.

Each row drives the real Diagnosis page under Streamlit's AppTest (in this process):
- first open (the baseline: what every visit would cost without the cache): the page with
  `?run=` on a run not analyzed yet (decode, event table, steps, detectors, then the page's
  charts and timeline);
- reopen: another session opening the same run afterwards (what a second visitor, a page
  switch or a browser reload does): the analysis comes from the cache, only the page renders.
Ratio: reopen / first open. Medians over --repeats; generated traces come from
bench/analyzer_speed.py (TF-like host traces, cached under /tmp/recadvisor_bench).

    .venv/bin/python bench/dashboard_cache.py [--events 100000,1000000] [--repeats 3] [LOGDIR ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import analyzer_speed  # bench/, on sys.path when this script runs
from rich.console import Console
from rich.table import Table

from analyzers.ingest.logdir import select_run

APP = Path(__file__).parent.parent / "dashboard" / "app.py"


def _open(key: str) -> float:
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


def measure(key: str, repeats: int) -> dict[str, float]:
    from dashboard import ui

    first, again = [], []
    for _ in range(repeats):
        ui._cached_view.clear()
        first.append(_open(key))
        again.append(_open(key))
    return {"first": statistics.median(first), "reopen": statistics.median(again)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logdirs", nargs="*", type=Path)
    ap.add_argument("--events", default="100000,1000000",
                    help="generated trace sizes, comma-separated ('' for none)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    os.environ.setdefault("STREAMLIT_BROWSER_GATHER_USAGE_STATS", "false")
    os.environ.setdefault("STREAMLIT_LOGGER_LEVEL", "error")  # AppTest's bare-mode warnings
    targets = [analyzer_speed.make_target(str(p), p) for p in args.logdirs]
    for n in [int(x) for x in args.events.split(",") if x.strip()]:
        targets.append(analyzer_speed.make_target(f"generated {n:,} events",
                                                  analyzer_speed.generated_logdir(n)))
    console = Console(width=150)
    table = Table(title="Diagnosis page: first open vs reopen (s, median of "
                  f"{args.repeats})")
    for col in ("trace", "events", "first open (baseline)", "reopen (cached)", "reopen / first"):
        table.add_column(col, justify="right" if col != "trace" else "left")
    for t in targets:
        run = select_run(t.logdir)
        os.environ["RECADVISOR_DASHBOARD_ROOT"] = str(run.parent)
        console.print(f"measuring {t.label} ...")
        m = measure(run.name, args.repeats)
        table.add_row(t.label, f"{t.events:,}", f"{m['first']:.2f}", f"{m['reopen']:.2f}",
                      f"{m['reopen'] / m['first']:.2f}")
    console.print(table)
    console.print("goal: reopening a run with a million events takes seconds (reopen column)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
