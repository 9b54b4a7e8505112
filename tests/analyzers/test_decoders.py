"""The protobuf decoder (small files) and the compiled one (large files) give the same table."""

from __future__ import annotations

import functools
import gc
import glob
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzers.ingest import xplane
from analyzers.ingest.xplane import read_xplane
from tests.analyzers.test_ingest import RECORDED, _random_builder, recorded_bytes
from tests.analyzers.traces import gpu_trace, host_trace

ROOT = Path(__file__).resolve().parents[2]


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


@pytest.mark.parametrize("recorded", RECORDED, ids=lambda p: p.name.split(".")[0])
def test_same_table_on_real_tf_traces(tmp_path, recorded):
    path = tmp_path / "vm.xplane.pb"
    path.write_bytes(recorded_bytes(recorded))
    assert len(_both(path).events) > 1000


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


def test_view_in_a_cycle_is_collected_and_a_kept_view_is_an_error(tmp_path, monkeypatch):
    _, run = host_trace(tmp_path, steps=2)
    path = next(run.glob("*.xplane.pb"))
    real = xplane._decode_unchecked
    kept: list = []

    def in_a_cycle(data, small):
        cycle: list = [np.frombuffer(data, dtype=np.uint8)]
        cycle.append(cycle)
        return real(data, small)

    def kept_for_good(data, small):
        kept.append(np.frombuffer(data, dtype=np.uint8))
        return real(data, small)

    gc.disable()
    try:
        monkeypatch.setattr(xplane, "_decode_unchecked", in_a_cycle)
        assert len(read_xplane(path, "h", decoder="compiled").events) > 0
        monkeypatch.setattr(xplane, "_decode_unchecked", kept_for_good)
        with pytest.raises(RuntimeError, match="outlived decoding"):
            read_xplane(path, "h", decoder="compiled")
    finally:
        gc.enable()
        kept.clear()


def _decoded_equal(a, b):
    for name in ("lines_i", "lines_s", "ev_line", "ev_mid", "ev_off", "ev_dur", "stats_i",
                 "stats_d"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


def test_chunked_decoding_fills_the_same_arrays_and_gives_back_every_line(tmp_path):
    """Lines decoded a chunk at a time (down to one line per chunk, on one thread or several)
    give the arrays a single chunk gives; each pass hands every line's bytes to `release`."""
    from analyzers.ingest.xplane_decode import decode_events, decode_layout

    rng = random.Random(11)
    files = [_random_builder(rng).to_bytes() for _ in range(15)]
    _, run = host_trace(tmp_path / "h", steps=3)
    files.append(next(run.glob("*.xplane.pb")).read_bytes())
    files += [Path(p).read_bytes() for p in glob.glob("/tmp/pl/default/plugins/profile/*/*.pb")]
    checked = 0
    for data in files:
        if not data:
            continue
        buf = np.frombuffer(data, dtype=np.uint8)
        layout = decode_layout(buf)
        want = np.tile(np.arange(64, dtype=np.int64), (max(len(layout.plane_rest), 1), 1))
        whole = decode_events(buf, want, layout.spans, chunk_bytes=1 << 40)
        released: list[tuple[int, int]] = []
        chunked = decode_events(buf, want, layout.spans,
                                lambda a, b, out=released: out.append((a, b)), chunk_bytes=1)
        _decoded_equal(whole, chunked)
        # One chunk per line, counted then filled: every line given back once per pass (in any
        # order: chunks are decoded on several threads).
        lines = [(int(s), int(e)) for _, s, e in layout.spans]
        assert sorted(released) == sorted(lines * 2)
        one_thread = decode_events(buf, want, layout.spans, chunk_bytes=1, workers=1)
        _decoded_equal(whole, one_thread)
        n = len(lines)
        checked += n > 1
    assert checked >= 5


def test_large_file_read_in_small_chunks_gives_the_same_table(tmp_path, monkeypatch):
    """The mapped path with pages given back after every line: the table does not change
    (line names and text stats are read after their pages were dropped)."""
    from analyzers.ingest import xplane_decode

    run = gpu_trace(tmp_path / "g", h2d_ms=2, nccl_ms=5, pingpong_ms=3)
    path = next(run.glob("*.xplane.pb"))
    small = read_xplane(path, "h", decoder="small")
    monkeypatch.setattr(xplane_decode, "decode_events",
                        functools.partial(xplane_decode.decode_events, chunk_bytes=1))
    compiled = read_xplane(path, "h", decoder="compiled")
    pd.testing.assert_frame_equal(small.events, compiled.events)
    assert compiled.events["memcpy_details"].notna().any()


def test_the_compiled_walker_is_built():
    """It is an optional extension (the package installs without a compiler), so a failed build
    would only show as slowness: here it fails."""
    assert xplane.compiled_decoder_built()


def test_walker_rejects_arrays_it_could_overrun(tmp_path):
    """The C walker trusts the spans and sizes it is given only after checking them: a caller's
    mistake is a ValueError, never a write outside an array."""
    from analyzers.ingest import _xplane_wire as wire
    from analyzers.ingest.xplane_decode import decode_layout

    _, run = host_trace(tmp_path, steps=2)
    buf = np.frombuffer(next(run.glob("*.xplane.pb")).read_bytes(), dtype=np.uint8)
    spans = decode_layout(buf).spans
    want = np.zeros((8, 4), dtype=np.int64)
    z1, z2 = np.zeros(0, np.int64), np.zeros((0, 4), np.int64)
    counts = np.zeros(4, np.int64)
    n_lines, no_stats = len(spans), np.zeros((0, 5), np.int64)

    def walk(spans=spans, first=0, last=n_lines, fill=True, width=4, counts=counts, ev=z1,
             st=no_stats):
        wire.walk_lines(buf, spans, first, last, fill, want, width, counts, z2, z2,
                        np.zeros(len(ev), np.int32), ev, ev, ev, st, np.zeros(len(st)))

    outside = spans.copy()
    outside[0, 2] = len(buf) + 1
    with pytest.raises(ValueError, match="outside buf"):
        walk(spans=outside)
    with pytest.raises(ValueError, match="out of range"):
        walk(last=len(spans) + 1)
    with pytest.raises(ValueError, match="out of range"):
        walk(width=3)  # want's 32 items are not rows of 3
    with pytest.raises(ValueError, match="counts"):
        walk(counts=np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="ev_mid"):
        walk(ev=np.zeros(1, np.int32))  # 4-byte items where 8-byte ones are written
    with pytest.raises((ValueError, BufferError), match="writable|read-only"):
        wire.walk_rest(buf, True, np.zeros(5, np.int64), buf, buf, buf)  # a read-only output
    # Arrays too small for what the file holds: an error code, not an overrun.
    walk()
    assert counts[2] == 6


def test_without_the_walker_large_files_decode_with_protobuf_and_say_so(tmp_path, monkeypatch):
    from analyzers.ingest import logdir

    run = gpu_trace(tmp_path / "g", h2d_ms=2, nccl_ms=5, pingpong_ms=3)
    expected = logdir.load_run(tmp_path / "g")
    assert logdir.SLOW_DECODER_WARNING not in expected.warnings
    monkeypatch.setattr(logdir, "compiled_decoder_built", lambda: False)
    monkeypatch.setattr(xplane, "compiled_decoder_built", lambda: False)
    monkeypatch.setattr(logdir, "SLOW_DECODER_BYTES", 0)
    used: list[bool] = []
    real = xplane._decode_unchecked
    monkeypatch.setattr(xplane, "_decode_unchecked",
                        lambda data, small: used.append(small) or real(data, small))
    slow = logdir.load_run(tmp_path / "g")
    assert used and all(used)
    assert slow.warnings.count(logdir.SLOW_DECODER_WARNING) == 1
    pd.testing.assert_frame_equal(slow.events, expected.events)
    assert run.exists()


_FUZZ = r"""
import json, random, sys
from pathlib import Path
import pandas as pd
from analyzers.ingest.xplane import read_xplane
from tests.analyzers.test_ingest import RECORDED, _random_builder, recorded_bytes

rng = random.Random(int(sys.argv[1]))
seeds = [s for s in (_random_builder(rng).to_bytes() for _ in range(25)) if s]
seeds.append(Path(sys.argv[2]).read_bytes())
path = Path(sys.argv[3])
counts = {"same": 0, "both_fail": 0, "only_walker_reads": 0}
for _ in range(int(sys.argv[4])):
    data = bytearray(rng.choice(seeds))
    for _ in range(rng.randint(1, 8)):
        if not data:
            break
        i, op = rng.randrange(len(data)), rng.random()
        if op < 0.5:
            data[i] = rng.randrange(256)
        elif op < 0.7:
            data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 5)))
        elif op < 0.85:
            del data[i:i + rng.randint(1, 20)]
        else:
            data[i:i] = b"\xff" * rng.randint(1, 11)  # over-long varints
    if not data:
        continue
    path.write_bytes(bytes(data))
    out = []
    for decoder in ("small", "compiled"):
        try:
            out.append(read_xplane(path, "h", decoder=decoder))
        except ValueError as e:
            assert "\n" not in str(e), str(e)
            out.append(None)
    small, walker = out
    if small is not None:
        assert walker is not None, "protobuf read a file the walker rejects"
        pd.testing.assert_frame_equal(small.events, walker.events)
        counts["same"] += 1
    else:
        counts["both_fail" if walker is None else "only_walker_reads"] += 1
print(json.dumps(counts))
"""


def test_mutated_files_never_crash_the_walker(tmp_path):
    """Random byte flips, insertions, deletions and over-long varints in valid files, decoded in a
    child process so that a crash in the C walker fails this test instead of killing pytest.
    Wherever protobuf reads a mutated file the walker reads the same table. The walker may read
    files protobuf rejects: it skips unwanted stats by their length without looking inside, and
    does not check that names are UTF-8 (docs/trace-signals.md)."""
    _, run = host_trace(tmp_path / "h", steps=2)
    seed = next(run.glob("*.xplane.pb"))
    done = subprocess.run([sys.executable, "-c", _FUZZ, "3", str(seed), str(tmp_path / "f.pb"),
                           "400"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    # Both paths taken: mutations protobuf still reads (compared) and ones it rejects.
    assert counts["same"] >= 5 and counts["both_fail"] >= 100, counts


def test_walker_rejects_wrong_dtypes_misaligned_arrays_and_negative_rows(tmp_path):
    from analyzers.ingest import _xplane_wire as wire
    from analyzers.ingest.xplane_decode import decode_layout

    _, run = host_trace(tmp_path, steps=2)
    buf = np.frombuffer(next(run.glob("*.xplane.pb")).read_bytes(), dtype=np.uint8)
    spans = decode_layout(buf).spans
    want = np.zeros((8, 4), dtype=np.int64)
    z2 = np.zeros((0, 4), np.int64)

    def walk(counts=None, ev_mid=None, spans=spans):
        ev = np.zeros(4, np.int64)
        wire.walk_lines(buf, spans, 0, len(spans), True, want, 4,
                        np.zeros(4, np.int64) if counts is None else counts, z2, z2,
                        np.zeros(4, np.int32), ev if ev_mid is None else ev_mid, ev, ev,
                        np.zeros((0, 5), np.int64), np.zeros(0))

    with pytest.raises(ValueError, match="ev_mid: not an aligned array of 8-byte integers"):
        walk(ev_mid=np.zeros(4))  # float64: right size, wrong kind
    raw = np.zeros(8 * 4 + 1, np.uint8)
    with pytest.raises(ValueError, match="ev_mid: not an aligned"):
        walk(ev_mid=raw[1:].view(np.int64))  # int64 at an odd address
    with pytest.raises(ValueError, match="negative starting row"):
        walk(counts=np.array([-1000, 0, 0, 0], np.int64))
    with pytest.raises(ValueError, match="spans: not an aligned"):
        walk(spans=spans.astype(np.int32))
