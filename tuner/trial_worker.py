"""One tuning trial, in its own process: `python -m tuner.trial_worker REQUEST.json`.

Runs the reference trainer (TensorFlow is imported here, never in the tuner's parent) and speaks
`tuner.protocol` on stdout. A crash, an OOM kill or a hang only ever takes this process down.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

from recadvisor.cli import exit_process
from recadvisor.errors import one_line
from tuner import protocol


def _emit(message: dict) -> None:
    print(protocol.encode(message), flush=True)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tuner.trial_worker REQUEST.json", file=sys.stderr)
        return 2
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from reference_model.config import TrainConfig

    try:
        req = json.loads(Path(argv[0]).read_text())
        cfg = TrainConfig.from_dict(req["config"]).replace(
            warmup_steps=int(req.get("warmup_steps", 5)),
            measure_steps=int(req.get("max_measure_steps", 10_000)),
            profile_steps=int(req.get("profile_steps", 0)) if req.get("logdir") else 0,
        )
        cfg.validate()
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: bad trial request: {e}", file=sys.stderr)
        return 2

    from reference_model.train import run_training

    every = float(req.get("report_every_s", 1.0))
    elapsed: list[float] = []
    last = [0.0]

    def on_step(steps: int, t: float) -> None:
        elapsed.append(t)
        if t - last[0] >= every:
            last[0] = t
            _emit({"event": "progress", "steps": steps, "elapsed_s": round(t, 4),
                   "samples_per_s": cfg.samples_per_step * steps / t})

    started = time.time()
    try:
        meta = run_training(
            cfg,
            logdir=Path(req["logdir"]) if req.get("logdir") else None,
            data_dir=Path(req["data_dir"]) if req.get("data_dir") else None,
            cache_root=Path(req["cache_root"]) if req.get("cache_root") else None,
            progress=False,
            measure_seconds=float(req.get("measure_seconds", 6.0)),
            on_measure_step=on_step,
        )
    except Exception as e:  # the parent records the last stderr line as the trial's reason
        user_error = isinstance(e, ValueError | OSError)
        if not user_error:
            traceback.print_exc()
        print(f"error: {type(e).__name__}: {one_line(e)}"[:500], file=sys.stderr, flush=True)
        return 2 if user_error else 1
    steady = protocol.steady_rate(cfg.samples_per_step, elapsed)
    _emit({"event": "result", "samples_per_s": steady, "overall_samples_per_s":
           meta["samples_per_s"], "steps": len(elapsed), "step_time_ms": meta["step_time_ms"],
           "run_dir": meta.get("run_dir"), "devices": meta.get("devices"),
           "wall_s": round(time.time() - started, 2)})
    return 0


if __name__ == "__main__":
    exit_process(main(sys.argv[1:]))
