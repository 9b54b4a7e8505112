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
anchor. A lone host `GatherV2` is no table (in a real Keras 2.4 GPU trace one picked a batch out
of a large host tensor, 28 ms a step).
"""

from __future__ import annotations

import re

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


def cause_of(op_type: str) -> tuple[str, bool] | None:
    """(cause, whether an anchor) of an op type, None for other ops."""
    for cause in CAUSE_IDS:
        if ANCHORS[cause].match(op_type):
            return cause, True
        if FOLLOWERS[cause].match(op_type):
            return cause, False
    return None
