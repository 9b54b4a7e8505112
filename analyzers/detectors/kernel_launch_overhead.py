"""`kernel_launch_overhead`: many tiny ops, so dispatch and launch dominate the step.

GPU: many short kernels per step (median below MAX_KERNEL_US) with the device idle between them
and the host busy in `cudaLaunchKernel`/`cuLaunchKernel`. CPU: hundreds of small TF ops per step
with the executor's own time (ExecutorState::Process and friends not covered by an op, on the
executor threads) a visible share. The step-driving thread's dispatch around each call is not
counted here: that is `per_step_overhead`, which more ops per call would not change. XLA fusion or
fused tables remove about half of that overhead (an assumption, stated).

XLA:CPU's thunks (the HLO fusions and dots of a compiled cluster, `MatMul_1.16`,
`multiply_add_fusion.23`: named without a `:Type`) are compiled already, and XLA's runtime around
them (`CpuExecutable::`, `ThunkExecutor::`) is no executor overhead fusion removes: neither is
counted (docs/trace-signals.md, "XLA on the CPU").
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.events import cat_mask, line_class
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.quantiles import median
from analyzers.steps import CATEGORIES, covered_outside, merge_intervals, other_runs_work

ID = "kernel_launch_overhead"
MIN_OPS_PER_STEP = 150
# On a GPU the device's idle time says what the overhead costs, so fewer kernels do: two real
# Keras 2.4 steps of a small CNN ran 145-148 kernels of median 4 µs with the GPU idle 92-96% of
# the step in TF's executor and launches (docs/trace-signals.md, "Input copies inside the step").
MIN_KERNELS_PER_STEP = 100
MAX_KERNEL_US = 20.0
MAX_HOST_OP_US = 50.0
RECOVERABLE = 0.5  # share of dispatch overhead fusion removes
# Below this share of the step the overhead is within step-to-step noise: many small ops that cost
# nothing measurable are no finding (0.3-0.7% on Keras jobs whose steps wait on their input, 0% on
# a PyTorch CPU trace, all once reported).
MIN_OVERHEAD = 0.01
# Table fusion is suggested from this many distinct lookup ops per device: `ResourceGather` is
# what tf.nn.embedding_lookup and Keras' Embedding run on a variable (GatherV2 also gathers plain
# tensors, so it does not count) (docs/trace-signals.md, "Signals the detectors key on").
MIN_LOOKUPS_TO_FUSE = 4
_LOOKUP = re.compile(r":ResourceGather$")
# XLA:CPU's runtime running a compiled cluster's thunks (TF 2.21).
_XLA_RUNTIME = re.compile(r"^(CpuExecutable|ThunkExecutor)::")
_REMEDY = {
    "tensorflow": ("Compile the step with XLA (tf.function(jit_compile=True), or Keras "
                   "compile(jit_compile=True)) so fused kernels replace chains of small ops"),
    "pytorch": ("Compile the model with torch.compile (fused kernels replace chains of small "
                "ops; mode=\"reduce-overhead\" also replays the step as a CUDA graph, one launch "
                "for all its kernels), or capture the step yourself with torch.cuda.graph or "
                "torch.cuda.make_graphed_callables; "
                "a larger batch spreads the same launches over more samples"),
}
# Event kinds of the breakdown categories that take priority over framework time, launch aside
# (it is counted with framework as dispatch overhead).
_ABOVE_FRAMEWORK = tuple(k for c in list(CATEGORIES)[:list(CATEGORIES).index("framework")]
                         if c != "launch" for k in CATEGORIES[c])


def detect(ctx: Context) -> Finding | None:
    if ctx.has_accelerator:
        kind = "device_compute"
        limit_us = MAX_KERNEL_US
        # Launch and framework time can only cost what the device sits idle.
        idle = 1.0 - ctx.fractions.get("device_compute", 0.0)
        overhead = min(ctx.fractions.get("launch", 0.0) + ctx.fractions.get("framework", 0.0),
                       idle)
        what = "kernels"
    else:
        kind = "host_op"
        limit_us = MAX_HOST_OP_US
        overhead = None  # measured below, once the ops look small enough to matter
        what = "torch ops" if ctx.framework == "pytorch" else "TF ops"
    ops = ctx.in_steps(kinds=(kind,), columns=("host", "plane", "line", "name", "dur_ns"))
    thunks = 0.0
    if not ctx.has_accelerator and _xla_ran(ctx):
        compiled = _xla_thunks(ops)
        thunks = int(compiled.sum()) / ctx.worker_steps(ops["host"])
        ops = ops[~compiled]
    per_step = len(ops) / ctx.worker_steps(ops["host"])
    # Each GPU launches its own kernels: the count that says they are many is one GPU's (of
    # those running kernels in the steps).
    per_device = per_step
    if ctx.has_accelerator and len(ops):
        per_device /= max(int(ops.groupby("host", observed=True)["plane"].nunique().max()), 1)
    if per_device < (MIN_KERNELS_PER_STEP if ctx.has_accelerator else MIN_OPS_PER_STEP):
        return None
    median_us = median(ops["dur_ns"].to_numpy()) / 1e3 if len(ops) else 0.0
    if median_us > limit_us:
        return None
    if overhead is None:
        overhead = _executor_overhead(ctx)
    if overhead < MIN_OVERHEAD:
        return None
    saved = overhead * RECOVERABLE
    tables = _lookup_ops_per_device(ctx)
    fuse = tables >= MIN_LOOKUPS_TO_FUSE
    changes = {}
    if ctx.config:
        asked = ("xla", "fused_tables") if fuse else ("xla",)
        changes = {k: True for k in asked if ctx.config.get(k) is False}
    remedy = _REMEDY[ctx.framework]
    # The small ones are what fusion removes: the top events are theirs (the few long GEMMs
    # and convolutions of the same steps hold most of the time and would be launched anyway).
    small = ops["dur_ns"].to_numpy() <= limit_us * 1000
    evidence = [f"{per_step:.0f} {what} per step, median {median_us:.1f} µs; "
                f"{small.mean():.0%} of them under {limit_us:g} µs",
                f"launch/executor time not covered by any op: {overhead:.1%} of the step",
                f"estimate assumes fusion removes {RECOVERABLE:.0%} of it"]
    if thunks:
        evidence.append(f"{thunks:.0f} XLA thunks per step not counted: part of the step is "
                        f"compiled already; the {what} above run outside it")
        remedy = ("Compile the rest of the step too: jit_compile=True on the outer "
                  "tf.function, so its ops join the compiled clusters")
    if fuse:
        evidence.append(f"{tables:g} embedding lookup ops (ResourceGather) per device: "
                        "likely one per table")
        remedy += ("; fuse same-width embedding tables into one table with per-feature offsets, "
                   "so one lookup and one update replace one per table")
    return Finding(
        id=ID,
        title=f"{per_step:.0f} small {what} per step: dispatch overhead",
        step_fraction=overhead,
        speedup=speedup_from_saving(saved),
        evidence=evidence,
        remedy=remedy + ".",
        numbers={"ops_per_step": round(per_step, 1), "median_op_us": round(median_us, 2),
                 "overhead_fraction": round(overhead, 4),
                 "lookup_ops_per_device": round(tables, 2),
                 "xla_thunks_per_step": round(thunks, 1)},
        top_events=heaviest_events(ops, where=small),
        config_changes=changes,
    )


def _lookup_ops_per_device(ctx: Context) -> float:
    """Distinct embedding-lookup ops per device: each table a device holds, or each replica's
    copy of a table, has its own op (`replica_1/...` under MirroredStrategy; one op per device for
    our fused, sharded tables). GPU kernels name their TF op in the `tf_op` stat."""
    ev = ctx.events
    ops = {n for col in ("name", "tf_op")
           if col in ev and isinstance(ev[col].dtype, pd.CategoricalDtype)
           for n in ctx.present(col) if _LOOKUP.search(n)}
    return len(ops) / max(ctx.devices_per_host, 1)


def _executor_overhead(ctx: Context) -> float:
    """Share of step time when an executor thread is in framework code and nothing the step
    breakdown ranks above framework (ops, collectives, copies, waits, conversions) runs
    anywhere. tf.data threads (input work) and the step-driving threads (dispatch) are left
    out."""
    # Each side merged on its own first: the merged spans are few, the raw events many. Both
    # on the step thread's host: its executors' idle time, covered by its own work.
    host = ctx.step_host
    calling = {line for line, _ in ctx.call_threads} or {ctx.main_line}
    fs, fe = _merged(ctx, ("framework", "launch"),
                     lambda n: line_class(n) != "tf_data" and n not in calling, host)
    os_, oe = _merged(ctx, _ABOVE_FRAMEWORK, host=host)
    if _xla_ran(ctx):
        rs, re_ = _xla_runtime(ctx, host)
        os_, oe = np.concatenate([os_, rs]), np.concatenate([oe, re_])
    # Session.run calls from other threads (queue runners) run their executors on the same
    # threads: their framework time is input work, not this step's dispatch.
    xs, xe = other_runs_work(ctx.events, ctx.steps.thread)
    os_, oe = np.concatenate([os_, xs]), np.concatenate([oe, xe])
    total = ctx.total_step_ns
    return covered_outside(fs, fe, os_, oe) / total if total > 0 else 0.0


def _xla_ran(ctx: Context) -> bool:
    return ctx.memo("xla_cpu_ran",
                    lambda: any(_XLA_RUNTIME.match(n) for n in ctx.present("name")))


def _xla_thunks(ops: pd.DataFrame) -> np.ndarray:
    """XLA:CPU thunks among host ops: on TF's pools, named without a `:Type` (TF op events are
    `scope/op:Type`, torch ops `aten::...`); only where XLA's runtime ran."""
    return (cat_mask(ops["name"], lambda n: ":" not in n)
            & cat_mask(ops["line"], lambda n: line_class(n) == "tf_pool"))


def _xla_runtime(ctx: Context, host: str | None) -> tuple[np.ndarray, np.ndarray]:
    df = ctx.in_steps(name=_XLA_RUNTIME.match, host=host, columns=("start_ns", "end_ns"))
    return merge_intervals(df["start_ns"].to_numpy(), df["end_ns"].to_numpy())


def _merged(ctx: Context, kinds: tuple[str, ...], line=None,
            host: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    df = ctx.in_steps(kinds=kinds, line=line, host=host, columns=("start_ns", "end_ns"))
    return merge_intervals(df["start_ns"].to_numpy(), df["end_ns"].to_numpy())
