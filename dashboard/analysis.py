"""One analyzed run as the pages need it: the analyzers' Report plus the tables the charts read.

Everything here comes from `analyzers` (report, steps, sampler tables); the dashboard adds only
the slicing for its charts. No Streamlit in this module: the pages cache `load_view` results.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analyzers.events import EndTimes, with_end
from analyzers.report import Report, analyze
from analyzers.signals import cpu_competition
from analyzers.steps import ALL_CATEGORIES

MAX_TIMELINE_EVENTS = 4000  # per step; the longest are kept, the page says how many were left


@dataclass
class RunView:
    report: Report
    summary: dict[str, Any]  # Report.to_dict(): the same JSON `recadvisor analyze` prints
    load_s: float

    @property
    def steps(self) -> pd.DataFrame:
        return self.report.ctx.steps.table

    @property
    def findings(self) -> list[dict[str, Any]]:
        return self.summary["findings"]


def load_view(path: Path) -> RunView:
    """Analyze the run at `path` (raises ValueError / OSError on unreadable input)."""
    t0 = time.perf_counter()
    report = analyze(path)
    return RunView(report=report, summary=report.to_dict(), load_s=time.perf_counter() - t0)


def _memo(view: RunView, key: str, compute):
    """Derived tables kept on the run's analysis context: a page rerun (any widget click) finds
    them instead of scanning the event table again."""
    return view.report.ctx.memo(f"dashboard:{key}", compute)


def step_breakdown_ms(view: RunView) -> pd.DataFrame:
    """One row per step: its start and the ms each category took (the analyzers' attribution)."""
    return _memo(view, "breakdown_ms", lambda: _breakdown_ms(view.steps))


def _breakdown_ms(t: pd.DataFrame) -> pd.DataFrame:
    if t.empty:
        return pd.DataFrame(columns=["step", "start_ms", "dur_ms", *ALL_CATEGORIES])
    out = pd.DataFrame({"step": t["step"].to_numpy(), "start_ms": t["start_ns"] / 1e6,
                        "dur_ms": t["dur_ns"] / 1e6})
    for c in ALL_CATEGORIES:
        out[c] = t[c].to_numpy() / 1e6
    return out


def step_events(view: RunView, step: int) -> tuple[pd.DataFrame, int]:
    """Events that overlap step `step`, clipped to it, times in ms from the step's start; and
    how many were left out (MAX_TIMELINE_EVENTS, shortest first)."""
    return _memo(view, f"timeline:{step}", lambda: _step_events(view, step))


def _step_events(view: RunView, step: int) -> tuple[pd.DataFrame, int]:
    s0, s1 = _step_ns(view, step)
    ev = view.report.ctx.events
    starts = ev["start_ns"].to_numpy()
    mask = (starts < s1) & (EndTimes(ev)[:] > s0)
    sel = with_end(ev.loc[mask, ["plane", "line", "name", "kind", "start_ns", "dur_ns"]])
    left_out = max(0, len(sel) - MAX_TIMELINE_EVENTS)
    if left_out:
        sel = sel.assign(_d=sel["end_ns"] - sel["start_ns"]).nlargest(MAX_TIMELINE_EVENTS, "_d")
    start = np.maximum(sel["start_ns"].to_numpy(), s0)
    end = np.minimum(sel["end_ns"].to_numpy(), s1)
    planes = sel["plane"].astype(str)
    # One plane (a CPU-only host): its name on every row would only push the thread names away.
    track = (sel["line"].astype(str) if planes.nunique() <= 1
             else planes + " / " + sel["line"].astype(str))
    out = pd.DataFrame({
        "track": track.to_numpy(),
        "name": sel["name"].astype(str).to_numpy(),
        "kind": sel["kind"].astype(str).to_numpy(),
        "start_ms": (start - s0) / 1e6,
        "dur_ms": (end - start) / 1e6,
    })
    return out.sort_values(["track", "start_ms"], ignore_index=True), left_out


def _step_ns(view: RunView, step: int) -> tuple[int, int]:
    t = view.steps
    row = t[t["step"] == step]
    if row.empty:
        raise ValueError(f"no step {step} in this run")
    return int(row["start_ns"].iloc[0]), int(row["end_ns"].iloc[0])


def step_window_ms(view: RunView, step: int) -> tuple[float, float]:
    s0, s1 = _step_ns(view, step)
    return s0 / 1e6, s1 / 1e6


def stalls_in_step(view: RunView, step: int) -> list[dict[str, Any]]:
    """The findings' time ranges (ms from the trace start) that fall in `step`, in step-relative
    ms, with the finding that named them: what the timeline highlights."""
    lo, hi = step_window_ms(view, step)
    out = []
    for f in view.findings:
        for a, b in f["evidence"]["time_ranges_ms"]:
            if a < hi and b > lo:
                out.append({"finding": f["id"], "start_ms": max(a, lo) - lo,
                            "end_ms": min(b, hi) - lo})
    return out


def slowest_step(view: RunView) -> int:
    t = view.steps
    return int(t.loc[t["dur_ns"].idxmax(), "step"])


def thread_states(view: RunView) -> pd.DataFrame | None:
    """Per sampler sweep: threads Running, Sleeping, in D-state, other; ms from the trace start.
    None when the run has no sampler data."""
    th = view.report.ctx.sampler_threads  # one machine's sweeps (several hosts: the step's)
    if th is None or th.empty:
        return None
    return _memo(view, "thread_states", lambda: _thread_states(th))


def _thread_states(th: pd.DataFrame) -> pd.DataFrame:
    state = th["state"].astype(str)
    kinds = np.where(state.isin(["R", "S", "D"]), state, "other")
    counts = pd.crosstab(th["t_ns"].to_numpy(), kinds)
    for c in ("R", "S", "D", "other"):
        if c not in counts:
            counts[c] = 0
    out = counts[["R", "S", "D", "other"]].reset_index(names="t_ns")
    out.columns.name = None
    out["t_ms"] = out["t_ns"] / 1e6
    return out.drop(columns="t_ns")


def other_processes(view: RunView, top: int = 10) -> pd.DataFrame | None:
    """The machine's other processes over the steps, busiest first (the sampler's scans of them,
    about once a second): command, how many processes, mean cores, whether they are the job's
    own children. None without the scans (no sampler, or data from before 2026-11-30)."""
    named = cpu_competition.other_processes(view.report.ctx)
    if named is None:
        return None
    return pd.DataFrame([{"command": x.what, "processes": len(x.pids), "cores": round(x.cores, 3),
                          "the job's own": x.own} for x in named.processes[:top]],
                        columns=["command", "processes", "cores", "the job's own"])


def process_cpu(view: RunView) -> pd.DataFrame | None:
    """The traced process's CPU use per sweep, as a share of all cores (0-100%)."""
    pr = view.report.ctx.sampler_process
    if pr is None or pr.empty or "cpu_percent" not in pr:
        return None
    n = view.report.ctx.n_cpus or 1
    return pd.DataFrame({"t_ms": pr["t_ns"] / 1e6,
                         "cpu_pct": pr["cpu_percent"].astype(float) / n})
