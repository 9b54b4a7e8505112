"""`recadvisor train`: run the reference trainer under the profiler and write a TensorBoard logdir.

No TensorFlow import at module level: `recadvisor --help` must stay fast.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
from collections.abc import Iterable
from pathlib import Path

from recadvisor.argtypes import positive
from reference_model.config import (
    TrainConfig,
    add_config_flags,
    config_to_flags,
    overrides_from_args,
)
from reference_model.presets import PRESETS, get_preset


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "train",
        help="run the reference DLRM trainer and write a profiled TensorBoard logdir",
        description="Run the reference hybrid-parallel DLRM trainer: warm-up, a timed window "
        "(samples/s), then a profiled window written to LOGDIR/plugins/profile/<run>/.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--preset", choices=sorted(PRESETS), help="start from a named preset")
    src.add_argument("--config", type=Path, help="start from a JSON config file")
    p.add_argument("--logdir", type=Path, help="TensorBoard logdir to write (omit: no profile)")
    p.add_argument("--data", type=Path, help="dataset dir from `recadvisor data` (default: cached)")
    p.add_argument("--cache-dir", type=Path, help="where generated datasets are cached")
    p.add_argument("--steps", type=int, help="timed steps (alias of --measure-steps)")
    p.add_argument("--measure-seconds", type=positive, metavar="S",
                   help="end the timed window once S seconds have passed (at most --steps steps): "
                   "every configuration gets the same measuring time, whatever its step time")
    p.add_argument("--eval", action="store_true", help="report AUC on the held-out split")
    p.add_argument("--python-trace", action="store_true", help="also trace Python calls")
    p.add_argument("--list-presets", action="store_true", help="print the presets and exit")
    p.add_argument("--print-config", action="store_true", help="print the config and exit")
    p.add_argument("--json", action="store_true", help="print the run metadata as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_config_flags(p)


def build_config(args: argparse.Namespace) -> TrainConfig:
    if args.config is not None:
        cfg = TrainConfig.from_json(args.config)
    elif args.preset is not None:
        cfg = get_preset(args.preset).config()
    else:
        cfg = TrainConfig()
    overrides = overrides_from_args(args)
    if args.steps is not None:
        overrides["measure_steps"] = args.steps
    cfg = cfg.replace(**overrides)
    cfg.validate()
    return cfg


def train_command(cfg: TrainConfig, logdir: str | None = None, keep: Iterable[str] = ()) -> str:
    parts = ["recadvisor", "train", *config_to_flags(cfg, keep=keep)]
    if logdir:
        parts += ["--logdir", logdir]
    return shlex.join(parts)


def run(args: argparse.Namespace) -> int:
    if args.list_presets:
        for p in PRESETS.values():
            print(f"{p.name:18s} {p.description}")
        return 0
    cfg = build_config(args)
    if args.print_config:
        print(json.dumps(cfg.to_dict(), indent=2))
        return 0
    # TensorFlow's C++ INFO/WARNING lines would drown the progress bars; errors still show.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from reference_model.train import run_training

    meta = run_training(
        cfg,
        logdir=args.logdir,
        data_dir=args.data,
        cache_root=args.cache_dir,
        preset=args.preset,
        evaluate=args.eval,
        progress=not args.no_progress,
        python_trace=args.python_trace,
        measure_seconds=args.measure_seconds,
    )
    if args.json:
        print(json.dumps(meta, indent=2))
        return 0
    sps = meta["samples_per_s"]
    st = meta["step_time_ms"] or {}
    print(f"samples/s: {sps:,.0f}" if sps else "samples/s: (no timed steps)")
    if st:
        print(f"step time ms: p50 {st['p50']:.1f}  p90 {st['p90']:.1f}  p99 {st['p99']:.1f}")
    if meta.get("eval_auc") is not None:
        print(f"eval AUC: {meta['eval_auc']:.4f}")
    if meta.get("run_dir"):
        print(f"profile written to {meta['run_dir']}")
    return 0
