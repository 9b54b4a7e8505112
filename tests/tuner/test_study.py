"""Studies end to end with a stand-in worker (milliseconds per trial): failures, pruning,
duplicates, resume after SIGKILL, bad input, outputs."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from reference_model.presets import get_preset
from tuner.objective import TrialSettings
from tuner.study import TuneSettings, run_tune
from tuner.summary import summarize_storage, summarize_tuner, write_outputs

FAKE = Path(__file__).with_name("fake_worker.py")
WORKER = f"{sys.executable} {FAKE}"


def _settings(tmp_path, **kw):
    base = dict(out=tmp_path / "out", trials=8, start=get_preset("default").config(),
                preset="default", sampler="random", seed=1, remeasure=0,
                trial=TrialSettings(measure_seconds=0.2, timeout_s=20),
                worker=(sys.executable, str(FAKE)))
    base.update(kw)
    return TuneSettings(**base)


def _tune(s):
    logs = []
    return run_tune(s, logs.append, lambda t: None), logs


def _cli(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "recadvisor", "tune", *args],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_crash_and_hang_fail_with_reasons_and_the_study_completes(tmp_path):
    s = _settings(tmp_path, env={"FAKE_TRIAL_PLAN": "2=crash,4=hang,5=fail"},
                  trial=TrialSettings(measure_seconds=0.2, timeout_s=3))
    tuner, _ = _tune(s)
    trials = tuner.study.trials
    assert len(trials) == 8
    by = {t.number: t for t in trials}
    assert by[2].state.name == "FAIL" and "SIGABRT" in by[2].user_attrs["fail_reason"]
    assert by[4].state.name == "FAIL" and "timed out" in by[4].user_attrs["fail_reason"]
    assert by[5].state.name == "FAIL" and "unreadable" in by[5].user_attrs["fail_reason"]
    ok = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(ok) == 5
    summary = summarize_tuner(tuner)
    assert summary["counts"]["fail"] == 3
    assert summary["best"]["samples_per_s"] >= summary["start"]["samples_per_s"]
    rows = {r["number"]: r for r in summary["trials"]}
    assert "SIGABRT" in rows[2]["fail_reason"]


def test_baseline_is_the_start_config_and_speedup_is_against_it(tmp_path):
    tuner, _ = _tune(_settings(tmp_path, trials=12, sampler="tpe", remeasure=1, top_k=2))
    summary = summarize_tuner(tuner)
    base = tuner.study.trials[0]
    assert base.user_attrs["source"] == "baseline"
    assert base.user_attrs["config"] == get_preset("default").config().to_dict()
    assert summary["start"]["samples_per_s"] == pytest.approx(10_000 * 1.2)  # gzip, 4 devices
    assert summary["speedup"] == pytest.approx(
        summary["best"]["samples_per_s"] / summary["start"]["samples_per_s"], rel=1e-3)
    assert summary["best"]["spread"]["n"] == 2  # re-measured once
    assert summary["improvements"][0]["source"] == "baseline"
    paths = write_outputs(tuner.s.out, tuner.study, summary)
    best = json.loads(paths["config"].read_text())
    assert best == summary["best"]["config"]
    assert paths["command"].read_text().startswith("recadvisor train")
    assert paths["trials"].read_text().count("\n") == 13


def test_invalid_combinations_fail_without_running(tmp_path):
    space = tmp_path / "space.toml"
    space.write_text("[params.batch_size]\nchoices = [4096, 4097]\n")
    s = _settings(tmp_path, trials=6, space_file=space, sampler="random", seed=3)
    tuner, _ = _tune(s)
    bad = [t for t in tuner.study.trials if t.params.get("batch_size") == 4097]
    assert bad, "the random sampler should have tried 4097 in 6 trials"
    for t in bad:
        if "duplicate_of" in t.user_attrs:
            continue
        assert t.state.name == "FAIL"
        assert "invalid configuration" in t.user_attrs["fail_reason"]
        assert not (s.out / "trials" / f"trial-{t.number:04d}.request.json").exists()


def test_duplicates_reuse_the_measurement(tmp_path):
    space = tmp_path / "space.toml"
    space.write_text("[params.prefetch]\nchoices = [0, 2]\n")
    tuner, _ = _tune(_settings(tmp_path, trials=6, space_file=space))
    dups = [t for t in tuner.study.trials if "duplicate_of" in t.user_attrs]
    assert len(dups) >= 3  # only 2 distinct configurations exist
    requests = list((tmp_path / "out" / "trials").glob("*.request.json"))
    assert len(requests) == 6 - len(dups)


def test_pruner_stops_slow_trials(tmp_path):
    # Every trial reports its final rate from the first report: the slow ones are pruned once
    # the startup trials are in.
    tuner, _ = _tune(_settings(tmp_path, trials=20, sampler="random", seed=0,
                               trial=TrialSettings(measure_seconds=1.0, timeout_s=20)))
    states = [t.state.name for t in tuner.study.trials]
    assert "PRUNED" in states


def test_multi_objective_reports_a_pareto_front(tmp_path):
    tuner, _ = _tune(_settings(tmp_path, trials=10, sampler="random", multi_objective=True))
    summary = summarize_tuner(tuner)
    front = summary["pareto_front"]
    assert front and all(p["command"].startswith("recadvisor train") for p in front)
    paths = write_outputs(tuner.s.out, tuner.study, summary)
    assert "values_0" in paths["trials"].read_text().splitlines()[0]
    devices = [p["devices"] for p in front]
    assert devices == sorted(devices)
    rates = [p["samples_per_s"] for p in front]
    # On a Pareto front of (max samples/s, min devices), more devices must buy more throughput.
    assert rates == sorted(rates)


def test_guided_without_a_profile_falls_back_to_the_sampler(tmp_path):
    tuner, logs = _tune(_settings(tmp_path, trials=4, sampler="guided"))
    assert len(tuner.study.trials) == 4
    assert any("cannot analyze" in m or "failed" in m for m in logs)


def _wait_for(path_glob, root, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        hits = list(Path(root).glob(path_glob))
        if hits:
            return hits
        time.sleep(0.05)
    raise AssertionError(f"nothing matched {path_glob} under {root}")


def test_sigkill_mid_study_then_resume_loses_no_completed_trial(tmp_path):
    out = tmp_path / "out"
    pids = tmp_path / "pids"
    pids.mkdir()
    env = {"FAKE_TRIAL_PLAN": "3=slow", "FAKE_SLOW_S": "30", "FAKE_PID_DIR": str(pids)}
    args = ["--preset", "default", "--trials", "6", "--out", str(out), "--worker", WORKER,
            "--sampler", "random", "--seed", "2", "--trial-seconds", "0.2", "--remeasure", "0",
            "--no-progress"]
    proc = subprocess.Popen([sys.executable, "-m", "recadvisor", "tune", *args],
                            env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _wait_for("trial-0003.request.json", out / "trials")
    time.sleep(0.5)  # trial 3's worker is now sleeping
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(0.5)
    running_workers = [p for p in pids.iterdir() if _pid_alive(int(p.name))]
    assert running_workers == [], "the trial's worker must die with the tuner"
    with sqlite3.connect(out / "study.db") as db:
        before = db.execute("select number, state from trials order by number").fetchall()
    assert [s for _, s in before[:3]] == ["COMPLETE"] * 3 and before[3][1] == "RUNNING"

    res = _cli(*args, "--resume", env={"FAKE_TRIAL_PLAN": ""})
    assert res.returncode == 0, res.stderr
    assert "worker that died" in res.stderr
    study = optuna.load_study(study_name="recadvisor-tune", storage=f"sqlite:///{out}/study.db")
    by = {t.number: t for t in study.trials}
    for n in range(3):  # completed before the kill, untouched
        assert by[n].state.name == "COMPLETE"
    assert by[3].state.name == "FAIL" and "died" in by[3].user_attrs["fail_reason"]
    retry = [t for t in study.trials if t.user_attrs.get("retry_of") == 3]
    assert len(retry) == 1 and retry[0].state.name == "COMPLETE"
    assert retry[0].params == by[3].params
    finished = [t for t in study.trials if t.state.name != "RUNNING"]
    assert len(finished) >= 6
    assert json.loads((out / "summary.json").read_text())["best"] is not None


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_cli_bad_inputs_are_one_line_errors(tmp_path):
    bad_space = tmp_path / "bad.toml"
    bad_space.write_text("[params.nope]\nchoices=[1]\n")
    cases = [
        (["--preset", "default", "--out", str(tmp_path / "a"), "--space", str(bad_space)],
         "not a trainer knob"),
        (["--preset", "default", "--out", str(tmp_path / "b"),
          "--storage", "postgresql+psycopg://nobody:x@127.0.0.1:1/none"], "cannot open storage"),
        (["--preset", "default", "--out", str(tmp_path / "c"), "--storage", "not-a-url"],
         "not a database URL"),
        (["--preset", "nope", "--out", str(tmp_path / "d")], "unknown preset"),
        (["--preset", "default", "--out", str(tmp_path / "e"), "--data", str(tmp_path / "none")],
         "no dataset there"),
        (["--out", str(tmp_path / "f"), "--resume"], "to resume"),
        (["--preset", "default", "--out", str(tmp_path / "g"), "--trials", "0"], "positive"),
    ]
    for args, message in cases:
        res = _cli(*args, "--worker", WORKER, "--no-progress")
        assert res.returncode == 2, (args, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, res.stderr)
        assert "Traceback" not in res.stderr
    res = _cli("--preset", "default", "--out", str(tmp_path / "h"), "--storage",
               "postgresql+psycopg://u:secret@127.0.0.1:1/x", "--worker", WORKER)
    assert "secret" not in res.stderr and "***" in res.stderr
    res = _cli("--bogus-flag")
    assert res.returncode == 2 and "usage" in res.stderr


def test_existing_study_needs_resume(tmp_path):
    args = ["--preset", "default", "--trials", "2", "--out", str(tmp_path / "o"), "--worker",
            WORKER, "--sampler", "random", "--trial-seconds", "0.1", "--remeasure", "0",
            "--no-progress"]
    first = _cli(*args)
    assert first.returncode == 0, first.stderr
    assert "speedup over the starting configuration" in first.stdout
    again = _cli(*args)
    assert again.returncode == 2 and "--resume" in again.stderr
    other = _cli(*[a if a != "default" else "clean" for a in args], "--resume")
    assert other.returncode == 2 and "different configuration" in other.stderr
    more = _cli(*[a if a != "2" else "4" for a in args], "--resume")
    assert more.returncode == 0, more.stderr
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["counts"]["complete"] + summary["counts"]["pruned"] == 4


def test_grid_sampler_covers_a_small_space(tmp_path):
    space = tmp_path / "space.toml"
    space.write_text("[params.prefetch]\nchoices = [0, 2]\n[params.devices]\nchoices = [2, 4]\n")
    tuner, _ = _tune(_settings(tmp_path, trials=10, sampler="grid", space_file=space,
                               start=get_preset("default").config()))
    seen = {(t.params["prefetch"], t.params["devices"]) for t in tuner.study.trials
            if t.state.name == "COMPLETE"}
    assert seen == {(0, 2), (0, 4), (2, 2), (2, 4)}
    assert len(tuner.study.trials) <= 5  # the grid stops the study when it is exhausted


def test_grid_sampler_refuses_a_huge_space(tmp_path):
    from recadvisor.errors import UserError

    with pytest.raises(UserError, match="combinations"):
        _tune(_settings(tmp_path, sampler="grid"))


def test_summary_straight_from_storage(tmp_path):
    tuner, _ = _tune(_settings(tmp_path, trials=3))
    url = f"sqlite:///{tmp_path / 'out' / 'study.db'}"
    s = summarize_storage(url)
    assert s["study"] == "recadvisor-tune" and s["sampler"] == "random"
    assert s["best"]["samples_per_s"] == summarize_tuner(tuner)["best"]["samples_per_s"]
    with pytest.raises(ValueError, match="no study 'other'"):
        summarize_storage(url, "other")


def test_clamp_applies_when_the_space_tunes_cycle_length_alone(tmp_path):
    space = tmp_path / "space.toml"
    space.write_text("[params.cycle_length]\nchoices = [1, 2]\n")
    start = get_preset("clean").config()  # interleave_parallelism 4
    tuner, _ = _tune(_settings(tmp_path, trials=4, sampler="grid", space_file=space, start=start))
    for t in tuner.study.trials:
        assert t.state.name == "COMPLETE", t.user_attrs.get("fail_reason")
        cfg = t.user_attrs["config"]
        assert cfg["interleave_parallelism"] <= cfg["cycle_length"]


def test_a_bad_space_leaves_no_study_behind(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[params.nope]\nchoices=[1]\n")
    out = tmp_path / "o"
    args = ["--preset", "default", "--trials", "2", "--out", str(out), "--worker", WORKER,
            "--sampler", "random", "--trial-seconds", "0.1", "--remeasure", "0", "--no-progress"]
    assert _cli(*args, "--space", str(bad)).returncode == 2
    res = _cli(*args)
    assert res.returncode == 0, res.stderr
