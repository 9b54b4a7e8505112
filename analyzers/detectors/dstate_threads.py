"""`dstate_threads`: threads in uninterruptible I/O sleep (D state) while the CPUs are contended.

Needs the OS sampler (recadvisor capture); without it the report says the check was skipped,
since the TF trace cannot see thread states. Seed 000: many I/O threads in D state on a host
with few vCPUs delayed op launches. The estimate takes the share of samples where more threads
were runnable or in D than there are CPUs, weighted by the D threads' part of that crowd, plus the
input wait while readers sat in D.
"""

from __future__ import annotations

from analyzers.context import Context
from analyzers.findings import Finding, Skipped, speedup_from_saving
from analyzers.signals.os_sampler import summarize

ID = "dstate_threads"
MIN_D_SHARE = 0.03
MIN_MEAN_D = 0.3


def detect(ctx: Context) -> Finding | Skipped | None:
    s = summarize(ctx)
    if s is None:
        return Skipped(ID, "no OS sampler data in this run (capture it with `recadvisor capture` "
                           "or the reference trainer): thread states are not in the TF trace")
    if s.d_state_share < MIN_D_SHARE and s.mean_d_threads < MIN_MEAN_D:
        return None
    crowd = s.mean_runnable + s.mean_d_threads
    d_part = s.mean_d_threads / crowd if crowd else 0.0
    wait = ctx.fractions.get("input_wait", 0.0)
    saved = s.oversubscribed_share * d_part * 0.5 + wait * min(1.0, s.mean_d_threads / 2)
    names = ", ".join(f"{k} ({v})" for k, v in list(s.d_threads_by_name.items())[:4])
    changes = {}
    if ctx.config:
        changes = {"cycle_length": 4, "interleave_parallelism": 4, "threadpool": 0,
                   "reader_buffer_kb": 256}
    return Finding(
        id=ID,
        title=f"{s.mean_d_threads:.1f} threads on average in uninterruptible I/O sleep (D)",
        step_fraction=min(1.0, s.oversubscribed_share * d_part + wait),
        speedup=speedup_from_saving(saved),
        evidence=[f"{s.d_state_share:.1%} of thread samples in D state, up to {s.max_d_threads} "
                  f"threads at once ({s.samples} samples at {s.hz:.0f} Hz)",
                  f"{s.oversubscribed_share:.0%} of samples had more runnable+D threads than the "
                  f"{s.n_cpus} CPUs (mean {s.mean_runnable:.1f} runnable)",
                  f"threads seen in D: {names}" if names else ""],
        remedy=("Fewer, larger reads: lower the reader thread count (interleave parallelism, "
                "private threadpool) to about the vCPU count, raise the read buffer size, keep "
                "hot files in the page cache or on local disk; or add vCPUs so I/O threads do "
                "not crowd out op launches."),
        numbers={"d_state_share": round(s.d_state_share, 4),
                 "mean_d_threads": round(s.mean_d_threads, 2), "max_d_threads": s.max_d_threads,
                 "oversubscribed_share": round(s.oversubscribed_share, 4), "n_cpus": s.n_cpus,
                 "sampler_hz": round(s.hz, 1)},
        top_events=[{"name": k, "d_samples": v} for k, v in s.d_threads_by_name.items()],
        config_changes=changes,
    )
