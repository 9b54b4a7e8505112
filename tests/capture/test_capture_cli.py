"""`recadvisor capture -- CMD`: error paths, the bootstrap, and real captures of small TF scripts
(xprof opens them, the sampler covers the window, xplane and sampler clocks agree)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from recadvisor.capture import METADATA_FILE
from recadvisor.capture.layout import (
    OTHERS_SUFFIX,
    PROCESS_SUFFIX,
    THREADS_SUFFIX,
    XPLANE_SUFFIX,
)

TIMEOUT = 240  # seconds for one TF run; TF imports take a few seconds on a busy 2-core machine


def capture(*args: str, timeout: int = TIMEOUT, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "recadvisor", "capture", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        **kw,
    )


def last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


# -- errors and the bootstrap (no TensorFlow) -------------------------------------------------


def test_command_not_found_is_127_and_one_line(tmp_path):
    proc = capture("--logdir", str(tmp_path / "l"), "--", "no-such-command-xyz", "arg")
    assert proc.returncode == 127
    expected = "recadvisor capture: error: command not found: no-such-command-xyz"
    assert proc.stderr.strip() == expected
    proc = capture("--logdir", str(tmp_path / "l"), "--", str(tmp_path / "missing.sh"))
    assert proc.returncode == 127 and "Traceback" not in proc.stderr


def test_command_not_executable_is_126(tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    proc = capture("--logdir", str(tmp_path / "l"), "--", str(script))
    assert proc.returncode == 126
    assert last_line(proc.stderr).startswith("recadvisor capture: error: command not executable")


def test_unwritable_logdir_is_2_and_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = capture("--logdir", str(blocker / "logdir"), "--", sys.executable, "-c", "pass")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith("recadvisor capture: error: cannot write --logdir")


def test_usage_errors_are_2(tmp_path):
    assert capture("--logdir", str(tmp_path)).returncode == 2  # no command
    assert capture("--logdir", str(tmp_path), "--").returncode == 2
    proc = capture("--logdir", str(tmp_path), "--duration", "1", "--steps", "3", "--", "true")
    assert proc.returncode == 2 and "not allowed with" in proc.stderr
    assert capture("--logdir", str(tmp_path), "--steps", "0", "--", "true").returncode == 2
    assert capture("--", "true").returncode == 2  # --logdir is required
    proc = capture("--logdir", str(tmp_path), "--sampler-hz", "0", "--", "true")
    assert proc.returncode == 2 and "--sampler-hz" in proc.stderr


def test_help_documents_the_window_and_step_counting():
    proc = subprocess.run(
        [sys.executable, "-m", "recadvisor", "capture", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0
    for needle in ("--steps", "tf.function", "--duration", "--delay", "eager", "Ctrl-C"):
        assert needle in proc.stdout


def test_a_command_without_tensorflow_keeps_its_exit_code(tmp_path):
    proc = capture(
        "--logdir", str(tmp_path / "l"), "--delay", "0", "--",
        sys.executable, "-c", "print('hello'); raise SystemExit(5)",
    )  # fmt: skip
    assert proc.returncode == 5
    assert proc.stdout.strip() == "hello"
    assert "nothing was profiled" in proc.stderr and "Traceback" not in proc.stderr


def test_bootstrap_chains_to_an_existing_sitecustomize(tmp_path):
    mine = tmp_path / "site"
    mine.mkdir()
    marker = tmp_path / "marker"
    (mine / "sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    env = {**os.environ, "PYTHONPATH": str(mine)}
    code = f"import sys; print({str(mine)!r} in sys.path)"
    proc = capture("--logdir", str(tmp_path / "l"), "--", sys.executable, "-c", code, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"
    assert marker.read_text() == "ran"


def test_bootstrap_is_inert_without_the_environment_variable():
    from recadvisor.capture.cli import BOOTSTRAP_DIR

    env = {k: v for k, v in os.environ.items() if k != "RECADVISOR_CAPTURE"}
    env["PYTHONPATH"] = str(BOOTSTRAP_DIR)
    code = "import sys; print(type(sys.meta_path[0]).__name__)"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0 and proc.stdout.strip() != "_PostImportFinder"


# -- real captures -------------------------------------------------------------------------------

# A small TF job: a tf.function step under a "train" step marker; every step records
# time.time_ns() inside the marker, written to argv[2] at the end. argv[1]: seconds to run;
# argv[3] (optional): exit code to die with after the loop.
JOB = textwrap.dedent(
    """
    import json, sys, time
    import tensorflow as tf
    secs, out = float(sys.argv[1]), sys.argv[2]
    w = tf.Variable(tf.random.normal((64, 64)))
    @tf.function
    def train_step(x):
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(tf.matmul(x, w) ** 2)
        w.assign_sub(1e-6 * t.gradient(loss, w))
        return loss
    x = tf.random.normal((64, 64))
    marks = []
    t = time.time()
    while time.time() - t < secs:
        with tf.profiler.experimental.Trace("train", step_num=len(marks), _r=1):
            marks.append(time.time_ns())
            train_step(x)
        time.sleep(0.005)
    json.dump(marks, open(out, "w"))
    if len(sys.argv) > 3:
        sys.exit(int(sys.argv[3]))
    """
)


@pytest.fixture
def job(tmp_path):
    path = tmp_path / "job.py"
    path.write_text(JOB)
    return path


def run_dir_of(logdir: Path) -> Path:
    runs = [p for p in (logdir / "plugins" / "profile").iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def xplane_markers(xplane: Path, name: str = "train") -> tuple[dict[int, int], int]:
    """{step_num: absolute start ns} of the `name` events, and the profile start time. Absolute
    time = profile_start_time (Task Environment plane) + line timestamp_ns + offset_ps / 1000."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(xplane.read_bytes())
    env = next(p for p in space.planes if p.name == "Task Environment")
    names = {k: v.name for k, v in env.stat_metadata.items()}
    start = next(s for s in env.stats if names[s.metadata_id] == "profile_start_time")
    profile_start = start.int64_value or start.uint64_value
    host = next(p for p in space.planes if p.name == "/host:CPU")
    events = {k: v.name for k, v in host.event_metadata.items()}
    stats = {k: v.name for k, v in host.stat_metadata.items()}
    out = {}
    for line in host.lines:
        for ev in line.events:
            if events[ev.metadata_id] != name:
                continue
            step = next(s.int64_value for s in ev.stats if stats[s.metadata_id] == "step_num")
            out[step] = profile_start + line.timestamp_ns + ev.offset_ps // 1000
    return out, profile_start


@pytest.mark.slow
def test_capture_of_a_tf_script_opens_in_xprof_with_aligned_sampler_data(tmp_path, job):
    logdir = tmp_path / "logdir"
    marks_file = tmp_path / "marks.json"
    proc = capture(
        "--logdir", str(logdir), "--delay", "0.5", "--duration", "1.5", "--",
        sys.executable, str(job), "4", str(marks_file),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    run_dir = run_dir_of(logdir)
    xplanes = list(run_dir.glob(f"*{XPLANE_SUFFIX}"))
    assert len(xplanes) == 1
    host = xplanes[0].name[: -len(XPLANE_SUFFIX)]

    # xprof opens it
    from xprof.convert import raw_to_tool_data

    data, content_type = raw_to_tool_data.xspace_to_tool_data(
        [str(xplanes[0])], "overview_page", {}
    )
    assert data and content_type == "application/json"
    assert isinstance(json.loads(data), list)

    meta = json.loads((run_dir / METADATA_FILE).read_text())
    w = meta["profile_window"]
    assert meta["exit_code"] == 0 and meta["finished"] and meta["tool"] == "recadvisor.capture"
    assert meta["command"][-2:] == ["4", str(marks_file)]
    assert meta["pid"] == meta["profiled_pid"]
    assert w["stop_reason"] == "duration" and w["step_function"] == "train_step"
    assert 1.4e9 <= w["end_unix_ns"] - w["start_unix_ns"] <= 3e9
    assert w["steps"] > 5 and w["steps_per_s"] > 0
    assert w["sampler"]["files"] == [host + THREADS_SUFFIX, host + PROCESS_SUFFIX,
                                     host + OTHERS_SUFFIX]

    # The sampler covers the window, at about the rate asked for.
    threads = pq.read_table(run_dir / (host + THREADS_SUFFIX)).to_pandas()
    process = pq.read_table(run_dir / (host + PROCESS_SUFFIX)).to_pandas()
    assert process.ts_ns.min() <= w["start_unix_ns"] and process.ts_ns.max() >= w["end_unix_ns"]
    span_s = (process.ts_ns.max() - process.ts_ns.min()) / 1e9
    assert len(process) / span_s >= 20
    assert (threads.pid == meta["profiled_pid"]).all()
    assert {"tf_Compute"} & set(threads.name)

    # Clock alignment: each step marker's xplane time matches the time.time_ns() taken inside it.
    marks = json.loads(marks_file.read_text())
    events, profile_start = xplane_markers(xplanes[0])
    assert abs(profile_start - w["start_unix_ns"]) < 50e6
    assert len(events) >= 5
    errors = [abs(marks[step] - t) for step, t in events.items()]
    assert max(errors) < 3e6, sorted(errors)[-5:]  # a few ms at most; typically tens of us
    inside = [marks[step] for step in events]
    assert process.ts_ns.min() <= min(inside) and process.ts_ns.max() >= max(inside)


@pytest.mark.slow
def test_steps_window_holds_n_whole_steps(tmp_path, job):
    logdir = tmp_path / "logdir"
    proc = capture(
        "--logdir", str(logdir), "--delay", "0.5", "--steps", "5", "--batch-size", "64", "--",
        sys.executable, str(job), "3", str(tmp_path / "marks.json"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = run_dir_of(logdir)
    meta = json.loads((run_dir / METADATA_FILE).read_text())
    w = meta["profile_window"]
    assert w["stop_reason"] == "steps" and w["steps"] == 5
    assert meta["samples_per_s"] == pytest.approx(64 * w["steps_per_s"])
    events, _ = xplane_markers(next(run_dir.glob(f"*{XPLANE_SUFFIX}")))
    assert len(events) == 5 and sorted(events) == list(range(min(events), min(events) + 5))


@pytest.mark.slow
def test_the_untraced_step_time_before_the_window_is_recorded(tmp_path, job):
    """The step function's calls before the window give the untraced step time (the metadata's
    `step_time_ms`, which the analyzer compares the profiled steps with): the cadence of the
    job's own step markers before the window."""
    logdir = tmp_path / "logdir"
    proc = capture(
        "--logdir", str(logdir), "--delay", "6", "--steps", "5", "--",
        sys.executable, str(job), "8", str(tmp_path / "marks.json"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    meta = json.loads((run_dir_of(logdir) / METADATA_FILE).read_text())
    start = meta["profile_window"]["start_unix_ns"]
    marks = json.loads((tmp_path / "marks.json").read_text())
    before = [b - a for a, b in zip(marks, marks[1:], strict=False) if b < start]
    untraced = meta["step_time_ms"]
    if len(before) < 8:  # TensorFlow took most of the delay to import: nothing to time
        assert untraced is None, untraced
        return
    assert untraced["function"] == "train_step" and untraced["steps"] >= 5
    expected = sorted(before)[len(before) // 2] / 1e6
    assert untraced["p50"] == pytest.approx(expected, rel=0.25), (untraced, expected)
    assert "took" in proc.stderr and "per call, median of" in proc.stderr


# A TF1 graph-mode job: Session.run of the training op from the main thread (a checkpoint run
# every 4th step, other fetches), and a second thread calling Session.run on another op without
# pause, as a queue runner does. argv[1]: steps to run.
SESSION_JOB = textwrap.dedent(
    """
    import os, sys, tempfile, threading
    import tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    v1 = tf.compat.v1
    x = tf.random.normal((256, 64))
    w = v1.get_variable("w", [64, 64])
    loss = tf.reduce_sum(tf.matmul(x, w) ** 2)
    train = v1.train.GradientDescentOptimizer(1e-6).minimize(loss)
    other = tf.reduce_sum(tf.random.normal((16, 16)))
    sess = v1.Session()
    sess.run(v1.global_variables_initializer())
    saver = v1.train.Saver()
    stop = threading.Event()
    def filler():
        while not stop.is_set():
            sess.run(other)
    other_thread = threading.Thread(target=filler, daemon=True)
    other_thread.start()
    folder = tempfile.mkdtemp()
    for i in range(int(sys.argv[1])):
        sess.run(train)
        if i % 4 == 3:
            saver.save(sess, os.path.join(folder, "ckpt"))
    stop.set()
    # A daemon thread still inside Session.run at interpreter exit aborts the process
    # ("terminate called ... exception not rethrown", exit 134: 1 CI run in many).
    other_thread.join()
    """
)


@pytest.mark.slow
def test_steps_window_counts_a_sessions_training_runs(tmp_path):
    """TF1 graph mode has no tf.function: `--steps` counts the main thread's Session.run calls of
    its most frequent fetches (the training op), not a checkpoint's runs nor another thread's."""
    script = tmp_path / "session_job.py"
    script.write_text(SESSION_JOB)
    logdir = tmp_path / "logdir"
    proc = capture(
        "--logdir", str(logdir), "--delay", "1", "--steps", "6", "--",
        sys.executable, str(script), "400",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = run_dir_of(logdir)
    meta = json.loads((run_dir / METADATA_FILE).read_text())
    w = meta["profile_window"]
    assert w["stop_reason"] == "steps" and w["steps"] == 6, w
    assert w["step_function"].startswith("Session.run(GradientDescent"), w
    from analyzers.report import analyze

    report = analyze(logdir)
    # Steps from the training runs: 6 whole ones, each from one run to the next (the 7th run
    # starts after the window).
    assert report.ctx.steps.source == "session:SessionRun"
    assert report.ctx.n_steps + len(report.ctx.steps.left_out) in (5, 6)


@pytest.mark.slow
def test_a_crashing_command_keeps_its_code_and_the_capture(tmp_path, job):
    """Through a shell wrapper, so the profiled Python is a grandchild."""
    logdir = tmp_path / "logdir"
    inner = f"{sys.executable} {job} 2.5 {tmp_path / 'marks.json'} 3"
    proc = capture(
        "--logdir", str(logdir), "--delay", "0.5", "--duration", "60", "--", "sh", "-c", inner
    )
    assert proc.returncode == 3, proc.stderr[-3000:]
    run_dir = run_dir_of(logdir)
    meta = json.loads((run_dir / METADATA_FILE).read_text())
    assert meta["exit_code"] == 3 and meta["profile_window"]["stop_reason"] == "exit"
    assert meta["pid"] != meta["profiled_pid"]
    names = {p.name for p in run_dir.iterdir()}
    assert {f"{h}{s}" for h in [meta["host"]["hostname"]] for s in (XPLANE_SUFFIX,)} <= names
    assert any(n.endswith(THREADS_SUFFIX) for n in names)
    assert any(n.endswith(PROCESS_SUFFIX) for n in names)


@pytest.mark.slow
def test_sigint_stops_the_command_and_keeps_what_was_captured(tmp_path, job):
    logdir = tmp_path / "logdir"
    p = subprocess.Popen(
        [
            sys.executable, "-m", "recadvisor", "capture", "--logdir", str(logdir),
            "--delay", "0.5", "--duration", "60", "--",
            sys.executable, str(job), "120", str(tmp_path / "marks.json"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    deadline = time.monotonic() + TIMEOUT
    seen = ""
    while "profiling pid" not in seen and time.monotonic() < deadline:
        seen += p.stderr.readline()
        assert p.poll() is None, seen
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)  # to recadvisor only: it passes it on
    _, err = p.communicate(timeout=TIMEOUT)
    assert p.returncode == 130, err[-3000:]
    run_dir = run_dir_of(logdir)
    meta = json.loads((run_dir / METADATA_FILE).read_text())
    assert meta["interrupted"] and meta["profile_window"]["stop_reason"] == "exit"
    assert list(run_dir.glob(f"*{XPLANE_SUFFIX}")) and list(run_dir.glob(f"*{THREADS_SUFFIX}"))


WINDOW_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import tensorflow as tf
    from recadvisor.capture import ProfileWindow
    @tf.function
    def f(x):
        return tf.reduce_sum(tf.matmul(x, x))
    x = tf.random.normal((128, 128))
    f(x)
    out = {}
    for label, kw in (("on", {}), ("off", {"sampler": False})):
        with ProfileWindow(sys.argv[1] + "/" + label, **kw) as w:
            for _ in range(20):
                f(x)
        out[label] = {"run_dir": str(w.run_dir), "info": w.sampler_info,
                      "start": w.start_ns, "end": w.end_ns}
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_profile_window_writes_sampler_files_beside_the_xplane(tmp_path):
    script = tmp_path / "window.py"
    script.write_text(WINDOW_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True,
        timeout=TIMEOUT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    on = Path(out["on"]["run_dir"])
    host = next(on.glob(f"*{XPLANE_SUFFIX}")).name[: -len(XPLANE_SUFFIX)]
    assert sorted(p.name for p in on.iterdir()) == sorted(
        [host + XPLANE_SUFFIX, host + THREADS_SUFFIX, host + PROCESS_SUFFIX, host + OTHERS_SUFFIX]
    )
    info = out["on"]["info"]
    assert info["files"] == [host + THREADS_SUFFIX, host + PROCESS_SUFFIX,
                             host + OTHERS_SUFFIX] and info["hz"] == 50
    assert info["start_unix_ns"] <= out["on"]["start"] and info["end_unix_ns"] >= out["on"]["end"]
    assert not [p for p in (tmp_path / "on").iterdir() if p.name.startswith(".")]  # scratch gone
    off = Path(out["off"]["run_dir"])
    assert [p.name for p in off.iterdir()] == [host + XPLANE_SUFFIX]
    assert out["off"]["info"] is None
