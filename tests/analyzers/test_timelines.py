"""TF1 RunMetadata timelines (`timeline.Timeline(step_stats).generate_chrome_trace_format()`, what
Estimator's ProfilerHook writes as timeline-<step>.json): one traced Session.run per file, built
here the way tensorflow/python/client/timeline.py lays them out (docs/trace-signals.md, "TF1
RunMetadata timelines"). The recorded TF 2.15 ones are in test_recorded_traces.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from analyzers.ingest.logdir import load_run
from analyzers.report import analyze

JOB = "/job:localhost/replica:0/task:0"
T0_US = 1_795_535_903_000_000  # unix microseconds, as step_stats record them


def _timeline(path: Path, start_us: int, ops: list[tuple[str, str, str, float, float]]) -> None:
    """ops: (process, node name, op type, start ms from `start_us`, duration ms)."""
    procs = ["Allocators"] + sorted({p for p, *_ in ops})
    pids = {p: i for i, p in enumerate(procs)}
    events = [{"name": "process_name", "ph": "M", "pid": i, "args": {"name": p}}
              for p, i in pids.items()]
    # Each Compute process has its Tensors twin (tensor snapshots, no ops).
    events += [{"name": "process_name", "ph": "M", "pid": 100 + i,
                "args": {"name": p.replace(" Compute", " Tensors")}}
               for p, i in pids.items() if p.endswith(" Compute")]
    lanes: dict[str, list[float]] = {}
    for proc, node, op, at, dur in ops:
        ends = lanes.setdefault(proc, [])
        # The writer's lanes: the first whose last op has ended.
        lane = next((i for i, e in enumerate(ends) if e < at), len(ends))
        ends[lane:lane + 1] = [at + dur]
        events.append({"ph": "X", "cat": "Op", "name": op, "pid": pids[proc], "tid": lane,
                       "ts": start_us + int(at * 1000), "dur": int(dur * 1000),
                       "args": {"name": node, "op": op}})
    # Dataflow arrows between lanes, as show_dataflow=True writes them.
    events.append({"ph": "s", "cat": "DataFlow", "name": "x", "pid": 1, "tid": 0,
                   "ts": start_us, "id": 0})
    events.append({"ph": "t", "cat": "DataFlow", "name": "x", "pid": 1, "tid": 1,
                   "ts": start_us + 10, "id": 0})
    path.write_text(json.dumps({"traceEvents": events}))


def _cpu_run(folder: Path, wait_ms: float, steps: int = 6, every: int = 5) -> Path:
    """A Session.run loop traced every `every` steps: IteratorGetNext waits `wait_ms`, then a
    forward/backward/update of 4.95 ms; 100 ms of untraced steps between files."""
    folder.mkdir(parents=True)
    cpu = f"{JOB}/device:CPU:0 Compute"
    for i in range(steps):
        ops = [(cpu, "IteratorGetNext", "IteratorGetNext", 0.0, wait_ms)]
        t = wait_ms
        for k, (node, op) in enumerate([("dense/MatMul", "_MklMatMul"),
                                        ("dense/Relu", "Relu"),
                                        ("gradients/dense/MatMul_grad/MatMul", "_MklMatMul"),
                                        ("Adam/update_dense/kernel/ResourceApplyAdam",
                                         "ResourceApplyAdam")]):
            ops.append((cpu, node, op, t + k * 1.25, 1.2))
        # A small op beside them on a second lane.
        ops.append((cpu, "global_step/add", "AssignAddVariableOp", t, 0.1))
        _timeline(folder / f"timeline-{10 + every * i}.json", T0_US + i * 100_000, ops)
    return folder


def test_each_timeline_file_is_one_step_of_one_host(tmp_path):
    report = analyze(_cpu_run(tmp_path / "run", wait_ms=3.0))
    steps = report.ctx.steps
    assert steps.source == "markers:RunMetadata timeline"
    assert steps.table["step"].tolist() == [10, 15, 20, 25, 30, 35]
    # A window is its file's run (7.95 ms), not the 100 ms to the next file.
    assert steps.table["dur_ns"].tolist() == [7_950_000] * 6
    assert report.ctx.hosts == ["localhost:0"] and report.ctx.n_hosts == 1
    names = set(report.ctx.present("name"))
    assert {"dense/MatMul:_MklMatMul", "IteratorGetNext"} <= names
    assert report.ctx.fractions["input_wait"] == pytest.approx(3 / 7.95, abs=0.001)
    assert report.ctx.fractions["host_compute"] == pytest.approx(4.8 / 7.95, abs=0.001)


def test_an_input_wait_without_pipeline_events_is_named_with_its_cause_unknown(tmp_path):
    found = {f.id: f for f in analyze(_cpu_run(tmp_path / "wait", wait_ms=3.0)).findings}
    # Nothing in a timeline says storage: no io_stall.
    assert "io_stall" not in found
    f = found["input_preprocessing"]
    assert f.numbers["pipeline_traced"] is False and f.numbers["causes"] == []
    assert f.speedup == pytest.approx(7.95 / 4.95, rel=0.001) and f.severity == "high"
    assert "upper bound" in " ".join(f.evidence) and "TF2 profiler" in f.remedy
    # A prefetched pipeline's get-next under the tracer: 0.5 of 5.45 ms, below what is reported.
    small = {f.id for f in analyze(_cpu_run(tmp_path / "small", wait_ms=0.5)).findings}
    assert not small & {"input_preprocessing", "io_stall"}


@pytest.mark.parametrize("layout", ["tf1", "tf2"])
def test_gpu_timelines_read_streams_and_copies_once(tmp_path, layout):
    """A GPU tracer's kernels and copies sit on per-stream processes, and are repeated on
    `<gpu>/stream:all` (kernels) and `<gpu>/memcpy` (copies). TF1's tracer puts copies on the
    kernel streams, named by copy type; TF 2.x's step stats give them streams of their own,
    `stream:N<MemcpyH2D>`, naming each event by the op that issued it, and add `<gpu>/sync` for
    the host's stream syncs. Ops placed on the GPU are the host executor's side of them."""
    gpu = "/device:GPU:0"
    copy = ((f"{gpu}/stream:7 Compute", "edge_3_IteratorGetNext", "MEMCPYHtoD") if layout == "tf1"
            else (f"{gpu}/stream:9<MemcpyH2D> Compute", "IteratorGetNext", "IteratorGetNext"))
    ops = [(f"{JOB}{gpu} Compute", "dense/MatMul", "MatMul", 0.0, 0.05),
           (*copy, 0.1, 0.8),
           (f"{gpu}/stream:7 Compute", "dense/MatMul", "MatMul", 1.0, 2.0),
           (f"{gpu}/memcpy Compute", *copy[1:], 0.1, 0.8),
           (f"{gpu}/stream:all Compute", "dense/MatMul", "MatMul", 1.0, 2.0)]
    if layout == "tf2":
        ops.append((f"{gpu}/sync Compute", "cuStreamSynchronize", "cuStreamSynchronize",
                    3.0, 0.2))
    folder = tmp_path / layout
    folder.mkdir()
    for i in range(3):
        _timeline(folder / f"timeline-{i}.json", T0_US + i * 50_000, ops)
    run = load_run(folder)
    ev = run.events
    device = ev[ev["plane"] == gpu]
    assert len(device) == 6  # a copy and a kernel per file: the repeats left out
    assert sorted(device["kind"].astype(str)) == ["device_compute"] * 3 + ["h2d"] * 3
    assert sorted(device["dur_ns"].tolist()) == [800_000] * 3 + [2_000_000] * 3
    host = ev[ev["plane"] == "/host:CPU"]
    assert (host["name"] == "dense/MatMul:MatMul").sum() == 3
    if layout == "tf2":
        sync = host[host["name"] == "cuStreamSynchronize"]
        assert len(sync) == 3 and set(sync["kind"].astype(str)) == {"sync"}
    # Every file is the one host its job and task name, whichever process comes first.
    assert run.hosts == ["localhost:0"] * 3


def test_a_timeline_without_ops_is_a_one_line_error(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "timeline-1.json").write_text(json.dumps({"traceEvents": [
        {"name": "process_name", "ph": "M", "pid": 0, "args": {"name": "Allocators"}},
        {"name": "process_name", "ph": "M", "pid": 1,
         "args": {"name": f"{JOB}/device:CPU:0 Compute"}},
        {"ph": "X", "cat": "Other", "name": "x", "pid": 7, "tid": 0, "ts": T0_US, "dur": 5}]}))
    out = subprocess.run([sys.executable, "-m", "recadvisor", "analyze", str(folder)],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "no op events" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_other_json_beside_the_timelines_is_left_out_with_a_warning(tmp_path):
    """A model_dir holds more than timelines: a hyperparameter JSON there is not a trace."""
    folder = _cpu_run(tmp_path / "model_dir", wait_ms=3.0)
    (folder / "hparams.json").write_text(json.dumps({"batch_size": 256}))
    run = load_run(folder)
    assert any("hparams.json: not a trace" in w for w in run.warnings)
    assert analyze(folder).ctx.n_steps == 6
    # Alone, or with only other non-traces, it is the one-line error it always was.
    only = tmp_path / "only"
    only.mkdir()
    for name in ("a.json", "b.json"):
        (only / name).write_text("{}")
    for target in (only / "a.json", only):
        out = subprocess.run([sys.executable, "-m", "recadvisor", "analyze", str(target)],
                             capture_output=True, text=True)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


def test_a_tree_of_jobs_lists_its_timeline_folders(tmp_path):
    """ProfilerHook's `timeline-<step>.json` make a folder a run when a tree is walked (the
    dashboard's root, `recadvisor analyze` on a parent folder); other plain JSON does not."""
    from analyzers.ingest.logdir import find_runs, walk_runs

    _cpu_run(tmp_path / "jobs" / "est" / "model_dir", wait_ms=3.0)
    (tmp_path / "jobs" / "tune").mkdir()
    (tmp_path / "jobs" / "tune" / "summary.json").write_text("{}")
    assert walk_runs(tmp_path / "jobs") == [tmp_path / "jobs" / "est" / "model_dir"]
    assert find_runs(tmp_path / "jobs") == [tmp_path / "jobs" / "est" / "model_dir"]


def test_profiler_runs_beside_timelines_are_the_runs(tmp_path):
    """A model_dir with ProfilerHook timelines and a TF2 profiler run under plugins/profile:
    `analyze` opens the profiler's runs, as TensorBoard lists them; without them, the
    timelines."""
    from analyzers.ingest.logdir import find_runs

    folder = _cpu_run(tmp_path / "model_dir", wait_ms=3.0)
    assert find_runs(folder) == [folder]
    run = folder / "plugins" / "profile" / "2026_11_24_10_00_00"
    run.mkdir(parents=True)
    (run / "vm.xplane.pb").write_bytes(b"")
    assert find_runs(folder) == [run]
