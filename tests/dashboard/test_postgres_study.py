"""The Tuning page on a study in a real PostgreSQL server (`.ci/run` starts one and exports
RECADVISOR_PG_URL; RECADVISOR_REQUIRE_PG makes a missing server a failure there)."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

from reference_model.presets import get_preset
from tests.dashboard.conftest import FAKE_WORKER
from tuner.objective import TrialSettings
from tuner.study import TuneSettings, run_tune
from tuner.summary import summarize_tuner

URL = os.environ.get("RECADVISOR_PG_URL")
if not URL:
    if os.environ.get("RECADVISOR_REQUIRE_PG"):
        pytest.fail("RECADVISOR_REQUIRE_PG is set but RECADVISOR_PG_URL is not", pytrace=False)
    pytest.skip("no PostgreSQL: set RECADVISOR_PG_URL (.ci/run does)", allow_module_level=True)

from streamlit.testing.v1 import AppTest  # noqa: E402

APP = Path(__file__).parents[2] / "dashboard" / "app.py"


def test_tuning_page_reads_a_postgresql_study(monkeypatch, tmp_path):
    name = f"dash-{uuid.uuid4().hex[:8]}"
    s = TuneSettings(out=tmp_path / "out", trials=6, start=get_preset("default").config(),
                     preset="default", sampler="random", seed=2, remeasure=0, storage=URL,
                     study_name=name, resume=True,
                     trial=TrialSettings(measure_seconds=0.2, timeout_s=20),
                     worker=(sys.executable, str(FAKE_WORKER)))
    summary = summarize_tuner(run_tune(s, lambda line: None, lambda t: None))
    monkeypatch.setenv("RECADVISOR_DASHBOARD_ROOT", str(tmp_path / "empty-root"))
    (tmp_path / "empty-root").mkdir()
    monkeypatch.setenv("RECADVISOR_DASHBOARD_STORAGE", URL)
    at = AppTest.from_file(str(APP), default_timeout=120).switch_page("views/tuning.py").run()
    assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
    assert at.selectbox(key="tuning_source").value == "storage URL…"
    assert at.text_input(key="tuning_url").value == URL
    at.selectbox(key="tuning_study").set_value(name).run()
    assert not at.exception and not at.error
    assert at.code[0].value == summary["best"]["command"]
    password = URL.split("://", 1)[1].split("@", 1)[0].partition(":")[2]
    shown = "\n".join(c.value for c in at.caption)
    assert ":***@" in shown and (not password or f":{password}@" not in shown), shown
