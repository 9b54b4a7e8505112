"""Step segmentation and the per-step time breakdown.

Steps come, in order of preference, from
1. step markers: host events carrying a `step_num` stat (`tf.profiler.experimental.Trace(name,
   step_num=..., _r=1)`, Keras' `train` trace, PyTorch's `ProfilerStep#N`);
2. repeated calls of one compiled train function (`__inference_*` on the host), step i running from
   call i to call i+1;
and a trace with neither gets an explicit "no steps found".

A step spans from its marker's start to the next marker's start, so time between steps (Python,
input fetch outside the marker) belongs to a step. The breakdown gives each instant of a step to
the highest-priority category active then (CATEGORIES order): compute first, so input waits, copies
and collectives count only where they are exposed, not where they overlap compute.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.events import cat_map, cat_mask, is_device_plane, stat

# Breakdown categories, highest priority first, with the event kinds feeding each.
CATEGORIES: dict[str, tuple[str, ...]] = {
    "device_compute": ("device_compute",),
    "host_compute": ("host_op",),
    "collective": ("collective",),
    "copy_d2d": ("d2d",),
    "copy_h2d": ("h2d", "d2h"),
    "input_wait": ("input_wait",),
    "convert": ("convert",),
    "launch": ("launch",),
    "framework": ("framework",),
}
IDLE = "python_other"  # step time no event covers: Python code, waits the tracer does not see
ALL_CATEGORIES = (*CATEGORIES, IDLE)

_COUNTER = re.compile(r"#\d+$")
_TRAIN_FN = re.compile(r"__inference_.*(?:train|step)", re.IGNORECASE)


@dataclass
class Steps:
    table: pd.DataFrame  # step, start_ns, end_ns, dur_ns, one column per ALL_CATEGORIES (ns)
    source: str  # "markers:<name>", "function:<name>" or "none"
    line: str | None = None  # the thread that drives the steps (markers or calls live there)
    # Events clipped to the steps (event row, step index, start, end): computed once, shared
    # with the detectors' in-step view.
    clipped: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def found(self) -> bool:
        return len(self.table) > 0

    def fractions(self) -> dict[str, float]:
        total = float(self.table["dur_ns"].sum())
        if total <= 0:
            return dict.fromkeys(ALL_CATEGORIES, 0.0)
        return {c: float(self.table[c].sum()) / total for c in ALL_CATEGORIES}

    def median_step_ns(self) -> float:
        return float(self.table["dur_ns"].median()) if self.found else 0.0


def _main_line(events: pd.DataFrame) -> str | None:
    return str(events["line"].value_counts().idxmax()) if len(events) else None


def find_step_windows(events: pd.DataFrame) -> tuple[pd.DataFrame, str, str | None]:
    """Return (DataFrame[step, start_ns, end_ns], source, step-driving line)."""
    host = cat_mask(events["plane"], lambda p: not is_device_plane(p))
    step_num = stat(events, "step_num")
    sel = host & (step_num >= 0)
    marked = events[sel][["name", "line", "start_ns", "end_ns", "dur_ns"]]
    if len(marked):
        marked = marked.assign(step_num=step_num[sel], root=stat(events, "root")[sel])
        if (marked["root"] > 0).any():
            marked = marked[marked["root"] > 0]
        # One marker family per name, with a step counter in the name folded (ProfilerStep#3).
        family = cat_map(marked["name"], lambda n: _COUNTER.sub("#N", n))
        marked = marked.assign(family=family)
        per_name = marked.groupby("family").agg(
            steps=("step_num", "nunique"), total=("dur_ns", "sum")
        )
        best = per_name.sort_values(["steps", "total"], ascending=False).index[0]
        m = marked[marked["family"] == best]
        w = m.groupby("step_num").agg(start_ns=("start_ns", "min"), end_ns=("end_ns", "max"))
        w = w.reset_index().rename(columns={"step_num": "step"})
        if len(w) >= 1:
            return _chain(w), f"markers:{best}", _main_line(m)
    calls = events[host & cat_mask(events["name"], _TRAIN_FN.search)]
    if len(calls):
        per_name = calls.groupby("name", observed=True).agg(n=("dur_ns", "size"),
                                                             total=("dur_ns", "sum"))
        per_name = per_name[per_name["n"] >= 2]
        if len(per_name):
            best = per_name.sort_values("total", ascending=False).index[0]
            c = calls[calls["name"] == best].sort_values("start_ns")
            # Nested duplicates of one call (EagerLocalExecute inside FunctionRun...) share a start.
            c = c.drop_duplicates("start_ns")
            w = pd.DataFrame({"step": np.arange(len(c)), "start_ns": c["start_ns"].to_numpy(),
                              "end_ns": c["end_ns"].to_numpy()})
            return _chain(w), f"function:{best}", _main_line(c)
    return pd.DataFrame(columns=["step", "start_ns", "end_ns"], dtype=np.int64), "none", None


def _chain(w: pd.DataFrame) -> pd.DataFrame:
    w = w.sort_values("start_ns", ignore_index=True)
    nxt = w["start_ns"].shift(-1)
    w["end_ns"] = np.where(nxt.notna(), nxt.fillna(0), w["end_ns"]).astype(np.int64)
    return w[w["end_ns"] > w["start_ns"]].reset_index(drop=True)


def clip_to_steps(starts: np.ndarray, ends: np.ndarray, w_start: np.ndarray,
                  w_end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split intervals at step boundaries: (interval index, step index, clipped start, end).
    Intervals outside every step are dropped; one spanning k steps appears k times."""
    first = np.searchsorted(w_start, starts, side="right") - 1
    last = np.searchsorted(w_start, ends, side="left") - 1
    first = np.maximum(first, 0)
    n = np.maximum(last - first + 1, 0)
    idx = np.repeat(np.arange(len(starts)), n)
    step = np.repeat(first, n) + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n))
    ok = (step >= 0) & (step < len(w_start))
    idx, step = idx[ok], step[ok]
    s = np.maximum(starts[idx], w_start[step])
    e = np.minimum(ends[idx], w_end[step])
    keep = e > s
    return idx[keep], step[keep], s[keep], e[keep]


def merge_intervals(step: np.ndarray, s: np.ndarray, e: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Disjoint, sorted union of intervals that never cross a step boundary (steps are disjoint
    and time-ordered, so sorting by start keeps each step's intervals together)."""
    if not len(s):
        return step, s, e
    order = np.argsort(s, kind="stable")
    s, e, step = s[order], e[order], step[order]
    reach = np.maximum.accumulate(e)
    first = np.flatnonzero(np.concatenate(([True], s[1:] > reach[:-1])))
    last = np.concatenate((first[1:] - 1, [len(s) - 1]))
    return step[first], s[first], reach[last]


def covered_ns(s: np.ndarray, e: np.ndarray) -> int:
    """Time covered by at least one of the intervals."""
    _, ms, me = merge_intervals(np.zeros(len(s), dtype=np.int64), np.asarray(s), np.asarray(e))
    return int((me - ms).sum())


def step_breakdown(events: pd.DataFrame) -> Steps:
    windows, source, line = find_step_windows(events)
    cols = ["step", "start_ns", "end_ns", "dur_ns", *ALL_CATEGORIES]
    if windows.empty:
        return Steps(pd.DataFrame(columns=cols, dtype=np.int64), source)
    w_start = windows["start_ns"].to_numpy(np.int64)
    w_end = windows["end_ns"].to_numpy(np.int64)
    n = len(windows)
    cover_prev = np.zeros(n, dtype=np.int64)
    out = windows.copy()
    out["dur_ns"] = w_end - w_start
    # Union of the categories so far, kept merged: each category's intervals are sorted once and
    # the running union stays small.
    acc_step = np.zeros(0, dtype=np.int64)
    acc_s = acc_e = np.zeros(0, dtype=np.int64)
    clipped = clip_to_steps(events["start_ns"].to_numpy(), events["end_ns"].to_numpy(),
                            w_start, w_end)
    idx, c_step, c_s, c_e = clipped
    kind_codes = events["kind"].cat.codes.to_numpy()[idx]
    kinds = list(events["kind"].cat.categories)
    for cat, feeding in CATEGORIES.items():
        sel = np.isin(kind_codes, [kinds.index(k) for k in feeding if k in kinds])
        st, s, e = merge_intervals(c_step[sel], c_s[sel], c_e[sel])
        acc_step, acc_s, acc_e = merge_intervals(np.concatenate((acc_step, st)),
                                                 np.concatenate((acc_s, s)),
                                                 np.concatenate((acc_e, e)))
        cover = np.bincount(acc_step, weights=acc_e - acc_s, minlength=n).astype(np.int64)
        out[cat] = cover - cover_prev
        cover_prev = cover
    out[IDLE] = out["dur_ns"] - cover_prev
    return Steps(out[cols].astype(np.int64), source, line, clipped)
