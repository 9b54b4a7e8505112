"""`collective_overhead` on a trace that holds only some of a collective's participants: a job
profiled on its chief or rank 0 alone (docs/trace-signals.md, "One worker's trace")."""

from __future__ import annotations

import pytest

from analyzers.report import analyze
from tests.analyzers.traces import MS, allreduce, gpu_trace, host_trace

HOROVOD_OP = "DistributedAdam_Allreduce/cond_0/HorovodAllreduce_grads_0:HorovodAllreduce"


def _found(report) -> dict:
    return {f.id: f for f in report.findings}


def test_one_worker_of_two_names_its_group(tmp_path):
    """One of two CPU workers' traces (the `test_cpu_workers_exchanging_over_rpc` job), its
    all-reduce 40% of the step: TF 2.21's group size says a peer is outside the trace. The
    exchange is RPC, won back whole, but may hold a wait for that peer: an upper bound, and
    the remedy first asks for every worker's trace."""
    report = analyze(host_trace(tmp_path, compute_ms=50, per_step=allreduce(52),
                                host_name="localhost_6001")[1])
    assert (report.ctx.n_devices, report.ctx.collective_group_size) == (1, 2)
    f = _found(report)["collective_overhead"]
    assert f.step_fraction == pytest.approx(0.4, abs=0.03) and f.severity == "high"
    assert f.speedup == pytest.approx(1 / (1 - f.step_fraction), rel=0.01)
    assert f.numbers["peers_outside"] and f.numbers["group_size"] == 2
    assert f.title.endswith("in a group of 2, 1 in this trace")
    assert "1 of the collective group's 2 participants" in f.evidence[1]
    assert any("upper bound" in e for e in f.evidence)
    assert f.remedy.startswith("First trace every worker") and "client.trace" in f.remedy
    assert "fewer hosts" in f.remedy and f.config_changes == {}


def test_an_older_tf_without_group_sizes(tmp_path):
    """Without `group_size` stats a collective op on a single device still means peers
    elsewhere (TF issues none for a group of one); how many the trace cannot say."""
    report = analyze(host_trace(tmp_path, compute_ms=50,
                                per_step=allreduce(52, group_size=None))[1])
    assert report.ctx.collective_group_size is None
    f = _found(report)["collective_overhead"]
    assert f.numbers["peers_outside"] and "group_size" not in f.numbers
    assert f.title.endswith("with peers outside this trace")
    assert "participants (at least 2)" in f.evidence[1]


def test_a_group_the_trace_holds_whole(tmp_path):
    """Four replicas of one process (MirroredStrategy names replica i's ops `replica_i/`) in a
    group of four: nobody is outside, and one process's devices on one CPU host only win back
    the redundant reduction."""
    def step(b, host, main, comp, t0, i):
        allreduce(52, group_size=4)(b, host, main, comp, t0, i)
        for r in range(1, 4):
            comp.event(f"replica_{r}/dense/MatMul:MatMul", t0 + 2 * MS, MS)
    report = analyze(host_trace(tmp_path, compute_ms=50, per_step=step)[1])
    assert (report.ctx.n_devices, report.ctx.collective_group_size) == (4, 4)
    f = _found(report)["collective_overhead"]
    assert "peers_outside" not in f.numbers and "First trace" not in f.remedy
    assert f.speedup < 1 / (1 - f.step_fraction)


def test_no_collectives_on_a_lone_device(tmp_path):
    """The same worker without an all-reduce: one device, nothing exchanged, no finding."""
    report = analyze(host_trace(tmp_path, compute_ms=50)[1])
    assert report.ctx.collective_group_size is None
    assert "collective_overhead" not in _found(report)


def test_a_horovod_rank_on_one_gpu(tmp_path):
    """Horovod runs one process per GPU: rank 0's trace holds one GPU whose NCCL all-reduce
    (30 ms of a 100 ms step, after its kernels) no compute hides. Horovod writes no group size;
    the NCCL kernel on a single GPU says the peers are elsewhere, and the remedy is Horovod's."""
    report = analyze(gpu_trace(tmp_path, devices=1, nccl_ms=30, host_op=(HOROVOD_OP, 90, 0.05)))
    assert report.ctx.n_devices == 1
    f = _found(report)["collective_overhead"]
    assert f.step_fraction == pytest.approx(0.3, abs=0.03) and f.severity == "high"
    assert f.numbers["peers_outside"]
    assert "HOROVOD_FUSION_THRESHOLD" in f.remedy and "sparse_as_dense" in f.remedy
    assert "First trace every worker" in f.remedy


@pytest.mark.parametrize("case", ["no_exchange", "hidden_under_compute"])
def test_a_single_gpu_without_exposed_exchange(tmp_path, case):
    """One GPU that exchanges nothing, or whose NCCL all-reduce runs under its kernels."""
    nccl = {"no_exchange": {}, "hidden_under_compute": {"nccl_ms": 30, "nccl_overlapped": True}}
    report = analyze(gpu_trace(tmp_path, devices=1, **nccl[case]))
    assert "collective_overhead" not in _found(report)
