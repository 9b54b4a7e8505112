"""`recadvisor tune` with the real reference trainer on the CPU: baseline, analysis, queued
remedies, sampler, re-measurement, and a best command that runs."""

import json
import shlex
import subprocess
import sys

import pytest

SMALL = {"record_format": "example", "parse": "per_example", "compression": "gzip",
         "cycle_length": 1, "interleave_parallelism": 1, "prefetch": 0, "cast": "host",
         "input_copy": "serial", "devices": 4, "xla": False, "fused_tables": False,
         "batch_size": 2048, "train_examples": 16384, "eval_examples": 4096, "shards": 4,
         "payload_bytes": 1024}


@pytest.mark.slow
def test_guided_study_on_the_real_trainer(tmp_path):
    cfg = tmp_path / "start.json"
    cfg.write_text(json.dumps(SMALL))
    out = tmp_path / "tune"
    cache = tmp_path / "cache"
    res = subprocess.run(
        [sys.executable, "-m", "recadvisor", "tune", "--config", str(cfg), "--trials", "4",
         "--out", str(out), "--cache-dir", str(cache), "--trial-seconds", "2", "--warmup-steps",
         "3", "--remeasure", "1", "--top-k", "1", "--guide-rounds", "1", "--no-progress"],
        capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["counts"]["complete"] >= 3
    # The analyzers saw the per-example GZIP pipeline without parallelism or prefetch, and the
    # trial that applied their remedy measured faster than the start.
    rounds = summary["guidance"]
    assert rounds and any(f["id"] == "input_preprocessing" for f in rounds[0]["findings"])
    verified = [v for v in summary["verified_remedies"]
                if "input_preprocessing" in v["findings"] and v["measured_speedup"]]
    assert verified and max(v["measured_speedup"] for v in verified) > 1.5
    assert summary["speedup"] > 1.5
    assert (out / "profiles" / "trial-0").is_dir()  # the baseline's profile, for the dashboard
    assert "speedup over the starting configuration" in res.stdout
    # The best configuration runs as printed.
    cmd = shlex.split((out / "best_command.txt").read_text())
    assert cmd[:2] == ["recadvisor", "train"]
    run = subprocess.run([sys.executable, "-m", "recadvisor", *cmd[1:], "--cache-dir", str(cache),
                          "--warmup-steps", "1", "--measure-steps", "2", "--no-progress"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "samples/s" in run.stdout
