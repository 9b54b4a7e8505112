"""Cached dataset variants: the trainer asks for (format, compression, rows, size, seed) and gets a
directory, generated once and reused by every later run and tuning trial."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

from reference_model.data.manifest import MANIFEST, Manifest
from reference_model.data.synthetic import generate
from reference_model.data.writer import write_dataset
from reference_model.schema import Schema

EVAL_SEED_OFFSET = 1_000_003  # eval examples come from a different stream than train


def variant_key(**params) -> str:
    blob = json.dumps(params, sort_keys=True, default=list).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def generate_dataset(
    out_dir: Path,
    *,
    schema: Schema,
    fmt: str,
    rows_per_record: int,
    compression: str,
    num_examples: int,
    eval_examples: int,
    num_shards: int,
    seed: int,
    zipf_a: float = 1.2,
    progress: bool = False,
) -> Manifest:
    splits = {"train": generate(schema, num_examples, seed, zipf_a=zipf_a)}
    if eval_examples:
        splits["eval"] = generate(schema, eval_examples, seed + EVAL_SEED_OFFSET, zipf_a=zipf_a)
    return write_dataset(
        out_dir, splits, schema, fmt=fmt, rows_per_record=rows_per_record,
        compression=compression, num_shards=num_shards,
        generator={"source": "synthetic", "seed": seed, "zipf_a": zipf_a}, progress=progress,
    )


def ensure_dataset(
    cache_root: Path,
    *,
    schema: Schema,
    fmt: str,
    rows_per_record: int,
    compression: str,
    num_examples: int,
    eval_examples: int,
    num_shards: int,
    seed: int,
    progress: bool = True,
) -> Path:
    params = dict(schema=schema.to_dict(), fmt=fmt, rows=rows_per_record, compression=compression,
                  n=num_examples, eval=eval_examples, shards=num_shards, seed=seed)
    cache_root = Path(cache_root)
    path = cache_root / f"{fmt}-{compression}-{variant_key(**params)}"
    if (path / MANIFEST).exists():
        return path
    cache_root.mkdir(parents=True, exist_ok=True)
    # Build aside and rename: a killed run never leaves a half-written variant behind.
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=cache_root))
    try:
        generate_dataset(tmp, schema=schema, fmt=fmt, rows_per_record=rows_per_record,
                         compression=compression, num_examples=num_examples,
                         eval_examples=eval_examples, num_shards=num_shards, seed=seed,
                         progress=progress)
        try:
            tmp.rename(path)
        except OSError:
            if not (path / MANIFEST).exists():  # lost a race with another process: theirs wins
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path
