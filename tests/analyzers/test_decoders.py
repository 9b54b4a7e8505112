"""The protobuf decoder (small files) and the compiled one (large files) give the same table."""

from __future__ import annotations

import glob
import random

import pandas as pd
import pytest

from analyzers.ingest.xplane import read_xplane
from tests.analyzers.test_ingest import _random_builder
from tests.analyzers.traces import gpu_trace, host_trace


def _both(path):
    small = read_xplane(path, "h", decoder="small")
    compiled = read_xplane(path, "h", decoder="compiled")
    assert small.t0_unix_ns == compiled.t0_unix_ns
    pd.testing.assert_frame_equal(small.events, compiled.events)
    return small


def test_same_table_on_random_traces(tmp_path):
    rng = random.Random(7)
    for i in range(40):
        data = _random_builder(rng).to_bytes()
        if not data:  # an empty space: "empty file" for both, tested in test_ingest
            continue
        path = tmp_path / f"{i}.xplane.pb"
        path.write_bytes(data)
        _both(path)


def test_same_table_on_cpu_and_gpu_traces(tmp_path):
    _, run = host_trace(tmp_path / "h", wait_ms=30, parse_ops=20)
    assert len(_both(next(run.glob("*.xplane.pb"))).events) > 100
    run = gpu_trace(tmp_path / "g", h2d_ms=2, nccl_ms=5, pingpong_ms=3)
    assert (_both(next(run.glob("*.xplane.pb"))).events["memcpy_details"].notna()).any()


@pytest.mark.parametrize("preset", ["clean", "default"])
def test_same_table_on_real_tf_traces(preset):
    files = glob.glob(f"/tmp/pl/{preset}/plugins/profile/*/*.xplane.pb")
    if not files:
        pytest.skip("no recorded TF trace on this machine")
    _both(files[0])


def test_truncated_small_file_is_a_value_error(tmp_path):
    _, run = host_trace(tmp_path)
    data = next(run.glob("*.xplane.pb")).read_bytes()
    bad = tmp_path / "bad.xplane.pb"
    bad.write_bytes(data[: len(data) - 7])
    with pytest.raises(ValueError, match="bad.xplane.pb"):
        read_xplane(bad, "h", decoder="small")


def test_both_decoders_agree_on_every_cut_of_a_file(tmp_path):
    """A cut is either a valid shorter file (at a plane boundary) for both, or an error for
    both: never a crash, never a different table."""
    _, run = host_trace(tmp_path, steps=2)
    data = next(run.glob("*.xplane.pb")).read_bytes()
    cut = tmp_path / "cut.xplane.pb"
    for n in range(1, len(data), max(1, len(data) // 300)):
        cut.write_bytes(data[:n])
        outcomes = []
        for decoder in ("small", "compiled"):
            try:
                outcomes.append(len(read_xplane(cut, "h", decoder=decoder).events))
            except ValueError as e:
                assert "\n" not in str(e)
                outcomes.append("error")
        assert outcomes[0] == outcomes[1], (n, outcomes)
