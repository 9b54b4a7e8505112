"""`cpu_throttling`: the process's cgroup CPU quota (a container's CPU limit) stopped it in many of
its 100 ms periods while it had more threads runnable than the quota runs, and the machine had
idle cores.

Needs the OS sampler (recadvisor capture), which records the quota and its group's `cpu.stat`
throttling counters (signals/throttling.py; docs/trace-signals.md, "CPU quotas"); a TF trace has
no trace of the quota: a throttled step just takes longer.

The estimate is for raising the limit: the process's runnable threads, up to the CPUs it may run
on, would use the machine's idle cores, so the host side of the step (its share f) shrinks by
C/(C + E), C the cores the quota gave it and E the idle cores it would take. Perfect scaling, an
upper bound on the machine's side, yet low on this one: a Keras MLP whose pools TF sized for 2
CPUs, in a 1-core quota, read 1.96-1.99x against 2.35x measured without the quota (its threads
lost more to the quota than its share of it). Where the limit must stay, pools sized to it waste
less of the quota (1 thread ran 1.30x faster than TF's 2 in that quota); the estimate does not
count that, so a quota on a machine without idle cores reads `low`.
"""

from __future__ import annotations

import math

from analyzers.context import Context
from analyzers.findings import Finding, Skipped, speedup_from_saving
from analyzers.signals.os_sampler import NO_SAMPLER
from analyzers.signals.throttling import throttling

ID = "cpu_throttling"
# Fewer periods than this over the steps say little (a 0.5 s window holds 5).
MIN_PERIODS = 5
# A quota that stops the group in fewer of its periods leaves it mostly free.
MIN_PERIOD_SHARE = 0.2
# Runnable threads beyond the quota, in cores, below which the job only uses what it was given:
# one thread in a 1-core quota is stopped in most periods too (the runtime's other threads tip
# it over), with nothing to gain from more.
MIN_EXCESS_DEMAND = 0.5
# Breakdown categories that are CPU work on the host: what the quota slows.
HOST_SIDE = ("host_compute", "framework", "python_other", "convert", "launch", "gil_wait")


def detect(ctx: Context) -> Finding | Skipped | None:
    if ctx.sampler_threads is None or ctx.sampler_threads.empty:
        return Skipped(ID, f"{NO_SAMPLER}: a CPU quota's throttling is not in a profiler trace")
    t = throttling(ctx)
    if (t is None or t.periods < MIN_PERIODS or t.period_share < MIN_PERIOD_SHARE
            or t.demand - t.quota < MIN_EXCESS_DEMAND):
        return None
    c = max(t.process_cores, 1e-9)
    extra = max(0.0, min(t.demand - c, t.machine_idle))
    f = sum(ctx.fractions.get(k, 0.0) for k in HOST_SIDE)
    saving = f * extra / (c + extra)
    quota = f"{t.quota:g}"
    evidence = [
        f"the cgroup's CPU quota of {quota} core(s) stopped the process in {t.throttled_periods} "
        f"of its {t.periods} 100 ms periods ({t.period_share:.0%}) over the steps; "
        f"its run queues stopped {t.throttled_s / t.wall_s:.2f} s per second, summed over CPUs",
        f"it used {t.process_cores:.2f} cores with {t.runnable:.1f} threads runnable on average "
        f"(a stopped thread stays runnable); it may run on {t.affinity} CPUs, which TF sizes its "
        f"thread pools to, not to the quota",
        f"the machine had {t.machine_idle:.2f} idle cores: "
        + (f"raising the limit would give the host side of the step ({f:.0%}) "
           f"{extra:.1f} more (perfect scaling, an upper bound)" if extra > 0 else
           "raising the limit would find none free on this machine"),
    ]
    pool = max(1, math.floor(t.quota))
    wanted = min(t.affinity, round(t.demand))
    return Finding(
        id=ID,
        title=f"a {quota}-core CPU limit stopped the process in {t.period_share:.0%} of its "
              f"periods",
        step_fraction=saving,
        speedup=speedup_from_saving(saving),
        evidence=evidence,
        remedy=(f"Raise the container's CPU limit toward the {wanted} CPUs the job keeps busy "
                "(Kubernetes resources.limits.cpu, Docker --cpus), or give it whole cores (a "
                "cpuset: TF then sizes its pools to them). Where the limit must stay, size "
                "TF's pools to it: "
                f"tf.config.threading.set_intra_op_parallelism_threads({pool}) and "
                f"set_inter_op_parallelism_threads({pool}), so fewer threads wait out each "
                f"period."),
        numbers={"cpu_quota": t.quota, "affinity_cpus": t.affinity, "periods": t.periods,
                 "throttled_periods": t.throttled_periods,
                 "throttled_period_share": round(t.period_share, 4),
                 "throttled_cpu_s_per_s": round(t.throttled_s / t.wall_s, 3),
                 "process_cores": round(t.process_cores, 3), "runnable": round(t.runnable, 2),
                 "machine_idle_cores": round(t.machine_idle, 3), "host_share": round(f, 4),
                 "extra_cores": round(extra, 3)},
    )
