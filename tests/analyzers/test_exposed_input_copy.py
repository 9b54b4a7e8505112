"""`exposed_input_copy` on code-built one-GPU traces (tests/analyzers/traces.py,
`input_copy_trace`, the layout of real Keras 2.4 GPU traces): the batch's copy inside the step,
the same copy prefetched under the kernels, a host op beside the copy, a copy longer than the
kernels can hide, several GPUs fed one after another, copies of a bounce, CPU-only traces."""

from __future__ import annotations

import pytest

from analyzers.detectors.exposed_input_copy import ID
from analyzers.report import analyze
from tests.analyzers.traces import MS, gpu_trace, host_trace, input_copy_trace


def _found(run):
    return {f.id: f for f in analyze(run).findings}


def test_a_batch_copied_inside_the_step(tmp_path):
    """A 100 MB batch copied in 30 ms of each 100 ms step, 50 ms of kernels after it. The
    breakdown calls it a host-to-device copy: the `_Send` holding its CUDA call is not a
    transfer between devices."""
    report = analyze(input_copy_trace(tmp_path))
    assert report.ctx.fractions["copy_h2d"] == pytest.approx(0.30, abs=0.002)
    assert report.ctx.fractions["copy_d2d"] == 0.0
    # The labels' send, waiting beside the copy without a call of its own, is the input's too.
    labels = analyze(input_copy_trace(tmp_path / "labels", labels_send=True)).ctx.fractions
    assert labels["copy_d2d"] == 0.0 and labels["copy_h2d"] == pytest.approx(0.30, abs=0.002)
    f = {f.id: f for f in report.findings}[ID]
    assert f.numbers["copy_fraction"] == pytest.approx(0.30, abs=0.002)
    assert f.numbers["mb_per_step"] == pytest.approx(100.66, abs=0.01)
    assert f.numbers["gb_per_s"] == pytest.approx(3.36, abs=0.01)
    assert f.speedup == pytest.approx(1 / 0.7, rel=0.01) and f.severity == "high"
    assert any("pageable" in e for e in f.evidence)
    assert "prefetch_to_device" in f.remedy and "beside the copy" not in f.remedy


def test_a_prefetched_copy_costs_nothing(tmp_path):
    assert ID not in _found(input_copy_trace(tmp_path, prefetched=True))


def test_small_copies_are_not_worth_a_finding(tmp_path):
    assert ID not in _found(input_copy_trace(tmp_path, copy_ms=2, size=1_000_000))
    # Pinned-memory rate: the pageable note is left out.
    fast = _found(input_copy_trace(tmp_path / "fast", copy_ms=8, size=100_000_000))[ID]
    assert not any("pageable" in e for e in fast.evidence)


def test_a_host_op_beside_the_copy_is_counted_with_it(tmp_path):
    """A 35 ms host gather starting with the 30 ms copy (the real traces' GatherV2): the GPU waits
    for both, so the finding takes the union and names the op; host_device_pingpong leaves it."""
    found = _found(input_copy_trace(tmp_path, beside=("GatherV2:GatherV2", 35.0)))
    f = found[ID]
    assert f.step_fraction == pytest.approx(0.35, abs=0.002)
    assert f.numbers["host_fraction"] == pytest.approx(0.35, abs=0.002)
    assert "GatherV2:GatherV2" in f.remedy
    pingpong = found.get("host_device_pingpong")
    assert pingpong is None or pingpong.step_fraction < 0.01


def test_the_estimate_is_capped_by_the_kernels(tmp_path):
    """A 50 ms copy before 20 ms of kernels: prefetched, it hides under 20 ms at most."""
    f = _found(input_copy_trace(tmp_path, copy_ms=50, kernel_ms=20))[ID]
    assert f.step_fraction == pytest.approx(0.5, abs=0.002)
    assert f.speedup == pytest.approx(1 / 0.8, rel=0.01)
    assert any("capped" in e for e in f.evidence)


def test_gpus_fed_one_after_another_are_serialized_h2d(tmp_path):
    found = _found(gpu_trace(tmp_path, devices=4, h2d_ms=8, kernel_ms=50))
    assert found["serialized_h2d"].severity in ("medium", "high")
    assert ID not in found
    # One GPU fed the same way: the copy is this finding's.
    one = _found(gpu_trace(tmp_path / "one", devices=1, h2d_ms=30, kernel_ms=50))
    assert one[ID].numbers["copy_fraction"] == pytest.approx(0.30, abs=0.002)


def test_copies_after_a_result_came_back_are_not_the_input(tmp_path):
    """A bounce: a copy back, a host op, its result copied to the GPU with the GPU idle."""
    from tests.analyzers.xspace_builder import Ref, XSpaceBuilder

    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    main, ops = host.line("python3", line_id=1), host.line("tf_Compute/11", line_id=11)
    gpu = b.plane("/device:GPU:0", plane_id=1)
    kern = gpu.line("Stream #13(Compute)", line_id=13)
    h2d, d2h = gpu.line("Stream #14(MemcpyH2D)", 14), gpu.line("Stream #15(MemcpyD2H)", 15)
    for i in range(4):
        t0 = i * 100 * MS
        main.event("train", t0, 100 * MS - 1000, step_num=i, _r=1)
        kern.event("volta_sgemm_128x64_nn", t0 + MS, 40 * MS, device_id=0)
        d2h.event("MemcpyD2H", t0 + 41 * MS, MS, device_id=0)
        ops.event("postprocess/EagerPyFunc:EagerPyFunc", t0 + 42 * MS, 10 * MS)
        h2d.event("MemcpyH2D", t0 + 52 * MS, 20 * MS, device_id=0,
                  memcpy_details=Ref("size:1000000 dest:0 async:1"))
        kern.event("volta_sgemm_128x64_nn", t0 + 72 * MS, 20 * MS, device_id=0)
    found = _found(b.write(tmp_path))
    assert ID not in found
    assert found["host_device_pingpong"].severity in ("medium", "high")
    assert found["host_device_pingpong"].title == "The step bounces between host and device"


def test_host_ops_before_any_copy_back_are_no_bounce(tmp_path):
    """A 30 ms py_function at the step's start (its input's copy too small to count), the loss
    read back at the end: host_device_pingpong reports host-only ops, not a bounce."""
    run = input_copy_trace(tmp_path, copy_ms=0.5, beside=("pre/EagerPyFunc:EagerPyFunc", 30.0))
    found = _found(run)
    assert ID not in found
    f = found["host_device_pingpong"]
    assert f.title == "Host-only ops run inside the step while the device idles"
    assert f.step_fraction == pytest.approx(0.3, abs=0.01)


def test_cpu_only_traces_have_no_device_copy(tmp_path):
    _, run = host_trace(tmp_path)
    report = analyze(run)
    assert ID not in {f.id for f in report.findings} | {s.id for s in report.skipped}


def test_the_reference_trainers_fix(tmp_path):
    """A run of the reference trainer with per-device copies from Python (`input_copy: serial`),
    on one GPU: the remedy's config change is its distributed, prefetched dataset."""
    import json

    run = input_copy_trace(tmp_path)
    (run / "recadvisor_run.json").write_text(json.dumps({"config": {"input_copy": "serial"}}))
    f = _found(run)[ID]
    assert f.config_changes == {"input_copy": "distributed"}
    assert f.fix_command and "--input-copy distributed" in f.fix_command


@pytest.mark.parametrize(("op", "owner"), [
    ("emb/embedding_lookup:ResourceGather", "embeddings_on_host"),
    ("hash/StringToHashBucketFast:_TensorToHashBucketFast", "preprocessing_in_step")])
def test_ops_beside_the_copy_that_another_finding_counts(tmp_path, op, owner):
    """A 35 ms host op beside the 30 ms copy that another detector counts on its own: the copy
    is this finding's, the op that one's, once each."""
    found = _found(input_copy_trace(tmp_path, beside=(op, 35.0)))
    f = found[ID]
    assert f.step_fraction == pytest.approx(0.30, abs=0.002)
    assert f.numbers["host_fraction"] == 0 and op not in f.remedy
    assert found[owner].step_fraction == pytest.approx(0.35, abs=0.01)
