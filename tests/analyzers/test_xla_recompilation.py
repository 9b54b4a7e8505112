"""`xla_recompilation` on code-built traces: XLA compiling the step again in many steps (new
input shapes), against a first call's warm-up compile, retracing without XLA, and a few stalls;
and on a recorded TF 2.21 trace: `data/tf2.21/xla_varying_shapes.xplane.pb.gz`, `python
tests/analyzers/foreign_jobs.py DIR xla_varying_shapes` with tensorflow-cpu 2.21 on 2026-11-29
(12 profiled steps, the xplane gzipped; 89.8 ms per step untraced against 1.91 ms for
`xla_static_shapes`)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from analyzers.report import analyze
from tests.analyzers.traces import MS
from tests.analyzers.xspace_builder import XSpaceBuilder


def xla_steps(tmp: Path, compiles: set[int], *, n: int = 20, run_ms: float = 2.0,
              lowering_ms: float = 4.0, compile_ms: float = 10.0,
              retrace: frozenset[int] = frozenset()) -> Path:
    """A custom loop calling a jit-compiled tf.function: each step runs it for `run_ms`; in
    `compiles` XLA first lowers the graph (`lowering_ms`, no events, as TF 2.21 writes it) and
    compiles it (`compile_ms`: the CPU pipeline, the backend, code generation on its own
    thread); in `retrace` the function is traced first (10 ms of graph building)."""
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    main = host.line("python", line_id=1)
    codegen = host.line("tf_xla-cpu-codegen/7", line_id=7)
    t = 0
    for i in range(n):
        s = t + MS // 10
        if i in retrace:
            main.event("tf.function-graph_building", s, 10 * MS)
            s += 10 * MS
        call = s
        if i in compiles:
            c0 = s + int(lowering_ms * MS)
            main.event("HLO passes through layout assignment", c0, MS)
            main.event("CpuCompiler::RunBackend", c0 + MS, int((compile_ms - 1) * MS))
            main.event("CpuCompiler::CompileCpuExecutable", c0 + MS, int((compile_ms - 1) * MS))
            codegen.event("FusionCompiler::Compile", c0 + 2 * MS, int((compile_ms - 3) * MS))
            s = c0 + int(compile_ms * MS)
        main.event("EagerLocalExecute: __inference_train_5", call, s - call + int(run_ms * MS))
        main.event("CpuExecutable::ExecuteAsyncOnStream", s, int(run_ms * MS))
        end = s + int(run_ms * MS) + MS // 10
        main.event("train", t, end - t, step_num=i, _r=1)
        t = end
    return b.write(tmp)


def by_id(report):
    return {f.id: f for f in report.findings}


def test_recorded_trace_of_varying_shapes(tmp_path):
    """Before the detector this read `step_stalls` low, "cause not in the trace": the compiles
    run inside the function's op, as host compute."""
    run = tmp_path / "plugins" / "profile" / "2026_11_29_18_30_00"
    run.mkdir(parents=True)
    (run / "vm.xplane.pb").write_bytes(gzip.decompress(
        (Path(__file__).parent / "data" / "tf2.21" / "xla_varying_shapes.xplane.pb.gz")
        .read_bytes()))
    report = analyze(tmp_path)
    strong = {f.id for f in report.findings if f.severity in ("medium", "high")}
    assert strong == {"xla_recompilation"}, report.findings
    f = by_id(report)["xla_recompilation"]
    assert f.numbers["compiling_steps"] == 6 and f.numbers["basis"] == "steps"
    # The window's 6 reusing steps at ~4 ms against ~200 ms compiling ones: past the cap.
    assert f.capped and f.step_fraction > 0.9


def test_recompiling_in_most_steps_is_found_against_the_steps_that_reuse_a_program(tmp_path):
    """12 of 20 steps compile (4 ms lowering + 10 ms compiler passes before a 2 ms run): the
    steps that reuse a program take 2.2 ms, so all but that of the compiling steps' 16.2 ms is
    saved, the untraced lowering included."""
    f = by_id(analyze(xla_steps(tmp_path, set(range(4, 16)))))["xla_recompilation"]
    total = 8 * 2.2 + 12 * 16.2
    assert f.numbers["compiling_steps"] == 12 and f.numbers["basis"] == "steps"
    assert f.numbers["reused_step_ms"] == pytest.approx(2.2, abs=0.01)
    assert f.numbers["compile_fraction"] == pytest.approx(12 * 10 / total, abs=0.005)
    assert f.step_fraction == pytest.approx(12 * 14 / total, abs=0.005)
    assert f.severity == "high" and "input_signature" in f.remedy and "static" in f.remedy
    assert f.top_events[0]["name"] == "CpuCompiler::RunBackend"


def test_every_step_compiling_counts_the_compiler_events_alone(tmp_path):
    f = by_id(analyze(xla_steps(tmp_path, set(range(10)), n=10)))["xla_recompilation"]
    assert f.numbers["basis"] == "compiler_events" and f.numbers["reused_step_ms"] is None
    # 10 ms of 16.2 in every step: the 4 ms of lowering stay in (a lower bound).
    assert f.step_fraction == pytest.approx(10 / 16.2, abs=0.005)
    assert any("lower bound" in e for e in f.evidence)


@pytest.mark.parametrize("compiles", [set(), {0}, {0, 1}, {0, 9}])
def test_a_first_calls_compile_is_warm_up(tmp_path, compiles):
    """The first call compiles (and a last partial batch once): no recompilation."""
    report = analyze(xla_steps(tmp_path, compiles, n=10))
    assert "xla_recompilation" not in by_id(report)


def test_retracing_that_recompiles_is_one_finding(tmp_path):
    """Each new shape retraces the function and compiles it: xla_recompilation counts both (its
    remedy, static shapes, ends both); function_retracing's remedy (None dimensions,
    reduce_retracing) would leave the compiling, so it stands down. Retracing without XLA is
    function_retracing's alone."""
    steps = frozenset(range(4, 16))
    found = by_id(analyze(xla_steps(tmp_path / "xla", set(steps), retrace=steps)))
    assert "function_retracing" not in found
    f = found["xla_recompilation"]
    assert f.numbers["retraced_steps"] == 12
    assert any("traced again in 12 of these steps" in e for e in f.evidence)

    found = by_id(analyze(xla_steps(tmp_path / "graph", set(), retrace=steps)))
    assert "xla_recompilation" not in found and "function_retracing" in found


def test_a_few_compiling_stalls_are_owned_by_xla_recompilation(tmp_path):
    """3 of 20 steps compile: stalls of 7x the median. step_stalls names the compilation and
    leaves its time to xla_recompilation."""
    found = by_id(analyze(xla_steps(tmp_path, {4, 9, 14})))
    assert found["xla_recompilation"].numbers["compiling_steps"] == 3
    stalls = found["step_stalls"]
    assert stalls.numbers["cause"] == "xla_compilation" and stalls.severity == "low"
    assert stalls.step_fraction == 0.0
    assert any("xla_recompilation" in e for e in stalls.evidence)
