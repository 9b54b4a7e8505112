"""`function_retracing`: a tf.function is traced again and again, so steps build graphs.

Signals (TF 2.x, docs/trace-signals.md, "Retracing"): each trace of a tf.function's Python body
is a `tf.function-graph_building` event on the calling thread; the new concrete function then
runs as a new `EagerLocalExecute: __inference_<name>_<id>` (a new id each time) whose first
execution also instantiates and optimizes the graph: its span is much longer than the
`EagerKernelExecute` inside it, which is the run itself (a cached function's two spans are
nearly equal). Tracing in a few warm-up steps is normal; tracing in many profiled steps means
the function's arguments keep changing its cache key (Python numbers, new objects, varying
shapes).

What-if: with a stable signature the graph building and the instantiation go; the run stays.
"""

from __future__ import annotations

import re

import numpy as np

from analyzers.context import Context
from analyzers.events import GRAPH_BUILDING as BUILD
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.signals.nesting import enclosing, on_thread, thread_keys
from analyzers.steps import covered_ns

ID = "function_retracing"
EXEC = "EagerLocalExecute: __inference_"
KERNEL = "EagerKernelExecute"
# Tracing in at least this share of the profiled steps, and in MIN_TRACED_STEPS of them, is
# retracing.
MIN_TRACED_STEP_SHARE = 0.25
MIN_TRACED_STEPS = 3
_FUNCTION_ID = re.compile(r"^EagerLocalExecute: __inference_(.+)_\d+$")


def detect(ctx: Context) -> Finding | None:
    if ctx.n_steps == 0:
        return None
    builds = ctx.in_steps(name=BUILD.__eq__, columns=("step_idx", "start_ns", "end_ns"))
    traced_steps = int(builds["step_idx"].nunique())
    # A first call or a validation function traced at an epoch's end is warm-up, not retracing.
    if traced_steps < max(MIN_TRACED_STEPS, MIN_TRACED_STEP_SHARE * ctx.n_steps):
        return None
    build_ns = covered_ns(builds["start_ns"].to_numpy(), builds["end_ns"].to_numpy())
    # Instantiation: a function execution's span beyond the kernel execution inside it. An
    # execution without one (a trace that does not write it) cannot be split and counts nothing.
    ev = ctx.in_steps(line=ctx.main_line or None,
                      name=lambda n: n.startswith(EXEC) or n == KERNEL,
                      columns=("plane", "line_id", "name", "start_ns", "end_ns", "dur_ns"))
    ev = on_thread(ev, ctx.steps.thread)
    names = ev["name"].astype(str)
    is_exec = names.str.startswith(EXEC).to_numpy()
    thread = thread_keys(ev)
    starts, ends = ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy()
    exec_dur = ev["dur_ns"].to_numpy()[is_exec]
    owner = enclosing(starts[is_exec], ends[is_exec], thread[is_exec],
                      starts[~is_exec], thread[~is_exec])
    inside = owner >= 0
    run_ns = np.zeros(len(exec_dur))
    np.add.at(run_ns, owner[inside], ev["dur_ns"].to_numpy()[~is_exec][inside])
    has_run = np.zeros(len(exec_dur), bool)
    has_run[owner[inside]] = True
    instantiate_ns = float(np.clip(exec_dur - run_ns, 0, None)[has_run].sum())
    total_ns = float(ctx.steps.table["dur_ns"].sum())
    saved = min((build_ns + instantiate_ns) / total_ns, 1.0) if total_ns > 0 else 0.0
    functions = names[is_exec].str.extract(_FUNCTION_ID)[0].dropna()
    variants = functions.value_counts()  # base name -> executions in steps
    distinct = names[is_exec].groupby(functions).nunique() if len(functions) else variants
    n = ctx.n_steps
    step_ms = ctx.steps.median_step_ns() / 1e6
    worst = str(distinct.idxmax()) if len(distinct) else "?"
    evidence = [
        f"{traced_steps} of {n} profiled steps trace a tf.function again "
        f"({len(builds)} `{BUILD}` events, {build_ns / total_ns:.0%} of step time)",
        f"new concrete functions are instantiated when first run: {instantiate_ns / total_ns:.0%} "
        "of step time beyond their own execution",
    ]
    if len(distinct):
        evidence.append(f"`{worst}` ran as {int(distinct.max())} different concrete functions "
                        f"in {int(variants.get(worst, 0))} calls (median step {step_ms:.1f} ms)")
    return Finding(
        id=ID,
        title=f"tf.function `{worst}` is retraced in {traced_steps} of {n} steps",
        step_fraction=saved,
        speedup=speedup_from_saving(saved),
        evidence=evidence,
        remedy=("Keep the function's cache key stable: pass tensors (tf.constant, tf.Variable) "
                "instead of Python numbers or new Python objects as arguments, give "
                "input_signature with None dimensions (or reduce_retracing=True) when shapes "
                "vary, and create tf.function objects and variables once, outside the loop."),
        numbers={"traced_steps": traced_steps, "graph_builds": len(builds),
                 "build_fraction": round(build_ns / total_ns, 4),
                 "instantiate_fraction": round(instantiate_ns / total_ns, 4),
                 "concrete_functions": {str(k): int(v) for k, v in distinct.items()}},
        top_events=heaviest_events(ev[is_exec]),
    )
