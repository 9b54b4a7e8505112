"""`input_preprocessing`: steps wait on (or share their CPUs with) a CPU-bound input pipeline.

Two ways it costs step time (docs/trace-signals.md, "Input pipeline"):
- exposed: the training thread waits in the iterator and the producers are busy, or the pipeline
  shape itself serializes work (no prefetch, one reader, per-example parsing);
- contention, on hosts without an accelerator: the producers' CPU time is taken from the cores
  that run the model. The step never waits, yet every op is slower; visible only in sampler data.
Evidence names the cause: decompression (run metadata, or the files the readers open), per-example
parsing, one example per record, Python functions (py_function, numpy_function, from_generator),
low parallelism, no prefetch.
"""

from __future__ import annotations

from analyzers.context import Context
from analyzers.findings import Finding, speedup_from_saving
from analyzers.signals.input_pipeline import (
    analyze_input_pipeline,
    input_cpu_bound,
    input_wait_ranges,
    pipeline_causes,
)
from analyzers.signals.os_sampler import summarize

ID = "input_preprocessing"
MIN_WAIT = 0.02
# Contention counts only when the cores are actually saturated and producers hold a real share.
SATURATED = 0.75
MIN_INPUT_CPU_SHARE = 0.08
MIN_TRACE_INPUT_SHARE = 0.3
# Share of the producers' CPU that turns into faster steps once it is freed: on the 2-core
# machine, gzip -> none freed 30% of the CPU and the step got 1.19x faster (bench/diagnosis.py).
CONTENTION_CONVERSION = 0.5
LOW_PARALLELISM_FIX = 4  # readers the remedy asks for, against the one a sequential pipeline has

_FIXES = {
    "decompression": ({"compression": "none"}, "store records uncompressed (or decompress once "
                      "to local disk): GZIP inflation runs on the same cores as the model"),
    "per_example_parsing": ({"record_format": "prebatched", "parse": "batched"},
                            "batch before parsing (parse a whole batch per call) or write "
                            "prebatched records, one record per batch"),
    "per_example_records": ({"record_format": "prebatched"},
                            "write prebatched records, one record per batch with each feature "
                            "holding the whole batch's values, so the reader hands over one "
                            "record per step instead of one per example (seed 002: 7x faster "
                            "steps); failing that, batch right after reading and parse the batch "
                            "with one tf.io.parse_example call"),
    "python_function": ({}, "replace the Python function with TensorFlow ops (tf.strings, "
                        "tf.io, tf.math) so tf.data runs it in parallel without the GIL, or "
                        "precompute the features offline; if it must stay in Python, batch first "
                        "so it runs once per batch on whole arrays, or spread it over processes "
                        "(tf.data service)"),
    "low_parallelism": ({"cycle_length": 4, "interleave_parallelism": 4, "map_parallelism": 4},
                        "read files with interleave(cycle_length>1, num_parallel_calls=AUTOTUNE) "
                        "and map with num_parallel_calls=AUTOTUNE"),
    "no_prefetch": ({"prefetch": 2}, "end the pipeline with .prefetch(AUTOTUNE)"),
}


def detect(ctx: Context) -> Finding | None:
    wait = ctx.fractions.get("input_wait", 0.0)
    pipe = analyze_input_pipeline(ctx)
    sampler = summarize(ctx)
    cpu_bound, cpu_note = input_cpu_bound(ctx, pipe, sampler)
    causes = pipeline_causes(ctx, pipe)
    exposed = wait if wait >= MIN_WAIT and (cpu_bound or causes) else 0.0
    # Contention needs two witnesses: the trace shows the producers doing a large share of the
    # machine's work (reader stages + map ops per step, over CPUs x step time), and the sampler
    # shows the CPUs saturated. The sampler's per-thread CPU gives the share itself; matching OS
    # threads to tf.data lines is uncertain, so the smaller of the two shares is used.
    contention = 0.0
    n_cpus = ctx.n_cpus or (sampler.n_cpus if sampler else 1)
    step_ms = ctx.steps.median_step_ns() / 1e6
    trace_share = ((pipe.reader_ms_per_step + pipe.input_op_ms_per_step) / (n_cpus * step_ms)
                   if step_ms else 0.0)
    if (sampler is not None and not ctx.has_accelerator
            and sampler.cpu_utilization >= SATURATED
            and trace_share >= MIN_TRACE_INPUT_SHARE
            and sampler.input_cpu_share >= MIN_INPUT_CPU_SHARE):
        contention = min(sampler.input_cpu_share, trace_share)
    if exposed == 0.0 and contention == 0.0:
        return None
    # CPU causes (parsing, decompression, no prefetch) go away with their fix: the wait is saved.
    # Parallelism alone spreads the same reads over LOW_PARALLELISM_FIX readers: it saves that
    # share of the wait. Of the rest, the producers' share of the saturated CPUs.
    if exposed and set(causes) <= {"low_parallelism"} and not cpu_bound:
        # As io_stall: k times the readers, batches k times faster, bounded by compute.
        exposed_saved = 1 - max(1 - exposed, 1 / LOW_PARALLELISM_FIX)
    else:
        exposed_saved = exposed
    saved = exposed_saved + (1.0 - exposed) * contention * CONTENTION_CONVERSION
    evidence = []
    if exposed:
        evidence.append(f"{wait:.0%} of step time the training thread waits for the next batch "
                        f"({wait * step_ms:.1f} ms of a {step_ms:.1f} ms median step)")
    if contention:
        evidence.append(f"CPU contention: input producers hold {contention:.0%} of the CPU (trace: "
                        f"reader stages + map ops = {trace_share:.0%} of {n_cpus} CPUs x step "
                        f"time; sampler: {sampler.input_cpu_share:.0%} of the process's CPU) "
                        f"while the CPUs were {sampler.cpu_utilization:.0%} busy; the model's "
                        "ops ran on what was left")
        evidence.append(f"estimate: {CONTENTION_CONVERSION:.0%} of the freed CPU becomes step "
                        "time (calibrated on the gzip preset, docs/trace-signals.md)")
    evidence.extend(causes.values())
    evidence.append(cpu_note)
    changes: dict = {}
    remedies = []
    for cause in causes:
        if cause in _FIXES:
            change, text = _FIXES[cause]
            changes.update(change)
            remedies.append(text)
    if not remedies:
        remedies.append("move per-batch CPU work out of the training job (preprocess offline, "
                        "store uncompressed prebatched records), parallelize map/interleave with "
                        "AUTOTUNE, and prefetch")
    if ctx.config is None:
        changes = {}
    which = ", ".join(c.replace("_", " ") for c in causes) or "CPU-bound producers"
    return Finding(
        id=ID,
        title=f"The input pipeline holds up training ({which})",
        step_fraction=max(exposed, contention),
        speedup=speedup_from_saving(saved),
        evidence=[e for e in evidence if e],
        remedy="; ".join(remedies) + ".",
        numbers={"input_wait_fraction": round(wait, 4), "median_step_ms": round(step_ms, 3),
                 "contention_share": round(contention, 4), "causes": sorted(causes),
                 "parse_ops_per_step": round(pipe.parse_ops_per_step, 1),
                 "input_op_ms_per_step": round(pipe.input_op_ms_per_step, 3),
                 "reader_ms_per_step": round(pipe.reader_ms_per_step, 3),
                 "reader_concurrency": round(pipe.reader_concurrency, 2),
                 "has_prefetch": pipe.has_prefetch, "stage_paths": pipe.stage_paths[:6]},
        top_events=pipe.top_events,
        time_ranges_ms=input_wait_ranges(ctx),
        config_changes=changes,
    )
