"""How much of the step the training thread spends executing ops eagerly, one by one from Python
(docs/trace-signals.md, "Eager execution"). `eager_execution` reports it; `convert_to_tensor_gaps`
stands down when the step is eager, since tf.function removes the conversions along with the rest
and one saving must not be claimed twice."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.signals.executions import EAGER_LOOP_OPS, eager_summaries, executions

MIN_OPS_PER_STEP = EAGER_LOOP_OPS
# Steps that already spend this share of their busy time inside tf.function calls are not eager
# loops (a casting layer in front of a compiled step is `convert_to_tensor_gaps`).
MAX_FUNCTION_SHARE = 0.5
# The share of the cheapest kernel runs whose time is taken as an eager run's fixed cost, and
# the most taken: 2.2-3.6 us in TF 2.15 and 2.21 jobs on this CPU. A loop of heavy ops alone
# (every run a 0.5 ms matmul) has no cheap run to read it from, and its floor is work.
FLOOR_PERCENTILE = 1.0
MAX_RUN_FLOOR_NS = 5_000


@dataclass
class EagerDispatch:
    is_eager: bool
    ops_per_step: float  # eager executions of primitive ops (fetches, conversions left out)
    op_types: int
    total_ns: float  # all step time
    busy_ns: float  # step time minus input wait
    function_ns: float  # inside tf.function executions
    kernel_ns: float  # primitive ops' kernel executions
    # What every eager kernel run pays beside its op's work: the cheapest runs' time. A
    # ReadVariableOp's run took 3.7-4.6 us eagerly and 0.1 us in a graph, a Relu 11.6 against
    # 0.5 (docs/trace-signals.md, "Eager execution"); a graph pays its executor's ~1 us instead.
    run_floor_ns: float
    kept_ns: float  # the kernels' time less the floor on every run: what a graph keeps
    ops: pd.DataFrame  # the primitive executions: name (op type), dur_ns


def eager_dispatch(ctx: Context) -> EagerDispatch:
    return ctx.memo("eager_dispatch", lambda: _measure(ctx))


def _measure(ctx: Context) -> EagerDispatch:
    total_ns = float(ctx.total_step_ns)
    busy_ns = total_ns * (1.0 - ctx.fractions.get("input_wait", 0.0)) if total_ns else 0.0
    ex = executions(ctx)
    # An eager `IteratorGetNext` is the input wait (input detectors' business), and eager Casts
    # or constants alone are a casting layer (`convert_to_tensor_gaps`): neither makes a step
    # eager, though an eager step's conversions go with it.
    # A summary written eagerly beside a compiled step is `debug_ops_in_step`'s: its ops go
    # when the summaries are written less often, not into a tf.function.
    primitive = ex[~ex["function"] & ~ex["kind"].isin(("input_wait", "convert"))
                   & ~eager_summaries(ctx)]
    fn_ns = float(ex["dur_ns"][ex["function"]].sum())
    per_step = len(primitive) / ctx.n_steps if ctx.n_steps else 0.0
    eager = (per_step >= MIN_OPS_PER_STEP and busy_ns > 0
             and fn_ns / busy_ns < MAX_FUNCTION_SHARE)
    run = primitive["run_ns"].to_numpy(np.float64)
    floor = min(float(np.percentile(run, FLOOR_PERCENTILE)), MAX_RUN_FLOOR_NS) if len(run) else 0.0
    return EagerDispatch(eager, per_step, int(primitive["op"].nunique()), total_ns, busy_ns,
                         fn_ns, float(run.sum()), floor, float(np.clip(run - floor, 0, None).sum()),
                         pd.DataFrame({"name": primitive["op"].to_numpy(),
                                       "dur_ns": primitive["dur_ns"].to_numpy()}))
