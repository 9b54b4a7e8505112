"""`cpu_contention`: other processes on the machine kept busy the cores the job wanted, through
its steps.

Needs the OS sampler (recadvisor capture): the TF trace has no trace of another process; the
same ops just take longer in every step. The sampler's process table says, per interval between
sweeps, how many cores the process used and how many the whole machine did, and its thread
states how many of the process's threads were runnable (state R: running, or waiting for a
core). signals/cpu_competition.py; docs/trace-signals.md, "Other processes on the cores".

Over the typical steps (those under step_stalls' STALL_RATIO times the median: stalls are that
detector's, which names other processes when they took the cores in the stalled steps only): C cores
the process used, U the CPUs it may use (affinity capped by its cgroup quota), O the cores other
processes used on those CPUs (cpu_competition.others_cores: the machine's busy cores less the
process's, its own children's and the sampler's, which the sampler's scans of every process tell
apart and its sweeps read interval by interval, and no more than over the whole window, where the
kernel's ticks add up; then less any CPUs outside its affinity, which other processes may have
filled first), R its runnable threads. A finding when the machine had fewer than
cpu_competition.FULL_IDLE_CORES idle (none left to take) and the process wanted at least MIN_DEFICIT
more cores than it got, of those the others held: E = min(R, U) - C, no more than O. A CPU quota
that stopped the process is cpu_throttling's.

The estimate gives those E cores back to the host side of the step (its share f, as cpu_throttling
counts it), which the process shares with its own child processes (K cores): f shrinks to f·(C +
K)/(C + K + E). Perfect scaling, an upper bound on the cores' side, measured against the same job
alone (docs/trace-signals.md).
"""

from __future__ import annotations

import numpy as np

from analyzers.context import Context
from analyzers.detectors.cpu_throttling import HOST_SIDE, MIN_PERIOD_SHARE
from analyzers.detectors.step_stalls import STALL_RATIO
from analyzers.findings import Finding, Skipped, speedup_from_saving
from analyzers.signals.cpu_competition import (
    MIN_INTERVALS,
    OtherProcesses,
    children_placed,
    cpu_share,
    other_processes,
    others_cores,
    own_children_cores,
    runnable_threads,
)
from analyzers.signals.os_sampler import NO_SAMPLER

ID = "cpu_contention"
# Fewer cores than this that the process wanted beyond those it got, and other processes held:
# it ran on what it needed, or the others were an agent, the sampler, a shell.
MIN_DEFICIT = 0.3
# Other processes named in the evidence, those using this many cores at least.
MAX_NAMED = 3
MIN_NAMED_CORES = 0.05


def detect(ctx: Context) -> Finding | Skipped | None:
    if ctx.sampler_threads is None or ctx.sampler_threads.empty:
        return Skipped(ID, f"{NO_SAMPLER}: other processes on the machine are not in a "
                           "profiler trace")
    t = ctx.steps.table
    if t.empty:
        return None
    dur = t["dur_ns"].to_numpy(np.float64)
    typical = dur < STALL_RATIO * float(np.median(dur))
    share, runnable = cpu_share(ctx, typical), runnable_threads(ctx, typical)
    n_cpus, usable = ctx.n_cpus, ctx.usable_cpus
    if (share is None or runnable is None or not n_cpus or not usable
            or share.intervals < MIN_INTERVALS):
        return None
    if share.throttled_share is not None and share.throttled_share >= MIN_PERIOD_SHARE:
        return None
    affinity = ctx.cpu_limits[0] or n_cpus
    c = share.process_cores
    named = other_processes(ctx)
    if named is None:
        # Its own child processes (data loader workers) count as other processes on the
        # machine's counters: a Keras PyDataset's 4 worker processes read as 0.95 cores of
        # "others" taken from it.
        return Skipped(ID, "the sampler data has no scans of the other processes around the "
                           "steps (recorded before 2026-11-30, or the sampler stopped early): "
                           "the job's own child processes cannot be told from other jobs")
    # The job's own child processes are its work, not a neighbour's; the sampler is ours.
    own = own_children_cores(share, named)
    # Other processes may run on the CPUs outside the job's affinity first: only what does not
    # fit there took the job's. No more than over the whole window: over a few scattered 20 ms
    # intervals the kernel's 10 ms ticks leave the children's and the machine's cores noisy (a
    # PyDataset job alone read 0.68 cores of "others" from 8 typical intervals), while over
    # back-to-back intervals the counters add up; a neighbour of the whole window is in both.
    whole = cpu_share(ctx, np.ones(len(t), dtype=bool))
    taken = typical_taken = others_cores(share, named)
    if whole is not None:
        taken = min(taken, others_cores(whole, named))
    others = max(0.0, taken - (n_cpus - affinity))
    want = min(runnable, usable)
    extra = max(0.0, min(want - c, others))
    if not share.full or extra < MIN_DEFICIT or c <= 0:
        return None
    f = sum(ctx.fractions.get(k, 0.0) for k in HOST_SIDE)
    # The job's own child processes do part of the host side (a data loader's workers): the
    # cores won back are shared with them (a PyDataset job's 4 workers beside a neighbour:
    # 1.31x measured, 1.42x so, 1.90x spread over the process's cores alone).
    job = c + own
    saving = f * extra / (job + extra)
    cpus = f"{usable:g}"
    outside = "" if affinity >= n_cpus else (
        f" ({share.others_cores:.2f} on the whole machine; those beyond its {n_cpus - affinity} "
        "CPUs outside the job's affinity counted as taking the job's)")
    evidence = [
        f"over the typical steps ({share.intervals} sampler intervals), other processes used "
        f"{others:.2f} cores of the {cpus} the job may use{outside}"
        + (f" (the whole window's count; {typical_taken:.2f} over the typical steps' scattered "
           "intervals, where the kernel's 10 ms ticks do not add up)"
           if taken < typical_taken - 0.005 else "")
        + f", the machine {share.idle_cores:.2f} idle",
        f"the job used {c:.2f} cores with {runnable:.1f} threads runnable on average (a thread "
        f"waiting for a core is runnable): it wanted {want - c:.1f} more than it got",
        f"estimate: the host side of the step ({f:.0%}) spread over {job + extra:.1f} cores "
        f"instead of {job:.1f}" + (f" (the process's {c:.2f} and its own child processes' "
                                   f"{own:.2f})" if own > 0 else "")
        + " (perfect scaling, an upper bound)",
        _who(named, own, children_placed(share, named)),
    ]
    return Finding(
        id=ID,
        title=f"other processes took {others:.1f} of the {cpus} cores the job wanted",
        step_fraction=saving,
        speedup=speedup_from_saving(saving),
        evidence=evidence,
        remedy=(
            "Give the job cores of its own: run it where nothing else competes, or separate the "
            "workloads' CPUs (`taskset -c` / a cgroup cpuset per job; in Kubernetes, Guaranteed "
            "QoS with whole-CPU requests under the static CPU manager policy). Smaller thread "
            "pools do not win the cores back: the job with one intra- and one inter-op thread "
            "ran 1.2-1.5x slower beside the same neighbour than with TF's own pools."),
        numbers={"process_cores": round(c, 3), "others_cores": round(others, 3),
                 "own_children_cores": round(own, 3),
                 "scanned_others_cores": round(named.scanned_others_cores, 3),
                 "sampler_cores": round(named.sampler_cores, 3),
                 "busiest_others": [{"command": x.what, "pids": x.pids[:8],
                                     "cores": round(x.cores, 3)}
                                    for x in named.processes if not x.own][:5],
                 "machine_idle_cores": round(share.idle_cores, 3),
                 "usable_cpus": round(usable, 3), "n_cpus": n_cpus,
                 "runnable": round(runnable, 2), "extra_cores": round(extra, 3),
                 "host_share": round(f, 4), "intervals": share.intervals},
    )


def _who(named: OtherProcesses, own: float, placed: bool) -> str:
    span = named.span_s
    top = [x for x in named.processes
           if not x.own and x.cores >= MIN_NAMED_CORES][:MAX_NAMED]
    line = (f"the busiest other processes over the steps' span ({span:.1f} s between the "
            "sampler's scans of them): " + "; ".join(
                f"`{_short(x.what)}` ({_pids(x.pids)}) {x.cores:.2f} cores" for x in top)
            ) if top else (
        f"no other process the sampler scanned used {MIN_NAMED_CORES:g} core or more over "
        f"the steps' span ({span:.1f} s): what took the cores is outside its view (another "
        "container or VM on the host)")
    if own > 0 and placed:
        line += (f"; the job's own child processes ({own:.2f} cores over the typical steps, "
                 "read at every sweep) are not counted as others")
    elif own > 0:
        line += (f"; the job's own child processes ({own:.2f} cores) are not counted as others, "
                 "and beside them only the scanned others count (data recorded before the "
                 "sampler read them at every sweep)")
    return line + f"; nor is the sampler's own process ({named.sampler_cores:.2f} cores)"


def _short(command: str, limit: int = 90) -> str:
    return command if len(command) <= limit else command[: limit - 1] + "…"


def _pids(pids: list[int]) -> str:
    return f"pid {pids[0]}" if len(pids) == 1 else f"{len(pids)} processes"
