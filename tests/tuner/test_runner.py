"""One trial in a subprocess: results, failures with a reason, timeouts, memory cap, early stop."""

import sys
from pathlib import Path

import pytest

from reference_model.config import TrainConfig
from tuner import protocol
from tuner.runner import Limits, TrialFailed, TrialStopped, run_trial

FAKE = (sys.executable, str(Path(__file__).with_name("fake_worker.py")))


def _req(seconds=0.2):
    return {"config": TrainConfig().to_dict(), "measure_seconds": seconds}


def _run(tmp_path, plan="", name="trial-0001", **kw):
    return run_trial(_req(), workdir=tmp_path, name=name, worker=FAKE,
                     env={"FAKE_TRIAL_PLAN": plan}, **kw)


def test_result_and_progress(tmp_path):
    out = _run(tmp_path)
    assert out.samples_per_s == pytest.approx(10_000 * 4 * 1.5 * 1.0 * 1.3)
    assert len(out.progress) >= 2 and out.wall_s > 0.2
    assert (tmp_path / "trial-0001.request.json").is_file()


def test_crash_fails_with_the_signal(tmp_path):
    with pytest.raises(TrialFailed, match="killed by SIGABRT"):
        _run(tmp_path, "1=crash")


def test_error_line_is_the_reason(tmp_path):
    with pytest.raises(TrialFailed) as e:
        _run(tmp_path, "1=fail")
    assert str(e.value) == "ValueError: this trial's data is unreadable"


def test_hang_times_out(tmp_path):
    with pytest.raises(TrialFailed, match="timed out after 2 s"):
        _run(tmp_path, "1=hang", limits=Limits(timeout_s=2))


def test_memory_cap(tmp_path):
    limit = r"out of memory: \d+ MiB resident, over the trial limit of 200 MiB"
    with pytest.raises(TrialFailed, match=limit):
        _run(tmp_path, "1=oom", limits=Limits(timeout_s=30, memory_bytes=200 * 2**20))


def test_early_stop(tmp_path):
    seen = []

    def stop(msg):
        seen.append(msg)
        return len(seen) == 2

    with pytest.raises(TrialStopped):
        run_trial(_req(seconds=5), workdir=tmp_path, name="trial-0001", worker=FAKE,
                  on_progress=stop)
    assert len(seen) == 2


def test_missing_worker(tmp_path):
    with pytest.raises(TrialFailed, match="cannot start the trial worker"):
        run_trial(_req(), workdir=tmp_path, name="t", worker=("/nonexistent/worker",))


def test_protocol_ignores_other_lines():
    assert protocol.decode("Epoch 1/10") is None
    assert protocol.decode(protocol.MARKER + "{not json") is None
    assert protocol.decode(protocol.encode({"event": "progress", "x": 1})) == {
        "event": "progress", "x": 1}


def test_steady_rate_skips_the_prefetched_start():
    # 2 fast (buffered) steps, then 6 slow ones: the steady rate is the slow one.
    elapsed, t = [], 0.0
    for dt in (0.01, 0.01, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5):
        t += dt
        elapsed.append(t)
    assert protocol.steady_rate(100, elapsed) == pytest.approx(200.0)
    assert protocol.steady_rate(100, []) is None


def test_a_trial_that_stops_reporting_is_killed_as_stalled(tmp_path):
    # "slow" sleeps after its first report: a stall, long before the overall timeout.
    with pytest.raises(TrialFailed, match="stalled: no progress for 1 s after 1 reports"):
        run_trial(_req(seconds=0.3), workdir=tmp_path, name="trial-0001", worker=FAKE,
                  env={"FAKE_TRIAL_PLAN": "1=stall"}, limits=Limits(timeout_s=60, stall_s=1))
