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

from analyzers.context import Context
from analyzers.detectors import claims, xla_recompilation
from analyzers.events import GRAPH_BUILDING as BUILD
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.signals.executions import PREFIX, executions, graph_builds
from analyzers.steps import covered_ns

ID = "function_retracing"
# Tracing in at least this share of the profiled steps, and in MIN_TRACED_STEPS of them, is
# retracing.
MIN_TRACED_STEP_SHARE = 0.25
MIN_TRACED_STEPS = 3
# Retraced steps that compile XLA programs in this share or more are xla_recompilation's.
COMPILED_SHARE = 0.5
_FUNCTION_ID = re.compile(r"^__inference_(.+)_\d+$")


def detect(ctx: Context) -> Finding | None:
    if ctx.n_steps == 0:
        return None
    builds = graph_builds(ctx)
    traced_steps = int(builds["step_idx"].nunique())
    # A first call or a validation function traced at an epoch's end is warm-up, not retracing.
    if traced_steps < max(MIN_TRACED_STEPS, MIN_TRACED_STEP_SHARE * ctx.n_steps):
        return None
    # Under jit_compile each new shape also recompiles: those steps are xla_recompilation's,
    # whose estimate counts their whole excess and whose remedy (static shapes) ends both; this
    # one's (None dimensions, reduce_retracing) would leave the compiling.
    compiled = xla_recompilation.compiling_steps(ctx)[builds["step_idx"].unique()] > 0
    if compiled.mean() >= COMPILED_SHARE and claims(xla_recompilation, ctx):
        return None
    build_ns = covered_ns(builds["start_ns"].to_numpy(), builds["end_ns"].to_numpy())
    # Instantiation: a function execution's span beyond the kernel execution inside it. An
    # execution without one (a trace that does not write it) cannot be split and counts nothing.
    ex = executions(ctx)
    fn = ex[ex["op"].str.startswith("__inference_")]
    has_run = fn["run_ns"] > 0
    instantiate_ns = float((fn["dur_ns"] - fn["run_ns"]).clip(lower=0)[has_run].sum())
    total_ns = ctx.total_step_ns
    saved = min((build_ns + instantiate_ns) / total_ns, 1.0) if total_ns > 0 else 0.0
    # Base name -> its executions in the steps and how many concrete functions ran under it.
    base = fn["op"].str.extract(_FUNCTION_ID)[0]
    variants = base.value_counts()
    distinct = fn["op"].groupby(base).nunique()
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
        top_events=heaviest_events(fn.assign(name=PREFIX + fn["op"])),
    )
