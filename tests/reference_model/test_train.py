"""End-to-end runs of `recadvisor train` (TensorFlow training on the CPU)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from recadvisor.capture import METADATA_FILE, read_run_metadata

SMALL_RUN = [
    "--batch-size",
    "1024",
    "--warmup-steps",
    "2",
    "--measure-steps",
    "4",
    "--profile-steps",
    "2",
    "--train-examples",
    "16384",
    "--eval-examples",
    "8192",
    "--shards",
    "4",
    "--payload-bytes",
    "64",
    "--no-progress",
]


def _train(tmp_path: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "recadvisor",
            "train",
            "--cache-dir",
            str(tmp_path / "cache"),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_clean_run_learns_and_writes_a_profiled_logdir(tmp_path):
    logdir = tmp_path / "logdir"
    # 16 epochs-worth of small batches: enough for the synthetic label's signal to be learned,
    # two a step in a loop inside the step function (--steps-per-call).
    proc = _train(
        tmp_path,
        "--preset",
        "clean",
        "--logdir",
        str(logdir),
        "--eval",
        "--json",
        *SMALL_RUN,
        "--measure-steps",
        "100",
        "--steps-per-call",
        "2",
        "--train-examples",
        "65536",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    meta = json.loads(proc.stdout)
    assert meta["eval_auc"] > 0.6
    assert meta["samples_per_s"] == pytest.approx(
        2 * 1024 * meta["measured_steps"] / meta["measured_s"], rel=0.01)
    assert meta["step_time_ms"]["p50"] > 0
    run_dir = Path(meta["run_dir"])
    assert run_dir.parent == logdir / "plugins" / "profile"
    assert list(run_dir.glob("*.xplane.pb"))
    on_disk = read_run_metadata(run_dir)
    assert on_disk["preset"] == "clean" and on_disk["config"]["xla"] is True
    # --profile-steps 2, stretched to the default 1.5 s so the OS sampler gets enough sweeps.
    win = on_disk["profile_window"]
    assert win["last_step"] - win["first_step"] >= 1
    assert win["end_unix_ns"] - win["start_unix_ns"] >= 1.5e9
    assert win["sampler"]["samples"] >= 30
    assert (run_dir / METADATA_FILE).exists()
    # Each profiled step (a call) reads both batches.
    from analyzers.report import analyze
    from analyzers.signals.batches import batches_per_step

    assert batches_per_step(analyze(logdir).ctx) == 2


@pytest.mark.slow
def test_default_preset_runs_every_anti_pattern_path(tmp_path):
    # --measure-seconds ends the timed window long before 100000 steps.
    proc = _train(tmp_path, "--preset", "default", "--json", *SMALL_RUN, "--logdir",
                  str(tmp_path / "logdir"), "--profile-seconds", "0", "--measure-steps",
                  "100000", "--measure-seconds", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    meta = json.loads(proc.stdout)
    assert meta["config"]["cast"] == "host" and meta["devices"]["count"] == 4
    win = meta["profile_window"]  # no minimum duration: exactly --profile-steps 2
    assert win["last_step"] - win["first_step"] == 1
    assert meta["dataset"]["format"] == "example" and meta["dataset"]["compression"] == "gzip"
    assert 1 <= meta["measured_steps"] < 100000 and 1.0 <= meta["measured_s"] < 30


@pytest.mark.slow
def test_bad_data_directory_is_a_one_line_error(tmp_path):
    proc = _train(tmp_path, "--data", str(tmp_path / "missing"), *SMALL_RUN)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("recadvisor train: error: dataset")
    data = tmp_path / "data"
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "recadvisor",
            "data",
            "--out",
            str(data),
            "--examples",
            "4096",
            "--eval-examples",
            "0",
            "--shards",
            "1",
            "--payload-bytes",
            "64",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr[-2000:]
    shard = next(data.glob("train-*"))
    shard.write_bytes(shard.read_bytes()[:5000] * 3)  # records cut mid-way: a corrupt file
    # Batches fetched in Python (host casting, serial copies), and inside the step function.
    for where in (["--cast", "host"], ["--cast", "pipeline", "--input-copy", "distributed"],
                  ["--steps-per-call", "2"]):
        proc = _train(tmp_path, "--data", str(data), *SMALL_RUN, *where)
        assert proc.returncode == 2, proc.stderr[-2000:]
        last = proc.stderr.strip().splitlines()[-1]
        assert "unreadable data" in last and "Traceback" not in proc.stderr, where
        assert "truncated record" in last and "Graph execution" not in last, last


def test_bad_flags_exit_2(tmp_path):
    assert _train(tmp_path, "--preset", "nope").returncode == 2
    proc = _train(tmp_path, "--measure-seconds", "0")
    assert proc.returncode == 2 and "must be > 0" in proc.stderr
    proc = _train(tmp_path, "--batch-size", "1000", "--devices", "3")
    assert proc.returncode == 2 and "divisible" in proc.stderr
    proc = _train(tmp_path, "--config", str(tmp_path / "none.json"))
    assert proc.returncode == 2 and "config file not found" in proc.stderr
