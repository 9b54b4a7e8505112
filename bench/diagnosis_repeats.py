"""Several `bench/diagnosis.py` runs side by side: per preset and expected finding, how the
estimate and the measured speedup of the fix spread across runs, and how often the estimate lands
within the goal. One run's measured speedup is noisy (a fixed `default` run took 42 ms a step in
one run and 58 ms in another), so the accuracy goal is judged on the medians and the spread here.

    .venv/bin/python bench/diagnosis_repeats.py OUT1 OUT2 ...   # each an --out of diagnosis.py

To re-estimate old logdirs with the current analyzers without training again, run
`bench/diagnosis.py --reuse --out OUT` on each first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from diagnosis import GOAL  # noqa: E402


def load_rows(outs: list[Path]) -> dict[tuple[str, str], list[dict]]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for out in outs:
        path = out / "diagnosis.json"
        try:
            rows = json.loads(path.read_text())["rows"]
        except (OSError, ValueError, KeyError) as e:
            raise SystemExit(f"diagnosis_repeats: cannot read {path}: {e}") from None
        for r in rows:
            groups.setdefault((r["preset"], r["expected"]), []).append({**r, "out": out.name})
    return groups


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    return f"{med:.2f}x ({min(values):.2f}–{max(values):.2f})" if len(values) > 1 else f"{med:.2f}x"


def summary_rows(groups: dict[tuple[str, str], list[dict]]) -> list[list[str]]:
    table = []
    for (preset, expected), rows in groups.items():
        found = sorted({r.get("found", "-") for r in rows})
        paired = [r for r in rows if r.get("estimated") and r.get("measured")]
        errors = [r["estimated"] / r["measured"] - 1 for r in paired]
        within = sum(abs(e) <= GOAL for e in errors)
        table.append([
            preset, expected, str(len(rows)), ", ".join(found),
            _spread([r["estimated"] for r in paired]),
            _spread([r["measured"] for r in paired]),
            f"{statistics.median(errors):+.0%}" if errors else "-",
            " ".join(f"{e:+.0%}" for e in errors) or "-",
            f"{within}/{len(errors)}" if errors else "-",
        ])
    return table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outs", nargs="+", type=Path, help="--out folders of bench/diagnosis.py")
    args = ap.parse_args(argv)
    cols = ["preset", "expected", "runs", "found", "estimated (median, range)",
            "measured (median, range)", "median error", "errors by run", "within goal"]
    cells = summary_rows(load_rows(args.outs))
    note = (f"error = estimated / measured - 1 per run (goal within +-{GOAL:.0%}); runs: "
            + ", ".join(str(o) for o in args.outs))
    table = Table(title="Diagnosis across runs", caption=note)
    for i, c in enumerate(cols):
        table.add_column(c, justify="right" if i >= 2 and i != 3 else "left", overflow="fold")
    for line in cells:
        table.add_row(*line)
    Console(width=200).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
