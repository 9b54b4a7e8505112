"""`dstate_threads`: threads in uninterruptible I/O sleep (D state) while the CPUs are contended.

Needs the OS sampler (recadvisor capture); without it the report says the check was skipped,
since the TF trace cannot see thread states. Seed 000: many I/O threads in D state on a host
with few vCPUs delayed op launches, and more vCPUs cured it.

A thread in D uses no CPU while it waits; what crowds out the model is the kernel work around
each wait: one system call, one device request and one wake-up per read. Small reads of cold
files multiply it (the `dstate_io` preset: 4 KB reads spent 3.7 ms of kernel CPU per MB read,
against 0.3 ms/MB for 256 KB reads; docs/trace-signals.md, "Threads in D state"). So the
estimate is the I/O threads' kernel CPU beyond what the same bytes cost in large reads, as a
share of the process's CPU, counted only while the cores were full (each CPU-second the readers
spent in the kernel was then one the model's threads waited for), plus the step's input wait
while readers sat in D when `io_stall` does not already claim that wait.
"""

from __future__ import annotations

from analyzers import detectors
from analyzers.context import Context
from analyzers.detectors import io_stall
from analyzers.findings import Finding, Skipped, speedup_from_saving
from analyzers.signals.os_sampler import (
    LARGE_READ_KERNEL_S_PER_MB,
    NO_SAMPLER,
    IoThreads,
    io_threads,
    summarize,
)

ID = "dstate_threads"
MIN_D_SHARE = 0.03
MIN_MEAN_D = 0.3
# Kernel CPU per MB read above which reads count as small (large reads: ~0.3 ms/MB,
# os_sampler.LARGE_READ_KERNEL_S_PER_MB).
SMALL_READ_MS_PER_MB = 1.0


def detect(ctx: Context) -> Finding | Skipped | None:
    s = summarize(ctx)
    if s is None:
        return Skipped(ID, f"{NO_SAMPLER}: thread states are not in a profiler trace")
    if s.d_state_share < MIN_D_SHARE and s.mean_d_threads < MIN_MEAN_D:
        return None
    io = io_threads(ctx)
    crowd = io.avoidable_kernel_share * s.saturated_share if io else 0.0
    per_mb = io.kernel_ms_per_mb if io else None
    small_reads = per_mb is None or per_mb > SMALL_READ_MS_PER_MB
    wait = ctx.fractions.get("input_wait", 0.0)
    wait_part = 0.0
    # Waiting on storage that serves large reads is a bandwidth problem (io_stall's), and
    # io_stall's finding, when there is one, already counts the wait.
    if small_reads and not isinstance(detectors.run_detector(io_stall, ctx), Finding):
        wait_part = wait * min(1.0, s.mean_d_threads / 2)
    names = ", ".join(f"{k} ({v})" for k, v in list(s.d_threads_by_name.items())[:4])
    evidence = [f"{s.d_state_share:.1%} of thread samples in D state, {s.mean_d_threads:.1f} "
                f"threads at once on average, up to {s.max_d_threads} ({s.samples} samples at "
                f"{s.hz:.0f} Hz)"]
    numbers: dict[str, float | int | None] = {
        "d_state_share": round(s.d_state_share, 4), "mean_d_threads": round(s.mean_d_threads, 2),
        "max_d_threads": s.max_d_threads, "oversubscribed_share": round(s.oversubscribed_share, 4),
        "n_cpus": s.n_cpus, "sampler_hz": round(s.hz, 1),
        "input_wait_claimed": round(wait_part, 4)}
    if io:
        evidence.append(
            f"the {io.threads} threads seen in D used {io.kernel_share:.0%} of the process's CPU "
            f"in the kernel ({io.kernel_s:.2f} s of {io.process_cpu_s:.2f} s over "
            f"{s.wall_s:.1f} s){_reads_note(io, small_reads)}")
        evidence.append(f"all {s.n_cpus} CPUs had a runnable thread in {s.saturated_share:.0%} "
                        f"of samples (mean {s.mean_runnable:.1f} runnable): "
                        + ("the cores were full, so the readers' kernel time came out of the "
                           "model's" if s.saturated_share >= 0.5 else "cores were often free"))
        numbers.update({"io_threads": io.threads, "io_kernel_share": round(io.kernel_share, 4),
                        "avoidable_kernel_share": round(io.avoidable_kernel_share, 4),
                        "kernel_ms_per_mb": None if per_mb is None else round(per_mb, 2),
                        "device_read_mb": None if io.read_mb is None else round(io.read_mb, 1),
                        "saturated_share": round(s.saturated_share, 4)})
    if wait_part:
        evidence.append(f"the step waited for input {wait:.0%} of the time while readers sat "
                        "in D")
    if names:
        evidence.append(f"threads seen in D: {names}")
    changes = {}
    if ctx.config:
        changes = {"cycle_length": 4, "interleave_parallelism": 4, "threadpool": 0,
                   "reader_buffer_kb": 256}
    return Finding(
        id=ID,
        title=f"{s.mean_d_threads:.1f} threads on average in uninterruptible I/O sleep (D)",
        step_fraction=min(1.0, crowd + wait_part),
        speedup=speedup_from_saving(crowd + wait_part),
        evidence=evidence,
        remedy=("Fewer, larger reads: raise the read buffer size (TFRecordDataset buffer_size, "
                "256 KB or more), lower the reader thread count (interleave parallelism, private "
                "threadpool) to about the vCPU count, keep hot files in the page cache or on "
                "local disk; or add vCPUs so I/O threads do not crowd out op launches."),
        numbers=numbers,
        top_events=[{"name": k, "d_samples": v} for k, v in s.d_threads_by_name.items()],
        config_changes=changes,
    )


def _reads_note(io: IoThreads, small_reads: bool) -> str:
    """What the kernel time per MB read says of the reads' size ("" without the bytes read)."""
    per_mb = io.kernel_ms_per_mb
    if per_mb is None:
        return ""
    said = f", {per_mb:.1f} ms per MB read from the device ({io.read_mb:.0f} MB"
    if small_reads:
        return (f"{said}; large reads cost ~{LARGE_READ_KERNEL_S_PER_MB * 1e3:.1f} ms/MB): "
                "small reads")
    return f"{said}): reads are already large"
