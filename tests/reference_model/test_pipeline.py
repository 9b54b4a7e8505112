"""The input pipeline's parallelism knobs become the tf.data stages a user would have written:
parallelism 0 a plain Map/Interleave, otherwise their parallel versions."""

import pytest

tf = pytest.importorskip("tensorflow")

from reference_model.config import TrainConfig  # noqa: E402
from reference_model.data.cache import DatasetSpec, generate_dataset  # noqa: E402
from reference_model.pipeline import build_dataset  # noqa: E402
from reference_model.presets import get_preset  # noqa: E402
from reference_model.schema import Schema  # noqa: E402

SMALL = Schema(cardinalities=(50, 3000, 7, 900, 12, 400) + (20,) * 20, payload_bytes=16)


def _stage_ops(ds) -> set[str]:
    graph = tf.compat.v1.GraphDef()
    # external_state_policy 1: ignore the shuffle's seed generator, which is state
    graph.ParseFromString(tf.raw_ops.DatasetToGraphV2(
        input_dataset=ds._variant_tensor, external_state_policy=1).numpy())
    return {n.op for n in graph.node if n.op.endswith("Dataset") or "DatasetV" in n.op}


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return generate_dataset(tmp_path_factory.mktemp("data"), DatasetSpec(
        schema=SMALL, fmt="prebatched", rows_per_record=256, compression="none",
        num_examples=2048, eval_examples=0, num_shards=2, seed=0))


def _cfg(preset: str) -> TrainConfig:
    # No emulated storage: the test reads a few small records.
    return get_preset(preset).config().replace(
        batch_size=512, rows_per_record=256, storage_latency_ms=0.0, storage_bandwidth_mbps=0.0)


def test_sequential_preset_has_no_parallel_stage(manifest):
    ds = build_dataset(_cfg("low_parallelism"), manifest)
    ops = _stage_ops(ds)
    assert {"InterleaveDataset", "MapDataset"} <= ops, ops
    assert not {op for op in ops if op.startswith(("Parallel", "Prefetch"))}, ops
    # tf.data would otherwise rewrite the map into a ParallelMapV2, or append a Prefetch, when
    # the iterator is made
    opt = ds.options().experimental_optimization
    assert opt.map_parallelization is False and opt.inject_prefetch is False
    dense, ids, labels = next(iter(ds))
    assert dense.shape[0] == ids.shape[0] == labels.shape[0] == 512


def test_clean_preset_reads_in_parallel_and_prefetches(manifest):
    ds = build_dataset(_cfg("clean"), manifest)
    ops = _stage_ops(ds)
    assert {"ParallelInterleaveDatasetV4", "ParallelMapDatasetV2", "PrefetchDataset"} <= ops, ops
    assert "MapDataset" not in ops and "InterleaveDataset" not in ops, ops
    assert ds.options().experimental_optimization.map_parallelization is not False
