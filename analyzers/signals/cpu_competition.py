"""Who had the CPUs in some of the steps (OS sampler): the process itself, other processes on the
machine, or nobody because the cgroup's CPU quota had stopped it.

A step in which the same ops simply ran longer says nothing in the trace; the sampler's
process table does, per interval between sweeps (`cpu_percent`: the process;
`system_cpu_percent`: the whole machine; the quota group's `cpu_periods` and
`cpu_throttled_periods`). step_stalls asks it of its stalled steps against the typical ones
(docs/trace-signals.md, "Stalls the sampler explains").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.context import Context
from analyzers.signals.os_sampler import sweep_intervals

# Fewer idle cores than this on average: the machine was full (whoever held the cores).
FULL_IDLE_CORES = 0.5


@dataclass
class CpuShare:
    intervals: int  # sampler intervals (sweep to sweep) whose middle falls in the steps
    process_cores: float  # mean cores the process used over them
    others_cores: float  # mean cores the machine's other processes used (machine busy - process)
    idle_cores: float  # mean idle cores of the machine
    throttled_share: float | None  # of the quota's periods over them, the share it ran out in
    # (None without a quota or its counters)

    @property
    def full(self) -> bool:
        return self.idle_cores < FULL_IDLE_CORES


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
                    idle_cores=max(0.0, float(n_cpus - busy)), throttled_share=throttled)
