"""`input_preprocessing`: steps wait on (or share their CPUs with) a CPU-bound input pipeline.

Two ways it costs step time (docs/trace-signals.md, "Input pipeline"):
- exposed: the training thread waits in the iterator and the producers are busy, or the pipeline
  shape itself serializes work (no prefetch, one reader, per-example parsing);
- contention, on hosts without an accelerator: the producers' CPU time is taken from the cores
  that run the model. The step never waits, yet every op is slower; visible only in sampler data.
Evidence names the cause: decompression, per-example parsing, casting, low parallelism, no prefetch.
"""

from __future__ import annotations

from analyzers.context import Context
from analyzers.findings import Finding, speedup_from_saving
from analyzers.signals.input_pipeline import (
    analyze_input_pipeline,
    input_cpu_bound,
    input_wait_ranges,
    structural_causes,
    top_events,
)
from analyzers.signals.os_sampler import summarize

ID = "input_preprocessing"
MIN_WAIT = 0.02
# Contention counts only when the cores are actually saturated and producers hold a real share.
SATURATED = 0.75
MIN_INPUT_CPU_SHARE = 0.08
LOW_PARALLELISM_FIX = 4  # readers the remedy asks for, against the one a sequential pipeline has

_FIXES = {
    "decompression": ({"compression": "none"}, "store records uncompressed (or decompress once "
                      "to local disk): GZIP inflation runs on the same cores as the model"),
    "per_example_parsing": ({"record_format": "prebatched", "parse": "batched"},
                            "batch before parsing (parse a whole batch per call) or write "
                            "prebatched records, one record per batch"),
    "low_parallelism": ({"cycle_length": 4, "interleave_parallelism": 4, "map_parallelism": 4},
                        "read files with interleave(cycle_length>1, num_parallel_calls=AUTOTUNE) "
                        "and map with num_parallel_calls=AUTOTUNE"),
    "no_prefetch": ({"prefetch": 2}, "end the pipeline with .prefetch(AUTOTUNE)"),
    "casting": ({"cast": "pipeline"}, "write features in the dtype the model uses, or cast once "
                "in a batched map"),
}


def detect(ctx: Context) -> Finding | None:
    wait = ctx.fractions.get("input_wait", 0.0)
    pipe = analyze_input_pipeline(ctx)
    sampler = summarize(ctx)
    cpu_bound, cpu_note = input_cpu_bound(ctx, pipe, sampler)
    causes = structural_causes(ctx, pipe)
    exposed = wait if wait >= MIN_WAIT and (cpu_bound or causes) else 0.0
    contention = 0.0
    if (sampler is not None and not ctx.has_accelerator
            and sampler.cpu_utilization >= SATURATED
            and sampler.input_cpu_share >= MIN_INPUT_CPU_SHARE):
        contention = sampler.input_cpu_share
    if exposed == 0.0 and contention == 0.0:
        return None
    # CPU causes (parsing, decompression, no prefetch) go away with their fix: the wait is saved.
    # Parallelism alone spreads the same reads over LOW_PARALLELISM_FIX readers: it saves that
    # share of the wait. Of the rest, the producers' share of the saturated CPUs.
    if exposed and set(causes) <= {"low_parallelism"} and not cpu_bound:
        exposed_saved = exposed * (1 - 1 / LOW_PARALLELISM_FIX)
    else:
        exposed_saved = exposed
    saved = exposed_saved + (1.0 - exposed) * contention
    step_ms = ctx.steps.median_step_ns() / 1e6
    evidence = []
    if exposed:
        evidence.append(f"{wait:.0%} of step time the training thread waits for the next batch "
                        f"({wait * step_ms:.1f} ms of a {step_ms:.1f} ms median step)")
    if contention:
        evidence.append(f"CPU contention: input threads used {sampler.input_cpu_share:.0%} of the "
                        f"process's CPU time while the {sampler.n_cpus} CPUs were "
                        f"{sampler.cpu_utilization:.0%} busy; the model's ops ran on what was left")
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
        top_events=top_events(ctx.in_steps[ctx.in_steps["kind"] == "input_work"]),
        time_ranges_ms=input_wait_ranges(ctx),
        config_changes=changes,
    )
