"""The analyzer on traces recorded with a TensorFlow other than the one CI installs.

`data/tf2.15/<mode>.xplane.pb.gz`: `python tests/analyzers/foreign_jobs.py DIR <mode>` run with
tensorflow-cpu 2.15.1 (Keras 2.15, Python 3.11) on 2026-11-23 (the `session_*` and
`keras_validation` modes on 2026-11-24), the xplane gzipped. Keras 2's fit
writes `train` step markers (Keras 3 in TF 2.21 writes none); the rest of the event vocabulary is
the same (docs/trace-signals.md, "TF 2.15"). No TensorFlow is needed to run these tests.

`data/tf2.4-gpu/bert_multiworker.xplane.pb.gz`: a real TF GPU trace, not ours (data/README.md):
BERT fine-tuning under MultiWorkerMirroredStrategy, TF 2.2-2.4 era, CUDA GPUs.
`data/pytorch-gpu/ddp_cnn_rank0.json.gz`: a real PyTorch profiler trace, rank 0 of a 2-GPU DDP job
(A100, NCCL) from HolisticTraceAnalysis's test data (data/README.md).
`data/pytorch-cpu-gloo/*.json.gz`: both ranks of a 2-rank DDP job on the CPU (gloo), balanced
or with rank 1 slower, recorded by `torch_ddp_job.py` with torch 2.13.0 CPU (data/README.md).
`data/kineto-2021/resnet50_num_workers_{0,4}.json.gz`: the PyTorch profiler's own TensorBoard
plugin samples (Kineto, 2021: capitalized event categories), ResNet-50 on a V100 with
DataLoader(num_workers=0) and with 4 workers (data/README.md).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from analyzers.report import analyze, render_text

DATA = Path(__file__).parent / "data"

# trace -> (the only medium/high finding and its severity, or None; profiled steps)
CASES = {
    "tf2.15/generator": (("input_preprocessing", "high"), 12),
    "tf2.15/keras_spe1": (("per_step_overhead", "high"), 12),
    "tf2.15/eager": (("eager_execution", "high"), 30),
    "tf2.15/graph": (("per_step_overhead", "high"), 30),
    "tf2.15/retrace": (("function_retracing", "high"), 15),
    "tf2.15/stable": (("per_step_overhead", "high"), 15),
}


def _report(tmp_path: Path, name: str):
    run = tmp_path / "plugins" / "profile" / "2026_11_23_09_56_00"
    run.mkdir(parents=True)
    (run / "vm.xplane.pb").write_bytes(gzip.decompress((DATA / f"{name}.xplane.pb.gz")
                                                       .read_bytes()))
    return analyze(tmp_path)


@pytest.mark.parametrize("name", sorted(CASES))
def test_recorded_trace_is_diagnosed(tmp_path, name):
    (expected, severity), n_steps = CASES[name]
    report = _report(tmp_path, name)
    assert report.ctx.steps.source == "markers:train" and report.ctx.n_steps == n_steps
    strong = {f.id: f.severity for f in report.findings if f.severity in ("medium", "high")}
    assert strong == {expected: severity}, report.findings
    assert not report.window_warnings()


def test_recorded_causes_and_remedies(tmp_path):
    found = {f.id: f for f in _report(tmp_path / "g", "tf2.15/generator").findings}
    assert found["input_preprocessing"].numbers["causes"] == ["python_function"]
    found = {f.id: f for f in _report(tmp_path / "k", "tf2.15/keras_spe1").findings}
    assert found["per_step_overhead"].numbers["suggested_steps_per_call"] == 4
    # Keras and the custom loop fetch their batches inside the function: no eager fetch named.
    for name in ("keras_spe1", "graph"):
        f = {f.id: f for f in _report(tmp_path / f"f{name}", f"tf2.15/{name}").findings}[
            "per_step_overhead"]
        assert f.numbers["fetched_from_python"] == 0.0, f.numbers
        assert "steps_per_execution=4" in f.remedy and "pass the iterator" not in f.remedy
    # The step is compiled in the twins of the eager and retraced jobs.
    for twin in ("graph", "stable"):
        ids = {f.id for f in _report(tmp_path / twin, f"tf2.15/{twin}").findings}
        assert not ids & {"eager_execution", "function_retracing"}


def test_recorded_session_jobs(tmp_path):
    """TF1-style `Session.run` loops (docs/trace-signals.md, "TF1 sessions"), no step markers:
    the steps are the training thread's 20 runs. Beside it, two queue-runner threads made ~2,500
    runs each; their executor work is not the step's dispatch overhead, and the training run's
    wait on their queue is `queue_input`."""
    ckpt = _report(tmp_path / "c", "tf2.15/session_checkpoint")
    assert ckpt.ctx.steps.source == "session:SessionRun" and ckpt.ctx.n_steps == 20
    found = {f.id: f for f in ckpt.findings if f.severity in ("medium", "high")}
    assert list(found) == ["step_stalls"] and found["step_stalls"].severity == "high"
    assert found["step_stalls"].numbers["cause"] == "checkpoint"
    assert found["step_stalls"].numbers["period_steps"] == 5
    assert "Saver.save" in found["step_stalls"].remedy
    queue = _report(tmp_path / "q", "tf2.15/session_queue")
    ctx = queue.ctx
    assert ctx.steps.source == "session:SessionRun" and ctx.n_steps == 20
    runs = ctx.events[ctx.events["name"] == "SessionRun"]
    per_thread = runs.groupby("line_id", observed=True).size()
    assert per_thread[ctx.steps.thread[2]] == 20 and per_thread.max() > 1000
    # Its wait on the queue: the training run idle 82% of the step, which the breakdown counts
    # as framework; the queue runners' executor work is not the step's dispatch overhead.
    strong = {f.id: f for f in queue.findings if f.severity in ("medium", "high")}
    assert list(strong) == ["queue_input"] and strong["queue_input"].severity == "high"
    assert strong["queue_input"].step_fraction > 0.6


def test_recorded_keras_2_fit_with_validation(tmp_path):
    """Keras 2 fit over 3 epochs of 12 batches with 24 validation batches each, profiled around
    the whole fit (docs/trace-signals.md, "Epochs and validation"): Keras 2 marks validation
    batches `test` like training ones `train`, and numbers both from 0 each epoch. The steps
    are the 36 training batches; what stalls at the two epochs' ends is the evaluation, once
    an epoch."""
    report = _report(tmp_path, "tf2.15/keras_validation")
    steps = report.ctx.steps
    assert steps.source == "markers:train" and report.ctx.n_steps == 36
    assert steps.epoch_ends.tolist() == [11, 23] and steps.epoch_rows == 12
    strong = {f.id: f for f in report.findings if f.severity in ("medium", "high")}
    assert list(strong) == ["step_stalls"], report.findings
    f = strong["step_stalls"]
    assert f.numbers["cause"] == "evaluation" and f.numbers["period_steps"] == 12
    assert f.numbers["stalled_steps"] == [11, 23] and "validation_freq" in f.remedy
    assert f.top_events[0]["name"] == "test_function" and f.top_events[0]["count"] == 48


def test_recorded_tf_gpu_trace(tmp_path):
    """TensorFlow's own GPU demo profile (docs/trace-signals.md, "GPU traces"): no host step
    markers, xprof's derived lines saved in the device planes, CUPTI launches on the thread that
    runs the GPU ops. The analyzer said "no steps found" on it before these signals were read."""
    report = _report(tmp_path, "tf2.4-gpu/bert_multiworker")
    ctx = report.ctx
    assert ctx.has_accelerator
    assert ctx.steps.source == "device:Steps (/device:GPU:4)" and ctx.n_steps == 1
    assert ctx.steps.median_step_ns() == pytest.approx(19.87e6, rel=0.01)
    # The derived `TensorFlow Ops`/`Name Scope` lines repeat the kernels: counted, the device
    # would read busy for the whole step. The compute stream alone is busy 14.87 ms of 19.87.
    assert ctx.fractions["device_compute"] == pytest.approx(0.75, abs=0.02)
    # The rest: one thread launching 665 short kernels (GPU idle in ~350 gaps of 5-20 µs) ahead
    # of the input pipeline's one 1.4 ms gap.
    assert ctx.fractions["launch"] > ctx.fractions["input_wait"] > 0.02
    found = {f.id: f for f in report.findings}
    launch = found["kernel_launch_overhead"]
    assert launch.numbers["ops_per_step"] == 665
    assert launch.step_fraction == pytest.approx(0.13, abs=0.03)
    # Severity follows the estimate: half of ~13% is a low-severity gain.
    assert {f.id for f in report.findings if f.severity in ("medium", "high")} == set()
    # One step: the report says what that leaves uncertain, with TF's way to profile more.
    [warning] = report.to_dict()["warnings"]
    assert warning.startswith("the window holds one step") and "profile_batch" in warning


def test_recorded_pytorch_gpu_trace(tmp_path):
    """A launch-bound PyTorch DDP step (docs/trace-signals.md, "PyTorch GPU traces"): the GPU
    runs kernels about a fifth of the step while the host thread dispatches ~930 small kernels;
    rank 0's trace alone (docs/trace-signals.md, "One worker's trace")."""
    (tmp_path / "rank0.pt.trace.json.gz").write_bytes(
        (DATA / "pytorch-gpu" / "ddp_cnn_rank0.json.gz").read_bytes())
    report = analyze(tmp_path)
    ctx = report.ctx
    assert ctx.steps.source == "markers:ProfilerStep#N" and ctx.n_steps == 3
    assert ctx.framework == "pytorch"
    # Kineto's GPU copies of the DDP forward/backward annotations span most of the step: read
    # as kernels they made the GPU look 60% busy.
    assert ctx.fractions["device_compute"] < 0.25
    assert ctx.fractions["launch"] > 0.4
    found = {f.id: f for f in report.findings}
    launch = found["kernel_launch_overhead"]
    assert launch.severity == "high" and launch.numbers["ops_per_step"] > 900
    assert "torch.compile" in launch.remedy and "jit_compile" not in launch.remedy
    # Rank 1 is not in the folder: its NCCL kernels' and `record_param_comms`' "Group size" of 2
    # says so. The exposed all-reduce (8% of the step) may hold a wait for rank 1: an upper
    # bound, with a medium gain; the remedy first asks for every rank's trace.
    assert ctx.collective_group_size == 2
    coll = found["collective_overhead"]
    assert coll.numbers["peers_outside"] and coll.numbers["group_size"] == 2
    assert 0.05 < coll.step_fraction < 0.1 and coll.severity == "medium"
    assert "tensorboard_trace_handler" in coll.remedy and "bucket_cap_mb" in coll.remedy


def test_recorded_kineto_2021_dataloader_traces(tmp_path):
    """ResNet-50 on a V100 fed by DataLoader(num_workers=0), then by 4 workers (docs/trace-
    signals.md, "PyTorch DataLoader"). Kineto wrote GPU events as `Kernel`/`Memcpy`/`Memset` on a
    pid named like the process: read as host events they made the trace CPU-only and the
    step 63% launch. With num_workers=0 every step waits ~60 ms while the training thread
    loads the batch; the 4-worker run's median step is 126.6 ms against 176.3 ms (1.39x)."""
    def report(name: str):
        (tmp_path / name).mkdir()
        (tmp_path / name / "worker0.pt.trace.json.gz").write_bytes(
            (DATA / "kineto-2021" / f"{name}.json.gz").read_bytes())
        return analyze(tmp_path / name)

    slow = report("resnet50_num_workers_0")
    ctx = slow.ctx
    assert ctx.has_accelerator and ctx.framework == "pytorch" and ctx.n_steps == 6
    assert ctx.fractions["device_compute"] > 0.5 and ctx.fractions["launch"] < 0.15
    found = {f.id: f for f in slow.findings if f.severity in ("medium", "high")}
    # FP32 convolutions on a V100 (test_no_mixed_precision.py): the other medium finding.
    assert list(found) == ["input_preprocessing", "no_mixed_precision"], found
    f = found["input_preprocessing"]
    assert f.numbers["causes"] == ["in_process_loading"] and f.severity == "high"
    # 69 ms of loading a step against 117 ms of the rest: one worker keeps up, one more spare.
    assert f.numbers["suggested_num_workers"] == 2
    # Per-example transforms inside each fetch: 32 ToTensor conversions or more for a batch of
    # 32, in each of the 6 fetches (top events count over the window).
    assert f.top_events[0]["count"] >= 32 * 6
    measured = 176.3 / 126.6
    assert abs(f.speedup / measured - 1) <= 0.25, f.speedup
    fed = report("resnet50_num_workers_4")
    assert fed.ctx.fractions.get("input_wait", 0.0) < 0.02
    # Launches: the top events are the small kernels fusion would remove (2,485 elementwise adds
    # of 3 µs), not the convolutions that hold most of the time (80 ms in 162 kernels), and the
    # text shows what a kernel computes, without its namespaces and parameter types.
    launch = {f.id: f for f in fed.findings}["kernel_launch_overhead"]
    top = launch.top_events[0]
    assert "AddFunctor<float>" in top["name"] and top["count"] == 2485
    assert top["name"].startswith("void at::native::")  # JSON keeps the name whole
    line = next(x for x in render_text(fed).splitlines() if "top events" in x and "Add" in x)
    assert "top events: …_elementwise_kernel<4, AddFunctor<float>, Array<char*, 3> > 4.773 ms" \
        in line
    assert "65% of them under 20 µs" in launch.evidence[0]
    assert fed.ctx.steps.median_step_ns() / 1e6 == pytest.approx(126.6, abs=0.1)
    assert "input_preprocessing" not in {f.id for f in fed.findings}


def test_recorded_estimator_profiler_hook_timelines():
    """`tf.estimator.ProfilerHook(save_steps=5)` timelines of the TF 2.15 Estimator job (6 of
    its timeline-<step>.json files, gzipped; docs/trace-signals.md, "TF1 RunMetadata
    timelines"): each file one traced run, steps 5 apart. The per-example pipeline's wait is
    named with its cause unknown (tf.data leaves no event there); the batched twin waits 4%."""
    per_example = analyze(DATA / "tf2.15/profiler_hook_per_example")
    steps = per_example.ctx.steps
    assert steps.source == "markers:RunMetadata timeline" and per_example.run.hosts == [
        "localhost:0"] * 6
    assert steps.table["step"].tolist() == [20, 25, 30, 35, 40, 45]
    # Each window is its file's run (ms), not the 5 untraced steps up to the next file.
    assert (steps.table["dur_ns"] < 20e6).all()
    found = {f.id: f for f in per_example.findings if f.severity in ("medium", "high")}
    assert list(found) == ["input_preprocessing"], found
    f = found["input_preprocessing"]
    assert f.severity == "high" and f.numbers["pipeline_traced"] is False
    assert "RunMetadata timeline" in " ".join(f.evidence) and "TF2 profiler" in f.remedy
    batched = analyze(DATA / "tf2.15/profiler_hook_batched")
    assert batched.ctx.n_steps == 6
    assert not [f for f in batched.findings if f.severity in ("medium", "high")]


def _gloo(tmp_path: Path, job: str, ranks: tuple[int, ...]) -> Path:
    """`data/pytorch-cpu-gloo/<job>_rank<r>.json.gz` of the given ranks, in one folder."""
    folder = tmp_path / f"{job}_{'_'.join(map(str, ranks))}"
    folder.mkdir()
    for r in ranks:
        (folder / f"rank{r}.pt.trace.json.gz").write_bytes(
            (DATA / "pytorch-cpu-gloo" / f"{job}_rank{r}.json.gz").read_bytes())
    return folder


def test_recorded_pytorch_cpu_ddp_ranks(tmp_path):
    """Two DDP ranks on the CPU (gloo), each profiled into one folder (`torch_ddp_job.py`;
    docs/trace-signals.md, "One worker's trace"). gloo's all-reduce is a `gloo:all_reduce`
    annotation on its own threads, which had read as host compute: no collective at all. Both
    ranks: 16% exposed, peers all here, a CPU remedy (ranks, threads), no straggler. Rank 0
    alone: gloo writes no group size on its events, but the file's `distributedInfo` says 2
    ranks, and gloo collectives on its one device say the peer is elsewhere. Measured on this
    machine: one process with both cores' threads and the global batch ran 1.35-1.90x faster
    than the two ranks (3 pairs)."""
    both = analyze(_gloo(tmp_path, "balanced", (0, 1)))
    assert both.ctx.n_hosts == 2 and both.ctx.framework == "pytorch"
    assert not both.ctx.has_accelerator and both.ctx.n_steps == 6
    assert both.ctx.fractions["collective"] > 0.1
    found = {f.id: f for f in both.findings}
    coll = found["collective_overhead"]
    assert "peers_outside" not in coll.numbers and coll.severity in ("medium", "high")
    assert "torch.set_num_threads" in coll.remedy and "GPU" not in coll.remedy
    assert "straggler_worker" not in found
    alone = {f.id: f for f in analyze(_gloo(tmp_path, "balanced", (0,))).findings}
    one = alone["collective_overhead"]
    assert one.numbers["peers_outside"] and one.numbers["group_size"] == 2
    assert one.remedy.startswith("First profile every rank") and "set_num_threads" in one.remedy


def test_recorded_pytorch_cpu_ddp_straggler(tmp_path):
    """Rank 1 runs 12 more matmuls per step: with both ranks' files rank 0 waits for it in
    gloo's all-reduce, and `straggler_worker` names rank 1 and its compute (2.9x; untraced,
    the balanced job's step is 3.2-3.9x shorter). Rank 0's file alone reads that wait as its
    collective time, an upper bound."""
    found = {f.id: f for f in analyze(_gloo(tmp_path, "straggler", (0, 1))).findings}
    f = found["straggler_worker"]
    assert f.numbers["straggler"] == "rank1" and f.numbers["cause"] == "compute"
    assert "DistributedSampler" in f.remedy and "tf.distribute" not in f.remedy
    assert f.severity == "high" and f.step_fraction > 0.5, f.evidence
    alone = {f.id: f for f in analyze(_gloo(tmp_path, "straggler", (0,))).findings}
    assert alone["collective_overhead"].step_fraction > 0.5
    assert any("upper bound" in e for e in alone["collective_overhead"].evidence)


def test_recorded_clean_preset_on_the_edge_of_an_input_wait(tmp_path, monkeypatch):
    """The reference trainer's `clean` preset from a CI run (data/README.md): 2.1% of the step
    waits on a CPU-bound, prefetched pipeline of prebatched uncompressed records, and the
    sampler shows the model's ops 1.23x slower for sharing the 2 cores with its readers. Nothing
    is left to take away: no finding reaches medium. With the wait counted as the producers'
    witness from the 2% MIN_INPUT_WAIT, as it was, `input_preprocessing` read medium."""
    from analyzers.detectors import input_preprocessing

    src = DATA / "tf2.21" / "clean_preset"
    run = tmp_path / "plugins" / "profile" / "2026_11_29_05_30_48"
    run.mkdir(parents=True)
    (run / "vm.xplane.pb").write_bytes(gzip.decompress((src / "vm.xplane.pb.gz").read_bytes()))
    for name in ("vm.process.parquet", "vm.threads.parquet", "recadvisor_run.json"):
        (run / name).write_bytes((src / name).read_bytes())
    report = analyze(tmp_path)
    assert report.ctx.fractions["input_wait"] == pytest.approx(0.021, abs=0.002)
    assert not [f for f in report.findings if f.severity in ("medium", "high")], report.findings
    monkeypatch.setattr(input_preprocessing, "MIN_PRODUCER_WAIT", 0.02)
    found = {f.id: f for f in analyze(tmp_path).findings}
    assert found["input_preprocessing"].severity == "medium"
    assert found["input_preprocessing"].numbers["contention_slowdown"] > 1.2
    # The trainer fetched each batch from Python then (it now fetches inside the step): 0.61 ms
    # of a 37.6 ms step between the fetch and the step function's span, half the 3.3% per-call
    # overhead, which is below the finding's 10%.
    from analyzers.detectors import per_step_overhead

    monkeypatch.setattr(per_step_overhead, "MIN_OVERHEAD", 0.0)
    f = {f.id: f for f in analyze(tmp_path).findings}["per_step_overhead"]
    assert f.numbers["overhead_fraction"] == pytest.approx(0.033, abs=0.003)
    assert f.numbers["fetched_from_python"] == 1.0
    assert f.numbers["eager_fetch_fraction"] == pytest.approx(0.016, abs=0.002)
    assert f.remedy.startswith("Run 4 steps per call: pass the iterator")
