"""`recadvisor analyze` and `recadvisor diff`. No TensorFlow anywhere on this path."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from recadvisor.errors import UserError

EXIT_FINDINGS = 3  # --fail-on reached: a CI gate


def add_parser(subparsers) -> None:
    a = subparsers.add_parser(
        "analyze",
        help="name the root causes in a TensorBoard profile logdir",
        description="Read a TensorBoard logdir (plugins/profile/<run>/*.xplane.pb, Chrome trace "
        "JSON, sampler and metadata files), break each step down, and report findings with "
        "evidence, estimated speedup and remedy. Exit 0; 3 when a finding reaches --fail-on; "
        "2 on bad input.",
    )
    a.add_argument("logdir", type=Path, help="logdir, run folder, or a single trace file "
                   "(a gzipped *.xplane.pb.gz too)")
    a.add_argument("--run", help="run name under plugins/profile/ (default: the latest); "
                   "cycle:K reads each PyTorch worker's K-th profiling cycle (1 the first, "
                   "-1 the last, the default) of a folder holding several")
    a.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    a.add_argument("--fail-on", choices=("high", "medium"),
                   help="exit 3 when a finding has this severity or worse")
    a.add_argument("--output", "-o", type=Path, help="write the report here instead of stdout")
    a.set_defaults(_analyzers_fn=run_analyze)

    d = subparsers.add_parser(
        "diff",
        help="compare two profiled runs: breakdowns, findings resolved and new, speedup",
        description="Compare run B against run A (e.g. before/after a fix). With one logdir, or "
        "the same one twice, its two latest runs are compared (or those --run-before and "
        "--run-after name, PyTorch cycles too: --run-before cycle:1).",
    )
    d.add_argument("before", type=Path, help="logdir or run folder A (before)")
    d.add_argument("after", type=Path, nargs="?",
                   help="logdir or run folder B (after); default: the same logdir as A")
    d.add_argument("--run-before", metavar="NAME",
                   help="A's run, as analyze's --run (default: the latest, or in one logdir the "
                   "latest other than B's)")
    d.add_argument("--run-after", metavar="NAME",
                   help="B's run, as analyze's --run (default: the latest)")
    d.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    d.add_argument("--output", "-o", type=Path, help="write the comparison here instead of stdout")
    d.set_defaults(_analyzers_fn=run_diff)


def run(args: argparse.Namespace) -> int:
    return args._analyzers_fn(args)


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        print(text, end="" if text.endswith("\n") else "\n")
        return
    tmp = output.with_name(output.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(output)


def run_analyze(args: argparse.Namespace) -> int:
    from analyzers.report import analyze, render_json, render_text

    report = analyze(args.logdir, args.run)
    if args.format == "json":
        text = render_json(report)
    else:
        text = render_text(report, markdown=args.format == "markdown")
    _emit(text, args.output)
    if args.fail_on:
        worst = report.worst_severity()
        order = ("high", "medium", "low")
        if worst is not None and order.index(worst) <= order.index(args.fail_on):
            return EXIT_FINDINGS
    return 0


def run_diff(args: argparse.Namespace) -> int:
    from analyzers.diff import diff_reports, render_diff
    from analyzers.report import analyze

    before, after = args.before, args.after or args.before
    run_a, run_b = args.run_before, args.run_after
    if _same_path(before, after) and (run_a is None or run_b is None):
        run_a, run_b = _two_runs(before, run_a, run_b)
    a, b = analyze(before, run_a), analyze(after, run_b)
    if not a.steps_found or not b.steps_found:
        which = (a if not a.steps_found else b).run.run_dir
        raise UserError(f"{which}: no steps found, nothing to compare")
    result = diff_reports(a, b)
    if args.format == "json":
        text = json.dumps(result, indent=2) + "\n"
    else:
        text = render_diff(result, markdown=args.format == "markdown")
    _emit(text, args.output)
    return 0


def _same_path(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return a == b


def _two_runs(logdir: Path, run_a: str | None, run_b: str | None) -> tuple[str, str]:
    """Both sides from one logdir: B the latest run unless named, A the latest other than B."""
    from analyzers.ingest.logdir import find_runs

    runs = [str(r) for r in find_runs(logdir)]

    def latest_but(other: str | None) -> str | None:
        # A run is named by its folder's name or its path (select_run takes either).
        return next((r for r in reversed(runs) if other not in (r, Path(r).name)), None)

    if run_b is None:
        run_b = latest_but(run_a)
    if run_a is None:
        run_a = latest_but(run_b)
    if run_a is None or run_b is None:
        raise UserError(f"{logdir}: one profile run, nothing to compare it with: give a second "
                        "logdir, or --run-before and --run-after (PyTorch cycles: cycle:K)")
    return run_a, run_b
