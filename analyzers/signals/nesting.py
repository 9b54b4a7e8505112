"""Which event encloses which, on one thread: the eager-dispatch detectors pair each
`EagerKernelExecute` with the `EagerLocalExecute` around it (docs/trace-signals.md, "Eager
execution"). Threads are told apart by (plane, line id): several Python threads can share the line
name `python`, and their events interleave in time."""

from __future__ import annotations

import numpy as np
import pandas as pd


def thread_keys(df: pd.DataFrame) -> np.ndarray:
    """One int64 per row naming its thread, from the `plane` and `line_id` columns of
    Context.in_steps (categoricals)."""
    plane = df["plane"].array.codes.astype(np.int64)
    line = df["line_id"].array.codes.astype(np.int64)
    return (plane << 32) | line


def enclosing(outer_start: np.ndarray, outer_end: np.ndarray, outer_thread: np.ndarray,
              inner_start: np.ndarray, inner_thread: np.ndarray) -> np.ndarray:
    """For each inner event, the index of the outer event on the same thread that started last at
    or before it and is still open when it starts; -1 where there is none."""
    owner = np.full(len(inner_start), -1, dtype=np.int64)
    if not len(outer_start) or not len(inner_start):
        return owner
    order = np.lexsort((outer_start, outer_thread))
    starts, threads = outer_start[order], outer_thread[order]
    for t in np.unique(inner_thread):
        lo, hi = np.searchsorted(threads, t, "left"), np.searchsorted(threads, t, "right")
        sel = np.flatnonzero(inner_thread == t)
        pos = np.searchsorted(starts[lo:hi], inner_start[sel], side="right") - 1
        cand = order[lo + np.maximum(pos, 0)] if hi > lo else np.zeros(len(sel), np.int64)
        ok = (pos >= 0) & (hi > lo)
        ok &= inner_start[sel] < outer_end[cand]
        owner[sel[ok]] = cand[ok]
    return owner


def on_thread(df: pd.DataFrame, thread: tuple[str, object] | None) -> pd.DataFrame:
    """The rows of `df` (with `plane` and `line_id` columns) on `thread` = (plane, line id), the
    step-driving thread of Steps.thread; all rows when it is unknown."""
    if thread is None or df.empty:
        return df
    keep = ((df["plane"] == thread[0]) & (df["line_id"] == thread[1])).to_numpy()
    return df if keep.all() else df[keep].reset_index(drop=True)
