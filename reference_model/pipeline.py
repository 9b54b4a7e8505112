"""The tf.data input pipeline: files -> interleave -> parse -> transform -> batch -> prefetch.

Every stage is a knob of TrainConfig, including the seed anti-patterns: GZIP records, per-example
records parsed one at a time, parallelism 1, no prefetch, float64 features that a host-side casting
layer converts every step, and slow or cold storage (see storage.py).
"""

from __future__ import annotations

import tensorflow as tf

from reference_model.config import AUTOTUNE, SEQUENTIAL, TrainConfig
from reference_model.data.manifest import Manifest
from reference_model.data.records import feature_spec, parse_single
from reference_model.schema import CAT_NAMES, DENSE_NAMES, LABEL_NAME
from reference_model.storage import open_records


def _par(n: int) -> int | None:
    """num_parallel_calls for a knob's value: None (a sequential stage) for SEQUENTIAL."""
    if n == SEQUENTIAL:
        return None
    return tf.data.AUTOTUNE if n == AUTOTUNE else n


def _to_model_inputs(feats: dict[str, tf.Tensor], host_cast: bool):
    """Model-ready tensors, or (host_cast) the per-feature float64/int64 dict a casting layer
    downstream has to convert, as in seed 000's job."""
    if host_cast:
        out = {k: tf.math.log1p(tf.cast(feats[k], tf.float64)) for k in DENSE_NAMES}
        out.update({k: tf.cast(feats[k], tf.int64) for k in CAT_NAMES})
        out[LABEL_NAME] = tf.cast(feats[LABEL_NAME], tf.float64)
        return out
    dense = tf.math.log1p(tf.stack([feats[k] for k in DENSE_NAMES], axis=-1))
    ids = tf.cast(tf.stack([feats[k] for k in CAT_NAMES], axis=-1), tf.int32)
    return dense, ids, feats[LABEL_NAME]


def _flatten_records(feats: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    return {k: tf.reshape(v, [-1]) for k, v in feats.items()}


def build_dataset(cfg: TrainConfig, manifest: Manifest, split: str = "train") -> tf.data.Dataset:
    files = manifest.files(split)
    if not files:
        raise ValueError(f"dataset split {split!r} has no files")
    schema = manifest.schema
    info = manifest.splits[split]
    num_records = sum(f["num_records"] for f in info["files"]) or 1
    record_bytes = sum(f["bytes"] for f in info["files"]) / num_records
    host_cast = cfg.cast == "host"

    interleave_par = _par(cfg.interleave_parallelism)
    ds = tf.data.Dataset.from_tensor_slices(files)
    if split == "train":
        ds = ds.shuffle(len(files), seed=cfg.seed, reshuffle_each_iteration=True).repeat()
    ds = ds.interleave(
        lambda path: open_records(
            path,
            compression=manifest.compression,
            buffer_bytes=cfg.reader_buffer_kb * 1024,
            open_latency_ms=cfg.storage_latency_ms,
            bandwidth_mbps=cfg.storage_bandwidth_mbps,
            record_bytes=record_bytes,
        ),
        cycle_length=cfg.cycle_length,
        block_length=cfg.block_length,
        num_parallel_calls=interleave_par,
        # Only a parallel interleave takes it (TF warns otherwise); a sequential one is in order.
        deterministic=None if interleave_par is None else split != "train",
    )
    par = _par(cfg.map_parallelism)
    if manifest.format == "prebatched":
        per_batch = cfg.batch_size // manifest.rows_per_record
        spec = feature_spec(schema, "prebatched", manifest.rows_per_record)
        ds = ds.batch(per_batch, drop_remainder=True)
        ds = ds.map(
            lambda s: _to_model_inputs(_flatten_records(tf.io.parse_example(s, spec)), host_cast),
            num_parallel_calls=par,
        )
    elif cfg.parse == "per_example":
        # What a typical user writes: parse each serialized example alone, then batch.
        ds = ds.map(lambda s: parse_single(s, schema), num_parallel_calls=par)
        ds = ds.batch(cfg.batch_size, drop_remainder=True)
        ds = ds.map(lambda f: _to_model_inputs(f, host_cast), num_parallel_calls=par)
    else:
        spec = feature_spec(schema, "example", 1)
        ds = ds.batch(cfg.batch_size, drop_remainder=True)
        ds = ds.map(
            lambda s: _to_model_inputs(_flatten_records(tf.io.parse_example(s, spec)), host_cast),
            num_parallel_calls=par,
        )
    if cfg.prefetch != 0:
        ds = ds.prefetch(_par(cfg.prefetch))
    options = tf.data.Options()
    # TF 2.21's default rewrites would make a pipeline written without parallelism read ahead
    # anyway: map_parallelization runs a stateless map as ParallelMapV2, and inject_prefetch
    # appends a Prefetch after a trailing synchronous stage. Either one reads the next batch
    # while the model computes, which hid the `low_parallelism` preset's wait on a slow machine
    # (docs/trace-signals.md, "The profiler's own cost"). Sequential and no prefetch mean that.
    if cfg.map_parallelism == SEQUENTIAL:
        options.experimental_optimization.map_parallelization = False
    if cfg.prefetch == 0:
        options.experimental_optimization.inject_prefetch = False
    if cfg.threadpool > 0:
        options.threading.private_threadpool_size = cfg.threadpool
    return ds.with_options(options)


def host_casting_layer(features: dict[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Seed 000's casting layer: runs eagerly on the Python thread between steps, creating new
    tensors for every feature (the convert_to_tensor / Cast gaps between steps in the trace)."""
    dense = [tf.cast(tf.convert_to_tensor(features[k]), tf.float32) for k in DENSE_NAMES]
    ids = [tf.cast(tf.convert_to_tensor(features[k]), tf.int32) for k in CAT_NAMES]
    label = tf.cast(tf.convert_to_tensor(features[LABEL_NAME]), tf.float32)
    return tf.stack(dense, axis=1), tf.stack(ids, axis=1), label
