"""Batches of 256 Criteo-like rows (26 hashed ids, 38 numbers) for the Keras PyDataset jobs:
built one example at a time in Python, as record-by-record loaders do (`foreign_jobs.py
pydataset*`, the baseline of `bench/pydataset_fixes.py`), or with whole-array NumPy (that
bench's remedy). NumPy only, so both a job and a bench import it."""

from __future__ import annotations

import numpy as np


def _label(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return x, (x[:, 0] > 0.2).astype("float32")


def _hashed(ids: np.ndarray) -> np.ndarray:
    return np.log1p((ids * 0x9E3779B1 + 7) % (1 << 31)).astype("float32") / 100


def rows_in_a_loop(i: int) -> tuple[np.ndarray, np.ndarray]:
    """Batch `i`, one example at a time (4 ms on 2026-11-24's machine, 7-10 ms on 2026-11-28's)."""
    r = np.random.default_rng(i)
    rows = []
    for _ in range(256):
        ids = r.integers(0, 1 << 40, size=26)
        hashed = _hashed(ids)
        rows.append(np.concatenate([hashed, r.normal(size=38).astype("float32")]))
    return _label(np.stack(rows))


def rows_vectorized(i: int) -> tuple[np.ndarray, np.ndarray]:
    """Batch `i`'s kind of rows, built with whole-array NumPy."""
    r = np.random.default_rng(i)
    ids = r.integers(0, 1 << 40, size=(256, 26))
    hashed = _hashed(ids)
    return _label(np.concatenate([hashed, r.normal(size=(256, 38)).astype("float32")], axis=1))
