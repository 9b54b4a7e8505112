"""The ingest layer: xplane decoder, schema, corrupt input, Chrome traces, logdir loading, steps.

Traces are built by code (tests/analyzers/xspace_builder.py), except the tests on real TF traces,
which read the ones committed in tests/analyzers/data. Only the schema/TF tests import
TensorFlow.
"""

from __future__ import annotations

import gzip
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from google.protobuf import descriptor_pb2

from analyzers.events import empty_events
from analyzers.ingest.chrome_trace import read_chrome_trace
from analyzers.ingest.logdir import find_runs, load_run, select_run, walk_runs
from analyzers.ingest.xplane import read_xplane
from analyzers.ingest.xplane_schema import XPlane, XSpace
from analyzers.steps import ALL_CATEGORIES, step_breakdown
from tests.analyzers.xspace_builder import (
    DEFAULT_PROFILE_START_NS,
    LineBuilder,
    Ref,
    XSpaceBuilder,
)

REPO = Path(__file__).resolve().parents[2]
MS = 1_000_000
# Real TF xplanes committed with the tests (tests/analyzers/data/README.md): TF 2.15 CPU jobs
# and TF 2.4 GPU demo data, gzipped; the smallest first.
RECORDED = sorted(Path(__file__).parent.joinpath("data").glob("*/*.xplane.pb.gz"),
                  key=lambda p: p.stat().st_size)


def recorded_bytes(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes())


# --------------------------------------------------------------------------- helpers


def _protobuf_view(data: bytes) -> tuple[list, list, list]:
    """(lines, events, stats) read with protobuf, in the decoder's row order.

    lines: (plane, id, timestamp_ns, duration_ps, name, display_name)
    events: (line, metadata_id, offset_ps, duration_ps, num_occurrences)
    stats: (event, metadata_id, kind, value) with kind the XStat field number."""
    kinds = {"double_value": 2, "uint64_value": 3, "int64_value": 4, "str_value": 5,
             "bytes_value": 6, "ref_value": 7}
    lines, events, stats = [], [], []
    for pi, plane in enumerate(XSpace.FromString(data).planes):
        for line in plane.lines:
            lines.append((pi, line.id, line.timestamp_ns, line.duration_ps, line.name,
                          line.display_name))
            for ev in line.events:
                events.append((len(lines) - 1, ev.metadata_id, ev.offset_ps, ev.duration_ps,
                               ev.num_occurrences))
                for st in ev.stats:
                    which = st.WhichOneof("value")
                    value = getattr(st, which) if which else 0
                    if which == "str_value":
                        value = value.encode()
                    stats.append((len(events) - 1, st.metadata_id, kinds.get(which, 0), value))
    return lines, events, stats


def decode_xspace(data: bytes):
    # Imported here: without the C extension, only the tests that decode with it fail.
    from analyzers.ingest.xplane_decode import decode_xspace as compiled

    return compiled(data)


def assert_decoder_matches_protobuf(data: bytes) -> None:
    space = decode_xspace(data)
    lines, events, stats = _protobuf_view(data)
    ref = XSpace.FromString(data)

    assert len(space.plane_rest) == len(ref.planes)
    for rest, plane in zip(space.plane_rest, ref.planes, strict=True):
        without_lines = XPlane()
        without_lines.CopyFrom(plane)
        del without_lines.lines[:]
        assert XPlane.FromString(rest) == without_lines

    got_lines = [
        (int(li[0]), int(li[1]), int(li[2]), int(li[3]), space.text(*ls[:2]), space.text(*ls[2:]))
        for li, ls in zip(space.lines_i, space.lines_s, strict=True)
    ]
    assert got_lines == lines

    ev = space.events
    # num_occurrences (aggregated events of derived planes) is not decoded: compare the rest.
    got_events = [(int(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in ev]
    assert got_events == [e[:4] for e in events]

    got_stats = []
    for row, dbl in zip(space.stats_i, space.stats_d, strict=True):
        event, mid, kind, value, length = (int(x) for x in row)
        if kind == 2:
            value = float(dbl)
        elif kind in (3, 7):
            value &= 2**64 - 1  # uint64 travels as int64 bits
        elif kind in (5, 6):
            value = space.buf[value:value + length].tobytes()
        got_stats.append((event, mid, kind, value))
    # NaN doubles (a TF 2.15 queue-runner trace has some) equal nothing, themselves included.
    assert _nan_as_text(got_stats) == _nan_as_text(stats)


def _nan_as_text(rows: list[tuple]) -> list[tuple]:
    return [tuple("nan" if isinstance(v, float) and v != v else v for v in r) for r in rows]


def _expected_table(data: bytes) -> pd.DataFrame:
    """What read_xplane should return, computed from the protobuf parse."""
    space = XSpace.FromString(data)
    env = {p.name: p for p in space.planes}.get("Task Environment")
    t0 = 0
    if env is not None:
        names = {k: m.name for k, m in env.stat_metadata.items()}
        t0 = next((s.uint64_value for s in env.stats
                   if names.get(s.metadata_id) == "profile_start_time"), 0)
    # Without a profile start, the earliest line that has events starts the trace.
    shift = 0 if t0 else min((line.timestamp_ns for p in space.planes for line in p.lines
                              if line.events), default=0)
    rows = []
    for p in space.planes:
        for line in p.lines:
            for e in line.events:
                meta = p.event_metadata.get(e.metadata_id)
                name = (meta.name or meta.display_name) if meta is not None else "<unknown>"
                rows.append((p.name, line.display_name or line.name, line.id, name,
                             line.timestamp_ns - shift + e.offset_ps // 1000,
                             e.duration_ps // 1000))
    return pd.DataFrame(rows, columns=["plane", "line", "line_id", "name", "start_ns", "dur_ns"])


def _table_rows(df: pd.DataFrame) -> pd.DataFrame:
    out = df[["plane", "line", "line_id", "name", "start_ns", "dur_ns"]].copy()
    for col in ("plane", "line", "name"):
        out[col] = out[col].astype(str)
    out["line_id"] = out["line_id"].astype(np.int64)  # categorical: one code per event
    return out.reset_index(drop=True)


def _random_builder(rng: random.Random) -> XSpaceBuilder:
    """A random small space: empty planes and lines, negative ids, every stat type."""
    b = XSpaceBuilder(profile_start_ns=rng.choice([None, DEFAULT_PROFILE_START_NS]))
    names = ["train", "IteratorGetNext", "dense/MatMul:MatMul", "ExecutorState::Process",
             "MemcpyH2D", "volta_sgemm_128x64_nn", "Iterator::Root::Prefetch", "ünïcode:Op"]
    stat_names = ["step_num", "_r", "correlation_id", "device_ordinal", "memcpy_details",
                  "tf_op", "bytes_transferred", "element_id", "kernel_details", "x"]

    def value(stat: str):
        kind = rng.randrange(7)
        if stat in ("memcpy_details", "tf_op", "kernel_details") and kind < 4:
            return Ref(rng.choice(["kind_src:pageable kind_dst:device size:4096",
                                   "dense/MatMul:MatMul", "regs:32"]))
        return [rng.randrange(-2**63, 2**63),  # int64, negatives as 10-byte varints
                rng.randrange(2**63, 2**64),  # uint64 above int64
                rng.randrange(0, 1000),
                rng.uniform(-1e9, 1e9),
                rng.choice(["", "a", "kind_src:pageable size:8", "ü"]),
                bytes(rng.randrange(256) for _ in range(rng.randrange(4))),
                Ref(rng.choice(["r1", "r2", "DEFAULT"]))][kind]

    for pi in range(rng.randrange(0, 4)):
        plane = b.plane(rng.choice(["/host:CPU", "/device:GPU:0", "/host:metadata", f"p{pi}"]))
        if rng.random() < 0.3:
            plane.stat(rng.choice(stat_names), value("x"))
        for li in range(rng.randrange(0, 4)):
            ts = rng.choice([0, rng.randrange(10**6), 1_790_000_000_000_000_000 + li])
            line = plane.line(f"line{li}", line_id=rng.choice([li, -li - 1, -(2**62)]),
                              timestamp_ns=ts)
            if rng.random() < 0.2:
                line.message.display_name = f"display{li}"
                line.message.duration_ps = rng.randrange(10**9)
            for _ in range(rng.randrange(0, 12)):
                stats = {}
                if rng.random() < 0.6:
                    for s in rng.sample(stat_names, rng.randrange(1, 4)):
                        stats[s] = value(s)
                start = line.message.timestamp_ns + rng.randrange(-5, 10**6)
                line.event(rng.choice(names), start, rng.randrange(10**5), **stats)
            if line.message.events and rng.random() < 0.1:
                line.message.events[0].num_occurrences = 3  # the other branch of the oneof
    return b


def _run_logdir(tmp_path: Path, builders: dict[tuple[str, str], XSpaceBuilder]) -> Path:
    for (run, host), b in builders.items():
        b.write(tmp_path, run=run, host=host)
    return tmp_path


def _main_and_compute(**kw) -> tuple[XSpaceBuilder, LineBuilder, LineBuilder]:
    """A space with a host plane, its Python thread line and one TF op thread line."""
    b = XSpaceBuilder(**kw)
    host = b.plane("/host:CPU")
    return b, host.line("python3", line_id=11), host.line("tf_Compute/1", line_id=1)


def _step_trace(**kw) -> XSpaceBuilder:
    """3 steps of 100 ms: 30 ms IteratorGetNext on the main thread, 60 ms of MatMul on a
    tf_Compute line, 10 ms uncovered. `train` markers carry step_num and _r=1."""
    b, main, compute = _main_and_compute(**kw)
    for i in range(3):
        t = i * 100 * MS
        main.event("train", t, 95 * MS, step_num=i, _r=1)
        main.event("IteratorGetNext", t, 30 * MS)
        compute.event("dense/MatMul:MatMul", t + 30 * MS, 60 * MS)
    return b


# --------------------------------------------------------------------------- (a) decoder


def test_builder_file_decodes_like_protobuf():
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    host.stat("cpu_count", 2)
    host.line("python3", line_id=7).event("train", 5, 100, step_num=1, _r=1).event(
        "IteratorGetNext", 10, 20, big=2**64 - 1, f=0.25, s="text", raw=b"\x00\xff",
        r=Ref("interned"), neg=-5)
    host.line("empty", line_id=-3, timestamp_ns=1000)
    b.plane("/device:GPU:0")  # empty plane
    assert_decoder_matches_protobuf(b.to_bytes())


def test_builder_interns_metadata_like_tf():
    b = XSpaceBuilder()
    line = b.plane("/host:CPU").line("t")
    line.event("a", 0, 1, k=Ref("v")).event("b", 0, 1).event("a", 0, 1, k=2)
    plane, env = XSpace.FromString(b.to_bytes("vm")).planes
    assert {k: m.name for k, m in plane.event_metadata.items()} == {1: "a", 2: "b"}
    assert {k: m.name for k, m in plane.stat_metadata.items()} == {1: "k", 2: "v"}
    firsts = [e.stats[0] for e in plane.lines[0].events if e.stats]
    assert [(s.WhichOneof("value"), s.ref_value, s.int64_value) for s in firsts] == [
        ("ref_value", 2, 0), ("int64_value", 0, 2)]
    assert env.name == "Task Environment" and not env.lines
    stats = {env.stat_metadata[s.metadata_id].name: s for s in env.stats}
    assert stats["profile_start_time"].uint64_value == DEFAULT_PROFILE_START_NS
    assert stats["profile_stop_time"].uint64_value == DEFAULT_PROFILE_START_NS + 1
    assert list(XSpace.FromString(b.to_bytes("vm")).hostnames) == ["vm"]


def test_decoder_fuzz_matches_protobuf_and_table():
    rng = random.Random(20260101)
    n_events = 0
    for _ in range(150):
        data = _random_builder(rng).to_bytes()
        assert_decoder_matches_protobuf(data)
        n_events += len(decode_xspace(data).events)
    assert n_events > 1000  # the fuzz did exercise events


def test_read_xplane_table_matches_protobuf(tmp_path):
    rng = random.Random(7)
    checked = 0
    for i in range(40):
        data = _random_builder(rng).to_bytes()
        if not data:  # an empty XSpace: read_xplane rejects empty files (tested below)
            continue
        path = tmp_path / f"{i}.xplane.pb"
        path.write_bytes(data)
        table = read_xplane(path, "h")
        expected = _expected_table(path.read_bytes())
        pd.testing.assert_frame_equal(_table_rows(table.events), expected, check_dtype=False)
        checked += len(expected)
    assert checked > 100


def test_read_xplane_stats_columns(tmp_path):
    b = XSpaceBuilder()
    gpu = b.plane("/device:GPU:0")
    s7 = gpu.line("Stream #7(Kernel,MemcpyH2D)", line_id=7)
    s7.event("volta_sgemm", 10, 5, correlation_id=41, device_ordinal=0,
             tf_op=Ref("dense/MatMul:MatMul"), kernel_details=Ref("regs:32"))
    s7.event("MemcpyH2D", 20, 5, correlation_id=42,
             memcpy_details=Ref("kind_src:pageable kind_dst:device size:4096"),
             bytes_transferred=4096)
    b.plane("/host:CPU").line("python3").event("train", 0, 100, step_num=2**40, _r=1)
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(b.to_bytes())
    df = read_xplane(path, "h").events.set_index("name")
    assert df.loc["volta_sgemm", "correlation_id"] == 41
    assert df.loc["volta_sgemm", "device_id"] == 0
    assert df.loc["volta_sgemm", "tf_op"] == "dense/MatMul:MatMul"
    assert df.loc["MemcpyH2D", "memcpy_details"] == "kind_src:pageable kind_dst:device size:4096"
    assert df.loc["MemcpyH2D", "bytes"] == 4096
    assert df.loc["MemcpyH2D", "kind"] == "h2d"
    assert df.loc["volta_sgemm", "kind"] == "device_compute"
    assert df.loc["train", "step_num"] == 2**40 and df.loc["train", "root"] == 1
    assert df.loc["train", "device_id"] == -1


def test_absolute_timestamps_without_task_environment(tmp_path):
    t_abs = 1_795_000_000_000_000_000
    b = XSpaceBuilder(profile_start_ns=None)
    b.plane("/host:CPU").line("a", timestamp_ns=t_abs + 500).event("x", t_abs + 700, 10)
    b.plane("/host:CPU").line("b", timestamp_ns=t_abs).event("y", t_abs + 2000, 10)
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(b.to_bytes())
    table = read_xplane(path, "h")
    assert table.t0_unix_ns == t_abs
    assert table.events.set_index("name")["start_ns"].to_dict() == {"x": 700, "y": 2000}
    assert "Task Environment" not in table.planes


def test_absolute_timestamps_ignore_empty_lines(tmp_path):
    t_abs = 1_795_000_000_000_000_000
    b = XSpaceBuilder(profile_start_ns=None)
    b.plane("/host:CPU").line("a", timestamp_ns=t_abs).event("x", t_abs + 700, 10)
    b.plane("/host:CPU").line("empty")
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(b.to_bytes())
    table = read_xplane(path, "h")
    assert (table.t0_unix_ns, table.events["start_ns"].tolist()) == (t_abs, [700])


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.name.split(".")[0])
def test_real_tf_trace_decodes_like_protobuf(path):
    assert_decoder_matches_protobuf(recorded_bytes(path))


# --------------------------------------------------------------------------- (b) TF schema


@pytest.fixture(scope="module")
def tf_xplane_pb2():
    pytest.importorskip("tensorflow")
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    return xplane_pb2


def _fields(msg: descriptor_pb2.DescriptorProto) -> dict[str, tuple]:
    oneofs = [o.name for o in msg.oneof_decl]
    return {
        f.name: (f.number, f.type, f.label, f.type_name.rsplit(".", 1)[-1],
                 oneofs[f.oneof_index] if f.HasField("oneof_index") else None)
        for f in msg.field
    }


def _messages(fd: descriptor_pb2.FileDescriptorProto) -> dict[str, dict]:
    out = {}
    for m in fd.message_type:
        out[m.name] = _fields(m)
        for nested in m.nested_type:
            out[f"{m.name}.{nested.name}"] = (_fields(nested), nested.options.map_entry)
    return out


def test_schema_matches_tensorflow_descriptor(tf_xplane_pb2):
    theirs, ours = descriptor_pb2.FileDescriptorProto(), descriptor_pb2.FileDescriptorProto()
    tf_xplane_pb2.DESCRIPTOR.CopyToProto(theirs)
    XSpace.DESCRIPTOR.file.CopyToProto(ours)
    assert theirs.syntax == ours.syntax == "proto3"
    t, o = _messages(theirs), _messages(ours)
    assert sorted(t) == sorted(o)
    for name in t:
        assert o[name] == t[name], name


def test_file_written_by_tensorflow_decodes_identically(tf_xplane_pb2, tmp_path):
    # 1. Our builder's message, re-serialized by TF's own classes.
    b = _step_trace()
    b.plane("/host:CPU").line("python3").event(
        "EagerExecute", 1, 2, big=2**64 - 2, f=1.5, s="ü", raw=b"\x01", r=Ref("x"))
    ours = b.to_bytes("vm")
    tf_bytes = tf_xplane_pb2.XSpace.FromString(ours).SerializeToString()
    assert_decoder_matches_protobuf(tf_bytes)
    (tmp_path / "ours.xplane.pb").write_bytes(ours)
    (tmp_path / "tf.xplane.pb").write_bytes(tf_bytes)
    a, c = read_xplane(tmp_path / "ours.xplane.pb", "vm"), read_xplane(tmp_path / "tf.xplane.pb",
                                                                      "vm")
    pd.testing.assert_frame_equal(a.events, c.events)
    assert a.t0_unix_ns == c.t0_unix_ns == DEFAULT_PROFILE_START_NS

    # 2. A space built with TF's classes alone.
    space = tf_xplane_pb2.XSpace(hostnames=["vm"])
    plane = space.planes.add(id=0, name="/host:CPU")
    plane.event_metadata[1].id = 1
    plane.event_metadata[1].name = "dense/MatMul:MatMul"
    plane.stat_metadata[1].id = 1
    plane.stat_metadata[1].name = "step_num"
    line = plane.lines.add(id=-4, name="tf_Compute/-4", timestamp_ns=1000)
    ev = line.events.add(metadata_id=1, offset_ps=2_000_000, duration_ps=3_000_000)
    ev.stats.add(metadata_id=1, int64_value=-9)
    env = space.planes.add(name="Task Environment")
    env.stat_metadata[1].id = 1
    env.stat_metadata[1].name = "profile_start_time"
    env.stats.add(metadata_id=1, uint64_value=DEFAULT_PROFILE_START_NS)
    data = space.SerializeToString()
    assert_decoder_matches_protobuf(data)
    (tmp_path / "pure.xplane.pb").write_bytes(data)
    t = read_xplane(tmp_path / "pure.xplane.pb", "vm")
    row = t.events.iloc[0]
    assert (row["name"], row["line"], row["line_id"], row["start_ns"], row["dur_ns"]) == (
        "dense/MatMul:MatMul", "tf_Compute/-4", -4, 3000, 3000)
    assert row["step_num"] == -9 and row["kind"] == "host_op"
    assert t.t0_unix_ns == DEFAULT_PROFILE_START_NS


# --------------------------------------------------------------------------- (c) corrupt input


def _assert_value_error(path: Path) -> str:
    with pytest.raises(ValueError) as info:
        read_xplane(path, "h")
    msg = str(info.value)
    assert msg and "\n" not in msg, repr(msg)
    assert str(path) in msg
    return msg


def _plane_boundaries(data: bytes) -> set[int]:
    """Byte offsets at which a cut leaves a valid XSpace (between top-level planes)."""
    space = XSpace.FromString(data)
    out, pos = set(), 0
    for p in space.planes:
        one = XSpace()
        one.planes.append(p)
        pos += len(one.SerializeToString())
        out.add(pos)
    return out


def _check_cuts(data: bytes, positions: list[int], tmp_path: Path) -> int:
    boundaries = _plane_boundaries(data)
    path = tmp_path / "cut.xplane.pb"
    errors = 0
    for cut in positions:
        path.write_bytes(data[:cut])
        if cut in boundaries:  # a prefix of whole planes is a valid (smaller) file
            assert len(read_xplane(path, "h").planes) <= len(boundaries)
        else:
            _assert_value_error(path)
            errors += 1
    return errors


@pytest.mark.timeout(60)
def test_truncated_builder_file_raises_value_error(tmp_path):
    data = _step_trace().to_bytes("vm")
    assert _check_cuts(data, list(range(len(data))), tmp_path) >= len(data) - 3


@pytest.mark.timeout(120)
def test_truncated_real_trace_raises_value_error(tmp_path):
    data = recorded_bytes(RECORDED[0])
    rng = random.Random(3)
    positions = set(range(0, 400)) | set(range(len(data) - 100, len(data)))
    positions |= {b + d for b in _plane_boundaries(data) for d in (-1, 0, 1) if b + d < len(data)}
    positions |= {rng.randrange(len(data)) for _ in range(150)}
    assert _check_cuts(data, sorted(positions), tmp_path) > 600


@pytest.mark.timeout(60)
def test_random_garbage_raises_value_error_or_loads(tmp_path):
    rng = random.Random(11)
    path = tmp_path / "g.xplane.pb"
    errors = 0
    for i in range(400):
        data = bytes(rng.randrange(256) for _ in range(rng.choice([1, 2, 7, 64, 1000, 5000])))
        if i % 4 == 0:  # start like a real file: a plane field
            data = b"\x0a" + data
        path.write_bytes(data)
        try:
            read_xplane(path, "h")
        except ValueError as e:
            assert "\n" not in str(e)
            errors += 1
    assert errors > 300


def test_empty_and_json_files_are_value_errors(tmp_path):
    empty = tmp_path / "empty.xplane.pb"
    empty.write_bytes(b"")
    assert "empty" in _assert_value_error(empty)
    js = tmp_path / "js.xplane.pb"
    js.write_text(json.dumps({"hello": [1, 2, 3]}))
    _assert_value_error(js)


def test_json_that_is_not_a_trace(tmp_path):
    run = tmp_path / "plugins" / "profile" / "r1"
    run.mkdir(parents=True)
    (run / "vm.json").write_text(json.dumps({"a": 1}))
    with pytest.raises(ValueError, match="not a Chrome trace"):
        load_run(tmp_path)
    (run / "vm.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a readable JSON trace"):
        load_run(tmp_path)


def _decode_in_subprocess(data: bytes, tmp_path: Path) -> subprocess.CompletedProcess:
    path = tmp_path / "adversarial.xplane.pb"
    path.write_bytes(data)
    code = ("import sys\nfrom analyzers.ingest.xplane import read_xplane\n"
            "try:\n    read_xplane(sys.argv[1], 'h')\nexcept ValueError as e:\n"
            "    print('ValueError', e)\n    sys.exit(0)\nprint('loaded')\n")
    return subprocess.run([sys.executable, "-c", code, str(path)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_huge_length_is_a_value_error_not_a_crash(tmp_path):
    huge = bytes([0xFF] * 8 + [0x7F])  # varint 2**63 - 1
    for data in (b"\x12" + huge + b"\x00\x00", b"\x0a\x0e\x1a\x0c\x22" + huge + b"\x00\x00"):
        proc = _decode_in_subprocess(data, tmp_path)
        assert proc.returncode == 0 and proc.stdout.startswith("ValueError"), (
            proc.returncode, proc.stdout, proc.stderr[-300:])


# --------------------------------------------------------------------------- (d) Chrome traces


TF_TRACE = {
    "displayTimeUnit": "ns",
    "traceEvents": [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "pid": 1, "tid": 7, "name": "thread_name",
         "args": {"name": "Stream #7(Kernel)"}},
        {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "/host:CPU"}},
        {"ph": "M", "pid": 2, "tid": 100, "name": "thread_name", "args": {"name": "python3"}},
        {"ph": "X", "pid": 2, "tid": 100, "ts": 1000.0, "dur": 100000.0, "name": "train",
         "args": {"step_num": "3", "_r": "1"}},
        {"ph": "X", "pid": 2, "tid": 100, "ts": 1000.5, "dur": 30000, "name": "IteratorGetNext"},
        {"ph": "X", "pid": 1, "tid": 7, "ts": 31000, "dur": 50, "name": "volta_sgemm_128x64_nn",
         "args": {"correlation_id": "55", "tf_op": "dense/MatMul:MatMul",
                  "kernel_details": "regs:32"}},
        {"ph": "X", "pid": 1, "tid": 8, "ts": 31100, "dur": 20, "name": "MemcpyH2D",
         "args": {"correlation_id": 56, "memcpy_details": "kind_src:pageable size:4096"}},
        {"ph": "i", "pid": 2, "tid": 100, "ts": 5, "name": "instant"},
    ],
}

T_US = 1_790_000_000_000_000.0  # PyTorch writes unix microseconds
TORCH_TRACE = {
    "schemaVersion": 1,
    "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 4321, "args": {"name": "python3"}},
        {"ph": "M", "name": "thread_name", "pid": 4321, "tid": 4321,
         "args": {"name": "thread 4321 (python3)"}},
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": 4321,
         "tid": 4321, "ts": T_US, "dur": 100000, "args": {"External id": 1}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4321, "tid": 4321,
         "ts": T_US + 10, "dur": 40, "args": {"External id": 10}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4321, "tid": 4321,
         "ts": T_US + 20, "dur": 5, "args": {"External id": 10, "cbid": 211, "correlation": 77}},
        {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "pid": 0, "tid": 7,
         "ts": T_US + 30, "dur": 100.5,
         "args": {"External id": 10, "device": 0, "stream": 7, "correlation": 77}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0,
         "tid": 7, "ts": T_US + 200, "dur": 3,
         "args": {"device": 0, "stream": 7, "correlation": 78, "bytes": 4096}},
        {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#3", "pid": 0, "tid": 7,
         "ts": T_US + 30, "dur": 200},
    ],
}


def _chrome_rows(tmp_path: Path, doc: dict) -> pd.DataFrame:
    path = tmp_path / "t.trace.json"
    path.write_text(json.dumps(doc))
    return read_chrome_trace(path, "h")[0].set_index("name")


def test_read_tf_style_chrome_trace(tmp_path):
    path = tmp_path / "vm.trace.json"
    path.write_text(json.dumps(TF_TRACE))
    events, t0 = read_chrome_trace(path, "vm")
    assert t0 == 0  # microseconds since the profile start, not unix time
    df = events.set_index("name")
    assert len(df) == 4
    assert df.loc["train", ["plane", "line", "start_ns", "dur_ns"]].tolist() == [
        "/host:CPU", "python3", 0, 100 * MS]
    assert df.loc["train", "step_num"] == 3 and df.loc["train", "root"] == 1
    assert df.loc["IteratorGetNext", "start_ns"] == 500
    assert df.loc["IteratorGetNext", "kind"] == "input_wait"
    k = df.loc["volta_sgemm_128x64_nn"]
    assert (k["plane"], k["line"], k["line_id"], k["start_ns"], k["dur_ns"]) == (
        "/device:GPU:0", "Stream #7(Kernel)", 7, 30 * MS, 50_000)
    assert (k["correlation_id"], k["tf_op"], k["kind"]) == (55, "dense/MatMul:MatMul",
                                                            "device_compute")
    m = df.loc["MemcpyH2D"]
    assert (m["kind"], m["correlation_id"]) == ("h2d", 56)
    assert m["memcpy_details"] == "kind_src:pageable size:4096"
    assert step_breakdown(events).source == "markers:train"


def test_begin_end_events_pair_per_thread_as_a_stack(tmp_path):
    """`B`/`E` duration events (writers other than TF's export and PyTorch's): nested on one
    thread, interleaved with another thread's, an `E` without name or `B`, a `B` never closed,
    out of time order in the file."""
    def ev(ph, tid, ts, name=None, **args):
        e = {"ph": ph, "pid": 2, "tid": tid, "ts": ts}
        return {**e, **({"name": name} if name else {}), **({"args": args} if args else {})}
    doc = {"traceEvents": [
        {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "/host:CPU"}},
        ev("E", 100, 0.5),  # closes nothing
        ev("B", 100, 1000, "train", step_num=3, _r=1),
        ev("B", 100, 1010, "IteratorGetNext"),
        ev("B", 200, 1020, "outer"),
        ev("E", 100, 1040),  # IteratorGetNext
        ev("E", 100, 1090),  # dense/MatMul, written before its own `B`
        ev("B", 100, 1050, "dense/MatMul:MatMul"),
        ev("E", 200, 1080, correlation_id=9),  # outer, with args of its own
        ev("E", 100, 1100),  # the first train; at equal times file order decides
        ev("B", 100, 1100, "train", step_num=4, _r=1),
        ev("B", 200, 1150, "never closed"),
        ev("E", 100, 1200),
        ev("B", "io", 1300, "read"),  # a writer that names its threads: ids of mixed types
        ev("E", "io", 1350),
    ]}
    df = _chrome_rows(tmp_path, doc).reset_index()
    got = sorted(zip(df["name"], df["line"], df["start_ns"], df["dur_ns"], strict=True))
    assert got == [("IteratorGetNext", "100", 10_000, 30_000),  # from the first train, 1000 µs
                   ("dense/MatMul:MatMul", "100", 50_000, 40_000),
                   ("outer", "200", 20_000, 60_000),
                   ("read", "io", 300_000, 50_000),
                   ("train", "100", 0, 100_000),
                   ("train", "100", 100_000, 100_000)]
    assert df.set_index("name").loc["outer", "correlation_id"] == 9
    # A thread named by text is a thread of its own, not the shared "no id" -1.
    assert df.set_index("name").loc["read", "line_id"] < -1
    assert sorted(df.loc[df["name"] == "train", "step_num"]) == [3, 4]
    assert step_breakdown(read_chrome_trace(tmp_path / "t.trace.json", "h")[0]).source == \
        "markers:train"


def test_chrome_thread_without_name_is_named_by_tid(tmp_path):
    assert _chrome_rows(tmp_path, TF_TRACE).loc["MemcpyH2D", "line"] == "8"


def test_read_pytorch_chrome_trace_and_gzip(tmp_path):
    plain = tmp_path / "worker.pt.trace.json"
    plain.write_text(json.dumps(TORCH_TRACE))
    gz = tmp_path / "worker.trace.json.gz"
    gz.write_bytes(gzip.compress(json.dumps(TORCH_TRACE).encode()))
    events, t0 = read_chrome_trace(plain, "worker")
    events_gz, t0_gz = read_chrome_trace(gz, "worker")
    pd.testing.assert_frame_equal(events, events_gz)
    assert t0 == t0_gz == int(T_US * 1000)
    df = events.set_index("name")
    step = df.loc["ProfilerStep#3"]
    host_step = step[step["plane"] == "/host:CPU"].iloc[0]
    assert (host_step["step_num"], host_step["start_ns"], host_step["line"]) == (
        3, 0, "thread 4321 (python3)")
    assert df.loc["cudaLaunchKernel", "kind"] == "launch"
    assert df.loc["cudaLaunchKernel", "correlation_id"] == 77
    k = df.loc["ampere_sgemm_128x64_nn"]
    assert (k["plane"], k["line"], k["kind"], k["device_id"], k["correlation_id"]) == (
        "/device:GPU:0", "stream 7", "device_compute", 0, 77)
    assert (k["start_ns"], k["dur_ns"]) == (30_000, 100_500)
    m = df.loc["Memcpy HtoD (Pageable -> Device)"]
    assert (m["plane"], m["kind"], m["start_ns"]) == ("/device:GPU:0", "h2d", 200_000)
    steps = step_breakdown(events)
    assert steps.source == "markers:ProfilerStep#N" and len(steps.table) == 1


def test_chrome_args_become_stat_columns(tmp_path):
    """Numbers, digit strings and whole floats are read; text, non-finite floats and missing
    args leave the row's default (-1, None)."""
    events = [{"ph": "X", "name": f"e{i}", "pid": 1, "tid": 1, "ts": 1e15 + i, "dur": 1,
               "args": a} for i, a in enumerate([
                   {"Bytes": 4096, "correlation": 7}, {"Bytes": "512"}, {"Bytes": 2048.0},
                   {"Bytes": "many"}, {"Bytes": float("inf")}, {}, {"device": 3}])]
    df = _chrome_rows(tmp_path, {"traceEvents": events})
    assert df["bytes"].tolist() == [4096, 512, 2048, -1, -1, -1, -1]
    assert df["correlation_id"].tolist() == [7, -1, -1, -1, -1, -1, -1]
    assert df["device_id"].tolist() == [-1, -1, -1, -1, -1, -1, 3]


# What xprof's `trace_viewer` conversion of a TF 2.21 xplane writes (seen 2026-11-23): display
# names with the xplane name in args.long_name, step markers named "<name> <step_num>", zero-length
# events as instants, string-valued args, times relative to the first event.
XPROF_TRACE = {
    "displayTimeUnit": "ns", "metadata": {"highres-ticks": True},
    "traceEvents": [
        {"args": {"name": "/host:CPU"}, "name": "process_name", "ph": "M", "pid": 701},
        {"args": {"name": "python"}, "name": "thread_name", "ph": "M", "pid": 701, "tid": 66},
        {"args": {"name": "tf_Compute/-148"}, "name": "thread_name", "ph": "M", "pid": 701,
         "tid": 33},
        {"args": {"name": "tf_data_iterator_resource/70"}, "name": "thread_name", "ph": "M",
         "pid": 701, "tid": 44},
        *({"args": {"group_id": str(i), "step_name": f"train {i}", "step_num": str(i)},
           "dur": 700.0, "name": f"train {i}", "ph": "X", "pid": 701, "tid": 66,
           "ts": 34.041 + 750 * i} for i in range(3)),
        {"args": {"group_id": "0", "is_eager": "0",
                  "long_name": "StatefulPartitionedCall/adam/Sub_6/ReadVariableOp:ReadVariableOp"},
         "dur": 4.647, "name": "ReadVariableOp", "ph": "X", "pid": 701, "tid": 33, "ts": 100.0},
        {"args": {"long_name": "Iterator::Root::Prefetch::BatchV2"}, "dur": 50.0,
         "name": "Iterator::BatchV2", "ph": "X", "pid": 701, "tid": 44, "ts": 200.0},
        {"args": {"flow": "4487", "group_id": "0"}, "name": "ThreadpoolListener::Record",
         "ph": "i", "pid": 701, "s": "t", "tid": 33, "ts": 300.0},
    ],
}


def test_xprof_trace_viewer_export_reads_the_xplane_names(tmp_path):
    events, t0 = read_chrome_trace(_write(tmp_path, XPROF_TRACE), "vm")
    df = events.set_index("name")
    op = df.loc["StatefulPartitionedCall/adam/Sub_6/ReadVariableOp:ReadVariableOp"]
    assert (op["op_type"], op["line"], op["dur_ns"]) == ("ReadVariableOp", "tf_Compute/-148", 4647)
    assert df.loc["Iterator::Root::Prefetch::BatchV2", "kind"] == "input_work"
    assert "ReadVariableOp" not in df.index and "Iterator::BatchV2" not in df.index
    # One step per marker although each marker has its own name.
    steps = step_breakdown(events)
    assert steps.source == "markers:train" and len(steps.table) == 3  # as the xplane says
    assert t0 == 0


def test_xprof_view_json_is_read_with_a_warning(tmp_path):
    # The trace viewer's own (streaming) JSON: host-prefixed process names, events with a uid only.
    view = {"displayTimeUnit": "ns", "returnedEventsSize": 2, "filteredByVisibility": True,
            "traceEvents": [
                {"args": {"name": "vm /device:GPU:0"}, "name": "process_name", "ph": "M",
                 "pid": 1},
                {"args": {"name": "vm /host:CPU"}, "name": "process_name", "ph": "M", "pid": 2},
                {"pid": 1, "tid": 5, "name": "volta_sgemm", "ts": 1.0, "dur": 3.0, "ph": "X",
                 "args": {"uid": 0}},
                {"pid": 2, "tid": 6, "name": "Iterator::BatchV2", "ts": 1.0, "dur": 3.0,
                 "ph": "X", "args": {"uid": 1}}]}
    warnings: list[str] = []
    df = read_chrome_trace(_write(tmp_path, view), "vm", warnings)[0].set_index("name")
    assert df.loc["volta_sgemm", "plane"] == "/device:GPU:0"
    assert df.loc["Iterator::BatchV2", "plane"] == "/host:CPU"
    assert len(warnings) == 1 and "display names only" in warnings[0]
    # The full export says nothing.
    read_chrome_trace(_write(tmp_path, XPROF_TRACE), "vm", warnings)
    assert len(warnings) == 1


def _write(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "vm.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def test_pytorch_memcpy_bytes(tmp_path):
    assert _chrome_rows(tmp_path, TORCH_TRACE).loc["Memcpy HtoD (Pageable -> Device)",
                                                   "bytes"] == 4096


def test_empty_chrome_traces(tmp_path):
    for doc in ({"traceEvents": []}, [], {"traceEvents": [{"ph": "M", "name": "process_name",
                                                          "pid": 1, "args": {"name": "x"}}]}):
        path = tmp_path / "e.json"
        path.write_text(json.dumps(doc))
        events, t0 = read_chrome_trace(path, "h")
        assert events.empty and t0 == 0
        assert list(events.columns) == list(empty_events().columns)


# --------------------------------------------------------------------------- (e) load_run


def test_load_run_selects_runs(tmp_path):
    first, second = _step_trace(), XSpaceBuilder()
    second.plane("/host:CPU").line("python3").event("only_event", 5, 10)
    _run_logdir(tmp_path, {("2026_01_01_00_00_00", "vm"): first,
                           ("2026_01_02_00_00_00", "vm"): second})
    assert [r.name for r in find_runs(tmp_path)] == ["2026_01_01_00_00_00", "2026_01_02_00_00_00"]
    latest = load_run(tmp_path)
    assert latest.name == "2026_01_02_00_00_00" and latest.hosts == ["vm"]
    assert latest.events["name"].astype(str).tolist() == ["only_event"]
    chosen = load_run(tmp_path, run="2026_01_01_00_00_00")
    assert len(chosen.events) == 9 and chosen.t0_unix_ns == DEFAULT_PROFILE_START_NS
    assert chosen.events.attrs["t0_unix_ns"] == DEFAULT_PROFILE_START_NS
    # a run folder or the xplane file itself are accepted too
    assert len(load_run(tmp_path / "plugins/profile/2026_01_01_00_00_00").events) == 9
    assert select_run(tmp_path / "plugins/profile/2026_01_01_00_00_00/vm.xplane.pb").is_file()
    with pytest.raises(ValueError, match="no run named 'nope'.*2026_01_01_00_00_00"):
        load_run(tmp_path, run="nope")


def test_load_run_merges_hosts_on_wall_clock(tmp_path):
    a, b = XSpaceBuilder(profile_start_ns=DEFAULT_PROFILE_START_NS), XSpaceBuilder(
        profile_start_ns=DEFAULT_PROFILE_START_NS + 2 * MS)
    a.plane("/host:CPU").line("python3").event("a_event", 5 * MS, MS)
    b.plane("/host:CPU").line("python3").event("b_event", 1 * MS, MS)
    b.plane("/host:CPU").line("python3").event("b_late", 9 * MS, MS)
    _run_logdir(tmp_path, {("r", "worker0"): a, ("r", "worker1"): b})
    run = load_run(tmp_path)
    assert run.hosts == ["worker0", "worker1"]
    assert run.t0_unix_ns == DEFAULT_PROFILE_START_NS
    got = list(zip(run.events["host"].astype(str), run.events["name"].astype(str),
                   run.events["start_ns"], strict=True))
    assert got == [("worker1", "b_event", 3 * MS), ("worker0", "a_event", 5 * MS),
                   ("worker1", "b_late", 11 * MS)]  # shifted by 2 ms, sorted by start


def test_load_run_bad_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_run(tmp_path / "missing")
    with pytest.raises(ValueError, match="no profile runs"):
        load_run(tmp_path)
    (tmp_path / "plugins" / "profile" / "empty_run").mkdir(parents=True)
    with pytest.raises(ValueError, match="no profile runs"):
        load_run(tmp_path)


def test_load_run_empty_xplane_file(tmp_path):
    run = tmp_path / "plugins" / "profile" / "r"
    run.mkdir(parents=True)
    (run / "vm.xplane.pb").write_bytes(b"")
    with pytest.raises(ValueError, match="empty xplane file"):
        load_run(tmp_path)


# --------------------------------------------------------------------------- (f) steps


def test_step_breakdown_exact_with_markers(tmp_path):
    _step_trace().write(tmp_path)
    steps = step_breakdown(load_run(tmp_path).events)
    assert steps.source == "markers:train"
    t = steps.table
    assert t["step"].tolist() == [0, 1, 2]
    assert t["start_ns"].tolist() == [0, 100 * MS, 200 * MS]
    # a step runs to the next marker; the last one ends with its marker (95 ms)
    assert t["dur_ns"].tolist() == [100 * MS, 100 * MS, 95 * MS]
    expected = dict.fromkeys(ALL_CATEGORIES, 0)
    expected.update(input_wait=30 * MS, host_compute=60 * MS, python_other=10 * MS)
    for i in (0, 1):
        assert t.loc[i, list(ALL_CATEGORIES)].to_dict() == expected
    assert t.loc[2, "python_other"] == 5 * MS
    assert (t[list(ALL_CATEGORIES)].sum(axis=1) == t["dur_ns"]).all()
    assert steps.median_step_ns() == 100 * MS


def test_step_breakdown_counts_only_exposed_waits(tmp_path):
    b, main, compute = _main_and_compute()
    for i in range(2):
        t = i * 100 * MS
        main.event("train", t, 100 * MS, step_num=i, _r=1)
        main.event("train", t + 10, 10, step_num=i)  # a nested non-root marker: ignored
        main.event("IteratorGetNext", t, 40 * MS)  # 10 ms of it overlaps compute
        compute.event("dense/MatMul:MatMul", t + 30 * MS, 50 * MS)
        main.event("EagerExecute", t + 85 * MS, 5 * MS)
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(b.to_bytes())
    t = step_breakdown(read_xplane(path, "h").events).table
    row = t.iloc[0]
    assert (row["host_compute"], row["input_wait"], row["framework"], row["python_other"]) == (
        50 * MS, 30 * MS, 5 * MS, 15 * MS)


def test_step_breakdown_splits_events_that_cross_steps(tmp_path):
    """An event crossing a step boundary gives each step its own part; a long runtime event
    that starts a step early does not move its later steps' time into that step (which left
    the step's idle time negative and the next steps' time uncounted)."""
    b, main, compute = _main_and_compute()
    for i in range(3):
        main.event("train", i * 100 * MS, 95 * MS, step_num=i, _r=1)
    main.event("IteratorGetNext", 80 * MS, 20 * MS)
    compute.event("dense/MatMul:MatMul", 95 * MS, 35 * MS)  # 5 ms in step 0, 30 ms in step 1
    main.event("EagerExecute", 150 * MS, 100 * MS)  # runtime: steps 1 and 2
    b.write(tmp_path)
    t = step_breakdown(load_run(tmp_path).events).table
    cats = t[list(ALL_CATEGORIES)]
    assert (cats >= 0).all().all() and (cats.sum(axis=1) == t["dur_ns"]).all()
    assert t["host_compute"].tolist() == [5 * MS, 30 * MS, 0]
    assert t["input_wait"].tolist() == [15 * MS, 0, 0]
    assert t["framework"].tolist() == [0, 50 * MS, 50 * MS]
    assert t["python_other"].tolist() == [80 * MS, 20 * MS, 45 * MS]


def test_step_breakdown_falls_back_to_train_function_calls(tmp_path):
    b, main, compute = _main_and_compute()
    for i in range(3):
        t = i * 100 * MS
        main.event("__inference_train_step_123", t, 80 * MS)
        compute.event("dense/MatMul:MatMul", t + 10 * MS, 60 * MS)
    main.event("__inference_predict_9", 0, MS)  # called once: not a step function
    b.write(tmp_path)
    steps = step_breakdown(load_run(tmp_path).events)
    assert steps.source == "function:__inference_train_step_123"
    assert steps.table["start_ns"].tolist() == [0, 100 * MS, 200 * MS]
    assert steps.table["dur_ns"].tolist() == [100 * MS, 100 * MS, 80 * MS]
    assert steps.table["host_compute"].tolist() == [60 * MS] * 3


def test_step_breakdown_none(tmp_path):
    b = XSpaceBuilder()
    b.plane("/host:CPU").line("python3").event("some_python_work", 0, MS)
    path = tmp_path / "h.xplane.pb"
    path.write_bytes(b.to_bytes())
    for events in (read_xplane(path, "h").events, empty_events()):
        steps = step_breakdown(events)
        assert steps.source == "none" and not steps.found
        assert steps.median_step_ns() == 0.0
        assert list(steps.table.columns) == ["step", "start_ns", "end_ns", "dur_ns",
                                             *ALL_CATEGORIES]


def test_numpy_only_types_in_table(tmp_path):
    _step_trace().write(tmp_path)
    df = load_run(tmp_path).events
    for col in ("start_ns", "dur_ns"):
        assert df[col].dtype == np.int64, col
    assert "end_ns" not in df  # derived where needed (EndTimes): 8 bytes per event saved
    # Per-line and per-name values are categories with narrow codes, not a value per event.
    assert df["line_id"].cat.categories.dtype == np.int64
    for col in ("plane", "line", "line_id", "name", "op_type", "kind"):
        assert df[col].cat.codes.dtype == np.int8, col
    # Stat columns are sparse: most events carry none of them.
    assert df["step_num"].dtype == pd.SparseDtype(np.int64, -1)


def test_walk_runs_finds_runs_at_any_depth_and_skips_non_traces(tmp_path):
    for rel in ("a/plugins/profile/r1/h.xplane.pb", "b/deep/er/r2/w.trace.json.gz",
                "c/rank0.pt.trace.json", ".venv/x/plugins/profile/r3/h.xplane.pb",
                "d/site-packages/pkg/r4/h.xplane.pb"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    (tmp_path / "tune").mkdir()
    (tmp_path / "tune" / "summary.json").write_text("{}")  # JSON, but not a trace
    found = {str(p.relative_to(tmp_path)) for p in walk_runs(tmp_path)}
    assert found == {"a/plugins/profile/r1", "b/deep/er/r2", "c"}


def test_walk_files_never_enters_skipped_folders_nor_symlinked_ones(tmp_path, monkeypatch):
    import os

    from analyzers.ingest import logdir

    for rel in ("a/x.db", "a/b/y.db", ".venv/lib/z.db", "d/site-packages/w.db",
                "e/node_modules/v.db", "outside/u.db"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"")
    root = tmp_path / "root"
    root.mkdir()
    for name in ("a", ".venv", "d", "e"):
        (tmp_path / name).rename(root / name)
    os.symlink(tmp_path / "outside", root / "linked")
    entered: list[str] = []
    real_walk = os.walk

    def recording_walk(top, *args, **kwargs):
        for folder, subfolders, files in real_walk(top, *args, **kwargs):
            entered.append(os.path.relpath(folder, root))
            yield folder, subfolders, files

    monkeypatch.setattr(logdir.os, "walk", recording_walk)
    found = sorted(str(p.relative_to(root)) for p in logdir.walk_files(root, ("*.db",)))
    assert found == ["a/b/y.db", "a/x.db"]
    assert sorted(entered) == [".", "a", "a/b", "d", "e"]


def test_a_tuning_output_folder_is_not_a_run_its_profiles_are(tmp_path):
    (tmp_path / "summary.json").write_text("{}")
    (tmp_path / "best_config.json").write_text("{}")
    run = tmp_path / "profiles" / "trial-0" / "plugins" / "profile" / "r1"
    run.mkdir(parents=True)
    (run / "h.xplane.pb").write_bytes(b"")
    assert find_runs(tmp_path) == [run]
    alone = tmp_path / "profiles" / "plain"  # plain JSON with nothing deeper: still a run
    alone.mkdir()
    (alone / "trace.json").write_text("{}")
    assert find_runs(alone) == [alone]


def test_window_edges_of_one_time_costs_are_left_out(tmp_path):
    """A first step holding the first call's tracing (40x the median) and a last step of 3x
    leave the table; steps within 2x of the median stay, and so does everything below 5 steps."""
    b, main, compute = _main_and_compute()
    durations = [400, 10, 12, 9, 11, 10, 30]
    t0 = 0
    for i, d in enumerate(durations):
        main.event("train", t0 * MS, d * MS - 1000, step_num=i, _r=1)
        compute.event("dense/MatMul:MatMul", t0 * MS + MS, 5 * MS)
        t0 += d
    main.event("tf.function-graph_building", MS, 300 * MS)
    b.write(tmp_path)
    steps = step_breakdown(load_run(tmp_path).events)
    assert steps.table["step"].tolist() == [1, 2, 3, 4, 5]
    # Judged against the median of the steps between them (10 ms).
    assert [(e["step"], e["x_median"], e["warmup"]) for e in steps.left_out] == [
        (0, 40.0, True), (6, 3.0, False)]
    # The shares describe the kept steps only: 25 ms of MatMul in 52 ms.
    assert steps.fractions()["host_compute"] == pytest.approx(25 / 52, rel=0.01)
    assert steps.mean_step_ns() == pytest.approx(10.4 * MS, rel=0.001)
    b2, main2, compute2 = _main_and_compute()
    for i, d in enumerate([400, 10, 10, 10]):
        main2.event("train", i * 400 * MS, d * MS, step_num=i, _r=1)
    b2.write(tmp_path / "short")
    assert step_breakdown(load_run(tmp_path / "short").events).left_out == []
