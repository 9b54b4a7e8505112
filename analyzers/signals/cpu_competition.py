"""Who had the CPUs in some of the steps (OS sampler): the process itself, other processes on the
machine, or nobody because the cgroup's CPU quota had stopped it.

A step in which the same ops simply ran longer says nothing in the trace; the sampler's
process table does, per interval between sweeps (`cpu_percent`: the process;
`system_cpu_percent`: the whole machine; the quota group's `cpu_periods` and
`cpu_throttled_periods`). step_stalls asks it of its stalled steps against the typical ones
(docs/trace-signals.md, "Stalls the sampler explains"); cpu_contention of the typical steps
alone, with the threads the process kept runnable there ("Other processes on the cores").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.signals.os_sampler import sweep_intervals, threads_in_steps

# Fewer idle cores than this on average: the machine was full (whoever held the cores).
FULL_IDLE_CORES = 0.5
# Fewer sampler intervals than this say nothing of the cores over a span: the kernel counts
# CPU time in 10 ms ticks, so over 20 ms intervals the machine's busy share moves in quarters
# of 2 cores (a 0.2 s window of a PyDataset job read 1.2 cores of "others" from 2 intervals
# where the sampler's scans found no other process using CPU).
MIN_INTERVALS = 10
# The job's own children's work the sampler's sweeps did not read, beyond which the counters'
# "others" are capped at what the scans found other processes using (others_cores): that work
# cannot be placed in the steps (a PyDataset's per-fit workers, found by the last scan only,
# left 0.70 cores unread and 1.0 core of "others" over the typical steps, the job alone).
UNPLACED_CORES = 0.05


@dataclass
class CpuShare:
    intervals: int  # sampler intervals (sweep to sweep) whose middle falls in the steps
    process_cores: float  # mean cores the process used over them
    others_cores: float  # mean cores the machine's other processes used (machine busy - process)
    idle_cores: float  # mean idle cores of the machine
    throttled_share: float | None  # of the quota's periods over them, the share it ran out in
    # (None without a quota or its counters)
    # mean cores of the process's children that exited and were waited for over them (their
    # CPU lands in the parent's cutime then; 0 without the column, recorded since 2026-11-30)
    reaped_children_cores: float = 0.0
    # mean cores of its live descendants, which the sampler reads at every sweep once a scan
    # found them (None without the column, recorded since 2026-11-30). One reaped in an interval
    # leaves this sum then and lands in the cutime whole: only the two together are its CPU.
    live_children_cores: float | None = None

    @property
    def full(self) -> bool:
        return self.idle_cores < FULL_IDLE_CORES

    @property
    def placed_children_cores(self) -> float:
        """The job's own child processes' cores placed interval by interval: exited ones and,
        where the sampler read them at every sweep, live ones."""
        return max(0.0, self.reaped_children_cores + (self.live_children_cores or 0.0))

    @property
    def neighbour_cores(self) -> float:
        """The other processes' cores less the job's own children's placed interval by
        interval (the sampler's own process is still in it)."""
        return max(0.0, self.others_cores - self.placed_children_cores)


def cpu_share(ctx: Context, steps: np.ndarray) -> CpuShare | None:
    """Over the sampler intervals inside the steps flagged in `steps` (a mask over the step
    table). None without sampler data of one process with its CPU columns, or without an
    interval there."""
    p, n_cpus = ctx.sampler_process, ctx.n_cpus
    if (p is None or len(p) < 2 or not n_cpus or ctx.steps.table.empty
            or not {"cpu_percent", "system_cpu_percent"} <= set(p)
            or ("pid" in p and p["pid"].nunique() > 1)):
        return None
    p, mid, ok = sweep_intervals(p)
    row = ctx.steps.row_at(mid)
    use = ok & (row >= 0) & steps[np.maximum(row, 0)]
    if not use.any():
        return None
    process = p["cpu_percent"].to_numpy(np.float64)[1:][use].mean() / 100
    dt = np.diff(p["t_ns"].to_numpy(np.int64))[use].sum() / 1e9

    def grew(column: str) -> float:
        return float(np.diff(p[column].to_numpy(np.float64))[use].sum() / dt) if dt > 0 else 0.0
    reaped = grew("children_s") if "children_s" in p else 0.0
    live = grew("live_children_s") if "live_children_s" in p else None
    busy = p["system_cpu_percent"].to_numpy(np.float64)[1:][use].mean() / 100 * n_cpus
    throttled = None
    if {"cpu_quota", "cpu_periods", "cpu_throttled_periods"} <= set(p) and (
            p["cpu_quota"].to_numpy() > 0).any():
        periods = np.diff(p["cpu_periods"].to_numpy(np.int64))
        stopped = np.diff(p["cpu_throttled_periods"].to_numpy(np.int64))
        counted = use & (periods >= 0) & (stopped >= 0)
        if periods[counted].sum() > 0:
            throttled = float(stopped[counted].sum()) / float(periods[counted].sum())
    return CpuShare(intervals=int(use.sum()), process_cores=float(process),
                    others_cores=max(0.0, float(busy - process)),
                    idle_cores=max(0.0, float(n_cpus - busy)), throttled_share=throttled,
                    reaped_children_cores=max(0.0, reaped), live_children_cores=live)


def runnable_threads(ctx: Context, steps: np.ndarray) -> float | None:
    """The process's threads in state R per sampler sweep, over the sweeps inside the steps
    flagged in `steps`: a thread waiting for a core is in R as well as one running, so beyond
    the cores the process got it is what it wanted and did not get. None without sampler thread
    rows of one process, or without a sweep there."""
    th = threads_in_steps(ctx)
    if th is None or th.empty or ("pid" in th and th["pid"].nunique() > 1):
        return None
    sweep_ts, sweep_of = np.unique(th["ts_ns"].to_numpy(np.int64), return_inverse=True)
    t = np.zeros(len(sweep_ts), np.int64)
    t[sweep_of] = th["t_ns"].to_numpy(np.int64)
    running = np.bincount(sweep_of, weights=(th["state"].astype(str) == "R").to_numpy(),
                          minlength=len(t))
    row = ctx.steps.row_at(t)
    use = (row >= 0) & steps[np.maximum(row, 0)]
    return float(running[use].mean()) if use.any() else None


@dataclass
class OtherProcess:
    what: str  # its command line (its name when the sampler read none)
    pids: list[int]  # the processes of that command
    cores: float  # mean cores they used over the span
    own: bool  # descendants of the sampled process: the job's own (data loader workers...)


@dataclass
class OtherProcesses:
    processes: list[OtherProcess]  # busiest first, the sampler's own process left out
    span_s: float  # between the two scans the cores are taken over
    sampler_cores: float  # the sampler's own process (1% of the machine, by its budget)
    # Of the job's own children's cores over the span, those the sampler's sweeps read (its
    # live_children_s; None in data without it)
    placed_own_cores: float | None = None

    @property
    def own_cores(self) -> float:
        return sum(x.cores for x in self.processes if x.own)

    @property
    def unplaced_own_cores(self) -> float:
        """The job's own children's cores over the span the sweeps did not read: children the
        scans found too late for a sweep to read (a Keras PyDataset starts new worker processes
        each fit() call; a pool's workers found only by the last scan) or not alive at any."""
        placed = self.placed_own_cores if self.placed_own_cores is not None else 0.0
        return max(0.0, self.own_cores - placed)

    @property
    def scanned_others_cores(self) -> float:
        """What the scans found processes other than the job's own using."""
        return sum(x.cores for x in self.processes if not x.own)


def other_processes(ctx: Context) -> OtherProcesses | None:
    """The machine's other processes by the cores they used from the last scan at or before
    the steps begin to the first at or after they end (the sampler scans them about once a
    second, and at its last sweep), grouped by command line. None without the sampler's scans
    of them (captures before 2026-11-30) or without two scans around the steps."""
    return ctx.memo("other_processes", lambda: _other_processes(ctx))


def _other_processes(ctx: Context) -> OtherProcesses | None:
    o, t = ctx.sampler_others, ctx.steps.table
    if o is None or o.empty or t.empty:
        return None
    scans = np.unique(o["t_ns"].to_numpy(np.int64))
    lo_ns, hi_ns = int(t["start_ns"].min()), int(t["end_ns"].max())
    lo = scans[max(0, np.searchsorted(scans, lo_ns, side="right") - 1)]
    hi = scans[min(len(scans) - 1, np.searchsorted(scans, hi_ns, side="left"))]
    if hi <= lo:
        return None
    o = o.sort_values("t_ns", kind="stable")
    key = ["pid", "start_ticks"]
    # A process's cumulative CPU at a scan is its last row at or before it; one with no row by
    # `lo` started after it.
    end = o[o["t_ns"] <= hi].groupby(key).last()
    start = o[o["t_ns"] <= lo].groupby(key)["cpu_s"].last()
    used = (end["cpu_s"] - start.reindex(end.index).fillna(0.0)).clip(lower=0.0)
    span_s = (hi - lo) / 1e9
    sampled, sampler = int(o["sampled_pid"].iloc[0]), int(o["sampler_pid"].iloc[0])
    parent = dict(zip(end.index.get_level_values("pid").tolist(), end["ppid"].tolist(),
                      strict=True))
    rows, sampler_cores = [], 0.0
    for (pid, _), cpu, cmd, name in zip(end.index, used.to_numpy(), end["cmd"].astype(str),
                                        end["name"].astype(str), strict=True):
        if pid == sampler:
            sampler_cores += cpu / span_s
        elif cpu > 0:
            rows.append((cmd or name, pid, cpu / span_s, _descends(pid, sampled, parent)))
    df = pd.DataFrame(rows, columns=["what", "pid", "cores", "own"])
    out = [OtherProcess(what=str(w), pids=sorted(g["pid"].tolist()),
                        cores=float(g["cores"].sum()), own=bool(own))
           for (w, own), g in df.groupby(["what", "own"], sort=False)]
    return OtherProcesses(sorted(out, key=lambda x: -x.cores), span_s, sampler_cores,
                          _placed_between(ctx.sampler_process, lo, hi))


def _placed_between(p: pd.DataFrame | None, lo: int, hi: int) -> float | None:
    """Mean cores of the job's live children the sampler's sweeps read between `lo` and `hi`
    (its live_children_s at the last sweep at or before each); None without the column."""
    if p is None or "live_children_s" not in p or p.empty:
        return None
    t = p["t_ns"].to_numpy(np.int64)
    live = p["live_children_s"].to_numpy(np.float64)
    order = np.argsort(t, kind="stable")
    t, live = t[order], live[order]
    at = np.searchsorted(t, [lo, hi], side="right") - 1
    start = live[at[0]] if at[0] >= 0 else 0.0
    end = live[at[1]] if at[1] >= 0 else 0.0
    return max(0.0, float(end - start)) / ((hi - lo) / 1e9)


def children_placed(share: CpuShare, named: OtherProcesses | None) -> bool:
    """Whether the job's own children's work is placed interval by interval: the sampler read
    them at every sweep (data since 2026-11-30), and missed less than UNPLACED_CORES of it."""
    return share.live_children_cores is not None and (
        named is None or named.unplaced_own_cores < UNPLACED_CORES)


def own_children_cores(share: CpuShare, named: OtherProcesses) -> float:
    """The cores the job's own child processes used over `share`'s intervals: exited ones from
    the process's cutime; live ones as the sampler read them at every sweep, plus, at their
    mean over the scans' span, what the sweeps did not read of them (in data recorded before
    the sweeps read them, 2026-11-30, all of it)."""
    if share.live_children_cores is not None:
        return share.placed_children_cores + named.unplaced_own_cores
    return named.own_cores + share.reaped_children_cores


def others_cores(share: CpuShare, named: OtherProcesses) -> float:
    """The cores other processes used over `share`'s intervals: the machine's busy ones less
    the process's, its own children's (`own_children_cores`) and the sampler's. In data whose
    live children only the scans saw, no more than the scans found other processes using beside
    children of its own: a data loader's work follows the step's phases, which scans a second
    apart cannot place (a PyDataset's 4 workers left 0.55 cores of "others" over the typical
    steps beyond their mean, with no other process scanned using CPU); a neighbour out of the
    scans' view (another container's) is then missed. Read at every sweep, the children's
    work is placed where it ran and no cap is needed, unless the sweeps missed UNPLACED_CORES
    or more of it."""
    own = own_children_cores(share, named)
    counted = share.others_cores - own - named.sampler_cores
    if own > 0 and not children_placed(share, named):
        counted = min(counted, named.scanned_others_cores)
    return max(0.0, counted)


def _descends(pid: int, ancestor: int, parent: dict[int, int]) -> bool:
    seen = set()
    while pid in parent and pid not in seen:
        seen.add(pid)
        pid = parent[pid]
        if pid == ancestor:
            return True
    return False
