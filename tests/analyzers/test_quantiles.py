"""The counting median against np.median: every rank, ties, ranges wide and narrow."""

from __future__ import annotations

import numpy as np
import pytest

from analyzers import quantiles
from analyzers.quantiles import median


@pytest.mark.parametrize("seed", range(6))
def test_same_as_numpy_on_large_arrays(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4 * quantiles.CHUNK + 1, 12 * quantiles.CHUNK))
    cases = [
        rng.integers(0, 10**12, n),  # wide: several narrowing passes
        rng.integers(0, 50, n),  # few distinct values, heavy ties
        np.full(n, 7),  # one value
        (rng.lognormal(8, 2, n)).astype(np.int64),  # skewed, like op durations
        np.concatenate([np.zeros(n // 2, np.int64), np.full(n - n // 2, 2**40)]),  # two far
    ]
    for x in cases:
        for arr in (x, x[: n - 1]):  # odd and even lengths
            assert median(arr) == float(np.median(arr))


def test_counting_never_copies_the_whole_array(monkeypatch):
    """What it is for: no np.median/np.partition over the full input."""
    x = np.random.default_rng(1).integers(0, 10**9, 8 * quantiles.CHUNK)
    expected = float(np.median(x))
    sizes: list[int] = []
    real = np.partition
    monkeypatch.setattr(np, "partition", lambda a, k: sizes.append(len(a)) or real(a, k))
    monkeypatch.setattr(np, "median", lambda *a, **k: pytest.fail("np.median over it all"))
    assert median(x) == expected
    assert sizes and max(sizes) <= quantiles.CHUNK


def test_small_negative_float_and_empty_inputs_fall_back_to_numpy():
    assert median(np.array([3, 1, 2])) == 2.0
    assert median(np.array([-5, 1] * (4 * quantiles.CHUNK))) == -2.0
    assert median(np.array([0.5, 1.5] * (4 * quantiles.CHUNK))) == 1.0
    assert np.isnan(median(np.array([], dtype=np.int64)))
