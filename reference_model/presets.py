"""Named configurations: `clean` (best practice), one preset per seed anti-pattern that differs from
`clean` only in that anti-pattern (and `capped_pools`, one not from the seeds), and `default`, the
seed 000 starting job with all of the seeds' ones.

The expected finding id (shared/ARCHITECTURE.md) of each preset is what the analyzers are judged on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_model.config import TrainConfig


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    changes: dict[str, Any] = field(default_factory=dict)
    expected_findings: tuple[str, ...] = ()

    def config(self) -> TrainConfig:
        return TrainConfig().replace(**self.changes)


_ALL = [
    Preset("clean", "best practice: prebatched uncompressed records on good network storage "
           "(5 ms open, 150 MB/s per stream) read by 4 parallel readers, prefetch, fused tables, "
           "XLA, 2 devices"),
    # Storage slow enough to bind by a margin on any 2-core machine, under the profiler too: at
    # 500 ms and 60 MB/s a batch took ~110 ms to read, and a CI machine at half the compute speed,
    # whose profiled steps took ~1.5x its untraced ones, computed as long, so the window showed
    # no wait. Now ~280 ms a batch (docs/trace-signals.md, "The profiler's own cost").
    Preset("io_stall", "cold remote storage: 1 s per file open, 20 MB/s per reader",
           {"storage_latency_ms": 1000.0, "storage_bandwidth_mbps": 20.0}, ("io_stall",)),
    Preset("gzip", "GZIP-compressed TFRecords", {"compression": "gzip"}, ("input_preprocessing",)),
    Preset("casting", "float64 features cast by a host-side casting layer every step",
           {"cast": "host"}, ("convert_to_tensor_gaps",)),
    # Sequential stages (no num_parallel_calls), not parallelism 1: a parallel stage with one
    # worker still reads the next batch while the model computes, and on a machine at half the
    # compute speed, under the profiler, that was enough to hide the wait (docs/trace-signals.md,
    # "The profiler's own cost").
    Preset("low_parallelism", "a sequential input pipeline: one reader, interleave and map "
           "without num_parallel_calls, no prefetch",
           {"cycle_length": 1, "interleave_parallelism": 0, "map_parallelism": 0, "prefetch": 0},
           ("input_preprocessing",)),
    Preset("per_example", "one tf.train.Example per record, parsed one at a time",
           {"record_format": "example", "parse": "per_example"}, ("input_preprocessing",)),
    Preset("serial_h2d", "per-device input copies issued one after another from Python",
           {"input_copy": "serial"}, ("serialized_h2d",)),
    Preset("too_many_devices", "8 devices for a small model: all-to-all and all-reduce dominate",
           {"devices": 8}, ("collective_overhead",)),
    Preset("small_ops_no_xla", "no XLA and one embedding table per feature: many tiny ops",
           {"xla": False, "fused_tables": False}, ("kernel_launch_overhead",)),
    Preset("string_hashing", "raw categorical ids hashed in the step through strings "
           "(AsString + StringToHashBucketFast, as Keras' Hashing layer does to integers)",
           {"id_hashing": "string"}, ("preprocessing_in_step",)),
    Preset("per_device_input", "one input pipeline per device, each reading and parsing the "
           "whole global batch (what one process per device does without seed 001's "
           "broadcasting dataloader)",
           {"input_loading": "per_device"}, ("duplicated_input",)),
    # One reader per shard (16): with 32, two interleave slots read each file side by side at
    # first, the second from the pages the first had just fetched, and a window early in the
    # run saw half the device reads and 0.5 threads in D (docs/trace-signals.md).
    Preset("dstate_io", "16 parallel readers, one per shard, doing 4 KB reads of cold files "
           "(evicted from the page cache, readahead off)",
           {"evict_page_cache": True, "cycle_length": 16, "interleave_parallelism": 16,
            "threadpool": 48, "reader_buffer_kb": 4}, ("dstate_threads",)),
    # Seed 000: "increase the batch size to reduce the # of calls between the host and devices".
    # At 128 a step computes ~4 ms and the call's fixed host cost (the Python loop, argument
    # handling, dispatch: ~0.6 ms) is 13-15% of it; records of 128 rows, as prebatched data
    # for that batch would be written.
    Preset("small_batches", "batches of 128: each step's fixed host cost around the call "
           "(Python loop, dispatch) is a large share of a ~4 ms step",
           {"batch_size": 128, "rows_per_record": 128}, ("per_step_overhead",)),
    # Not from the seeds: the CPU-host counterpart of an idle accelerator, common where a job
    # sets its pools for determinism or inherits TF_NUM_INTRAOP_THREADS=1.
    Preset("capped_pools", "TF's intra- and inter-op thread pools set to one thread each",
           {"intra_op_threads": 1, "inter_op_threads": 1}, ("idle_cores",)),
    Preset("default", "seed 000's starting job: per-example GZIP records, parallelism 1, no "
           "prefetch, float64 + casting layer, serial per-device copies, 4 devices, no XLA, "
           "unfused tables",
           {"record_format": "example", "parse": "per_example", "compression": "gzip",
            "cycle_length": 1, "interleave_parallelism": 1, "prefetch": 0,
            "cast": "host", "input_copy": "serial", "devices": 4, "xla": False,
            "fused_tables": False},
           ("input_preprocessing", "convert_to_tensor_gaps", "serialized_h2d")),
]
PRESETS: dict[str, Preset] = {p.name: p for p in _ALL}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose from: {', '.join(PRESETS)}") from None
