"""TensorFlow embedding ops by what their placement says (docs/trace-signals.md, "Embeddings on
the host").

A resource variable's ops run on the device that holds the variable, so a table's gather,
scatter or sparse optimizer update running as a host op in a trace with a GPU says the table is
in host memory (seed 001's "store the large embeddings on CPU"). The sparse helpers around a
lookup (deduplicating ids, combining multi-hot rows, partitioning ids over table shards) run on
the host when they have no GPU kernel for their dtype or TF version (seed 002: before TF 2.7,
`Unique` and `SparseSegmentMean` had CPU kernels only), the gather itself staying on the GPU.
"""

from __future__ import annotations

import re

CAUSES: dict[str, re.Pattern[str]] = {
    # Ops that run where the table is: the lookup, the writes into it, sparse optimizer updates
    # (`ResourceSparseApplyAdagradV2`, ...; `SparseApply*`, `Scatter*` on TF1 ref variables).
    "tables_on_host": re.compile(
        r"^(?:ResourceGather|ResourceGatherNd|GatherV2|Gather|ResourceScatter\w+|"
        r"ResourceSparseApply\w+|SparseApply\w+|Scatter(?:Add|Sub|Mul|Div|Min|Max|Update)|"
        r"ScatterNd(?:Add|Sub|Update))$"),
    # What surrounds a lookup: ids deduplicated, multi-hot rows combined and their gradients,
    # ids split over table shards and the rows stitched back, a gather's gradient aggregated.
    "sparse_ops_on_host": re.compile(
        r"^(?:Unique|UniqueV2|UniqueWithCounts|UniqueWithCountsV2|"
        r"SparseSegment(?:Sum|Mean|SqrtN)(?:WithNumSegments)?(?:Grad(?:V2)?)?|"
        r"SparseFillEmptyRows(?:Grad)?|SparseReshape|Segment(?:Sum|Mean)|UnsortedSegmentSum|"
        r"DynamicPartition|DynamicStitch|ParallelDynamicStitch)$"),
}
CAUSE_IDS = tuple(CAUSES)


def cause_of(op_type: str) -> str | None:
    for cause, pattern in CAUSES.items():
        if pattern.match(op_type):
            return cause
    return None
