"""Exact medians of large integer columns without sorting a copy of them.

`np.median` partitions a copy of its input: 35 MB for the 4.3M host-op durations of a 5M-event
trace, which was the largest transient of a detector's run (bench/analyzer_speed.py). Here the
k-th value is found by counting instead: a histogram of up to 2**16 buckets over the values'
range, block by block, narrows the range to the bucket holding rank k, until it holds a single
value or few enough values to partition.
"""

from __future__ import annotations

import numpy as np

from analyzers.events import CHUNK, chunks

_BITS = 16  # histogram buckets per pass: 2**16 counts, 512 KB


def median(values: np.ndarray) -> float:
    """Same as float(np.median(values)) (nan when empty), for any array; integer arrays of
    non-negative values (durations, sizes) beyond a few blocks are counted, not copied."""
    n = len(values)
    if n <= 4 * CHUNK or values.dtype.kind not in "iu" or values.min() < 0:
        return float(np.median(values)) if n else float("nan")
    # Both middle ranks (one when n is odd) in one descent: they nearly always share a bucket.
    a, b = _ranks(values, [(n - 1) // 2, n // 2], int(values.min()), int(values.max()))
    # As np.median rounds: each middle value to a float, then their mean.
    return (float(a) + float(b)) / 2


def _ranks(values: np.ndarray, ks: list[int], lo: int, hi: int) -> list[int]:
    """The ks-th smallest values (0-based, ascending) of those in [lo, hi], ks counted within
    them."""
    while lo < hi:
        shift = max((hi - lo).bit_length() - _BITS, 0)
        counts = np.zeros(((hi - lo) >> shift) + 1, dtype=np.int64)
        for block in chunks(len(values)):
            v = values[block]
            v = v[(v >= lo) & (v <= hi)]
            counts += np.bincount((v - lo) >> shift, minlength=len(counts))
        cum = np.cumsum(counts)
        buckets = np.searchsorted(cum, ks, side="right")  # the bucket holding each rank
        if buckets[0] != buckets[-1]:  # a rank on each side of a bucket edge: one at a time
            return [r for k in ks for r in _ranks(values, [k], lo, hi)]
        j = int(buckets[0])
        ks = [k - (int(cum[j - 1]) if j else 0) for k in ks]
        lo, hi = lo + (j << shift), min(lo + ((j + 1) << shift) - 1, hi)
        if counts[j] <= CHUNK:  # few left: gather and partition them
            inside = np.concatenate([v[(v >= lo) & (v <= hi)] for v in (values[b] for b in
                                                                      chunks(len(values)))])
            part = np.partition(inside, ks)
            return [int(part[k]) for k in ks]
    return [lo] * len(ks)
