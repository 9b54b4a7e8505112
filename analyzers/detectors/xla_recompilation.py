"""`xla_recompilation`: XLA compiles the step's program again and again, because its input shapes
keep changing.

XLA compiles one program per input shape (`tf.function(jit_compile=True)`, Keras `jit_compile`,
auto-clustering). A batch whose shape varies from step to step (variable-length features
padded to the batch's longest list, a last partial batch, ragged ids) compiles again whenever a
shape is new, inside the step. `reduce_retracing=True` or an `input_signature` with None
dimensions stop the retracing that `function_retracing` reports, not this: the function is
traced once, and XLA still compiles per concrete shape.

Signal (docs/trace-signals.md, "XLA compilation in the steps"): XLA's compiler passes write
TraceMe events on the compiling thread (`CpuCompiler::RunBackend`,
`CpuCompiler::CompileCpuExecutable`, the pass pipelines `HLO passes through layout assignment`
and `HLO passes after layout assignment`; on a GPU `GpuCompiler::OptimizeHloModule`,
`GpuCompiler::CompileToBackendResult`), and its code generation runs on `tf_xla-*-codegen`
threads. A compile in the first step or two is warm-up; compiles in many profiled steps are
recompilation. Lowering the TensorFlow graph to HLO, before those events, writes none.

What-if: every step as long as the steps that reused a compiled program (their median), when
the window has some; otherwise the compiler's events alone, a lower bound.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.events import cat_mask, is_device_plane
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.signals.executions import graph_builds
from analyzers.steps import covered_ns

ID = "xla_recompilation"
# XLA's compiler: its passes and backends by compiler class, and the CPU compiler's pipelines.
COMPILE = re.compile(r"^(?:Cpu|Gpu|NVPTX|AMDGPU)Compiler::\w+$|"
                     r"^HLO passes (?:through|after) layout assignment$")
# Compiling in at least this many profiled steps, and this share of them, is recompilation: a
# first call (or a validation function's) compiles once.
MIN_COMPILING_STEPS = 3
MIN_COMPILING_SHARE = 0.1
# Steps that reused a compiled program: this many make the baseline a step is compared with.
MIN_BASELINE_STEPS = 2

REMEDY = (
    "XLA compiles a program for every new input shape (tf.function(jit_compile=True), Keras "
    "jit_compile, auto-clustering), and the step's shapes keep changing: make them static. Pad "
    "variable-length features to a fixed length, or to a few bucket lengths "
    "(Dataset.padded_batch with fixed padded_shapes, Dataset.bucket_by_sequence_length), batch "
    "with drop_remainder=True so the last batch has the same shape, and give the tf.function an "
    "input_signature of those fixed shapes. Where shapes must vary freely, run that function "
    "without jit_compile: reduce_retracing=True or None dimensions stop the retracing, not the "
    "compiling.")


def compiling_steps(ctx: Context) -> np.ndarray:
    """Per step, the time XLA's compiler events cover in it (ns; 0 where nothing compiled)."""
    return ctx.memo("xla_compiling_steps", lambda: _compile_ns(_compile_events(ctx), ctx.n_steps))


def _compile_events(ctx: Context) -> pd.DataFrame:
    """XLA's compiler events in the steps, clipped to them (none: a trace without XLA, told
    from its distinct names before any pass over its rows)."""
    def build() -> pd.DataFrame:
        columns = ("name", "step_idx", "start_ns", "end_ns", "dur_ns")
        if not any(COMPILE.search(n) for n in ctx.present("name")):
            return pd.DataFrame(columns=list(columns))
        return ctx.in_steps(name=COMPILE.search, plane=lambda p: not is_device_plane(p),
                            columns=columns)
    return ctx.memo("xla_compile_events", build)


def _compile_ns(ev: pd.DataFrame, n_steps: int) -> np.ndarray:
    out = np.zeros(n_steps)
    for idx, g in ev.groupby("step_idx"):
        out[int(idx)] = covered_ns(g["start_ns"].to_numpy(), g["end_ns"].to_numpy())
    return out


def detect(ctx: Context) -> Finding | None:
    n = ctx.n_steps
    if n == 0:
        return None
    compile_ns = compiling_steps(ctx)
    compiling = compile_ns > 0
    k = int(compiling.sum())
    if k < max(MIN_COMPILING_STEPS, MIN_COMPILING_SHARE * n):
        return None
    dur = ctx.steps.table["dur_ns"].to_numpy(np.float64)
    total = float(dur.sum())
    if total <= 0:
        return None
    reused = dur[~compiling]
    compile_share = float(compile_ns.sum()) / total
    step_ms = float(np.median(dur[compiling])) / 1e6
    compile_ms = float(np.median(compile_ns[compiling])) / 1e6
    evidence = [
        f"{k} of {n} profiled steps compile an XLA program again: {compile_share:.0%} of step "
        f"time in XLA's compiler passes, {compile_ms:.1f} ms per compiling step (median "
        f"{step_ms:.1f} ms)"]
    base: float | None = None
    if len(reused) >= MIN_BASELINE_STEPS:
        base = float(np.median(reused))
        saved = float(np.clip(dur[compiling] - base, 0, None).sum()) / total
        evidence.append(
            f"the {n - k} steps that reused a compiled program took {base / 1e6:.2f} ms "
            f"(median): the compiling steps' time beyond that is {saved:.0%} of the window's "
            "step time, lowering the graph to HLO included (it writes no events of its own)")
    else:
        saved = compile_share
        evidence.append(
            "every profiled step compiles: the estimate counts the compiler's events alone, a "
            "lower bound (lowering the graph to HLO before them writes no events)")
    built = graph_builds(ctx)["step_idx"].to_numpy()
    retraced = int(np.unique(built[compiling[built]]).size)
    if retraced:
        evidence.append(
            f"the tf.function is traced again in {retraced} of these steps too (the "
            "function_retracing pattern, counted here): each new shape both retraces and "
            "recompiles, and static shapes end both")
    evidence.append("estimate: every step as long as the steps that reused a compiled program"
                    if base is not None else
                    "estimate: the compiler's passes removed from every step")
    ev = _compile_events(ctx)
    top = ev[cat_mask(ev["name"], lambda x: x.endswith(("RunBackend", "RunHloPasses",
                                                       "OptimizeHloModule",
                                                       "CompileToBackendResult"))
                      or x.startswith("HLO passes"))]
    return Finding(
        id=ID,
        title=f"XLA recompiles the step in {k} of {n} steps: its input shapes keep changing",
        step_fraction=saved,
        speedup=speedup_from_saving(saved),
        evidence=evidence,
        remedy=REMEDY,
        numbers={"compiling_steps": k, "compile_fraction": round(compile_share, 4),
                 "compile_ms_per_compiling_step": round(compile_ms, 3),
                 "compiling_step_ms": round(step_ms, 3),
                 "reused_step_ms": None if base is None else round(base / 1e6, 3),
                 "retraced_steps": retraced,
                 "basis": "compiler_events" if base is None else "steps"},
        top_events=heaviest_events(top if len(top) else ev),
    )
