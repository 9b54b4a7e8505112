"""A dashboard root made of real runs: two reference-trainer logdirs (one input-bound, one clean),
a corrupt run, and tuning studies (single- and multi-objective) from the stand-in trial worker.

Built once per session; the trainer runs need TensorFlow (tests that use them skip without it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reference_model.presets import get_preset
from tuner.objective import TrialSettings
from tuner.study import TuneSettings, run_tune
from tuner.summary import summarize_tuner, write_outputs

FAKE_WORKER = Path(__file__).parents[1] / "tuner" / "fake_worker.py"
# One tf.train.Example per record, parsed one at a time: input_preprocessing, high, on any machine
# (0.10x of `clean` on 2026-11-23's machine, 0.15x on 2026-11-28's, whose compute ran at half the
# speed). `low_parallelism` (0.44x on the first, 0.80x on the second) read `low` there: under the
# profiler its compute took 1.49x as long and the pipeline kept up in the window. Its stages are
# sequential since (0.24x, 80% wait); per_example stayed, as nothing asked for a change.
SLOW_PRESET = "per_example"
CORRUPT_RUN = "logdirs/corrupt/plugins/profile/2026_01_01_00_00_00"


def _train(root: Path, preset: str, cache: str) -> None:
    env = {**os.environ, "RECADVISOR_CACHE": cache, "TF_CPP_MIN_LOG_LEVEL": "2"}
    subprocess.run([sys.executable, "-m", "recadvisor", "train", "--preset", preset,
                    "--logdir", str(root / "logdirs" / preset), "--no-progress", "--steps", "10"],
                   check=True, timeout=400, env=env, capture_output=True)


def _study(out: Path, name: str, multi: bool) -> None:
    s = TuneSettings(out=out, trials=8, start=get_preset("default").config(), preset="default",
                     sampler="tpe", seed=3, remeasure=1, top_k=2, study_name=name,
                     multi_objective=multi, resume=True,
                     trial=TrialSettings(measure_seconds=0.2, timeout_s=20),
                     worker=(sys.executable, str(FAKE_WORKER)))
    tuner = run_tune(s, lambda line: None, lambda t: None)
    write_outputs(out, tuner.study, summarize_tuner(tuner))


@pytest.fixture(scope="session")
def study_root(tmp_path_factory) -> Path:
    """A root with tuning studies only (no TensorFlow needed)."""
    root = tmp_path_factory.mktemp("study-root")
    _study(root / "tune", "recadvisor", multi=False)
    _study(root / "tune", "pareto", multi=True)
    (root / "notes.db").write_bytes(b"not a database")  # a .db the Tuning page must skip
    return root


@pytest.fixture(scope="session")
def dash_root(study_root, dataset_cache) -> Path:
    """study_root plus real trainer runs and a corrupt one."""
    pytest.importorskip("tensorflow")
    root = study_root
    cache = dataset_cache
    if not (root / "logdirs").exists():
        for preset in (SLOW_PRESET, "clean"):
            _train(root, preset, cache)
        bad = root / CORRUPT_RUN
        bad.mkdir(parents=True)
        (bad / "vm.xplane.pb").write_bytes(b"\x0a\xff\xff\xff garbage, not a protobuf")
    return root


def run_key(root: Path, preset: str) -> str:
    """The Runs page's key (path relative to the root) of a preset's run."""
    runs = sorted((root / "logdirs" / preset / "plugins" / "profile").iterdir())
    return str(runs[-1].relative_to(root))
