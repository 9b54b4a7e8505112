"""`dense_embedding_update`: embedding tables handled whole, every row, every step.

A batch touches a few thousand rows of a table of millions, so a recommender's step should cost
in proportion to the batch. Two TensorFlow patterns make it cost in proportion to the table
(docs/trace-signals.md, "Embedding tables under Keras 3 optimizers"):
- `dense_optimizer`: the optimizer turns the table's sparse gradient (IndexedSlices) into a dense
  table-sized tensor, an `UnsortedSegmentSum` under its name scope (`adam/`, `Adam/`,
  `adagrad/`, ...), then updates every row with elementwise ops (Keras 3's Adam). Without that
  op, the optimizer's dense ops reaching DENSE_ALONE of the step say the same (Keras 3's Adagrad).
  The saving is the optimizer ops' share of the step, its own row ops (Adagrad's scatters)
  included, less what the row-sparse update that replaces them costs: a scatter of the batch's
  rows into each table, SPARSE_LOOKUPS forward lookups (2.2-2.8x one lookup in three runs of
  the fixed loop).
- `table_copy_on_read`: `ReadVariableOp`s of half a millisecond or more (median per op name)
  while the model looks rows up:
  TF copies on read a variable that sparse ops write, so gathering from a read of the table (Keras
  3's Embedding layer: `ReadVariableOp` then `GatherV2`) copies all of it each step. The saving is
  their share. Keras 3's `global_clipnorm` densifies too (UnsortedSegmentSum feeding the norm's
  `Sum`, then a table-sized scaling), even with a row-sparse optimizer (SGD: 57.0 ms a step
  against 8.2 ms with tf.clip_by_global_norm first): its remedy comes first then. A copying read
  under a `StopGradient` scope in a trace that writes summaries is
  `tf.summary.histogram`'s: it reads its data before `record_if` decides whether to write, so a
  histogram of a table written every 100th step still copies it every step (11.4 ms a step
  without it, 16.8 ms with it; docs/trace-signals.md, "Debugging and summary ops in the step").
Keys on TF op names: on a host without an accelerator the ops' own events; with one, the device
kernels' `tf_op` stat (the TF op that launched each kernel), so the optimizer's and the lookups'
shares are device time. A copy on read runs no kernel of its own, so on GPU traces only the
`dense_optimizer` cause is looked for.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.detectors.debug_ops_in_step import SUMMARY_SCOPE
from analyzers.events import cat_mask, is_device_plane
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.signals.compiled import compiled_share
from analyzers.signals.embedding_ops import OPTIMIZER_SCOPE, ROW_OPS, densifying
from analyzers.steps import covered_ns

ID = "dense_embedding_update"
MIN_SHARE = 0.05
SPARSE_LOOKUPS = 2.6  # the scatter a row-sparse update keeps, in forward lookups
COPY_MIN_NS = 500_000  # a plain read is a reference count: microseconds
# Forward lookups only: a gather under the gradient tape is the backward pass of some other op
# (Keras 3's binary cross-entropy has one, `gradient_tape/compile_loss/.../GatherV2`, in models
# without a table).
_LOOKUP = re.compile(
    r"^(?!(?:.*/)?(?:gradient_tape|gradients(?:_\d+)?)/).*:(?:ResourceGather|GatherV2)$")
_READ = re.compile(r":ReadVariableOp$")
# Share of the steps a read must run in to count as a copy made every step.
EVERY_STEP_SHARE = 0.5
# The optimizer's share of a step is (elementwise passes over every parameter) against (the
# model's compute over the batch): a few percent for dense layers at any usable batch size.
# A quarter or more, with tables in the model, is the tables updated whole.
DENSE_ALONE = 0.25
_FUSED_APPLY = re.compile(r":ResourceApply\w+$")
# A densified gradient fed to a reduction under the optimizer's scope: its norm, as Keras 3's
# global_clipnorm takes it (`sgd/Sum/input:UnsortedSegmentSum`; docs/trace-signals.md,
# "Gradient clipping densifies a table's gradient").
_NORM_INPUT = re.compile(r"/(?:Sum|Square|Norm|EuclideanNorm)(?:_\d+)?/(?:input|x):"
                         r"UnsortedSegmentSum$")
# `tf.stop_gradient(variable)`'s read, as tf.summary.histogram makes it of its data.
_STOP_GRADIENT_READ = re.compile(r"(?:^|/)StopGradient(?:_\d+)?/ReadVariableOp:ReadVariableOp$")
_REMEDY = {
    "dense_optimizer": (
        "Update the embedding tables row-sparsely, only the rows the batch touched: apply the "
        "dense optimizer (Adam, Adagrad) to the dense layers only and update each table with a "
        "scatter (table.scatter_sub(tf.IndexedSlices(lr * g.values, g.indices))), or with a lazy "
        "Adam that gathers and scatters its slots for the batch's rows; for tables of many GB, "
        "an embedding library that does this (TensorFlow Recommenders-Addons, NVIDIA "
        "distributed-embeddings, seed 001)."),
    "table_copy_on_read": (
        "Look rows up from the table variable itself, tf.nn.embedding_lookup(table_variable, ids) "
        "(ResourceGather), instead of gathering from a read of it: a variable that sparse ops "
        "write is copied whole on every read (Keras 3's Embedding layer reads the table, then "
        "GatherV2)."),
    "clipping": (
        "Clip before the optimizer, with tf.clip_by_global_norm on the gradients (it takes the "
        "norm of an IndexedSlices from its values and keeps it sparse), then apply_gradients "
        "without global_clipnorm: Keras 3's global_clipnorm densifies every table's gradient "
        "to take the norm and scale it, so the update touches every row (a 1M-row table: 57.0 "
        "ms a step against 8.2 ms clipped first)."),
    "summary_read": (
        "Write the table's histogram from outside the training step: eagerly from the Python "
        "loop every N steps, so the read and its copy happen only then, or of a sample of its "
        "rows (tf.gather on the variable, a ResourceGather, copies nothing). Inside a "
        "tf.function, tf.summary.histogram reads its data (tf.stop_gradient) before "
        "tf.summary.record_if decides whether to write."),
}


def _where_any(savings: dict[str, float], dense: np.ndarray, copy: np.ndarray) -> np.ndarray:
    """The rows behind the causes found: the optimizer's dense ops, the copying reads."""
    return (dense & ("dense_optimizer" in savings)) | (copy & ("table_copy_on_read" in savings))


def _union_share(ops: pd.DataFrame, mask: np.ndarray, total_ns: float) -> float:
    if not mask.any() or total_ns <= 0:
        return 0.0
    return covered_ns(ops["start_ns"].to_numpy()[mask], ops["end_ns"].to_numpy()[mask],
                      overwrite=True) / total_ns


def _wanted(name: str) -> bool:
    return bool(OPTIMIZER_SCOPE.search(name) or _LOOKUP.search(name) or _READ.search(name))


# The kinds an update runs as: a host op without an accelerator, a kernel with one. Collectives
# under the optimizer's scope (MirroredStrategy's all-reduce) are not updates.
_UPDATE_KINDS = ("host_op", "device_compute")


def _kernels_by_op(ctx: Context) -> pd.DataFrame:
    """Device kernels whose launching TF op this reads, with that op as their `name`."""
    if "tf_op" not in ctx.events:
        return pd.DataFrame()
    k = ctx.in_steps(kinds=("device_compute",), plane=is_device_plane,
                     columns=("host", "tf_op", "kind", "start_ns", "end_ns"))
    return k[cat_mask(k["tf_op"], _wanted)].rename(columns={"tf_op": "name"})


def detect(ctx: Context) -> Finding | None:
    names = ctx.present_tf_ops()
    if ctx.has_accelerator and "tf_op" in ctx.events:
        names = [*names, *ctx.present("tf_op")]
    if ctx.framework != "tensorflow" or not any(_LOOKUP.search(n) for n in names):
        return None
    if not any(_READ.search(n) or (OPTIMIZER_SCOPE.search(n) and not ROW_OPS.search(n))
               for n in names):
        return None
    if ctx.has_accelerator:
        ops = _kernels_by_op(ctx)
    else:
        # Only the few op names this reads are clipped (all host ops of a large trace are
        # millions).
        cols = ("host", "name", "kind", "start_ns", "end_ns", "step_idx")
        ops = ctx.in_steps(name=_wanted, columns=cols)
        # XLA-compiled steps run thunks named after HLO instructions: read as their TF ops.
        compiled = ctx.compiled_ops(_wanted, columns=cols)
        if len(compiled):
            ops = pd.concat([ops.assign(thunk=False), compiled.assign(thunk=True)],
                            ignore_index=True)
            ops["name"] = ops["name"].astype(str).astype("category")
    if not ops.empty and ctx.ps_hosts:
        # On a parameter-server job the servers' updates run while the worker waits for
        # them: `parameter_server_wait` counts that wait, this finding the workers' own ops.
        ops = ops[~ops["host"].isin(ctx.ps_hosts).to_numpy()]
    if ops.empty:
        return None
    total = float(ctx.total_step_ns)
    thunk = ops["thunk"].to_numpy(bool) if "thunk" in ops else np.zeros(len(ops), dtype=bool)

    def _share(ops: pd.DataFrame, mask: np.ndarray, total_ns: float) -> float:
        """The rows' union in the step; XLA thunks' by their traced time (signals/compiled.py)."""
        plain = _union_share(ops, mask & ~thunk, total_ns)
        if not (mask & thunk).any():
            return plain
        dur = (ops["end_ns"] - ops["start_ns"]).to_numpy()[mask & thunk]
        return plain + compiled_share(ctx, float(dur.sum()))

    in_optimizer = (cat_mask(ops["name"], OPTIMIZER_SCOPE.search)
                    & ops["kind"].isin(_UPDATE_KINDS).to_numpy())
    lookup = cat_mask(ops["name"], _LOOKUP.search) & ~in_optimizer
    densify = densifying(ops["name"], names) & in_optimizer
    read = cat_mask(ops["name"], _READ.search)
    # A copy is a read of COPY_MIN_NS or more, judged per op name on the median, that most
    # steps make: a read in a few steps is periodic work (a TF1 Saver reads each variable,
    # `table/Read/ReadVariableOp`, only in the steps that save: `step_stalls`).
    reads = ops[read]
    med = (reads["end_ns"] - reads["start_ns"]).groupby(reads["name"], observed=True).median()
    copy = np.zeros(len(ops), dtype=bool)
    if not ctx.has_accelerator:  # a copy on read runs no kernel of its own: host traces only
        # Steps, not events: one read clipped in two at a step boundary, or made twice in one.
        steps_with = reads.groupby("name", observed=True)["step_idx"].nunique()
        copying = med.index[(med >= COPY_MIN_NS)
                            & (steps_with.reindex(med.index) >= EVERY_STEP_SHARE * ctx.n_steps)]
        copy = read & ops["name"].isin(copying).to_numpy()

    lookup_share = _share(ops, lookup, total)
    savings: dict[str, float] = {}
    evidence: list[str] = []
    clipping = False
    n = ctx.worker_steps(ops["host"])  # counts per step are one worker's
    # The copies are the other cause's. The optimizer's own row ops (Adagrad's scatters into
    # its accumulator and the table, the gathers of its slots) go with the rest of it: the
    # remedy replaces the whole update by one row-sparse one, SPARSE_LOOKUPS lookups' worth.
    rows = in_optimizer & ~copy & cat_mask(ops["name"], ROW_OPS.search)
    dense = in_optimizer & ~copy & ~rows
    dense_share = _share(ops, dense, total)
    replaced_share = _share(ops, dense | rows, total)
    # Without a densifying op, only elementwise passes say a table is updated whole: a fused
    # dense apply (ResourceApplyAdam) takes a dense gradient, which a table's lookup never
    # makes, so it is a dense layer's (a TF1 MLP's Adam: 24-28% of a 1.8 ms step).
    alone_share = _share(ops, dense & ~cat_mask(ops["name"], _FUSED_APPLY.search), total)
    if densify.any() or alone_share >= DENSE_ALONE:
        saved = max(replaced_share - SPARSE_LOOKUPS * lookup_share, 0.0)
        if saved >= MIN_SHARE:
            savings["dense_optimizer"] = saved
            how = (f"densifies the tables' sparse gradients ({densify.sum() / n:.0f} "
                   "UnsortedSegmentSum per step under its name scope) and updates every row"
                   if densify.any() else "updates every row of the tables")
            evidence.append(
                f"the optimizer {how}: its dense ops cover {dense_share:.1%} of the step, against "
                f"{lookup_share:.1%} for the forward lookups (a row-sparse update is taken as "
                f"{SPARSE_LOOKUPS:g} of them)")
            norms = int((densify & cat_mask(ops["name"], _NORM_INPUT.search)).sum())
            if norms:
                clipping = True
                evidence.append(
                    f"per step, {norms / n:.0f} of them feed a reduction (`.../Sum/input`): a "
                    "gradient's norm, which Keras 3's global_clipnorm takes of the densified "
                    "table gradient before scaling it and updating every row")
    copy_share = _share(ops, copy, total)
    histogram_reads = 0
    if copy_share >= MIN_SHARE:
        savings["table_copy_on_read"] = copy_share
        evidence.append(
            f"{copy.sum() / n:.0f} variable read(s) per step of {med.max() / 1e6:.1f} ms median "
            f"({copy_share:.1%} of the step): copies of whole variables that sparse ops write "
            f"(a table read to gather rows from, an optimizer slot)")
        if any(SUMMARY_SCOPE.search(x) for x in names):
            histogram_reads = int((copy & cat_mask(ops["name"], _STOP_GRADIENT_READ.search)).sum())
        if histogram_reads:
            evidence.append(
                f"{histogram_reads / n:.0f} of them a tf.stop_gradient read "
                "(`StopGradient/ReadVariableOp`) in a step that writes summaries: what "
                "tf.summary.histogram reads of its data every step, written or not")
    if not savings:
        return None
    if ctx.has_accelerator:
        evidence.append(f"device time: the {len(ops)} kernels launched by these ops, named by "
                        "their tf_op stat")
    if (thunk & _where_any(savings, dense, copy)).any():
        evidence.append(
            "compiled by XLA: its thunks read as the TF ops the compiled modules name, each "
            "standing for its share of the thunks' traced time, of the time the modules ran "
            "(XLA:CPU runs parallel loops off the traced threads); the row-sparse update is "
            f"priced at {SPARSE_LOOKUPS:g} compiled lookups, a ratio measured uncompiled: on the "
            "compiled job measured this read low (docs/trace-signals.md)")
    saved = sum(savings.values())
    where = _where_any(savings, dense, copy)
    # When histograms' reads are the only copies, gathering from a read is not what this job
    # does: their remedy replaces the lookup's.
    only_histograms = 0 < histogram_reads == int(copy.sum())
    remedies = [_REMEDY[c] for c in savings
                if not (c == "table_copy_on_read" and only_histograms)]
    if histogram_reads:
        remedies.append(_REMEDY["summary_read"])
    if clipping:
        remedies.insert(0, _REMEDY["clipping"])
    return Finding(
        id=ID,
        title="Embedding tables are updated or copied whole every step",
        step_fraction=saved,
        speedup=speedup_from_saving(saved),
        evidence=evidence,
        remedy=" ".join(remedies),
        numbers={"causes": list(savings), **{f"{c}_fraction": round(s, 4)
                                              for c, s in savings.items()},
                 "lookup_fraction": round(lookup_share, 4), "global_clipnorm": clipping,
                 "histogram_reads_per_step": round(histogram_reads / n, 1)},
        top_events=heaviest_events(ops[where].assign(dur_ns=ops["end_ns"] - ops["start_ns"])),
    )
