"""`convert_to_tensor_gaps`: host-side tensor creation on the training thread between steps.

Signals (TF 2.x eager): `convert_to_tensor` and `tf.constant` trace events, eager `Cast`,
`_EagerConst` and `DeepCopy` executions on the step-driving thread, outside the compiled step.
Each is a small synchronous op the step waits for (seed 000's casting layer). Conversions inside
`tf.function-graph_building` are graph construction while tracing (`function_retracing`'s
business), not per-step tensor creation: they are left out. In a step that runs eagerly the
conversions are part of `eager_execution`'s saving (tf.function removes them with the rest), so
this detector stands down there. The Python between the conversions of a burst (a casting
layer's own code) is counted with them (signals/conversion_bursts.py).
"""

from __future__ import annotations

import numpy as np

from analyzers.context import Context
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.signals.conversion_bursts import conversion_bursts
from analyzers.signals.eager_dispatch import eager_dispatch
from analyzers.signals.executions import eager_summary_spans, while_tracing
from analyzers.steps import inside

ID = "convert_to_tensor_gaps"
MIN_PER_STEP = 4


def detect(ctx: Context) -> Finding | None:
    if eager_dispatch(ctx).is_eager:
        return None
    # The step thread's host's: the tracing they are told apart from is its own.
    conv = ctx.in_steps(kinds=("convert",), line=ctx.main_line or None, host=ctx.step_host,
                        columns=("host", "name", "start_ns", "dur_ns"))
    share = ctx.fractions.get("convert", 0.0)
    # Conversions made while tracing are graph construction, and those of a summary written
    # eagerly are `debug_ops_in_step`'s.
    start = conv["start_ns"].to_numpy(np.int64)
    summary_s, summary_e = eager_summary_spans(ctx)
    theirs = while_tracing(ctx, start) | (inside(start, summary_s, summary_e)
                                          if len(summary_s) else False)
    if theirs.any():
        all_ns = float(conv["dur_ns"].sum())
        conv = conv[~theirs]
        # The breakdown's exposed convert time, less theirs.
        share *= float(conv["dur_ns"].sum()) / all_ns if all_ns else 0.0
    worker_steps = ctx.worker_steps(conv["host"])
    per_step = len(conv) / worker_steps
    if per_step < MIN_PER_STEP:
        return None
    casts = int((conv["name"] == "EagerLocalExecute: Cast").sum() / worker_steps)
    step_ms = ctx.steps.median_step_ns() / 1e6
    events_share = share
    bursts = conversion_bursts(ctx)
    total = ctx.total_step_ns
    glue = float(bursts.glue_ns[~bursts.copies].sum()) / total if total > 0 else 0.0
    share += glue
    changes = {"cast": "pipeline"} if ctx.config and ctx.config.get("cast") == "host" else {}
    return Finding(
        id=ID,
        title="Tensors are created and cast on the training thread every step",
        step_fraction=share,
        speedup=speedup_from_saving(share),
        evidence=[
            f"{per_step:.0f} host-side conversions per step on the training thread "
            f"({casts} eager Casts), {share:.1%} of step time exposed "
            f"({share * step_ms:.2f} ms of a {step_ms:.1f} ms step): {events_share:.1%} in the "
            f"conversions, {glue:.1%} in the Python between them (the code that makes them)",
        ],
        remedy=("Produce tensors in tf.data in the dtype the model consumes (cast in a batched "
                "map, or store the features as float32/int32), and keep per-step Python free of "
                "tf.constant/convert_to_tensor calls."),
        numbers={"conversions_per_step": round(per_step, 1), "eager_casts_per_step": casts,
                 "exposed_fraction": round(share, 4), "between_fraction": round(glue, 4)},
        top_events=heaviest_events(conv),
        config_changes=changes,
    )
