"""TensorFlow embedding ops by what their placement says (docs/trace-signals.md, "Embeddings on
the host").

A resource variable's ops run on the device that holds the variable, so a table's gather,
scatter or sparse optimizer update running as a host op in a trace with a GPU says the table is
in host memory (seed 001's "store the large embeddings on CPU"). The sparse ops that combine a
lookup's rows run on the host when they have no GPU kernel for their dtype or TF version (seed
002: before TF 2.7, `SparseSegmentMean` and `Unique` had CPU kernels only), the gather itself
staying on the GPU.

Each cause has anchors, ops only embedding lookups make, and followers, ops lookups make among
others (a plain `GatherV2`, `Unique`, `UnsortedSegmentSum`): followers count only beside an
anchor that admits them (ADMITTED_BY). A lone host `GatherV2` is no table (in a real Keras 2.4
GPU trace one picked samples out of the host batch, 28 ms a step).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from analyzers.events import cat_mask, is_device_plane, op_type_of

if TYPE_CHECKING:
    from analyzers.context import Context

# An optimizer's name scope (Keras 3 `adam/`, TF1 `Adam/update_<var>/`, `SGD/`, ...).
OPTIMIZER_SCOPE = re.compile(
    r"(?:^|/)(?:adam|adamw|adamax|nadam|adagrad|adadelta|adafactor|rmsprop|ftrl|lion|lamb|sgd|"
    r"momentum|gradientdescent)(?:_\d+)?/", re.IGNORECASE)
# The op TF turns an IndexedSlices gradient into a table-sized tensor with (tf.convert_to_tensor,
# Keras 3's Adam and Adagrad on a table).
DENSIFY = re.compile(r":UnsortedSegmentSum$")
# A table touched by rows: lookups, scatters, sparse optimizer updates; what a row-sparse step
# keeps of its tables' work.
ROW_OPS = re.compile(r":(?:ResourceScatter\w*|ResourceSparseApply\w*|ResourceGather|GatherV2|"
                     r"Unique\w*)$")
_UNIQUE = re.compile(r":Unique(V2)?$")


def dedup_sums(names: Iterable[str]) -> set[str]:
    """The `UnsortedSegmentSum`s that sum a sparse gradient's duplicate rows before a row-sparse
    update, not densify it: TF1's and Keras 2's optimizers run a `Unique` of the indices and
    that sum over the unique rows in the update's scope (`_deduplicate_indexed_slices`:
    `Adagrad/update_t/Unique`, `.../UnsortedSegmentSum`, then `ResourceSparseApplyAdagrad`); a
    densified gradient has no `Unique` beside it (Keras 3's `adam/UnsortedSegmentSum`)."""
    names = list(names)
    scopes = {n.rpartition("/")[0] for n in names if _UNIQUE.search(n)}
    return {n for n in names if DENSIFY.search(n) and n.rpartition("/")[0] in scopes}


def densifying(col: pd.Series, names: Iterable[str] | None = None) -> np.ndarray:
    """The rows of the categorical op-name column `col` that densify a gradient (DENSIFY), not
    the duplicate-row sums `dedup_sums` finds among `names` (the column's own values unless
    given: a detector that also reads compiled thunks as TF ops passes those)."""
    dedup = dedup_sums(str(n) for n in (col.unique() if names is None else names))
    return cat_mask(col, lambda n: bool(DENSIFY.search(n)) and n not in dedup)


ANCHORS: dict[str, re.Pattern[str]] = {
    # Ops that run where the table is: the lookup, the writes into it, sparse optimizer updates
    # (`ResourceSparseApplyAdagradV2`, ...; `SparseApply*`, `Scatter*` on TF1 ref variables).
    "tables_on_host": re.compile(
        r"^(?:ResourceGather|ResourceGatherNd|ResourceScatter\w+|ResourceSparseApply\w+|"
        r"SparseApply\w+|Scatter(?:Add|Sub|Mul|Div|Min|Max|Update)|ScatterNd(?:Add|Sub|Update))$"),
    # Multi-hot rows combined (embedding_lookup_sparse, DenseFeatures) and their gradients.
    "sparse_ops_on_host": re.compile(
        r"^(?:SparseSegment(?:Sum|Mean|SqrtN)(?:WithNumSegments)?(?:Grad(?:V2)?)?|"
        r"SparseFillEmptyRows(?:Grad)?|SparseReshape)$"),
}
FOLLOWERS: dict[str, re.Pattern[str]] = {
    "tables_on_host": re.compile(r"^(?:GatherV2|Gather)$"),
    # Ids deduplicated, split over table shards and stitched back, a gather's gradient summed.
    "sparse_ops_on_host": re.compile(
        r"^(?:Unique|UniqueV2|UniqueWithCounts|UniqueWithCountsV2|Segment(?:Sum|Mean)|"
        r"UnsortedSegmentSum|DynamicPartition|DynamicStitch|ParallelDynamicStitch)$"),
}
CAUSE_IDS = tuple(ANCHORS)
# The anchors a cause's followers need beside them: a plain gather is a table's only beside a
# table op (beside a host SparseSegmentMean it may gather anything); the sparse helpers belong to
# any lookup chain (a table's Unique before its ResourceGather).
ADMITTED_BY: dict[str, frozenset[str]] = {
    "tables_on_host": frozenset({"tables_on_host"}),
    "sparse_ops_on_host": frozenset(CAUSE_IDS),
}


def cause_of(op_type: str) -> tuple[str, bool] | None:
    """(cause, whether an anchor) of an op type, None for other ops."""
    for cause in CAUSE_IDS:
        if ANCHORS[cause].match(op_type):
            return cause, True
        if FOLLOWERS[cause].match(op_type):
            return cause, False
    return None


_COLUMNS = ("host", "name", "op_type", "start_ns", "end_ns", "dur_ns")


def anchored(op_types) -> set[str]:
    """The causes an anchor among `op_types` stands for."""
    return {c[0] for t in op_types if (c := cause_of(str(t))) and c[1]}


def embedding_host_ops(ctx: Context) -> pd.DataFrame:
    """The host ops in the steps whose op types embeddings_on_host counts (anchors, and the
    followers they admit), with their `cause` (no rows without an accelerator). Read once per
    run: embeddings_on_host counts them, exposed_input_copy leaves them out of the host ops
    beside a copy."""
    def read() -> pd.DataFrame:
        causes = {t: c for t in ctx.present("op_type") if (c := cause_of(t))}
        if not causes or not ctx.has_accelerator:
            return pd.DataFrame(columns=[*_COLUMNS, "cause"])
        ops = ctx.in_steps(kinds=("host_op",), plane=lambda p: not is_device_plane(p),
                           name=lambda n: op_type_of(n) in causes, columns=_COLUMNS)
        types = {str(t) for t in ops["op_type"].unique()}
        anchors = anchored(types)
        kept = {t: causes[t][0] for t in types
                if causes[t][1] or ADMITTED_BY[causes[t][0]] & anchors}
        ops = ops[ops["op_type"].isin(list(kept))].copy()
        ops["cause"] = ops["op_type"].astype(str).map(kept)
        return ops
    return ctx.memo("embedding_host_ops", read)
