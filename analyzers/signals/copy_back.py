"""Where in its step an event falls against the step's first device→host copy: before it, the
step is still taking its input to the device (`exposed_input_copy`); after it, results have come
back to the host, and host work then is a bounce (`host_device_pingpong`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.events import is_device_plane


def before_first_copy_back(ctx: Context, df: pd.DataFrame) -> np.ndarray:
    """Per row of `df` (in-step parts with `step_idx` and `start_ns`), whether it starts before
    its step's first device→host copy (every row of a step that copies nothing back)."""
    d2h = ctx.memo("first_copy_back", lambda: ctx.in_steps(
        kinds=("d2h",), plane=is_device_plane, columns=("step_idx", "start_ns")))
    first = np.full(ctx.n_steps, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, d2h["step_idx"].to_numpy(), d2h["start_ns"].to_numpy())
    return df["start_ns"].to_numpy() < first[df["step_idx"].to_numpy()]
