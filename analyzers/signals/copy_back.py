"""Where in its step an event falls against the step's first device→host copy: before it, the
step is still taking its input to the device (`exposed_input_copy`); after it, results have come
back to the host, and host work then is a bounce (`host_device_pingpong`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.events import is_device_plane


def copies_back(ctx: Context) -> pd.DataFrame:
    """The device→host copies on the device planes, clipped to the steps (host, step_idx,
    start_ns, end_ns), read once per run."""
    return ctx.memo("copies_back", lambda: ctx.in_steps(
        kinds=("d2h",), plane=is_device_plane, columns=("host", "step_idx", "start_ns",
                                                         "end_ns")))


def copies_back_per_step(ctx: Context) -> float:
    d2h = copies_back(ctx)
    return len(d2h) / ctx.worker_steps(d2h["host"]) if len(d2h) else 0.0


def before_first_copy_back(ctx: Context, df: pd.DataFrame) -> np.ndarray:
    """Per row of `df` (in-step parts with `host`, `step_idx` and `start_ns`), whether it starts
    before its step's first device→host copy on its own host (every row of a step that copies
    nothing back): one worker's early loss read says nothing of another's input."""
    first = ctx.memo("first_copy_back", lambda: _first_copy_back(ctx))
    return df["start_ns"].to_numpy() < first[df["host"].array.codes, df["step_idx"].to_numpy()]


def _first_copy_back(ctx: Context) -> np.ndarray:
    """first[host code, step]: the start of the first device→host copy (int64 max: none)."""
    d2h = copies_back(ctx)
    first = np.full((len(ctx.events["host"].cat.categories), max(ctx.n_steps, 1)),
                    np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, (d2h["host"].array.codes, d2h["step_idx"].to_numpy()),
                  d2h["start_ns"].to_numpy())
    return first
