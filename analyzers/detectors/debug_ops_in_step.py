"""`debug_ops_in_step`: debugging and summary ops run inside every training step.

What helps while a model is written costs every step once it trains for days, and nothing in
xprof's overview names it: the time shows up as ordinary host compute. Signals (TF op names and
types, docs/trace-signals.md, "Debugging and summary ops in the step"):
- `summaries`: ops under a `write_summary` name scope (TF2's `tf.summary.*`: a histogram buckets
  every value of its tensor with ordinary ops there, `Min`, `Max`, `OneHot`, `Sum`) and the
  summary op types themselves (`WriteSummary`, `FlushSummaryWriter`, TF1's `HistogramSummary`,
  `ScalarSummary`, `MergeSummary`...). Counted when a write op runs in at least half the steps
  (`record_if`'s condition runs in every one): written every N steps they are `step_stalls`'
  periodic `summary` cause.
- `debugger`: tfdbg2's instrumentation (`tf.debugging.experimental.enable_dump_debug_info`):
  a `DebugIdentityV2` on every op's output, and a `DebugNumericSummaryV2` in the numeric modes.
- `numeric_checks`: `CheckNumerics` / `CheckNumericsV2` (`tf.debugging.enable_check_numerics`,
  `check_numerics`, `assert_all_finite`).
- `prints`: `PrintV2` (`tf.print` in the step).
- `anomaly_detection` (PyTorch): `torch.autograd.set_detect_anomaly(True)` checks every backward
  function's outputs for NaN, `aten::isnan`, `aten::_is_any_true` and `aten::item` inside each
  `autograd::engine::evaluate_function: ...` (a user's own NaN check runs outside those).

Estimate: the ops leave the step. On a CPU host the step's ops share its cores, so the saving is
their share of all host ops' busy time, of the time ops cover in the step (the union of the
debug ops' intervals would count ops running side by side with them: 9.7x where removing
tfdbg measured 3.1x). With an accelerator, the same for the kernels their ops launched (the
`tf_op` stat), plus their host ops' time while no kernel runs.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.events import cat_map, cat_mask, is_device_plane, op_type_of
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.signals.executions import (
    PREFIX,
    eager_summaries,
    eager_summary_spans,
    executions,
)
from analyzers.steps import covered_ns, inside

ID = "debug_ops_in_step"
MIN_SHARE = 0.03
# Summaries written in fewer steps than this share are periodic: step_stalls' `summary` cause.
EVERY_STEP = 0.5
# The write interval the evidence prices summaries at.
RARELY = 100
# TF2 `tf.summary.write` opens this name scope under the summary's tag.
SUMMARY_SCOPE = re.compile(r"(?:^|/)write_summary(?:/|:|$)")
# TF1's summary ops (tf.compat.v1.summary.*), fetched with a Session.run.
_TF1_TYPES = r"(Histogram|Scalar|Image|Audio|Tensor|Merge)Summary(V2)?"
_TF1_SUMMARIES = re.compile(rf"^{_TF1_TYPES}$")
# The ops that write a summary: a step that runs one wrote one (`record_if`'s condition, a
# `mod` and an `Equal` in the scope, runs every step).
_WRITES = re.compile(rf"^(Write\w*Summary|ImportEvent|{_TF1_TYPES})$")
_SUMMARY_TYPES = re.compile(
    r"^(FlushSummaryWriter|CreateSummary\w*Writer|SummaryWriter)$|" + _WRITES.pattern)
_CAUSES: dict[str, re.Pattern[str]] = {
    "debugger": re.compile(r"^Debug(Identity(V2|V3)?|NanCount|NumericSummary)$"),
    "numeric_checks": re.compile(r"^CheckNumerics(V2)?$"),
    "prints": re.compile(r"^PrintV2$|^Print$"),
}
# Written by tfdbg's numeric modes and by enable_check_numerics alike (a reduction of each float
# output, which the latter feeds to a CheckNumericsV2): whose it is follows from whether tfdbg's
# DebugIdentityV2 ops are in the trace too.
_NUMERIC_SUMMARY = "DebugNumericSummaryV2"
CAUSE_IDS = ("summaries", *_CAUSES)
_WHAT = {
    "summaries": "summaries written every step",
    "debugger": "tfdbg's dump instrumentation",
    "numeric_checks": "numeric checks",
    "prints": "tf.print",
}
_REMEDY = {
    "summaries": (
        "Write summaries every N steps, not every step: wrap the writes in "
        "tf.summary.record_if(lambda: step % 100 == 0) (Keras: TensorBoard(update_freq=100)); "
        "written every N steps they cost 1/N of this. Histograms are the costly kind: each "
        "buckets every value of its tensor, so its cost grows with the tensor's size. Keep "
        "histograms of embedding tables out of the training step (per epoch with Keras' "
        "histogram_freq, or of a sample of rows)."),
    # TF1 graphs fetch their merged summary with the training op.
    "summaries_tf1": (
        "Fetch the merged summary (tf.compat.v1.summary.merge_all()) only every N steps: "
        "sess.run([train_op, merged]) when step % 100 == 0 and sess.run(train_op) otherwise; "
        "written every N steps they cost 1/N of this. Histograms are the costly kind: each "
        "buckets every value of its tensor, so keep embedding tables out of them."),
    "debugger": (
        "Turn tfdbg off for training runs: drop "
        "tf.debugging.experimental.enable_dump_debug_info(...) (or call "
        "tf.debugging.experimental.disable_dump_debug_info() once the steps to debug are "
        "dumped). It instruments every op's output in every graph it builds."),
    "numeric_checks": (
        "Take the numeric checks out of the training step: drop "
        "tf.debugging.enable_check_numerics() and per-tensor check_numerics / "
        "assert_all_finite calls, and check the fetched loss for NaN every N steps instead "
        "(keep the checks for a debugging run)."),
    "prints": ("Print every N steps from Python on a fetched value, not with tf.print inside "
               "the step."),
}


def cause_of(name: str, dumping: bool = False) -> str | None:
    """Which kind of debugging work a TF op (`scope/op:Type`) is, or None; `dumping`: tfdbg's
    DebugIdentityV2 ops are in the trace."""
    if SUMMARY_SCOPE.search(name):
        return "summaries"
    op_type = op_type_of(name)
    if _SUMMARY_TYPES.match(op_type):
        return "summaries"
    if op_type == _NUMERIC_SUMMARY:
        return "debugger" if dumping else "numeric_checks"
    return next((c for c, pattern in _CAUSES.items() if pattern.match(op_type)), None)


def _summary_tag(name: str) -> str:
    """The tag a summary op writes: its scope before `write_summary` (TF2), else the op's name."""
    m = SUMMARY_SCOPE.search(name)
    return name[:m.start()] if m and m.start() else name.split(":")[0]


def _cause_codes(col: pd.Series, dumping: bool) -> np.ndarray:
    """Per row of a categorical name column, the index of its cause in CAUSE_IDS (-1: none),
    worked out once per distinct name: a large trace has millions of host ops."""
    index = {c: i for i, c in enumerate(CAUSE_IDS)}
    table = np.array([index.get(cause_of(str(n), dumping) or "", -1)
                      for n in col.cat.categories] + [-1], dtype=np.int8)
    return table[col.array.codes]


def detect(ctx: Context) -> Finding | None:
    if ctx.framework == "pytorch":
        return _anomaly_detection(ctx)
    if ctx.framework != "tensorflow":
        return None
    gpu = ctx.has_accelerator and "tf_op" in ctx.events
    names = [*ctx.present("name"), *(ctx.present("tf_op") if gpu else ())]
    if ctx.total_step_ns <= 0:
        return None
    # Summaries written eagerly from the Python loop beside a compiled step.
    eager_s, eager_e = eager_summary_spans(ctx)
    if not any(cause_of(n) for n in names) and not len(eager_s):
        return None
    dumping = any(op_type_of(n).startswith("DebugIdentity") for n in names)
    host_ops = ctx.in_steps(kinds=("host_op",),
                            columns=("host", "name", "step_idx", "start_ns", "end_ns", "dur_ns"))
    host_code = _cause_codes(host_ops["name"], dumping)
    # Whose busy time the ops take: the host's cores, or with an accelerator the device (the
    # kernels each TF op launched).
    pool, pool_code, on = host_ops, host_code, "host ops"
    if gpu:
        kernels = ctx.in_steps(kinds=("device_compute",), plane=is_device_plane,
                               columns=("host", "tf_op", "step_idx", "start_ns", "end_ns",
                                        "dur_ns")).rename(columns={"tf_op": "name"})
        if not kernels.empty:
            pool, pool_code, on = kernels, _cause_codes(kernels["name"], dumping), "kernels"
    n_steps = max(ctx.n_steps, 1)
    # A step wrote summaries when a write op ran in it, in the graph or eagerly; the other
    # causes run wherever their ops do.
    writes = cat_mask(host_ops["name"], lambda n: _WRITES.match(op_type_of(n)))
    eager_rows = ctx.steps.row_at(eager_e - 1)
    steps_with = {"summaries": len(np.union1d(host_ops["step_idx"].to_numpy()[writes],
                                              eager_rows[eager_rows >= 0])) / n_steps}
    steps_with |= {c: len(np.union1d(pool["step_idx"].to_numpy()[pool_code == i],
                                     host_ops["step_idx"].to_numpy()[host_code == i])) / n_steps
                   for i, c in enumerate(CAUSE_IDS) if c != "summaries"}
    periodic = 0 < steps_with["summaries"] < EVERY_STEP
    counted = [c for c in CAUSE_IDS if steps_with[c] and not (c == "summaries" and periodic)]
    if not counted:
        return None
    covered = ctx.kernel_idle_share(pool, kernels=False)
    pool_busy = float(pool["dur_ns"].sum())
    step_ms = ctx.steps.median_step_ns() / 1e6
    shares: dict[str, float] = {}
    evidence: list[str] = []
    for c in counted:
        i = CAUSE_IDS.index(c)
        rows = pool[pool_code == i]
        busy = float(rows["dur_ns"].sum()) / pool_busy if pool_busy else 0.0
        # A GPU job's host-side debug work (summary writes, tfdbg's dumps) while the device
        # has nothing to run.
        exposed = ctx.kernel_idle_share(host_ops[host_code == i]) if on == "kernels" else 0.0
        shares[c] = busy * covered + exposed
        if len(rows) or (host_code == i).any():
            evidence.append(_cause_line(ctx, c, rows if len(rows) else host_ops[host_code == i],
                                        busy, shares[c], exposed, step_ms, steps_with[c]))
        if c == "summaries" and len(eager_s):
            # One after another on the Python thread: the time they span leaves the step.
            eager = covered_ns(eager_s, eager_e) / ctx.total_step_ns
            shares[c] += eager
            evidence.append(
                f"{len(eager_s) / n_steps:.0f} summary write(s) per step made eagerly from Python "
                f"beside the compiled step: {eager:.1%} of the step ({eager * step_ms:.2f} ms), "
                "their ops, conversions and Python from the call before to each write")
    saved = sum(shares.values())
    if saved < MIN_SHARE:
        return None
    causes = [c for c in counted if shares[c] > 0]
    mine = pool[np.isin(pool_code, [CAUSE_IDS.index(c) for c in causes])]
    if len(mine):
        evidence.append(
            f"estimate: the ops leave the step: their share of the {on}' busy time, of the "
            f"{covered:.0%} of the step the {on} cover"
            + (" (the ops share the cores with those beside them: the intervals they ran in "
               "would overstate it)" if on == "host ops" else ""))
    if periodic:
        evidence.append(f"summaries ran in {steps_with['summaries']:.0%} of the steps only: "
                        "written every N steps, they are `step_stalls`' to estimate")
    top = heaviest_events(mine)
    if not top and len(eager_s):
        ex = executions(ctx)[eager_summaries(ctx)]
        top = heaviest_events(pd.DataFrame({"name": PREFIX + ex["op"], "dur_ns": ex["dur_ns"]}))
    return Finding(
        id=ID,
        title="Debugging ops run inside every training step ("
              + ", ".join(_WHAT[c] for c in causes) + ")",
        step_fraction=min(saved, 1.0),
        speedup=speedup_from_saving(saved),
        evidence=evidence,
        remedy=" ".join(_REMEDY[_remedy_key(c, mine)] for c in causes),
        numbers={"causes": causes,
                 **{f"{c}_fraction": round(shares[c], 4) for c in causes},
                 **{f"{c}_steps_fraction": round(steps_with[c], 3) for c in causes},
                 "ops_per_step": round(len(mine) / ctx.worker_steps(mine["host"]), 1),
                 "eager_writes_per_step": round(len(eager_s) / n_steps, 1),
                 "covered_fraction": round(covered, 4)},
        top_events=top,
    )


def _remedy_key(cause: str, mine: pd.DataFrame) -> str:
    """TF1 summaries (fetched with a Session.run) get their own remedy."""
    if cause == "summaries" and len(mine) and cat_mask(
            mine["name"], lambda n: _TF1_SUMMARIES.match(op_type_of(n))).any():
        return "summaries_tf1"
    return cause


def _cause_line(ctx: Context, cause: str, rows: pd.DataFrame, busy: float, share: float,
                exposed: float, step_ms: float, steps_with: float) -> str:
    n = ctx.worker_steps(rows["host"])
    types = pd.Series(cat_map(rows["name"], op_type_of)).value_counts()
    kinds = ", ".join(f"{t} x{c / n:.0f}" for t, c in types.head(4).items())
    line = (f"{_WHAT[cause]}: {len(rows) / n:.0f} op(s) per step ({kinds}) in {steps_with:.0%} "
            f"of the steps, {busy:.0%} of the ops' busy time: {share:.1%} of the step "
            f"({share * step_ms:.2f} ms of a {step_ms:.1f} ms step)")
    if exposed >= 0.005:
        line += f", {exposed:.1%} of it host work while no kernel ran"
    if cause == "summaries":
        tags = pd.Series(rows["dur_ns"].to_numpy(), index=cat_map(rows["name"], _summary_tag))
        by_tag = tags.groupby(level=0).sum().sort_values(ascending=False)
        line += ("; by tag: " + ", ".join(f"{t} {v / by_tag.sum():.0%}"
                                          for t, v in by_tag.head(4).items())
                 + f"; written every {RARELY}th step instead, {share * step_ms / RARELY:.2f} ms "
                 "a step on average")
    if cause == "debugger" and _NUMERIC_SUMMARY in types.index:
        line += ("; a numeric summary of every tensor: a tensor_debug_mode other than "
                 "NO_TENSOR or FULL_TENSOR")
    if cause == "numeric_checks" and _NUMERIC_SUMMARY in types.index:
        line += ("; a DebugNumericSummaryV2 reduces each float output for its CheckNumericsV2: "
                 "tf.debugging.enable_check_numerics()")
    return line


# Autograd's anomaly mode: per backward function, `isnan(output)._is_any_true().item()` (their
# children, `aten::ne`, `aten::any`, `aten::_local_scalar_dense`, are inside these).
_ANOMALY_CHECKS = frozenset({"aten::isnan", "aten::_is_any_true", "aten::item"})
_BACKWARD_FUNCTION = "autograd::engine::evaluate_function: "
_ANOMALY_REMEDY = (
    "Turn autograd's anomaly detection off for training: no "
    "torch.autograd.set_detect_anomaly(True), no `with torch.autograd.detect_anomaly():` "
    "around the loop (keep it for a debugging run). It checks every backward function's "
    "outputs for NaN (on a GPU each check's item() waits for the device) and records a stack "
    "trace for every forward op, Python time this estimate does not count.")


def _anomaly_detection(ctx: Context) -> Finding | None:
    """PyTorch's anomaly mode: NaN checks inside the autograd engine's backward functions
    (docs/trace-signals.md, "Debugging and summary ops in the step")."""
    names = ctx.present("name")
    if "aten::isnan" not in names or not any(n.startswith(_BACKWARD_FUNCTION) for n in names):
        return None
    cols = ("host", "name", "step_idx", "start_ns", "end_ns", "dur_ns")
    backward = ctx.in_steps(name=lambda n: n.startswith(_BACKWARD_FUNCTION), columns=cols)
    checks = ctx.in_steps(name=_ANOMALY_CHECKS.__contains__, columns=cols)
    if backward.empty or checks.empty:
        return None
    # Each rank's checks against its own backward functions: ranks' clocks differ.
    within = np.zeros(len(checks), dtype=bool)
    for host in ctx.hosts:
        mine, theirs = (checks["host"] == host).to_numpy(), (backward["host"] == host).to_numpy()
        within[mine] = inside(checks["start_ns"].to_numpy(np.int64)[mine],
                              backward["start_ns"].to_numpy(np.int64)[theirs],
                              backward["end_ns"].to_numpy(np.int64)[theirs])
    checks = checks[within]
    share = ctx.kernel_idle_share(checks) if len(checks) else 0.0
    if share < MIN_SHARE:
        return None
    n = ctx.worker_steps(checks["host"])
    step_ms = ctx.steps.median_step_ns() / 1e6
    per_step = int(cat_mask(checks["name"], "aten::isnan".__eq__).sum()) / n
    evidence = [
        f"autograd's anomaly mode: {per_step:.0f} NaN check(s) per step (aten::isnan, "
        "_is_any_true, item) inside the backward functions, one per function output: "
        f"{share:.1%} of the step ({share * step_ms:.2f} ms of a {step_ms:.1f} ms step)",
        "estimate: the checks leave the step; the stack trace it records for every forward op "
        "is untraced Python, not counted (a lower bound)",
    ]
    if ctx.has_accelerator:
        evidence.append("only the checks' time while no kernel ran is counted")
    return Finding(
        id=ID,
        title="Debugging ops run inside every training step (autograd anomaly detection)",
        step_fraction=share,
        speedup=speedup_from_saving(share),
        evidence=evidence,
        remedy=_ANOMALY_REMEDY,
        numbers={"causes": ["anomaly_detection"], "anomaly_detection_fraction": round(share, 4),
                 "checks_per_step": round(per_step, 1)},
        top_events=heaviest_events(checks),
    )
