"""Write generated or converted examples as sharded TFRecord files plus manifest.json."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from reference_model.data.manifest import Manifest
from reference_model.data.records import (
    COMPRESSIONS,
    FORMATS,
    serialize_examples,
    serialize_prebatched,
)
from reference_model.schema import Schema

_CHUNK = 16_384  # examples serialized at a time: bounds memory for per-example records


def _shard_name(split: str, i: int, n: int, compression: str) -> str:
    return f"{split}-{i:05d}-of-{n:05d}.tfrecord" + (".gz" if compression == "gzip" else "")


def write_split(
    out_dir: Path,
    columns: dict[str, np.ndarray],
    *,
    split: str,
    fmt: str,
    rows_per_record: int,
    compression: str,
    num_shards: int,
    progress: bool = False,
) -> dict:
    """Write one split; returns its manifest entry. Prebatched drops the last partial record."""
    import tensorflow as tf
    from tqdm import tqdm

    n = len(columns["label"])
    rows = rows_per_record if fmt == "prebatched" else 1
    num_records = n // rows
    if num_records == 0:
        raise ValueError(f"{split} split: {n} examples make no record of {rows} rows")
    num_shards = max(1, min(num_shards, num_records))
    bounds = np.linspace(0, num_records, num_shards + 1).astype(int)
    options = tf.io.TFRecordOptions(compression_type="GZIP" if compression == "gzip" else "")
    files = []
    with tqdm(total=num_records * rows, desc=f"writing {split}", unit="ex",
              disable=None if progress else True,
              leave=False) as bar:
        for i in range(num_shards):
            name = _shard_name(split, i, num_shards, compression)
            r0, r1 = int(bounds[i]), int(bounds[i + 1])
            with tf.io.TFRecordWriter(str(out_dir / name), options) as w:
                if fmt == "prebatched":
                    for r in range(r0, r1):
                        w.write(serialize_prebatched(columns, r * rows, rows))
                        bar.update(rows)
                else:
                    for s in range(r0, r1, _CHUNK):
                        for rec in serialize_examples(columns, s, min(r1, s + _CHUNK)):
                            w.write(rec)
                        bar.update(min(r1, s + _CHUNK) - s)
            files.append({
                "name": name,
                "num_records": r1 - r0,
                "num_examples": (r1 - r0) * rows,
                "bytes": os.path.getsize(out_dir / name),
            })
    return {"num_examples": num_records * rows, "files": files}


def write_dataset(
    out_dir: Path,
    splits: dict[str, dict[str, np.ndarray]],
    schema: Schema,
    *,
    fmt: str,
    rows_per_record: int,
    compression: str,
    num_shards: int,
    generator: dict,
    progress: bool = False,
) -> Manifest:
    if fmt not in FORMATS:
        raise ValueError(f"unknown record format {fmt!r}")
    if compression not in COMPRESSIONS:
        raise ValueError(f"unknown compression {compression!r}")
    if rows_per_record < 1:
        raise ValueError("--rows-per-record must be >= 1")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(
        schema=schema,
        format=fmt,
        compression=compression,
        rows_per_record=rows_per_record if fmt == "prebatched" else 1,
        generator=generator,
    )
    for split, columns in splits.items():
        shards = num_shards if split == "train" else max(1, num_shards // 4)
        manifest.splits[split] = write_split(
            out_dir, columns, split=split, fmt=fmt, rows_per_record=rows_per_record,
            compression=compression, num_shards=shards, progress=progress,
        )
    manifest.save(out_dir)
    return manifest
