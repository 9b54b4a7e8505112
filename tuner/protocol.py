"""The line protocol between the tuner and a trial's subprocess.

The parent writes a JSON request file and starts `WORKER ... REQUEST.json`; the worker prints
progress and one result on stdout, each line `@@recadvisor-trial {json}` (anything else a training
job prints is ignored), and on failure one line on stderr and a non-zero exit. Any program that
speaks this protocol can be tuned with `recadvisor tune --worker CMD`.

Request: {"config": {TrainConfig fields}, "warmup_steps": int, "measure_seconds": float,
          "max_measure_steps": int, "report_every_s": float, "logdir": str | null,
          "data_dir": str | null, "cache_root": str | null}
Progress: {"event": "progress", "steps": int, "elapsed_s": float, "samples_per_s": float}
Result:   {"event": "result", "samples_per_s": float (steady state), "steps": int,
           "step_time_ms": {p50, p90, p99, mean} | null, "run_dir": str | null}
"""

from __future__ import annotations

import json
from typing import Any

MARKER = "@@recadvisor-trial "


def encode(message: dict[str, Any]) -> str:
    return MARKER + json.dumps(message, separators=(",", ":"))


def decode(line: str) -> dict[str, Any] | None:
    """The message on a protocol line; None for any other line."""
    if not line.startswith(MARKER):
        return None
    try:
        msg = json.loads(line[len(MARKER):])
    except json.JSONDecodeError:
        return None
    return msg if isinstance(msg, dict) and "event" in msg else None


def steady_rate(samples_per_step: int, elapsed: list[float]) -> float | None:
    """Samples/s over the last three quarters of the timed steps.

    The first steps after warm-up drain batches that prefetch buffered while the model was
    compiling: counting them flatters input-bound configurations (2 of 12 slow steps is +17%).
    """
    n = len(elapsed)
    if n == 0:
        return None
    k = n // 4
    t0 = elapsed[k - 1] if k else 0.0
    span = elapsed[-1] - t0
    return samples_per_step * (n - k) / span if span > 0 else None
