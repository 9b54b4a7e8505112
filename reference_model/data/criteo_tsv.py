"""Read the public Criteo click logs (TSV: label, 13 integer counts, 26 hex ids; any may be empty)
into the same columns the synthetic generator makes, so every downstream tool treats them alike."""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from reference_model.schema import NUM_CAT, NUM_DENSE, Schema

_CHUNK = 200_000


def _hash_ids(values: pd.Series, cardinality: int) -> np.ndarray:
    """Hex id -> bucket in [0, cardinality); empty -> 0. crc32 is stable across runs and
    machines (Python's hash() is salted per process)."""
    out = np.zeros(len(values), dtype=np.int64)
    present = values.notna().to_numpy()
    if present.any():
        hashed = [zlib.crc32(v.encode()) for v in values[present].astype(str)]
        out[present] = 1 + np.asarray(hashed, dtype=np.int64) % max(cardinality - 1, 1)
    return out


def read_chunks(paths: Sequence[Path], schema: Schema, chunk_rows: int = _CHUNK) -> Iterator[dict]:
    for path in paths:
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"Criteo TSV file not found: {path}")
        try:
            reader = pd.read_csv(path, sep="\t", header=None, dtype=str, chunksize=chunk_rows,
                                 keep_default_na=False, na_values=[""])
            for df in reader:
                if df.shape[1] != 1 + NUM_DENSE + NUM_CAT:
                    raise ValueError(
                        f"{path}: expected {1 + NUM_DENSE + NUM_CAT} tab-separated columns "
                        f"(label, 13 counts, 26 ids), found {df.shape[1]}"
                    )
                yield _convert(df, schema, path)
        except (pd.errors.ParserError, UnicodeDecodeError) as e:
            raise ValueError(f"{path} is not a Criteo TSV file: {e}") from None


def _convert(df: pd.DataFrame, schema: Schema, path: Path) -> dict:
    try:
        label = pd.to_numeric(df[0]).to_numpy(np.float32)
        dense = df.iloc[:, 1 : 1 + NUM_DENSE].apply(pd.to_numeric).fillna(0).to_numpy(np.float64)
    except ValueError as e:
        raise ValueError(f"{path}: non-numeric label or count: {e}") from None
    if not np.isin(label, (0.0, 1.0)).all():
        raise ValueError(f"{path}: labels must be 0 or 1")
    cat = np.stack(
        [_hash_ids(df[1 + NUM_DENSE + j], c) for j, c in enumerate(schema.cardinalities)], axis=1
    )
    cols = {"label": label, "dense": np.clip(dense, 0, None).astype(np.float32), "cat": cat}
    if schema.payload_bytes:
        cols["payload"] = np.zeros((len(label), schema.payload_bytes), np.uint8)
    return cols


def read_criteo_tsv(paths: Sequence[Path], schema: Schema, limit: int | None = None) -> dict:
    chunks, n = [], 0
    for chunk in read_chunks(paths, schema):
        chunks.append(chunk)
        n += len(chunk["label"])
        if limit is not None and n >= limit:
            break
    if not chunks:
        raise ValueError("the Criteo TSV input holds no rows")
    cols = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
    return {k: v[:limit] for k, v in cols.items()} if limit is not None else cols
