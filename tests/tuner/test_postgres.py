"""Two `recadvisor tune` workers share one study on a real PostgreSQL server on loopback.

`.ci/run` installs and starts PostgreSQL and exports RECADVISOR_PG_URL (and RECADVISOR_REQUIRE_PG,
so that CI fails instead of skipping when the server could not be set up).
"""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import optuna
import pytest

FAKE = Path(__file__).with_name("fake_worker.py")
URL = os.environ.get("RECADVISOR_PG_URL")

if not URL:
    if os.environ.get("RECADVISOR_REQUIRE_PG"):
        pytest.fail("RECADVISOR_REQUIRE_PG is set but RECADVISOR_PG_URL is not", pytrace=False)
    pytest.skip("no PostgreSQL: set RECADVISOR_PG_URL (.ci/run does)", allow_module_level=True)


def _worker(out: Path, study: str, trials: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "recadvisor", "tune", "--preset", "default", "--trials",
         str(trials), "--out", str(out), "--storage", URL, "--study", study, "--resume",
         "--worker", f"{sys.executable} {FAKE}", "--sampler", "tpe", "--trial-seconds", "0.5",
         "--remeasure", "0", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "FAKE_TRIAL_PLAN": ""})


def test_two_workers_share_one_study(tmp_path):
    study_name = f"test-{uuid.uuid4().hex[:8]}"
    trials = 12
    workers = [_worker(tmp_path / f"w{i}", study_name, trials) for i in range(2)]
    outs = [w.communicate(timeout=300) for w in workers]
    for w, (_, err) in zip(workers, outs, strict=True):
        assert w.returncode == 0, err
    study = optuna.load_study(study_name=study_name, storage=URL)
    done = [t for t in study.trials if t.state.name in ("COMPLETE", "PRUNED", "FAIL")]
    assert trials <= len(done) <= trials + 1  # each worker may finish the trial it had started
    assert sorted(t.number for t in study.trials) == list(range(len(study.trials)))
    by_worker = {t.user_attrs.get("worker") for t in done}
    assert len(by_worker) == 2, "both workers must have run trials"
    assert sum(t.user_attrs.get("source") == "baseline" for t in study.trials) == 1
    # Both wrote a summary of the same shared study.
    for i in range(2):
        assert (tmp_path / f"w{i}" / "summary.json").is_file()
    optuna.delete_study(study_name=study_name, storage=URL)
