"""How the process's cgroup CPU quota throttled it over the steps (OS sampler).

A container's CPU limit (Kubernetes `resources.limits.cpu`, Docker `--cpus`) is a quota of CPU
time per 100 ms period, enforced by stopping every thread of the group once it is spent until
the next period begins. TF sizes its pools to the CPUs the process may run on (its affinity),
not to the quota, so a job that sees the host's cores keeps more threads runnable than its quota
can run. The sampler records the quota's group's `cpu.stat` counters each sweep
(recadvisor/capture/cpu_limits.py; docs/trace-signals.md, "CPU quotas").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.context import Context
from analyzers.signals.os_sampler import threads_in_steps, within_steps

_COUNTERS = ("cpu_periods", "cpu_throttled_periods", "cpu_throttled_s")


@dataclass
class Throttling:
    quota: float  # cores (quota / period)
    affinity: int  # the CPUs the process may run on: what TF sizes its pools to
    periods: int  # CFS periods over the steps
    throttled_periods: int  # of them, periods in which the quota ran out
    throttled_s: float  # time the group was stopped, summed over the CPUs it was stopped on
    wall_s: float
    process_cores: float  # mean cores the process used over the steps
    machine_idle: float  # mean idle cores on the whole machine over the steps
    runnable: float  # the process's threads in R per sweep (a throttled thread stays in R)

    @property
    def period_share(self) -> float:
        return self.throttled_periods / self.periods if self.periods else 0.0

    @property
    def demand(self) -> float:
        """The cores the process's runnable threads would use without the quota: no more than
        it may run on."""
        return min(self.runnable, float(self.affinity))


def throttling(ctx: Context) -> Throttling | None:
    """None without sampler data that recorded a quota and its counters, or without steps."""
    p, th = ctx.sampler_process, threads_in_steps(ctx)
    if (p is None or len(p) < 2 or th is None or th.empty or not ctx.steps.found
            or not {*_COUNTERS, "cpu_quota", "cpu_percent", "system_cpu_percent"} <= set(p)):
        return None
    affinity, quota = ctx.cpu_limits
    p = within_steps(p, ctx)
    p = p[(p[list(_COUNTERS)] >= 0).all(axis=1)].sort_values("t_ns")
    if quota is None or len(p) < 2:
        return None
    first, last = p.iloc[0], p.iloc[-1]
    wall = (last["t_ns"] - first["t_ns"]) / 1e9
    if wall <= 0:
        return None
    n_cpus = ctx.n_cpus or 1
    affinity = affinity or n_cpus
    running = (th["state"].astype(str) == "R").to_numpy()
    sweeps = max(1, th["t_ns"].nunique())
    return Throttling(
        quota=quota, affinity=affinity,
        periods=int(last["cpu_periods"] - first["cpu_periods"]),
        throttled_periods=int(last["cpu_throttled_periods"] - first["cpu_throttled_periods"]),
        throttled_s=float(last["cpu_throttled_s"] - first["cpu_throttled_s"]),
        wall_s=float(wall),
        process_cores=float(p["cpu_percent"].iloc[1:].mean()) / 100,
        machine_idle=float(np.mean(100 - p["system_cpu_percent"].iloc[1:])) / 100 * n_cpus,
        runnable=float(running.sum()) / sweeps)
