"""`idle_cores`: the model's large ops ran on fewer threads than the process has CPUs, and the
other cores sat idle (thread pools capped: intra/inter-op parallelism set low).

Needs the OS sampler (recadvisor capture): on CPU the intra-op threads that do an op's work write
no trace events, so only the sampled thread states and CPU counters show how many cores the ops
used (signals/core_use.py; docs/trace-signals.md, "Idle cores"). Without it the report says the
check was skipped.

Idle cores alone are not the finding: a pool never fills every core between ops, and cores may
belong to other processes or lie outside the process's affinity and quota. The pools count as
capped when fewer threads did the ops' work than the process may use CPUs, and the ops woke no
more threads than that either, or when only TF's inter-op threads did it (the ops ran inline:
an intra-op pool of one thread), and only where the large ops are mostly of the kinds a pool
splits (matrix products, convolutions), not serial ones (signals/core_use.py).

The estimate gives the idle cores to the large ops and nothing else: if they used C cores for a
share f of the step and I more were free, f shrinks to f·C/(C + I). Perfect scaling over the
added cores is an upper bound: a Keras MLP with one intra- and one inter-op thread on two CPUs
read 1.77-1.83x against 1.74x measured with the pools left to TF, the reference trainer's
`capped_pools` preset 1.37-1.41x against 1.29-1.38x.
"""

from __future__ import annotations

from analyzers.context import Context
from analyzers.findings import Finding, Skipped, speedup_from_saving
from analyzers.signals.core_use import LARGE_OP_NS, core_use
from analyzers.signals.os_sampler import NO_SAMPLER

ID = "idle_cores"
# Less than this many idle cores is within what any job leaves between ops: TF's own pools left
# 0.07-0.24 of 2 cores idle in 17 captures of Keras MLPs and the reference trainer; one intra-op
# and two inter-op threads left 0.47-0.49 (1.12-1.24x slower; docs/trace-signals.md, "Idle
# cores").
MIN_IDLE_CORES = 0.35


def detect(ctx: Context) -> Finding | Skipped | None:
    if ctx.sampler_threads is None or ctx.sampler_threads.empty:
        return Skipped(ID, f"{NO_SAMPLER}: the threads that do an op's work on CPU write no "
                           "trace events")
    use = core_use(ctx)
    if use is None or not use.capped or use.idle_cores < MIN_IDLE_CORES:
        return None
    c, idle, f = use.process_cores, use.idle_cores, use.op_share
    if c <= 0:
        return None
    saving = f * idle / (c + idle)
    usable = _cpus(use.usable_cpus)
    limited = "" if use.usable_cpus >= use.n_cpus else (
        f" (of the machine's {use.n_cpus}: affinity or cgroup quota)")
    workers = ", ".join(f"tid {tid} `{name}` running in {share:.0%}"
                        for tid, name, share in use.workers[:4])
    evidence = [
        f"while the model's large ops ran ({f:.0%} of the step: host ops of "
        f"{LARGE_OP_NS // 1000} µs or more), the process used {c:.2f} cores of the {usable} "
        f"it may use{limited}; the machine had {use.n_cpus - use.machine_cores:.2f} idle "
        f"({use.intervals} sampler intervals)",
        f"{len(use.workers)} thread(s) did that work ({workers}); {use.runnable_mean:.1f} of the "
        f"process's threads runnable on average: " + (
            "only TF's inter-op threads (`tf_Compute`) ran the ops, no intra-op thread helped: "
            "each op ran inline on one thread (an intra-op pool of one)" if use.inline else
            "its thread pools hold fewer threads than it has CPUs"),
        f"estimate: those ops spread over {c + idle:.1f} cores instead of {c:.1f} (perfect "
        f"scaling, an upper bound)",
    ]
    return Finding(
        id=ID,
        title=f"{idle:.1f} of {usable} usable cores idle while the model's ops ran on "
              f"{len(use.workers)} thread(s)",
        step_fraction=saving,
        speedup=speedup_from_saving(saving),
        evidence=evidence,
        remedy=_remedy(ctx, max(1, int(use.usable_cpus))),
        numbers={"op_share": round(f, 4), "process_cores": round(c, 3),
                 "machine_idle_cores": round(use.n_cpus - use.machine_cores, 3),
                 "idle_cores": round(idle, 3), "usable_cpus": round(use.usable_cpus, 3),
                 "n_cpus": use.n_cpus, "workers": len(use.workers),
                 "runnable_mean": round(use.runnable_mean, 2), "intervals": use.intervals},
        top_events=[{"name": f"{name} (tid {tid})", "running_share": round(share, 3)}
                    for tid, name, share in use.workers],
        config_changes=_trainer_changes(ctx),
    )


def _trainer_changes(ctx: Context) -> dict[str, int]:
    """For a reference-trainer run that set its pools: back to TF's own sizing."""
    cfg = ctx.config or {}
    return {k: 0 for k in ("intra_op_threads", "inter_op_threads") if cfg.get(k)}


def _cpus(n: float) -> str:
    return f"{n:.0f}" if float(n).is_integer() else f"{n:.1f}"


def _remedy(ctx: Context, usable: int) -> str:
    """`usable`: whole CPUs (a fractional quota rounds down: a pool thread per full core)."""
    if ctx.framework == "pytorch":
        return (f"Let the intra-op pool use the {usable} CPUs: torch.set_num_threads({usable}), "
                "and unset OMP_NUM_THREADS / MKL_NUM_THREADS where the job's environment sets "
                "them lower.")
    return (f"Let TF's thread pools use the {usable} CPUs: leave "
            "tf.config.threading.set_intra_op_parallelism_threads and "
            "set_inter_op_parallelism_threads at 0 (TF then sizes them to the CPUs the process "
            f"may use) or set the intra-op pool to {usable}; look for TF_NUM_INTRAOP_THREADS, "
            "TF_NUM_INTEROP_THREADS or OMP_NUM_THREADS in the job's environment and for "
            "intra_op_parallelism_threads in a TF1 ConfigProto.")
