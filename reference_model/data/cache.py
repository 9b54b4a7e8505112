"""Cached dataset variants: the trainer asks for (format, compression, rows, size, seed) and gets a
directory, generated once and reused by every later run and tuning trial."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from reference_model.data.manifest import MANIFEST, Manifest
from reference_model.data.synthetic import generate
from reference_model.data.writer import write_dataset
from reference_model.schema import Schema

EVAL_SEED_OFFSET = 1_000_003  # eval examples come from a different stream than train


@dataclass(frozen=True)
class DatasetSpec:
    """What to generate: one cached variant per distinct spec."""

    schema: Schema
    fmt: str
    rows_per_record: int
    compression: str
    num_examples: int
    eval_examples: int
    num_shards: int
    seed: int
    zipf_a: float = 1.2

    def key(self) -> str:
        blob = json.dumps({**asdict(self), "schema": self.schema.to_dict()}, sort_keys=True)
        return f"{self.fmt}-{self.compression}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def generate_dataset(out_dir: Path, spec: DatasetSpec, *, progress: bool = False) -> Manifest:
    splits = {"train": generate(spec.schema, spec.num_examples, spec.seed, zipf_a=spec.zipf_a)}
    if spec.eval_examples:
        eval_seed = spec.seed + EVAL_SEED_OFFSET
        splits["eval"] = generate(spec.schema, spec.eval_examples, eval_seed, zipf_a=spec.zipf_a)
    return write_dataset(
        out_dir, splits, spec.schema, fmt=spec.fmt, rows_per_record=spec.rows_per_record,
        compression=spec.compression, num_shards=spec.num_shards,
        generator={"source": "synthetic", "seed": spec.seed, "zipf_a": spec.zipf_a},
        progress=progress,
    )


def ensure_dataset(cache_root: Path, spec: DatasetSpec, *, progress: bool = True) -> Path:
    cache_root = Path(cache_root)
    path = cache_root / spec.key()
    if (path / MANIFEST).exists():
        return path
    cache_root.mkdir(parents=True, exist_ok=True)
    # Build aside and rename: a killed run never leaves a half-written variant behind.
    tmp = Path(tempfile.mkdtemp(prefix=".building-", dir=cache_root))
    try:
        generate_dataset(tmp, spec, progress=progress)
        try:
            tmp.rename(path)
        except OSError:
            if not (path / MANIFEST).exists():  # lost a race with another process: theirs wins
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path
