"""`eager_execution`: the training step runs op by op from Python instead of as a tf.function.

Signal (TF 2.x, docs/trace-signals.md, "Eager execution"): on the step-driving thread every eagerly
run op is an `EagerLocalExecute: <OpType>` event; a tf.function call is one
`EagerLocalExecute: __inference_<name>_<id>` event whose graph runs on executor threads. A step
made of dozens of primitive executions and little function time is an eager loop: each op pays
Python, dispatch and conversion costs that a traced function pays once
(analyzers/signals/eager_dispatch.py measures it).

What-if: inside a tf.function the same ops still run their kernels (`EagerKernelExecute` below
each primitive execution), so the step keeps that kernel time and the function time it already
has; the rest (Python between ops, dispatch, argument conversion) goes away. Graph execution also
runs independent ops side by side, so this understates the gain.
"""

from __future__ import annotations

from analyzers.context import Context
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.signals.eager_dispatch import eager_dispatch

ID = "eager_execution"


def detect(ctx: Context) -> Finding | None:
    d = eager_dispatch(ctx)
    if not d.is_eager:
        return None
    saved = max(d.busy_ns - d.function_ns - d.kept_ns, 0.0) / d.total_ns
    n = ctx.n_steps
    step_ms = ctx.steps.median_step_ns() / 1e6
    convert = ctx.fractions.get("convert", 0.0)
    return Finding(
        id=ID,
        title=f"The step runs eagerly: {d.ops_per_step:.0f} ops per step dispatched one by one "
              "from Python",
        step_fraction=saved,
        speedup=speedup_from_saving(saved),
        evidence=[
            f"{d.ops_per_step:.0f} eager op executions per step ({d.op_types} op types) on the "
            f"training thread; {d.function_ns / d.busy_ns:.0%} of the step's busy time (step "
            "minus input wait) inside tf.function calls",
            f"their kernels take {d.kernel_ns / d.total_ns:.0%} of the step "
            f"({d.kernel_ns / n / 1e6:.2f} ms of a {step_ms:.2f} ms median step); the rest is "
            f"Python, dispatch and argument conversion around them (conversions alone "
            f"{convert:.0%}, counted here rather than as convert_to_tensor_gaps)",
            f"estimate keeps the function time and the kernels' less what every eager run pays "
            f"beside its op's work, {d.run_floor_ns / 1e3:.1f} us (the cheapest runs): "
            f"{d.kept_ns / n / 1e6:.2f} ms per step; it drops the rest (graph execution also "
            "overlaps independent ops, so the gain can be larger)",
        ],
        remedy=("Wrap the training step in tf.function (jit_compile=True where the ops allow it), "
                "or compile the Keras model without run_eagerly=True, so its ops run as one graph "
                "and Python runs once per trace, not once per op. If the step already is a "
                "tf.function, look for tf.config.run_functions_eagerly(True), a debugging switch "
                "that runs every tf.function op by op and leaves the same trace (a 12-layer "
                "step: 6.41 ms a step with it, 0.59 ms without)."),
        numbers={"eager_ops_per_step": round(d.ops_per_step, 1), "op_types": d.op_types,
                 "function_fraction": round(d.function_ns / d.busy_ns, 4),
                 "kernel_fraction": round(d.kernel_ns / d.total_ns, 4),
                 "run_floor_us": round(d.run_floor_ns / 1e3, 2)},
        top_events=heaviest_events(d.ops),
    )
