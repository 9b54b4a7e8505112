"""Every page under Streamlit's AppTest, on real logdirs from the reference trainer and studies
from the tuner (tests/dashboard/conftest.py)."""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

import pytest

from tests.dashboard.conftest import CORRUPT_RUN, SLOW_PRESET, run_key

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

APP = Path(__file__).parents[2] / "dashboard" / "app.py"
TIMEOUT = 180  # the first analysis of a run takes seconds on a 2-core machine


def _app(monkeypatch, root: Path, page: str, **params: str) -> AppTest:
    monkeypatch.setenv("RECADVISOR_DASHBOARD_ROOT", str(root))
    monkeypatch.delenv("RECADVISOR_DASHBOARD_STORAGE", raising=False)
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    for k, v in params.items():
        at.query_params[k] = v
    return at.switch_page(f"views/{page}.py").run()


def _text(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption]
    parts += [e.value for e in (*at.error, *at.warning, *at.info, *at.success)]
    parts += [c.value for c in at.code] + [f"{m.label}={m.value}" for m in at.metric]
    return "\n".join(str(p) for p in parts)


def _no_exceptions(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    # ui.shown_errors turns a bug into a one-line "internal error" in the page, not an exception.
    internal = [e.value for e in at.error if "internal error" in e.value]
    assert not internal, internal


def _charts(at: AppTest) -> int:
    return len(at.get("plotly_chart"))


def test_runs_page_lists_every_run_with_its_top_finding(monkeypatch, dash_root):
    at = _app(monkeypatch, dash_root, "runs")
    _no_exceptions(at)
    df = at.dataframe[0].value
    runs = dict(zip(df["run"], df["top finding"], strict=True))
    slow, clean = run_key(dash_root, SLOW_PRESET), run_key(dash_root, "clean")
    assert runs[slow].startswith("high: input_preprocessing"), runs
    assert not runs[clean].startswith(("high", "medium")), runs
    assert df.set_index("run").loc[slow, "samples/s"] > 0
    assert f"preset {SLOW_PRESET}" in df.set_index("run").loc[slow, "config"]
    # The corrupt run is listed; its analysis error is a one-line message, not a traceback.
    assert CORRUPT_RUN in runs and runs[CORRUPT_RUN].startswith("unreadable")
    errors = [e.value for e in at.error]
    assert any(CORRUPT_RUN in e for e in errors) and all("\n" not in e for e in errors), errors


def test_diagnosis_shows_cards_charts_timeline_and_thread_states(monkeypatch, dash_root):
    key = run_key(dash_root, SLOW_PRESET)
    at = _app(monkeypatch, dash_root, "diagnosis", run=key)
    _no_exceptions(at)
    assert at.selectbox(key="diagnosis_run").value == key
    text = _text(at)
    assert "The input pipeline holds up training" in text
    assert ":red-badge[HIGH]" in text  # the card's severity
    fix = [c.value for c in at.code]
    # The input finding's fix undoes the preset (one example per record, parsed one at a time).
    assert fix[0].startswith("recadvisor train"), fix
    assert "--record-format prebatched" in fix[0] and "--parse batched" in fix[0], fix
    assert _charts(at) == 3  # breakdown, timeline, thread states
    assert len(at.get("download_button")) == 1  # the JSON report
    step = at.selectbox(key="timeline_step")
    assert f"{step.value} (slowest)" in step.options, step.options
    assert "red: input waits" in text and "No OS sampler data" not in text
    # The sampler's scans of the other processes: at least the test run's own pytest process.
    assert "Other processes on the machine" in [h.value for h in at.subheader]
    others = at.dataframe[-1].value
    assert list(others.columns) == ["command", "processes", "cores", "the job's own"]
    assert len(others) >= 1 and (others["cores"] > 0).all()
    # Another step re-renders the timeline.
    other = next(s for s in step.options if "slowest" not in s)
    at.selectbox(key="timeline_step").set_value(int(other)).run()
    _no_exceptions(at)
    assert f"events in step {other}" in _text(at)


def _input_fixed(text: str) -> bool:
    """The clean run's input finding is gone, or `low`: on a busy 2-core machine it can still
    read a 1.02x wait (one CI run in several), which is no problem to fix."""
    title = "The input pipeline holds up training"
    return title not in text or text.count(title) == text.count(f"[low] {title}")


def test_diagnosis_of_a_clean_run_has_no_serious_findings(monkeypatch, dash_root):
    at = _app(monkeypatch, dash_root, "diagnosis", run=run_key(dash_root, "clean"))
    _no_exceptions(at)
    # The run was analyzed and shown (not merely absent findings because the page stopped).
    assert not at.error, [e.value for e in at.error]
    assert int(next(m for m in at.metric if m.label == "steps").value) > 0
    assert _charts(at) >= 2
    text = _text(at)
    assert "HIGH]" not in text and "MEDIUM]" not in text
    assert _input_fixed(text)


def test_diagnosis_refuses_paths_outside_the_root(monkeypatch, dash_root):
    at = _app(monkeypatch, dash_root, "diagnosis", run="../../../etc")
    _no_exceptions(at)
    assert any("outside the dashboard root" in e.value for e in at.error)


def test_diagnosis_of_a_corrupt_run_is_one_line(monkeypatch, dash_root):
    at = _app(monkeypatch, dash_root, "diagnosis", run=CORRUPT_RUN)
    _no_exceptions(at)
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith(f"cannot analyze {CORRUPT_RUN}"), errors
    assert "\n" not in errors[0] and "Traceback" not in errors[0]


def test_compare_shows_speedup_and_resolved_findings(monkeypatch, dash_root):
    before, after = run_key(dash_root, SLOW_PRESET), run_key(dash_root, "clean")
    at = _app(monkeypatch, dash_root, "compare", before=before, after=after)
    _no_exceptions(at)
    speedup = next(m for m in at.metric if m.label == "speedup").value
    assert speedup.endswith("x") and float(speedup[:-1]) > 1.2, speedup
    text = _text(at)
    # Fixed: gone, or down to `low` (on a busy 2-core machine a clean run can still read a
    # 1.02x input wait: one CI run in several).
    assert (":green[resolved] `input_preprocessing`" in text
            or re.search(r"`input_preprocessing`: (high|medium) -> low", text)), text
    assert _charts(at) == 1


def test_compare_same_run_twice_is_refused(monkeypatch, dash_root):
    key = run_key(dash_root, "clean")
    at = _app(monkeypatch, dash_root, "compare", before=key, after=key)
    _no_exceptions(at)
    assert any("same run" in w.value for w in at.warning)


def test_tuning_page_shows_best_command_history_and_importances(monkeypatch, study_root):
    at = _app(monkeypatch, study_root, "tuning")
    _no_exceptions(at)
    assert at.selectbox(key="tuning_source").value == "tune/study.db"  # notes.db is skipped
    assert "notes.db" not in at.selectbox(key="tuning_source").options
    assert at.selectbox(key="tuning_study").options == ["recadvisor", "pareto"]
    at.selectbox(key="tuning_study").set_value("recadvisor").run()
    text = _text(at)
    best = [c.value for c in at.code]
    assert best and best[0].startswith("recadvisor train"), best
    expected = (study_root / "tune" / "best_command.txt").read_text().strip()
    assert best[0] == expected  # the page and `recadvisor tune` agree on the best
    speedup = next(m for m in at.metric if m.label == "speedup").value
    assert speedup.endswith("x") and float(speedup[:-1]) > 1, speedup
    assert _chart_titles(at) == ["Optimization history", "Parameter importances"]
    assert "Pareto" not in text
    at.selectbox(key="tuning_study").set_value("pareto").run()
    _no_exceptions(at)
    assert "Pareto front: samples/s vs devices" in _chart_titles(at)


def _chart_titles(at: AppTest) -> list[str]:
    import json

    return [json.loads(c.proto.spec)["layout"]["title"]["text"] for c in at.get("plotly_chart")]


def test_tuning_page_with_studies_that_have_no_result(monkeypatch, tmp_path):
    import optuna

    url = f"sqlite:///{tmp_path / 'other' / 'study.db'}"
    (tmp_path / "other").mkdir()
    optuna.create_study(study_name="empty", storage=url)
    failed = optuna.create_study(study_name="failed", storage=url)
    failed.optimize(lambda t: 1 / 0, n_trials=2, catch=(ZeroDivisionError,))
    for name in ("empty", "failed"):  # not made by recadvisor: no setup, no baseline
        at = _app(monkeypatch, tmp_path, "tuning")
        at.selectbox(key="tuning_study").set_value(name).run()
        _no_exceptions(at)
        assert not at.error, [e.value for e in at.error]
        assert next(m for m in at.metric if m.label == "best samples/s").value == "—"


def test_changing_the_run_picker_sticks(monkeypatch, dash_root):
    slow, clean = run_key(dash_root, SLOW_PRESET), run_key(dash_root, "clean")
    at = _app(monkeypatch, dash_root, "diagnosis", run=slow)
    assert "The input pipeline holds up training" in _text(at)
    at.selectbox(key="diagnosis_run").set_value(clean).run()
    _no_exceptions(at)
    assert at.selectbox(key="diagnosis_run").value == clean
    assert at.query_params["run"] == clean
    assert _input_fixed(_text(at))
    at.run()  # a later rerun (any widget) keeps the pick
    assert at.selectbox(key="diagnosis_run").value == clean
    at.switch_page("views/compare.py").run()
    at.selectbox(key="compare_before").set_value(slow).run()
    assert at.selectbox(key="compare_before").value == slow
    assert at.selectbox(key="compare_after").value == clean  # the run picked in Diagnosis
    assert any("input_preprocessing" in m.value for m in at.markdown)


def test_chrome_trace_run_without_sampler(monkeypatch, tmp_path):
    """A PyTorch-profiler GPU trace (no sampler, no metadata): findings, no thread states."""
    import json

    events = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]
    for step in range(4):
        t0 = step * 100_000
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}",
                       "pid": 1, "tid": 1, "ts": t0, "dur": 99_000})
        for d in range(2):
            events.append({"ph": "X", "cat": "kernel", "name": "sm80_xmma_gemm_f32f32",
                           "pid": d, "tid": 7, "ts": t0 + 1_000, "dur": 60_000,
                           "args": {"device": d}})
            events.append({"ph": "X", "cat": "kernel",
                           "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                           "pid": d, "tid": 20, "ts": t0 + 61_000, "dur": 30_000,
                           "args": {"device": d}})
    run = tmp_path / "torch"
    run.mkdir()
    gpu = {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "computeMajor": 8, "computeMinor": 0}
    (run / "rank0.pt.trace.json").write_text(json.dumps({"deviceProperties": [gpu],
                                                         "traceEvents": events}))
    at = _app(monkeypatch, tmp_path, "runs")
    assert list(at.dataframe[0].value["run"]) == ["torch"]
    at = _app(monkeypatch, tmp_path, "diagnosis", run="torch")
    _no_exceptions(at)
    text = _text(at)
    assert "collective_overhead" in text and ":red-badge[HIGH]" in text
    assert any("No OS sampler data" in i.value for i in at.info)
    assert any("GPU: NVIDIA A100-SXM4-80GB (compute capability 8.0)" in c.value
               for c in at.caption)
    assert _chart_titles(at) == ["Step time by category", f"Timeline of step "
                                 f"{at.selectbox(key='timeline_step').value}"]
    assert not at.code  # not a reference-trainer run: no fix command is made up



def test_tuning_storage_url_is_checked(monkeypatch, study_root, tmp_path):
    at = _app(monkeypatch, study_root, "tuning")
    at.selectbox(key="tuning_source").set_value("storage URL…").run()
    outside = tmp_path / "elsewhere.db"
    outside.write_bytes(b"")
    at.text_input(key="tuning_url").input(f"sqlite:///{outside}").run()
    _no_exceptions(at)
    assert any("outside the dashboard root" in e.value for e in at.error)
    at.text_input(key="tuning_url").input(
        "postgresql+psycopg://u:secret@127.0.0.1:1/none").run()
    _no_exceptions(at)
    errors = [e.value for e in at.error]
    assert errors and "cannot open storage" in errors[0] and "secret" not in errors[0], errors
    good = f"sqlite:///{study_root / 'tune' / 'study.db'}"
    at.text_input(key="tuning_url").input(good).run()
    _no_exceptions(at)
    assert not at.error and at.code[0].value.startswith("recadvisor train")


def _upload(at: AppTest, name: str, data: bytes) -> AppTest:
    at.file_uploader(key="upload").upload(name, data, "application/octet-stream")
    return at.run()


def test_upload_of_a_zipped_logdir_is_analyzed_and_listed(monkeypatch, dash_root):
    logdir = dash_root / "logdirs" / SLOW_PRESET
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for f in logdir.rglob("*"):
            if f.is_file():
                zf.write(f, f.relative_to(logdir))
    at = _app(monkeypatch, dash_root, "runs")
    _upload(at, "mine.zip", buf.getvalue())
    _no_exceptions(at)
    assert any("mine.zip: analyzed" in s.value for s in at.success), [e.value for e in at.error]
    at.switch_page("views/diagnosis.py").run()
    _no_exceptions(at)
    assert at.selectbox(key="diagnosis_run").value == "upload: mine.zip"
    assert "The input pipeline holds up training" in _text(at)


@pytest.mark.parametrize("name,data,message", [
    ("broken.xplane.pb", b"\x0a\xff\xff\xff not a protobuf", "upload broken.xplane.pb"),
    ("trace.json.gz", b"not gzip", "not gzip data"),
    ("evil.zip", None, "points outside the archive"),
])
def test_bad_uploads_get_one_line(monkeypatch, tmp_path, name, data, message):
    if data is None:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            zf.writestr("../../escape.xplane.pb", b"x")
        data = buf.getvalue()
    at = _app(monkeypatch, tmp_path, "runs")
    _upload(at, name, data)
    _no_exceptions(at)
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and message in errors[0] and "\n" not in errors[0], errors


def test_upload_over_the_cap_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("RECADVISOR_DASHBOARD_MAX_UPLOAD_MB", "1")
    at = _app(monkeypatch, tmp_path, "runs")
    _upload(at, "big.xplane.pb", b"\0" * (2 * 2**20))
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "over the upload cap of 1 MB" in errors[0], errors


def test_open_path_box(monkeypatch, dash_root):
    at = _app(monkeypatch, dash_root, "runs")
    at.text_input(key="open_path").input("/etc").run()
    assert any("outside the dashboard root" in e.value for e in at.error)
    at.text_input(key="open_path").input("logdirs/nothing-here").run()
    assert any("no such file or directory" in e.value for e in at.error)
    at.text_input(key="open_path").input(f"logdirs/{SLOW_PRESET}").run()
    _no_exceptions(at)
    assert any(s.value.startswith(f"logdirs/{SLOW_PRESET}:") for s in at.success)


def test_empty_root_says_what_to_do(monkeypatch, tmp_path):
    for page in ("runs", "diagnosis", "compare", "tuning"):
        at = _app(monkeypatch, tmp_path, page)
        _no_exceptions(at)
        assert at.info, page


def test_tuning_guidance_rounds_link_to_their_profiles(monkeypatch, dash_root, tmp_path):
    import shutil

    import optuna

    from tuner.study import GUIDANCE_ATTR

    shutil.copytree(dash_root / "logdirs" / SLOW_PRESET, tmp_path / "profiles" / "trial-0")
    shutil.copy(dash_root / "tune" / "study.db", tmp_path / "study.db")
    study = optuna.load_study(study_name="recadvisor", storage=f"sqlite:///{tmp_path}/study.db")
    study.set_user_attr(GUIDANCE_ATTR, {"rounds": [
        {"round": 1, "analyzed_trial": 0, "logdir": str(tmp_path / "profiles" / "trial-0")},
        {"round": 2, "analyzed_trial": 3, "logdir": "/somewhere/else"}]})
    at = _app(monkeypatch, tmp_path, "tuning")
    at.selectbox(key="tuning_study").set_value("recadvisor").run()
    _no_exceptions(at)
    links = [(link.proto.label, link.proto.query_string) for link in at.get("page_link")]
    assert links == [("diagnosis of profiles/trial-0", "run=profiles%2Ftrial-0")]
    at.query_params["run"] = "profiles/trial-0"
    at.switch_page("views/diagnosis.py").run()
    _no_exceptions(at)
    assert "The input pipeline holds up training" in _text(at)


def test_diagnosis_names_the_steps_it_left_out(monkeypatch, tmp_path):
    """A first step holding the job's compilation is out of the shares, and the page says so."""
    from tests.analyzers.xspace_builder import XSpaceBuilder

    b = XSpaceBuilder()
    main = b.plane("/host:CPU").line("python3", line_id=1)
    for i, dur in enumerate([400] + [10] * 9):
        t0 = (0 if i == 0 else 390 + 10 * i) * 1_000_000
        main.event("train", t0, dur * 1_000_000 - 1000, step_num=i, _r=1)
    main.event("tf.function-graph_building", 1_000_000, 300 * 1_000_000)
    run = b.write(tmp_path / "logdir")
    at = _app(monkeypatch, tmp_path, "diagnosis", run=str(run.relative_to(tmp_path)))
    _no_exceptions(at)
    assert "Left out of every share and estimate: step 0 (400.0 ms" in _text(at)
    assert "tracing and compilation ran in it" in _text(at)


def test_diagnosis_says_what_comes_next(monkeypatch, tmp_path):
    """A step waiting 60 ms for per-example parsing with 20 ms of Python around the call: the
    overhead is medium now, high once the input keeps up (analyzers/after_fix.py)."""
    from tests.analyzers.traces import host_trace

    _, run = host_trace(tmp_path / "logdir", steps=6, wait_ms=60, compute_ms=20, parse_ops=40,
                        parse_op_ms=0.5)
    at = _app(monkeypatch, tmp_path, "diagnosis", run=str(run.relative_to(tmp_path)))
    _no_exceptions(at)
    assert ("**Next**, once `input_preprocessing` is fixed (the step 2.50x shorter): "
            "`per_step_overhead` 50% of the step (1.60x, high)") in _text(at)


def test_diagnosis_says_what_caps_the_cpus(monkeypatch, tmp_path):
    """A run whose process had a CPU quota: the caption says so, as the report's hardware line
    does; a run without limits says nothing of them."""
    from tests.analyzers.traces import host_trace, sweeps, write_sampler

    for name, limits in (("quota", {"cpu_quota": 1.5}), ("free", {"affinity_cpus": 2})):
        _, run = host_trace(tmp_path / name, wait_ms=0)
        write_sampler(run, sweeps(100, 0, input_running=0), n_cpus=2, cpu_percent=100,
                      **limits)
        at = _app(monkeypatch, tmp_path, "diagnosis", run=str(run.relative_to(tmp_path)))
        _no_exceptions(at)
        captions = [c.value for c in at.caption]
        assert any(f"{run.relative_to(tmp_path)}" in c for c in captions), captions
        limited = [c for c in captions if "CPUs: 2 (CPU quota 1.5: 1.5 usable)" in c]
        assert bool(limited) == (name == "quota"), captions
