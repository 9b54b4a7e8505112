"""Which rank wrote a PyTorch profiler trace: Kineto records `distributedInfo` (rank, world
size, backend) and `host_name` at the head of each file (docs/trace-signals.md, "PyTorch
ranks"). `tensorboard_trace_handler` names files by a worker name, `<hostname>_<pid>` unless
given, which says nothing of the rank, and ranks given one `worker_name` write files that differ
only in their timestamps, as a process's cycles do. `data/pytorch-cpu-gloo/` holds both ranks of
a 2-rank DDP job on the CPU (gloo), balanced or with rank 1 the straggler."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest

from analyzers.ingest.chrome_trace import read_chrome_trace
from analyzers.ingest.kineto_header import KinetoHeader, kineto_header
from analyzers.ingest.logdir import load_run
from analyzers.report import analyze, render_text

DATA = Path(__file__).parent / "data"
GLOO = DATA / "pytorch-cpu-gloo"


def _handler_folder(tmp: Path, files: dict[str, str]) -> Path:
    """A folder as tensorboard_trace_handler leaves it: {target name: fixture name}."""
    run = tmp / "tb"
    run.mkdir()
    for target, source in files.items():
        (run / target).write_bytes((GLOO / source).read_bytes())
    return run


def test_default_worker_names_are_read_as_ranks(tmp_path):
    run = _handler_folder(tmp_path, {
        "vm_4242.1795862768227995881.pt.trace.json.gz": "straggler_rank0.json.gz",
        "vm_4243.1795862768226491901.pt.trace.json.gz": "straggler_rank1.json.gz"})
    report = analyze(run)
    assert report.ctx.hosts == ["rank 0 (vm_4242)", "rank 1 (vm_4243)"]
    assert report.run.world_size == 2 and report.ctx.one_machine == "vm"
    found = {f.id: f for f in report.findings}
    assert found["straggler_worker"].numbers["straggler"] == "rank 1 (vm_4243)"
    assert "Worker rank 1 (vm_4243) is the straggler" in found["straggler_worker"].title
    assert "hardware: CPU only, 2 of 2 ranks, 2 device(s)" in render_text(report)


def test_ranks_sharing_a_worker_name_are_not_cycles(tmp_path):
    """worker_name="trainer" on both ranks, two cycles each: the balanced job's files first, the
    straggler's last. Read by name alone, rank 0's last file was an earlier cycle of rank 1's
    and was left out: one host, whose gloo wait read as collective time."""
    run = _handler_folder(tmp_path, {
        "trainer.1795862733538583019.pt.trace.json.gz": "balanced_rank0.json.gz",
        "trainer.1795862733538566474.pt.trace.json.gz": "balanced_rank1.json.gz",
        "trainer.1795862768227995881.pt.trace.json.gz": "straggler_rank0.json.gz",
        "trainer.1795862768226491901.pt.trace.json.gz": "straggler_rank1.json.gz"})
    report = analyze(run)
    assert report.ctx.hosts == ["rank 0 (trainer)", "rank 1 (trainer)"]
    assert sorted(f.name.split(".")[1] for f in report.run.trace_files) == [
        "1795862768226491901", "1795862768227995881"]
    assert any("2 other PyTorch profiling cycle(s)" in w for w in report.run.warnings)
    found = {f.id: f for f in report.findings}
    assert found["straggler_worker"].numbers["straggler"] == "rank 1 (trainer)"


def test_names_that_say_the_rank_are_kept(tmp_path):
    run = _handler_folder(tmp_path, {"rank0.pt.trace.json.gz": "balanced_rank0.json.gz",
                                     "worker-rank_1.pt.trace.json.gz": "balanced_rank1.json.gz"})
    assert load_run(run).hosts == ["rank0", "worker-rank_1"]


def test_one_rank_alone_knows_its_group(tmp_path):
    """gloo writes no "Group size" on its events: the header's world size is the group."""
    run = _handler_folder(tmp_path, {
        "vm_4242.1795862768227995881.pt.trace.json.gz": "straggler_rank0.json.gz"})
    report = analyze(run)
    assert report.ctx.hosts == ["rank 0 (vm_4242)"] and report.ctx.one_machine is None
    coll = {f.id: f for f in report.findings}["collective_overhead"]
    assert coll.numbers["group_size"] == 2 and coll.numbers["peers_outside"]
    assert "in a group of 2, 1 in this trace" in coll.title
    assert report.to_dict()["hardware"]["world_size"] == 2
    assert "hardware: CPU only, 1 of 2 ranks, 1 device(s)" in render_text(report)


def test_processes_without_ranks_keep_their_worker_names():
    """A single process (no distributedInfo) and a trace whose writer records none."""
    cycles = sorted((DATA / "pytorch-cpu-cycles").glob("*.pt.trace.json.gz"))
    single = load_run(cycles[-1])
    assert single.hosts == ["vm_21481"] and single.world_size is None
    assert "ranks" not in render_text(analyze(cycles[-1])).splitlines()[1]
    assert kineto_header(cycles[-1]) == KinetoHeader(machine="vm")
    old = DATA / "kineto-2021" / "resnet50_num_workers_0.json.gz"
    # Its header names the GPUs only (4 V100s), no ranks.
    assert kineto_header(old) == KinetoHeader(gpus=(("Tesla V100-DGXS-32GB", 7, 0),) * 4)
    assert load_run(old).world_size is None


def test_header_of_a_gpu_rank_and_of_a_truncated_file(tmp_path):
    gpu = kineto_header(DATA / "pytorch-gpu" / "ddp_cnn_rank0.json.gz")
    assert gpu == KinetoHeader(rank=0, world_size=2, backend="nccl", machine=None,
                               gpus=(("NVIDIA A100-PG509-200", 8, 0),) * 8)
    # The head is read from a partial gzip stream: the file's first 2 KB hold it.
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(gzip.decompress((GLOO / "balanced_rank1.json.gz").read_bytes()))
                    [:2048])
    assert kineto_header(cut) == KinetoHeader(rank=1, world_size=2, backend="gloo",
                                              machine="vm")


@pytest.mark.parametrize("content", [b"", b"\x1f\x8b\x08garbage", b"not json at all",
                                     b'{"distributedInfo": {"rank": "one"}, "traceEvents": []}',
                                     b'{"traceEvents": [], "distributedInfo": {"rank": 1}}'])
def test_headers_that_say_nothing(tmp_path, content):
    """Empty, corrupt, not JSON, a rank that is not a number, or metadata after the events
    (not Kineto's order: only the head is read)."""
    f = tmp_path / "t.json"
    f.write_bytes(content)
    assert kineto_header(f) is None


def _with_early_event(source: Path, target: Path, early_us: float) -> None:
    """A rank's trace with one more event `early_us` before its first: a rank whose profiler
    caught a little more before its first step (a DataLoader fetch, a trailing backward)."""
    doc = json.loads(gzip.decompress(source.read_bytes()))
    xs = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    first = min(xs, key=lambda e: e["ts"])
    early = copy.deepcopy(first) | {"ts": first["ts"] - early_us, "dur": 1, "name": "early"}
    doc["traceEvents"].append(early)
    target.write_bytes(gzip.compress(json.dumps(doc).encode()))


def test_ranks_line_up_on_kineto_base_time_not_on_their_first_events(tmp_path):
    """Kineto since PyTorch ~2.0 writes timestamps counted from `baseTimeNanoseconds`, not unix
    microseconds. Read as relative times, each rank's file started at its first event: one
    event 8 ms earlier on rank 1 moved its whole trace 8 ms against rank 0's, and the straggler
    job's 5% collective_overhead finding was gone (collective 9% -> 2% of the step)."""
    doc = json.loads(gzip.decompress((GLOO / "straggler_rank0.json.gz").read_bytes()))
    first_us = min(e["ts"] for e in doc["traceEvents"] if e.get("ph") == "X")
    t0 = read_chrome_trace(GLOO / "straggler_rank0.json.gz", "r0")[1]
    assert t0 == doc["baseTimeNanoseconds"] + round(first_us * 1000)  # unix ns
    plain = analyze(_handler_folder(tmp_path, {
        "rank0.pt.trace.json.gz": "straggler_rank0.json.gz",
        "rank1.pt.trace.json.gz": "straggler_rank1.json.gz"}))
    shifted_dir = tmp_path / "b"
    shifted_dir.mkdir()
    (shifted_dir / "rank0.pt.trace.json.gz").write_bytes(
        (GLOO / "straggler_rank0.json.gz").read_bytes())
    _with_early_event(GLOO / "straggler_rank1.json.gz", shifted_dir / "rank1.pt.trace.json.gz",
                      8000.0)
    shifted = analyze(shifted_dir)
    for report in (plain, shifted):
        found = {f.id: f for f in report.findings}
        assert found["straggler_worker"].numbers["straggler"] == "rank1"
        assert "collective_overhead" in found
    assert shifted.ctx.fractions == pytest.approx(plain.ctx.fractions, abs=0.005)
    assert shifted.ctx.steps.median_step_ns() == pytest.approx(plain.ctx.steps.median_step_ns(),
                                                               rel=0.01)
