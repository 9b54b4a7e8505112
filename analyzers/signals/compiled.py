"""What the thunks of XLA-compiled steps stand for in the step (docs/trace-signals.md, "One-hot
features multiplied", compiled by XLA).

XLA:CPU runs a compiled module's thunks (`RunData.hlo_ops` names them) under one
`CpuExecutable::ExecuteAsyncOnStream` span on the calling thread, and hands its parallel loops
and dots to Eigen's pool: such a thunk's event ends at the hand-off (8-57 µs for dots that take
milliseconds), so the thunks' intervals leave much of the module's time uncovered (18 of 38.9
ms). A thunk's share of the step is therefore taken as its share of all thunks' traced time,
of the time the modules ran.
"""

from __future__ import annotations

from analyzers.context import Context

XLA_EXECUTABLE = "CpuExecutable::ExecuteAsyncOnStream"


def _weights(ctx: Context) -> tuple[float, float]:
    """(all thunks' traced ns in the steps, the share of step time the modules ran)."""
    hlo = ctx.run.hlo_ops
    cols = ("host", "start_ns", "end_ns", "dur_ns")
    thunks = ctx.in_steps(kinds=("host_op",), name=hlo.__contains__, columns=cols)
    spans = ctx.in_steps(name=XLA_EXECUTABLE.__eq__, columns=cols)
    # Without the module's span (a runtime that writes none), the thunks' own intervals.
    ran = ctx.kernel_idle_share(spans if len(spans) else thunks, kernels=False)
    return float(thunks["dur_ns"].sum()), ran


def compiled_share(ctx: Context, busy_ns: float) -> float:
    """The share of step time that thunks of `busy_ns` traced ns (summed over the steps) stand
    for: their part of all thunks' traced time, of the time the compiled modules ran."""
    total, ran = ctx.memo("compiled:weights", lambda: _weights(ctx))
    return busy_ns / total * ran if total > 0 else 0.0
