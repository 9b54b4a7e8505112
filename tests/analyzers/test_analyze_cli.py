"""`recadvisor analyze` / `diff` end to end: formats, exit codes, bad input."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from recadvisor.cli import main
from tests.analyzers.traces import host_trace
from tests.analyzers.xspace_builder import XSpaceBuilder


def test_json_schema_and_fail_on(tmp_path, capsys):
    _, run = host_trace(tmp_path, wait_ms=60)
    assert main(["analyze", str(tmp_path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 1 and doc["steps"]["count"] == 5
    assert set(doc["breakdown"]) >= {"input_wait", "host_compute", "python_other"}
    f = doc["findings"][0]
    assert f["id"] == "io_stall" and f["severity"] == "high"
    assert {"summary", "numbers", "top_events", "time_ranges_ms"} <= set(f["evidence"])
    assert f["impact"]["estimated_speedup"] > 1.3 and f["remedy"]["text"]
    assert main(["analyze", str(tmp_path), "--fail-on", "high"]) == 3
    assert main(["analyze", str(run), "--format", "markdown"]) == 0
    assert "| high | `io_stall`" in capsys.readouterr().out


def test_a_capped_estimate_reads_as_a_floor(tmp_path, capsys):
    """A step that waits 98.5% of its time on per-example parsing: the what-if saves more than
    any fix is credited with (95%), so 20x is a floor, and every format says so; a 60% wait is
    not capped."""
    host_trace(tmp_path / "capped", step_ms=400, wait_ms=394, compute_ms=4, parse_ops=160,
               parse_op_ms=2)
    assert main(["analyze", str(tmp_path / "capped"), "--format", "json"]) == 0
    f = json.loads(capsys.readouterr().out)["findings"][0]
    assert f["impact"] == {"step_fraction": pytest.approx(0.985, abs=0.005),
                           "estimated_speedup": 20.0, "estimate_capped": True}
    assert main(["analyze", str(tmp_path / "capped")]) == 0
    assert ("estimated speedup if fixed at least 20.00x (no fix is credited with more than 95% "
            "of the step)") in capsys.readouterr().out
    assert main(["analyze", str(tmp_path / "capped"), "--format", "markdown"]) == 0
    assert "| at least 20.00x |" in capsys.readouterr().out

    host_trace(tmp_path / "uncapped", wait_ms=60)
    assert main(["analyze", str(tmp_path / "uncapped"), "--format", "json"]) == 0
    f = json.loads(capsys.readouterr().out)["findings"][0]
    assert f["impact"]["estimate_capped"] is False
    assert main(["analyze", str(tmp_path / "uncapped")]) == 0
    text = capsys.readouterr().out
    assert "at least" not in text and "estimated speedup if fixed 2." in text

    # The diff sets a floor against the measured speedup as a floor.
    host_trace(tmp_path / "after", step_ms=6, compute_ms=4, readers=0, parse_ops=0)
    assert main(["diff", str(tmp_path / "capped"), str(tmp_path / "after")]) == 0
    assert "est. at least 20.00x" in capsys.readouterr().out


def test_text_top_events_keep_the_end_of_long_names():
    from analyzers.report import _top_event

    name = "StatefulPartitionedCall/gradient_tape/sequential_1/dense_1/MatMul/MatMul:_MklMatMul"
    text = _top_event({"name": name, "total_ms": 1.641, "count": 12})
    # The op and its type are at the end of a TF op name: they must survive the cut.
    assert text.startswith("…") and "MatMul/MatMul:_MklMatMul 1.641 ms (12 events)" in text
    assert len(text.split(" ")[0]) == 60
    assert _top_event({"name": "short", "total_ms": 2.0, "count": 1}) == "short 2 ms (1 event)"
    assert _top_event({"name": "tf_data_worker", "d_samples": 7}) == (
        "tf_data_worker 7 samples in D state")


def test_fix_command_names_what_the_remedy_changes_even_at_the_default():
    from analyzers.report import _fix_command
    from reference_model.config import TrainConfig

    unfused = TrainConfig().replace(xla=False, fused_tables=False).to_dict()
    # Both changes restore defaults: a bare `recadvisor train` would not say what to change.
    cmd = _fix_command(unfused, {"xla": True, "fused_tables": True})
    assert cmd is not None and cmd.split()[:2] == ["recadvisor", "train"]
    flags = cmd.split()[2:]
    assert dict(zip(flags[::2], flags[1::2], strict=True)) == {"--xla": "true",
                                                               "--fused-tables": "true"}


def test_clean_trace_passes_the_gate(tmp_path, capsys):
    host_trace(tmp_path)
    assert main(["analyze", str(tmp_path), "--fail-on", "medium"]) == 0


def test_no_steps_is_reported_not_crashed(tmp_path, capsys):
    b = XSpaceBuilder()
    b.plane("/host:CPU").line("python3").event("some_op", 0, 1000)
    b.write(tmp_path)
    assert main(["analyze", str(tmp_path)]) == 0
    assert "no steps found" in capsys.readouterr().out


@pytest.mark.parametrize("content", [b"", b"\x0a\xff\xff\xff\xff\x0f", b"garbage" * 50])
def test_corrupt_trace_is_one_line_exit_2(tmp_path, content):
    d = tmp_path / "plugins" / "profile" / "r1"
    d.mkdir(parents=True)
    (d / "h.xplane.pb").write_bytes(content)
    p = subprocess.run([sys.executable, "-m", "recadvisor.cli", "analyze", str(tmp_path)],
                       capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_a_gzipped_xplane_named_directly_reads_like_the_xplane(tmp_path, capsys):
    _, run = host_trace(tmp_path / "ld", wait_ms=60)
    (xplane,) = run.glob("*.xplane.pb")
    gz = tmp_path / "shared.xplane.pb.gz"
    gz.write_bytes(gzip.compress(xplane.read_bytes()))
    assert main(["analyze", str(xplane), "--format", "json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert main(["analyze", str(gz), "--format", "json"]) == 0
    zipped = json.loads(capsys.readouterr().out)
    assert zipped["findings"] == plain["findings"] and zipped["breakdown"] == plain["breakdown"]
    assert zipped["steps"] == plain["steps"]


@pytest.mark.parametrize(("content", "said"), [
    (b"not gzip", "not a readable gzip-compressed xplane"),
    (gzip.compress(bytes(range(256)) * 40, mtime=0)[:100], "not a readable gzip-compressed xplane"),
    (gzip.compress(b"garbage" * 50), "(inflated): not a valid xplane"),
    (gzip.compress(b""), "(inflated): empty xplane file"),
])
def test_a_bad_gzipped_xplane_is_one_line_exit_2(tmp_path, content, said):
    path = tmp_path / "bad.xplane.pb.gz"
    path.write_bytes(content)
    p = subprocess.run([sys.executable, "-m", "recadvisor.cli", "analyze", str(path)],
                       capture_output=True, text=True)
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr
    assert f"{path}" in p.stderr and said in p.stderr, p.stderr


def test_empty_logdir_and_missing_path(tmp_path, capsys):
    assert main(["analyze", str(tmp_path)]) == 2
    assert main(["analyze", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "no profile runs" in err and "no such file" in err


def test_output_file_written_atomically(tmp_path):
    host_trace(tmp_path / "ld")
    out = tmp_path / "report.json"
    assert main(["analyze", str(tmp_path / "ld"), "--format", "json", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["run"] == "2026_01_01_00_00_00"


def test_diff_names_resolved_findings_and_speedup(tmp_path, capsys):
    host_trace(tmp_path / "before", wait_ms=60)
    host_trace(tmp_path / "after", wait_ms=0, step_ms=40)
    assert main(["diff", str(tmp_path / "before"), str(tmp_path / "after"),
                 "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["speedup"] == pytest.approx(2.5, rel=0.01)
    [resolved] = [r for r in d["resolved"] if r["id"] == "io_stall"]
    assert resolved["severity"] == "high" and resolved["estimated_speedup"] > 1.25


def _runs_in_one_logdir(tmp_path: Path) -> Path:
    """A logdir of three runs: a 100 ms step waiting 60 ms for storage, then 60 ms and 40 ms
    steps without the wait."""
    logdir = tmp_path / "ld"
    for k, (wait_ms, step_ms) in enumerate([(60, 100), (0, 60), (0, 40)]):
        b, _ = host_trace(tmp_path / f"b{k}", wait_ms=wait_ms, step_ms=step_ms)
        b.write(logdir, run=f"2026_01_0{k + 1}_00_00_00")
    return logdir


def test_diff_of_one_logdir_compares_its_two_latest_runs(tmp_path, capsys):
    logdir = _runs_in_one_logdir(tmp_path)

    def diff(*args: str) -> dict:
        assert main(["diff", *args, "--format", "json"]) == 0
        d = json.loads(capsys.readouterr().out)
        return {"runs": (d["before"]["run"], d["after"]["run"]), "speedup": d["speedup"]}

    assert diff(str(logdir)) == {"runs": ("2026_01_02_00_00_00", "2026_01_03_00_00_00"),
                                 "speedup": pytest.approx(1.5, rel=0.01)}
    assert diff(str(logdir), str(logdir)) == diff(str(logdir))
    got = diff(str(logdir), "--run-before", "2026_01_01_00_00_00")
    assert got == {"runs": ("2026_01_01_00_00_00", "2026_01_03_00_00_00"),
                   "speedup": pytest.approx(2.5, rel=0.01)}
    got = diff(str(logdir), "--run-after", "2026_01_02_00_00_00")
    assert got["runs"] == ("2026_01_03_00_00_00", "2026_01_02_00_00_00")
    # The latest named as A: B is the latest other run.
    got = diff(str(logdir), "--run-before", "2026_01_03_00_00_00")
    assert got["runs"] == ("2026_01_03_00_00_00", "2026_01_02_00_00_00")
    got = diff(str(logdir), "--run-before", "2026_01_01_00_00_00",
               "--run-after", "2026_01_02_00_00_00")
    assert got["runs"] == ("2026_01_01_00_00_00", "2026_01_02_00_00_00")
    # Two logdirs: each side's run is its own.
    other = tmp_path / "other"
    host_trace(other, wait_ms=0, step_ms=50)
    got = diff(str(logdir), str(other), "--run-before", "2026_01_01_00_00_00")
    assert got == {"runs": ("2026_01_01_00_00_00", "2026_01_01_00_00_00"),
                   "speedup": pytest.approx(2.0, rel=0.01)}


def test_diff_output_file_and_a_logdir_of_one_run(tmp_path, capsys):
    logdir = _runs_in_one_logdir(tmp_path)
    out = tmp_path / "diff.md"
    assert main(["diff", str(logdir), "--format", "markdown", "-o", str(out)]) == 0
    assert capsys.readouterr().out == ""
    assert "2026_01_02_00_00_00" in out.read_text() and "1.50x" in out.read_text()
    single = tmp_path / "single"
    host_trace(single, wait_ms=60)
    assert main(["diff", str(single)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "one profile run, nothing to compare" in err, err
    assert main(["diff", str(logdir), "--run-before", "nope"]) == 2
    assert "no run named 'nope'" in capsys.readouterr().err


def test_diff_says_which_causes_of_a_remaining_finding_went(tmp_path, capsys):
    """Packing small files into larger ones leaves the per-example parsing: input_preprocessing
    remains, and the diff says which of its causes the change removed."""
    from tests.analyzers.test_detectors import _files_opened

    host_trace(tmp_path / "before", wait_ms=60, parse_ops=120, parse_op_ms=0.5,
               per_step=_files_opened(8))
    host_trace(tmp_path / "after", wait_ms=60, parse_ops=120, parse_op_ms=0.5)
    dirs = [str(tmp_path / "before"), str(tmp_path / "after")]
    assert main(["diff", *dirs, "--format", "json"]) == 0
    rem = {x["id"]: x for x in json.loads(capsys.readouterr().out)["remaining"]}
    x = rem["input_preprocessing"]
    assert x["causes_resolved"] == ["small_files"] and x["causes_new"] == []
    assert x["speedup_before"] > 1 and x["speedup_after"] > 1
    assert main(["diff", *dirs]) == 0
    assert "resolved: small files" in capsys.readouterr().out


def test_analyzer_path_never_imports_tensorflow(tmp_path):
    host_trace(tmp_path, wait_ms=60)
    target = str(tmp_path)
    code = (f"import sys; from recadvisor.cli import main; rc = main(['analyze', {target!r}]); "
            "bad = [m for m in ('tensorflow', 'keras', 'streamlit') if m in sys.modules]; "
            "print(bad); sys.exit(rc)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().endswith("[]")


def test_json_values_keep_their_json_types():
    import numpy as np

    from analyzers.report import json_value

    # A numpy bool in a finding's evidence once reached the JSON as the string "False".
    out = json.loads(json.dumps({"b": np.bool_(False), "i": np.int64(3), "f": np.float32(0.5),
                                 "p": Path("/x")}, default=json_value))
    assert out == {"b": False, "i": 3, "f": 0.5, "p": "/x"}


@pytest.mark.parametrize(("untraced_ms", "warned"), [(60.0, "slows most"), (100.0, None),
                                                     (140.0, "may not be typical"), (None, None)])
def test_profiler_slowdown_against_the_untraced_steps(tmp_path, capsys, untraced_ms, warned):
    """The reference trainer records its median step outside the profiler: a profiled median
    (100 ms here) 1.25x slower or more, or 0.8x or less, is said, since the trace's shares are then
    suspect; within those bounds, or with no such metadata, nothing is."""
    _, run = host_trace(tmp_path)
    if untraced_ms is not None:
        (run / "recadvisor_run.json").write_text(json.dumps(
            {"tool": "recadvisor.reference_model", "step_time_ms": {"p50": untraced_ms}}))
    assert main(["analyze", str(tmp_path), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["steps"]["untraced_median_ms"] == untraced_ms
    said = [w for w in doc["warnings"] if "untraced median" in w]
    assert len(said) == (warned is not None)
    if warned:
        assert warned in said[0] and f"vs {untraced_ms:.1f} ms" in said[0]
    assert main(["analyze", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert ("warning: the profiled steps took" in text) == (warned is not None)
    steps_line = next(line for line in text.splitlines() if line.startswith("steps:"))
    assert ("untraced median" in steps_line) == (untraced_ms is not None)
    if untraced_ms is not None:
        assert f"untraced median {untraced_ms:.1f} ms" in steps_line


def test_diff_counts_stalls_the_median_step_hides(tmp_path, capsys):
    """Removing a stall every 5th step leaves the median step as it was: the speedup comes from
    the mean step of the windows' interior."""
    from tests.analyzers.test_detectors import _every, _uneven

    _uneven(tmp_path / "before", _every(5, 100.0))
    _uneven(tmp_path / "after", [10.0] * 30)
    assert main(["diff", str(tmp_path / "before"), str(tmp_path / "after"),
                 "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    # Steps 0-28 (the last, 10x the median, is left out): five stalls of 100 ms and 24 steps
    # of 10 ms, against 10 ms.
    assert d["speedup"] == pytest.approx(740 / 29 / 10, rel=0.01)
    assert d["before"]["median_step_ms"] == pytest.approx(d["after"]["median_step_ms"], rel=0.01)
    assert "mean step time" in d["speedup_basis"]
    assert any(r["id"] == "step_stalls" and r["severity"] == "high" for r in d["resolved"])


def test_a_machine_shared_all_along_is_a_warning(tmp_path):
    """Other processes holding a core over the whole window (a job beside another, each slowed
    evenly: no stall, nothing in the job to fix): the report says its times include them."""
    from analyzers.report import analyze
    from tests.analyzers.traces import sweeps, write_sampler

    _, run = host_trace(tmp_path, wait_ms=0)
    write_sampler(run, sweeps(100, 0, input_running=0), n_cpus=2, cpu_percent=100,
                  machine_percent=100)
    [said] = [w for w in analyze(run).to_dict()["warnings"] if "other processes" in w]
    assert "used 1.0 of its 2 cores over the steps, and 0.0 sat idle" in said
    # Alone: the other core idle.
    write_sampler(run, sweeps(100, 0, input_running=0), n_cpus=2, cpu_percent=100)
    assert not [w for w in analyze(run).to_dict()["warnings"] if "other processes" in w]


def test_diff_sets_the_estimate_and_the_projection_against_the_after_run(tmp_path, capsys):
    """Before: 60 ms of a 100 ms step waiting on per-example parsing (input_preprocessing,
    2.5x), 20 ms of Python around the call. After: the same step without the wait. The diff
    sets the estimate against the measured speedup and the projected breakdown (the before
    report's `next:`) beside what the after run read."""
    host_trace(tmp_path / "before", steps=6, wait_ms=60, compute_ms=20, parse_ops=40,
               parse_op_ms=0.5)
    host_trace(tmp_path / "after", steps=6, step_ms=40, compute_ms=20, parse_ops=0,
               readers=0)
    assert main(["diff", str(tmp_path / "before"), str(tmp_path / "after"),
                 "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    [resolved] = [r for r in d["resolved"] if r["id"] == "input_preprocessing"]
    assert resolved["estimated_speedup"] == pytest.approx(2.5, rel=0.01)
    assert d["projected_after"] == "input_preprocessing"
    bd = d["breakdown"]
    assert bd["host_compute"]["projected"] == pytest.approx(0.5, abs=0.01)
    assert bd["host_compute"]["after"] == pytest.approx(0.5, abs=0.02)
    assert bd["input_wait"]["projected"] == 0.0
    assert main(["diff", str(tmp_path / "before"), str(tmp_path / "after")]) == 0
    text = capsys.readouterr().out
    assert "projected" in text.splitlines()[2]
    assert "resolved: input_preprocessing (high; est. 2.50x, measured 2.50x: +0%)" in text


@pytest.mark.parametrize(("limits", "said", "usable"), [
    ({"cpu_quota": 1.5}, "2 CPUs (CPU quota 1.5: 1.5 usable)", 1.5),
    ({"affinity_cpus": 1}, "2 CPUs (affinity 1: 1 usable)", 1.0),
    ({"affinity_cpus": 1, "cpu_quota": 0.5}, "2 CPUs (affinity 1, CPU quota 0.5: 0.5 usable)",
     0.5),
    ({"affinity_cpus": 2, "cpu_quota": 4.0}, "2 CPUs; sampler", 2.0),  # neither binds
    ({}, "2 CPUs; sampler", 2.0),  # sampler data from before the limits were recorded
])
def test_the_hardware_line_says_what_caps_the_cpus(tmp_path, capsys, limits, said, usable):
    """A container's CPU quota or a process pinned to fewer CPUs than the machine has is on the
    report's hardware line and in its JSON (what idle_cores and cpu_throttling judge against)."""
    from tests.analyzers.traces import sweeps, write_sampler

    _, run = host_trace(tmp_path, wait_ms=0)
    write_sampler(run, sweeps(100, 0, input_running=0), n_cpus=2, cpu_percent=100, **limits)
    assert main(["analyze", str(tmp_path)]) == 0
    assert said in capsys.readouterr().out
    assert main(["analyze", str(tmp_path), "--format", "json"]) == 0
    hw = json.loads(capsys.readouterr().out)["hardware"]
    assert hw["usable_cpus"] == usable
    assert hw["cpu_quota"] == limits.get("cpu_quota")
    assert hw["affinity_cpus"] == (limits.get("affinity_cpus") or (2 if limits else None))


def test_without_sampler_data_no_cpu_limits(tmp_path, capsys):
    host_trace(tmp_path, wait_ms=0)
    assert main(["analyze", str(tmp_path), "--format", "json"]) == 0
    hw = json.loads(capsys.readouterr().out)["hardware"]
    assert (hw["affinity_cpus"], hw["cpu_quota"], hw["usable_cpus"]) == (None, None, None)


def test_cpu_limits_text_without_a_cpu_count():
    from analyzers.report import cpu_limits_text

    assert cpu_limits_text({"cpus": None, "affinity_cpus": None, "cpu_quota": 1.5,
                            "usable_cpus": None}) == "CPU quota 1.5"
    assert cpu_limits_text({"cpus": 4, "gpus": {}}) == ""  # a report cached before the keys
