"""`eager_execution`: the training step runs op by op from Python instead of as a tf.function.

Signal (TF 2.x, docs/trace-signals.md, "Eager execution"): on the step-driving thread every eagerly
run op is an `EagerLocalExecute: <OpType>` event; a tf.function call is one
`EagerLocalExecute: __inference_<name>_<id>` event whose graph runs on executor threads. A step
made of dozens of primitive executions and little function time is an eager loop: each op pays
Python, dispatch and conversion costs that a traced function pays once.

What-if: inside a tf.function the same ops still run their kernels (`EagerKernelExecute` below
each primitive execution), so the step keeps that kernel time and the function time it already
has; the rest (Python between ops, dispatch) goes away. Conversions (`convert_to_tensor`, eager
Casts) are `convert_to_tensor_gaps`'s saving and are not counted twice. Graph execution also runs
independent ops side by side, so this understates the gain.
"""

from __future__ import annotations

import numpy as np

from analyzers.context import Context
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.signals.nesting import enclosing, on_thread, thread_keys

ID = "eager_execution"
PREFIX = "EagerLocalExecute: "
KERNEL = "EagerKernelExecute"
MIN_OPS_PER_STEP = 20
# Steps that already spend this share inside tf.function calls are not eager loops (a casting
# layer in front of a compiled step is `convert_to_tensor_gaps`).
MAX_FUNCTION_SHARE = 0.5
_OTHERS = ("input_wait", "convert")


def _is_function(op: str) -> bool:
    return op.startswith(("__inference_", "__forward_", "__backward_"))


def detect(ctx: Context) -> Finding | None:
    if ctx.main_line is None or ctx.n_steps == 0:
        return None
    ev = ctx.in_steps(line=ctx.main_line,
                      name=lambda n: n.startswith(PREFIX) or n == KERNEL,
                      columns=("plane", "line_id", "name", "kind", "start_ns", "end_ns",
                               "dur_ns"))
    ev = on_thread(ev, ctx.steps.thread)
    names = ev["name"].astype(str)
    is_exec = names.str.startswith(PREFIX).to_numpy()
    kind = ev["kind"].astype(str).to_numpy()
    ops = names[is_exec].str.removeprefix(PREFIX)
    is_fn = ops.map(_is_function).to_numpy(bool)
    # An eager `IteratorGetNext` is the input wait, and eager Casts / constants are conversions:
    # other detectors own that time.
    counted = ~is_fn & ~np.isin(kind[is_exec], _OTHERS)
    n = ctx.n_steps
    primitive_per_step = int(counted.sum()) / n
    total_ns = float(ctx.steps.table["dur_ns"].sum())
    # What the step spends on anything but waiting for input: the part a tf.function changes.
    busy_ns = total_ns * (1.0 - ctx.fractions.get("input_wait", 0.0))
    fn_ns = float(ev["dur_ns"].to_numpy()[is_exec][is_fn].sum())
    if (primitive_per_step < MIN_OPS_PER_STEP or busy_ns <= 0
            or fn_ns / busy_ns >= MAX_FUNCTION_SHARE):
        return None
    thread = thread_keys(ev)
    starts, ends = ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy()
    owner = enclosing(starts[is_exec], ends[is_exec], thread[is_exec],
                      starts[~is_exec], thread[~is_exec])
    in_primitive = (owner >= 0) & counted[np.maximum(owner, 0)]
    kernel_ns = float(ev["dur_ns"].to_numpy()[~is_exec][in_primitive].sum())
    convert_ns = total_ns * ctx.fractions.get("convert", 0.0)
    saved = max(busy_ns - fn_ns - kernel_ns - convert_ns, 0.0) / total_ns
    step_ms = ctx.steps.median_step_ns() / 1e6
    prim = ev[is_exec][counted]
    top = heaviest_events(prim.assign(name=ops[counted].to_numpy()))
    kinds = ops[counted].nunique()
    return Finding(
        id=ID,
        title=f"The step runs eagerly: {primitive_per_step:.0f} ops per step dispatched one by "
              "one from Python",
        step_fraction=saved,
        speedup=speedup_from_saving(saved),
        evidence=[
            f"{primitive_per_step:.0f} eager op executions per step ({kinds} op types) on the "
            f"training thread; {fn_ns / busy_ns:.0%} of the step's busy time (step minus input "
            "wait) inside tf.function calls",
            f"their kernels take {kernel_ns / total_ns:.0%} of the step "
            f"({kernel_ns / n / 1e6:.2f} ms of a {step_ms:.2f} ms median step); the rest is "
            "Python, dispatch and argument conversion around them",
            "estimate keeps the kernel and function time and drops the rest, conversions left "
            "to convert_to_tensor_gaps (graph execution also overlaps independent ops, so the "
            "gain can be larger)",
        ],
        remedy=("Wrap the training step in tf.function (jit_compile=True where the ops allow it), "
                "or compile the Keras model without run_eagerly=True, so its ops run as one graph "
                "and Python runs once per trace, not once per op."),
        numbers={"eager_ops_per_step": round(primitive_per_step, 1), "op_types": kinds,
                 "function_fraction": round(fn_ns / busy_ns, 4),
                 "kernel_fraction": round(kernel_ns / total_ns, 4)},
        top_events=top,
    )
