"""`embeddings_on_host`: a GPU step waits for embedding work done on the host.

A recommender's tables are the first thing users pin to host memory (`tf.device("/CPU:0")`, a
too-large table, a placement left over from CPU training). Then every step gathers rows on the
CPU, copies them to the GPU, copies the gradients back and updates the table on the CPU while
the GPU waits: seed 001 measured such a job at 43x a CPU-only one where the tables spread over
the GPUs reached 672x. Seed 002 shows the other half: the gather on the GPU but the ops around
it (`Unique`, `SparseSegmentMean`, ...) on the CPU for lack of GPU kernels, copies going back
and forth between them. Signals (accelerator traces, TensorFlow op types; docs/trace-signals.md,
"Embeddings on the host"): host ops on the step's threads, not tf.data's, of the op types in
`signals/embedding_ops` (a host op there launches no kernel: it computes on the CPU), and
device→host copies inside the step.

Estimate: the ops' time while no kernel runs, less what the same work costs on the device
(DEVICE_FASTER times less: it is memory-bound), plus half the exposed copy time when the step
copies back to the host (as `host_device_pingpong`: the bounce's copies go, the input's own
stay), which `host_device_pingpong` then leaves to this finding.
"""

from __future__ import annotations

import pandas as pd

from analyzers.context import Context
from analyzers.detectors import exposed_input_copy, run_detector
from analyzers.events import is_device_plane, op_type_of
from analyzers.findings import Finding, Skipped, heaviest_events, speedup_from_saving
from analyzers.signals.copy_back import copies_back_per_step
from analyzers.signals.embedding_ops import CAUSE_IDS, anchored, cause_of, embedding_host_ops

ID = "embeddings_on_host"
MIN_SHARE = 0.03
# Lookups and updates are memory-bound: seed 001 compares 409.6 GB/s for two EPYC 7742 sockets
# with 2 TB/s for one A100-80GB.
DEVICE_FASTER = 5.0
COPIES_COUNTED = 0.5
_WHAT = {
    "tables_on_host": "lookups and updates of tables in host memory",
    "sparse_ops_on_host": "sparse ops around the lookups",
}
_TITLE = {
    "tables_on_host": "Embedding tables live in host memory: the GPU step waits for CPU lookups "
                      "and updates",
    "sparse_ops_on_host": "Sparse embedding ops run on the host between GPU ops",
}
_REMEDY = {
    "tables_on_host": (
        "Keep the tables in GPU memory: remove the tf.device(\"/CPU:0\") scope (or the "
        "placement that put them there) when they fit; when they do not fit one GPU, shard "
        "them over the GPUs, table-wise or column-wise, with an all-to-all to the data-parallel "
        "layers (seed 001: 672x a CPU-only job against 43x with the large tables in host "
        "memory; `recadvisor train` is such a hybrid-parallel trainer, NVIDIA "
        "distributed-embeddings and HugeCTR's SOK do it for Keras models). Leave in host "
        "memory only what fits nowhere, and look each unique id up once (tf.unique before the "
        "gather) so fewer rows cross PCIe."),
    "sparse_ops_on_host": (
        "Give the lookups' sparse ops GPU kernels: TensorFlow 2.7 added them for Unique, "
        "SparseSegmentMean/Sum/SqrtN and their gradients, SparseFillEmptyRows and SparseReshape "
        "(seed 002); on an older version, upgrade. On a newer one an op left on the host lacks "
        "a kernel for its dtype or was pinned there: tf.debugging.set_log_device_placement(True) "
        "names it; or replace embedding_lookup_sparse / DenseFeatures over sparse ids with "
        "padded dense ids and one gather per table (a Keras Embedding with a mask or combiner)."),
}


def detect(ctx: Context) -> Finding | Skipped | None:
    if not ctx.has_accelerator:
        return Skipped(ID, "no accelerator plane in the trace: the tables and the model share "
                           "the host's memory")
    if ctx.framework != "tensorflow":
        return Skipped(ID, "keys on TensorFlow op types; host-side embedding ops of other "
                           "frameworks are not told apart yet")
    ops = embedding_host_ops(ctx)
    if ops.empty or ctx.total_step_ns <= 0:
        return None
    anchors = anchored(ops["op_type"].unique())
    of_cause = ops["cause"].to_numpy()
    exposed = ctx.kernel_idle_share(ops)
    on_device = ctx.kernel_idle_share(ops, kernels=False) / DEVICE_FASTER
    n = ctx.worker_steps(ops["host"])
    step_ms = ctx.steps.median_step_ns() / 1e6
    evidence: list[str] = []
    shares: dict[str, float] = {}
    for cause in CAUSE_IDS:
        mine = of_cause == cause
        if not mine.any():
            continue
        share = ctx.kernel_idle_share(ops[mine])
        shares[cause] = share
        kinds = ", ".join(sorted({str(t) for t in ops["op_type"][mine].unique()}))
        evidence.append(f"{_WHAT[cause]}: {mine.sum() / n:.0f} host op(s) per step ({kinds}), "
                        f"{share:.1%} of the step with no kernel running ({share * step_ms:.2f} "
                        f"ms of a {step_ms:.1f} ms step)")
    d2h_per_step = copies_back_per_step(ctx)
    copies = _bounce_copies(ctx, ops, exposed) if d2h_per_step >= 1 else 0.0
    saved = max(exposed - on_device, 0.0) + copies * COPIES_COUNTED
    if saved < MIN_SHARE:
        return None
    cause = "tables_on_host" if "tables_on_host" in anchors else "sparse_ops_on_host"
    if cause == "sparse_ops_on_host" and "tf_op" in ctx.events:
        on_gpu = sorted({op_type_of(t) for t in ctx.present("tf_op")
                         if cause_of(op_type_of(t)) == ("tables_on_host", True)})
        if on_gpu:
            evidence.append(f"the lookups themselves run on the GPU ({', '.join(on_gpu)} "
                            "kernels): the ops around them send ids and rows back and forth")
    if copies:
        evidence.append(f"{d2h_per_step:.0f} device→host copies per step; copies between host "
                        f"and device take {copies:.1%} more of the step with nothing else "
                        "running (the input's own copies left out), half of it counted")
    evidence.append(f"on the GPU the same work would take about 1/{DEVICE_FASTER:.0f} of its "
                    f"{on_device * DEVICE_FASTER:.1%} of the step (memory-bound; seed 001: "
                    "2 TB/s for one A100 against 409.6 GB/s for two EPYC sockets): "
                    f"{on_device:.1%} is counted as staying")
    return Finding(
        id=ID,
        title=_TITLE[cause],
        step_fraction=exposed + copies,
        speedup=speedup_from_saving(saved),
        evidence=evidence,
        remedy=_REMEDY[cause],
        numbers={"cause": cause, "causes": list(shares),
                 **{f"{c}_fraction": round(v, 4) for c, v in shares.items()},
                 "host_fraction": round(exposed, 4),
                 "copies_fraction": round(copies, 4),
                 "ops_per_step": round(len(ops) / n, 1),
                 "d2h_per_step": round(d2h_per_step, 1)},
        top_events=heaviest_events(ops),
    )


def _bounce_copies(ctx: Context, ops: pd.DataFrame, exposed: float) -> float:
    """The share copies between host and device add to the ops' exposed time, with no kernel
    running, less the input's copies that exposed_input_copy counts."""
    copies = ctx.in_steps(kinds=("h2d", "d2h"), plane=is_device_plane,
                          columns=("host", "start_ns", "end_ns"))
    added = ctx.kernel_idle_share(ops, copies) - exposed
    inp = run_detector(exposed_input_copy, ctx)
    if isinstance(inp, Finding):
        added -= inp.numbers["copy_fraction"]
    return max(added, 0.0)
