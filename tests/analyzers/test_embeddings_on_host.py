"""`embeddings_on_host` on code-built GPU traces (tests/analyzers/traces.py, `embedding_trace`):
a table in host memory, the sparse ops around a GPU gather on the host, everything on the GPU;
host embedding ops the device does not wait for; CPU-only and PyTorch traces."""

from __future__ import annotations

import pytest

from analyzers.detectors import embeddings_on_host
from analyzers.detectors.embeddings_on_host import DEVICE_FASTER, ID
from analyzers.report import analyze
from tests.analyzers.traces import MS, embedding_trace, gpu_trace, host_trace

LOOKUP = "emb/embedding_lookup:ResourceGather"


def _found(run):
    report = analyze(run)
    return {f.id: f for f in report.findings}, {s.id: s for s in report.skipped}


def test_a_table_in_host_memory(tmp_path):
    """Per 100 ms step: a 10 ms gather and 8 ms of update on the host with the GPU idle, a copy
    back of the gradients. Counted: the 18 ms less a fifth of it (the same work on the GPU),
    and half the 3 ms of exposed copies."""
    found, _ = _found(embedding_trace(tmp_path, where="host"))
    f = found[ID]
    assert f.numbers["cause"] == "tables_on_host"
    assert f.numbers["host_fraction"] == pytest.approx(0.18, abs=0.002)
    assert f.numbers["tables_on_host_fraction"] == pytest.approx(0.16, abs=0.002)
    assert f.numbers["d2h_per_step"] == 1
    # The ids' copy in, the rows' copy in, the gradients' copy back: 1 ms each.
    assert f.numbers["copies_fraction"] == pytest.approx(0.03, abs=0.002)
    saved = 0.18 * (1 - 1 / DEVICE_FASTER) + 0.03 / 2
    assert f.speedup == pytest.approx(1 / (1 - saved), rel=0.01)
    assert f.severity == "medium"
    assert "GPU memory" in f.remedy and "TensorFlow 2.7" not in f.remedy
    assert "ResourceSparseApplyAdagradV2" in f.evidence[0]
    # host_device_pingpong leaves the embedding work and its copies to this finding.
    assert "host_device_pingpong" not in found


def test_severity_follows_the_host_time(tmp_path):
    slow = _found(embedding_trace(tmp_path / "slow", where="host", lookup_ms=25,
                                  update_ms=20, kernel_ms=40))[0][ID]
    assert slow.severity == "high"
    # 1.5 ms of lookups and updates in a 100 ms step: not worth a finding.
    assert ID not in _found(embedding_trace(tmp_path / "small", where="host", lookup_ms=1,
                                            update_ms=0.5))[0]


def test_sparse_ops_around_a_gpu_gather(tmp_path):
    """Seed 002's TF 2.4 profile: ResourceGather on the GPU, Unique and SparseSegmentMean (and
    its gradient) on the CPU, copies both ways between them."""
    found, _ = _found(embedding_trace(tmp_path, where="sparse_ops"))
    f = found[ID]
    assert f.numbers["cause"] == "sparse_ops_on_host" and f.numbers["causes"] == [
        "sparse_ops_on_host"]
    assert f.numbers["host_fraction"] == pytest.approx(0.18, abs=0.002)
    assert f.numbers["d2h_per_step"] == 2
    assert f.severity in ("medium", "high")
    assert "TensorFlow 2.7" in f.remedy
    assert any("ResourceGather kernels" in e for e in f.evidence)
    assert "host_device_pingpong" not in found


def test_tables_on_the_gpu(tmp_path):
    """Every op on the GPU. Its host events (TF 2.5+: on the executor's thread, their launch
    calls on the `/host:CUPTI` plane's line of the same thread id) are launches, not host ops."""
    report = analyze(embedding_trace(tmp_path, where="device"))
    assert ID not in {f.id for f in report.findings} | {s.id for s in report.skipped}
    ev = report.ctx.events
    lookups = ev[(ev["name"] == LOOKUP) & (ev["plane"] == "/host:CPU")]
    assert len(lookups) == 4 and set(lookups["kind"]) == {"launch"}


@pytest.mark.parametrize(("at_ms", "expected"), [(10.0, False), (70.0, True)])
def test_only_the_time_the_gpu_waits_counts(tmp_path, at_ms, expected):
    """A 20 ms host gather each step, while the kernels run (5-65 ms: a lookup for the next
    batch, overlapped) or after them with the device idle."""
    run = gpu_trace(tmp_path, devices=1, kernel_ms=60, h2d_ms=5, host_op=(LOOKUP, at_ms, 20.0))
    f = _found(run)[0].get(ID)
    assert (f is not None) == expected
    if expected:
        assert f.numbers["host_fraction"] == pytest.approx(0.2, abs=0.002)
        # The input's 5 ms copy to the GPU stays, and nothing comes back: no copy counted.
        assert f.numbers["copies_fraction"] == 0
        assert f.speedup == pytest.approx(1 / (1 - 0.2 * (1 - 1 / DEVICE_FASTER)), rel=0.01)


def test_pingpong_keeps_the_other_host_work(tmp_path):
    """A host py_function after a copy back, and a host gather after it: each finding takes its
    own ops' time."""
    run = gpu_trace(tmp_path, devices=1, kernel_ms=50, pingpong_ms=15,
                    host_op=(LOOKUP, 70.0, 15.0))
    found, _ = _found(run)
    assert found[ID].numbers["host_fraction"] == pytest.approx(0.15, abs=0.002)
    pingpong = found["host_device_pingpong"]
    assert "less 15.0% of embedding ops (embeddings_on_host)" in pingpong.evidence
    # Its own copies' half went to embeddings_on_host: 15% of host work is left.
    assert pingpong.step_fraction == pytest.approx(0.15, abs=0.01)


def test_cpu_only_and_pytorch_traces_are_skipped(tmp_path):
    def gathers(b, host, main, comp, t0, i):
        comp.event(LOOKUP, t0 + 2 * MS, 30 * MS)

    _, run = host_trace(tmp_path / "cpu", per_step=gathers)
    assert "no accelerator" in _found(run)[1][ID].reason
    from tests.analyzers.test_gpu_signals import _PROCESS, _cpu, _gpu, _write_torch

    ev = [_PROCESS]
    for i in range(2):
        t0 = i * 10_000
        ev += [_cpu("user_annotation", f"ProfilerStep#{i}", t0, 9_900),
               _gpu("kernel", "ampere_sgemm_128x64_nn", t0, 4_000),
               _cpu("cpu_op", "aten::embedding_bag", t0 + 4_200, 3_800)]
    _write_torch(tmp_path / "torch", ev)
    assert "TensorFlow op types" in _found(tmp_path / "torch")[1][ID].reason


def test_run_once_per_report(tmp_path, monkeypatch):
    """host_device_pingpong asks for this finding too: one detection per run."""
    calls = []
    detect = embeddings_on_host.detect
    monkeypatch.setattr(embeddings_on_host, "detect", lambda ctx: calls.append(1) or detect(ctx))
    analyze(embedding_trace(tmp_path, where="host"))
    assert len(calls) == 1


def test_each_copy_is_counted_once(tmp_path):
    """5 ms copies: the ids' and the rows' in before anything comes back (exposed_input_copy
    counts them as the step's input), the gradients' back (this finding's); pingpong is left
    none."""
    found, _ = _found(embedding_trace(tmp_path, where="host", copy_ms=5))
    assert found["exposed_input_copy"].numbers["copy_fraction"] == pytest.approx(0.10, abs=0.002)
    assert found[ID].numbers["copies_fraction"] == pytest.approx(0.05, abs=0.002)
    assert "host_device_pingpong" not in found


def test_a_lone_gather_is_no_table(tmp_path):
    """A host `GatherV2` alone (real Keras 2.4 GPU traces: a gather picking samples out of the
    host batch, 28 ms a step) is other host work, not a table's lookup; the same time in a
    `ResourceGather` is."""
    for op, table in (("GatherV2:GatherV2", False), (LOOKUP, True)):
        run = gpu_trace(tmp_path / str(table), devices=1, kernel_ms=60, host_op=(op, 70.0, 20.0))
        assert (ID in _found(run)[0]) == table


def test_a_gather_beside_sparse_ops_only_is_no_table(tmp_path):
    """A host SparseSegmentMean (an anchor of the sparse ops) and a 28 ms plain GatherV2: the
    gather is not a table's lookup, only a table op admits it."""
    from tests.analyzers.xspace_builder import XSpaceBuilder

    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    main, ops = host.line("python3", line_id=1), host.line("tf_Compute/11", line_id=11)
    gpu = b.plane("/device:GPU:0", plane_id=1)
    kern, d2h = gpu.line("Stream #7(Kernel)", line_id=7), gpu.line("Stream #15(MemcpyD2H)", 15)
    for i in range(4):
        t0 = i * 100 * MS
        main.event("train", t0, 100 * MS - 1000, step_num=i, _r=1)
        kern.event("volta_sgemm_128x64_nn", t0 + MS, 50 * MS, device_id=0)
        d2h.event("MemcpyD2H", t0 + 51 * MS, MS // 10, device_id=0)
        ops.event("emb/embedding_lookup_sparse:SparseSegmentMean", t0 + 52 * MS, 10 * MS)
        ops.event("GatherV2:GatherV2", t0 + 62 * MS, 28 * MS)
    f = _found(b.write(tmp_path))[0][ID]
    assert f.numbers["causes"] == ["sparse_ops_on_host"]
    assert f.numbers["host_fraction"] == pytest.approx(0.10, abs=0.002)
