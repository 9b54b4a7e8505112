"""How much of the step the training thread spends executing ops eagerly, one by one from Python
(docs/trace-signals.md, "Eager execution"). `eager_execution` reports it; `convert_to_tensor_gaps`
stands down when the step is eager, since tf.function removes the conversions along with the rest
and one saving must not be claimed twice."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.signals.nesting import enclosing, on_thread, thread_keys

PREFIX = "EagerLocalExecute: "
KERNEL = "EagerKernelExecute"
MIN_OPS_PER_STEP = 20
# Steps that already spend this share of their busy time inside tf.function calls are not eager
# loops (a casting layer in front of a compiled step is `convert_to_tensor_gaps`).
MAX_FUNCTION_SHARE = 0.5


@dataclass
class EagerDispatch:
    is_eager: bool
    ops_per_step: float  # eager executions of primitive ops (fetches, conversions left out)
    op_types: int
    total_ns: float  # all step time
    busy_ns: float  # step time minus input wait
    function_ns: float  # inside tf.function executions
    kernel_ns: float  # primitive ops' kernel executions
    ops: pd.DataFrame  # the primitive executions: name (op type), dur_ns


def _is_function(op: str) -> bool:
    return op.startswith(("__inference_", "__forward_", "__backward_"))


def eager_dispatch(ctx: Context) -> EagerDispatch:
    return ctx.memo("eager_dispatch", lambda: _measure(ctx))


def _measure(ctx: Context) -> EagerDispatch:
    total_ns = float(ctx.steps.table["dur_ns"].sum()) if ctx.n_steps else 0.0
    busy_ns = total_ns * (1.0 - ctx.fractions.get("input_wait", 0.0)) if total_ns else 0.0
    none = EagerDispatch(False, 0.0, 0, total_ns, busy_ns, 0.0, 0.0,
                         pd.DataFrame({"name": [], "dur_ns": []}))
    if ctx.main_line is None or total_ns <= 0:
        return none
    ev = on_thread(ctx.in_steps(line=ctx.main_line,
                                name=lambda n: n.startswith(PREFIX) or n == KERNEL,
                                columns=("plane", "line_id", "name", "kind", "start_ns",
                                         "end_ns", "dur_ns")),
                   ctx.steps.thread)
    names = ev["name"].astype(str)
    is_exec = names.str.startswith(PREFIX).to_numpy()
    ops = names[is_exec].str.removeprefix(PREFIX)
    is_fn = ops.map(_is_function).to_numpy(bool)
    # An eager `IteratorGetNext` is the input wait (input detectors' business), and eager Casts
    # or constants alone are a casting layer (`convert_to_tensor_gaps`): neither makes a step
    # eager, though an eager step's conversions go with it.
    counted = ~is_fn & ~np.isin(ev["kind"].astype(str).to_numpy()[is_exec],
                                ("input_wait", "convert"))
    dur = ev["dur_ns"].to_numpy()
    fn_ns = float(dur[is_exec][is_fn].sum())
    per_step = int(counted.sum()) / ctx.n_steps
    if per_step < MIN_OPS_PER_STEP or busy_ns <= 0 or fn_ns / busy_ns >= MAX_FUNCTION_SHARE:
        return EagerDispatch(False, per_step, 0, total_ns, busy_ns, fn_ns, 0.0, none.ops)
    thread = thread_keys(ev)
    starts, ends = ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy()
    owner = enclosing(starts[is_exec], ends[is_exec], thread[is_exec],
                      starts[~is_exec], thread[~is_exec])
    in_primitive = (owner >= 0) & counted[np.maximum(owner, 0)]
    primitive = pd.DataFrame({"name": ops[counted].to_numpy(),
                              "dur_ns": dur[is_exec][counted]})
    return EagerDispatch(True, per_step, int(primitive["name"].nunique()), total_ns, busy_ns,
                         fn_ns, float(dur[~is_exec][in_primitive].sum()), primitive)
