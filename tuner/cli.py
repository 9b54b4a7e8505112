"""`recadvisor tune`: Optuna search over the reference trainer's knobs, warm-started from the
analyzers' findings, every trial measured in its own subprocess.

Module level stays light (the CLI registry imports it for --help): Optuna, TensorFlow and the
analyzers load inside `run`.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shlex
import sys
from pathlib import Path

from recadvisor.errors import UserError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "tune",
        help="search the trainer's knobs with Optuna, warm-started from the findings",
        description="Measure the starting configuration, analyze its profile, queue each "
        "finding's remedy as a trial, then search the rest of the space (devices, batch size, "
        "input parallelism, data format, XLA, ...) with Optuna. Every trial runs in its own "
        "subprocess; a crash, OOM or hang fails that trial only. Writes summary.json, "
        "best_config.json, best_command.txt and trials.csv to --out.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", help="start from a reference-trainer preset (e.g. default)")
    src.add_argument("--config", type=Path, help="start from a trainer config JSON file")
    p.add_argument("--trials", type=int, default=20,
                   help="trials in the study, shared by all its workers (default 20)")
    p.add_argument("--out", type=Path, required=True, help="output folder")
    p.add_argument("--space", type=Path, help="search space TOML (default: tuner/spaces/"
                   "default.toml, which documents the format)")
    p.add_argument("--storage", help="Optuna RDB URL shared by several workers, e.g. "
                   "postgresql+psycopg://user:pass@host/db (default: SQLite in --out)")
    p.add_argument("--study", default=None, help="study name (default recadvisor-tune)")
    p.add_argument("--resume", action="store_true",
                   help="continue the study (or join it from another worker); creates it if new")
    p.add_argument("--sampler", choices=("guided", "tpe", "random", "grid"), default="guided",
                   help="guided: TPE warm-started from the findings (default); grid: every "
                   "combination of a small categorical space")
    p.add_argument("--seed", type=int, help="sampler seed")
    p.add_argument("--multi-objective", action="store_true",
                   help="maximize samples/s and minimize devices; report the Pareto front")
    p.add_argument("--guide-rounds", type=int, default=3,
                   help="analyze-and-fix rounds for the guided sampler (default 3)")
    p.add_argument("--remeasure", type=int, default=2,
                   help="extra measurements of each leading configuration (default 2; 0: none)")
    p.add_argument("--top-k", type=int, default=3, help="leaders to re-measure (default 3)")
    g = p.add_argument_group("each trial")
    g.add_argument("--warmup-steps", type=int, default=5, help="steps before timing (default 5)")
    g.add_argument("--trial-seconds", type=float, default=6.0,
                   help="timed seconds per trial (default 6)")
    g.add_argument("--trial-timeout", type=float, default=600.0,
                   help="seconds before a trial is killed as hung (default 600)")
    g.add_argument("--trial-memory-gb", type=float,
                   help="kill a trial whose processes use more resident memory (GiB)")
    g.add_argument("--data", type=Path, help="dataset dir from `recadvisor data` (fixes the "
                   "record format; default: cached synthetic variants)")
    g.add_argument("--cache-dir", type=Path, help="where generated datasets are cached")
    g.add_argument("--worker", help="command that runs one trial and speaks the trial protocol "
                   "(default: the reference trainer; see tuner/protocol.py)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _start(args: argparse.Namespace):
    from reference_model.config import TrainConfig
    from reference_model.presets import get_preset

    if args.config is not None:
        return TrainConfig.from_json(args.config), None
    if args.preset is not None:
        return get_preset(args.preset).config(), args.preset
    return None, None


def _check_args(args: argparse.Namespace) -> None:
    for name in ("trials", "trial_seconds", "trial_timeout"):
        if getattr(args, name) <= 0:
            raise UserError(f"--{name.replace('_', '-')} must be positive")
    if args.warmup_steps < 0 or args.remeasure < 0 or args.top_k < 1 or args.guide_rounds < 0:
        raise UserError("--warmup-steps, --remeasure and --guide-rounds must be >= 0, "
                        "--top-k >= 1")
    if args.data is not None and not (args.data / "manifest.json").is_file():
        raise UserError(f"--data {args.data}: no dataset there (manifest.json missing); "
                        "create one with `recadvisor data --out DIR`")
    if args.worker is None and importlib.util.find_spec("tensorflow") is None:
        raise UserError("trials run the reference trainer, which needs TensorFlow: "
                        "pip install 'recadvisor[tf]'")
    if args.out.exists() and not args.out.is_dir():
        raise UserError(f"--out {args.out} exists and is not a folder")


def run(args: argparse.Namespace) -> int:
    _check_args(args)
    import optuna
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tuner.objective import TrialSettings
    from tuner.render import render_summary, trial_line
    from tuner.study import DEFAULT_STUDY, Tuner, TuneSettings, run_tune
    from tuner.summary import summarize_tuner, write_outputs

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    start, preset = _start(args)
    settings = TuneSettings(
        out=args.out, trials=args.trials, start=start, preset=preset, space_file=args.space,
        storage=args.storage, study_name=args.study or DEFAULT_STUDY, resume=args.resume,
        sampler=args.sampler, seed=args.seed, multi_objective=args.multi_objective,
        guide_rounds=args.guide_rounds, remeasure=args.remeasure, top_k=args.top_k,
        trial=TrialSettings(warmup_steps=args.warmup_steps, measure_seconds=args.trial_seconds,
                            timeout_s=args.trial_timeout, memory_gb=args.trial_memory_gb),
        data_dir=args.data, cache_root=(args.cache_dir / "data") if args.cache_dir else None,
    )
    if args.worker:
        settings.worker = tuple(shlex.split(args.worker))
    console = Console(stderr=True, highlight=False)
    progress = Progress(TextColumn("[bold]tune[/]"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[best]}"), TimeElapsedColumn(), console=console,
                        disable=args.no_progress or not sys.stderr.isatty())
    task = progress.add_task("tune", total=args.trials, best="")
    state: dict = {"base": None, "best": 0.0, "tuner": None}

    def log(msg: str) -> None:
        progress.console.print(msg, markup=False, soft_wrap=True)

    def on_trial(t) -> None:
        from tuner.study import throughput

        v = throughput(t)
        if t.user_attrs.get("source") == "baseline" and v:
            state["base"] = v
        if v and t.state.name == "COMPLETE":
            state["best"] = max(state["best"], v)
        log(trial_line(t, state["base"]))
        tuner = state["tuner"]
        done = tuner.finished() if tuner is not None else t.number + 1
        best = f"best {state['best']:,.0f} samples/s" if state["best"] else ""
        progress.update(task, completed=min(done, args.trials), best=best)

    def on_open(tuner: Tuner) -> None:
        state["tuner"] = tuner
        log(f"study {tuner.study.study_name!r}: {args.trials} trials, sampler {args.sampler}, "
            f"{tuner.hw.describe()}; storage {settings.storage or tuner.url}")

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with progress:
        try:
            tuner = run_tune(settings, log, on_trial, on_open)
        except KeyboardInterrupt:
            tuner = state["tuner"]
            if tuner is not None:
                write_outputs(args.out, tuner.study, summarize_tuner(tuner))
                log(f"interrupted: the finished trials are kept; resume with --resume "
                    f"(summary so far in {args.out / 'summary.json'})")
            raise
    summary = summarize_tuner(tuner)
    paths = write_outputs(args.out, tuner.study, summary)
    print(render_summary(summary, paths), end="")
    return 0
