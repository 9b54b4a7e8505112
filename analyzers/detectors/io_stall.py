"""`io_stall`: steps wait on storage reads while the CPU is mostly idle.

Signals: the step-driving thread blocked in the iterator (input_wait in the breakdown) although the
pipeline is already parallel and prefetched, and its producers do little CPU work meanwhile
(sampler: low process CPU; without it, map-function op time small next to the wait).
docs/trace-signals.md, "Input pipeline".
"""

from __future__ import annotations

from analyzers.context import Context
from analyzers.findings import Finding, speedup_from_saving
from analyzers.signals.input_pipeline import (
    MIN_INPUT_WAIT,
    analyze_input_pipeline,
    input_cpu_bound,
    input_wait_ranges,
    pipeline_causes,
    some_paths,
)
from analyzers.signals.os_sampler import read_volume, summarize

ID = "io_stall"
# The remedy doubles the reads in flight. Input-bound, a step lasts as long as producing one
# batch; with the CPU idle, storage latency overlaps across readers, so k times the readers make
# the batch k times faster, until the step's own compute (1 - wait) is the limit:
# speedup = 1 / max(1 - wait, 1 / k). io_stall preset: wait 60%, k = 2 -> 2.0x; measured 1.97x.
READ_PARALLELISM_GAIN = 2.0


def detect(ctx: Context) -> Finding | None:
    wait = ctx.fractions.get("input_wait", 0.0)
    if wait < MIN_INPUT_WAIT:
        return None
    pipe = analyze_input_pipeline(ctx)
    if not pipe.present:
        # No event of the pipeline (a TF1 RunMetadata timeline): nothing says storage, and
        # input_preprocessing reports the wait with its cause unknown.
        return None
    if pipe.stage_paths and not pipe.reads_files:
        # In-memory sources (from_tensor_slices, cache, range): whatever the wait is, it is not
        # storage (docs/trace-signals.md, "Jobs that are not ours").
        return None
    sampler = summarize(ctx)
    cpu_bound, cpu_note = input_cpu_bound(ctx, pipe, sampler)
    if cpu_bound or pipeline_causes(ctx, pipe):
        return None  # input_preprocessing owns this wait
    step_ms = ctx.steps.median_step_ns() / 1e6
    evidence = [
        f"{wait:.0%} of step time the training thread waits for the next batch "
        f"({wait * step_ms:.1f} ms of a {step_ms:.1f} ms median step)",
        f"the pipeline is parallel ({', '.join(pipe.parallel_stages) or 'n/a'}) and prefetched, "
        f"{pipe.reader_concurrency:.1f} reads in flight on average",
        cpu_note,
        f"reader stages spend {pipe.reader_ms_per_step:.1f} ms per step; map-function ops only "
        f"{pipe.input_op_ms_per_step:.1f} ms",
    ]
    if pipe.files:
        evidence.append(f"the readers opened {len(pipe.files)} file(s) in the profile: "
                        f"{some_paths(pipe.files)}")
    # How much the readers bring in, and from where: a rate near the storage's own says
    # bandwidth (faster storage, caching), a low one with many opens says latency (more reads in
    # flight, larger files).
    volume = read_volume(ctx)
    if volume:
        evidence.append(volume.note())
    saved = 1 - max(1 - wait, 1 / READ_PARALLELISM_GAIN)
    evidence.append(f"estimate: {READ_PARALLELISM_GAIN:.0f}x the reads in flight produce batches "
                    f"{READ_PARALLELISM_GAIN:.0f}x faster ({speedup_from_saving(saved):.2f}x, "
                    f"bounded by the step's compute); removing the wait entirely would give "
                    f"{speedup_from_saving(wait):.2f}x")
    changes: dict = {}
    if ctx.config:
        cycle = int(ctx.config.get("cycle_length", 4)) * int(READ_PARALLELISM_GAIN)
        changes = {"cycle_length": cycle, "interleave_parallelism": cycle,
                   "prefetch": max(int(ctx.config.get("prefetch", 2)), 4)}
    return Finding(
        id=ID,
        title="Input-bound on storage reads: the CPU idles while files are fetched",
        step_fraction=wait,
        speedup=speedup_from_saving(saved),
        evidence=[e for e in evidence if e],
        remedy=("Read more files in parallel (interleave cycle_length and num_parallel_calls up, "
                "or AUTOTUNE), prefetch deeper, use larger files or a larger interleave "
                "block_length so each open is amortized, and stage the data on faster or local "
                "storage (or cache it after the first epoch)."),
        numbers={"input_wait_fraction": round(wait, 4), "median_step_ms": round(step_ms, 3),
                 "speedup_if_wait_removed": round(speedup_from_saving(wait), 3),
                 "reader_ms_per_step": round(pipe.reader_ms_per_step, 3),
                 "reader_concurrency": round(pipe.reader_concurrency, 2),
                 "files_opened": len(pipe.files), **(volume.numbers() if volume else {})},
        top_events=pipe.top_events,
        time_ranges_ms=input_wait_ranges(ctx),
        config_changes=changes,
    )
