"""Steps of TF1 graph-mode jobs: Session.run calls (docs/trace-signals.md, "TF1 sessions").

Code-built traces mirror a TF 2.21 `tf.compat.v1.Session` job: a `SessionRun` event (`_r=1`,
producing its run id as `_p`) on the calling thread, the run's ops on inter-op threads nested in
`ExecutorState::Process` events that consume the id (`_c`). The real traces are
`foreign_jobs.py session_*` (tests/analyzers/test_real_traces.py).
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from analyzers.events import present_stat
from analyzers.ingest.chrome_trace import read_chrome_trace
from analyzers.ingest.logdir import load_run
from analyzers.report import analyze
from analyzers.steps import other_runs_work, runs_work, session_runs, step_breakdown
from tests.analyzers.xspace_builder import XSpaceBuilder

MS = 1_000_000


def session_trace(*, steps: int = 6, step_ms: float = 10.0, save_every: int = 0,
                  queue_threads: int = 0, ids: bool = True, updates: bool = True,
                  marker: bool = False, queue_op: str = "input_producer:FIFOQueueV2",
                  busy_runs: bool = False) -> XSpaceBuilder:
    """Training runs of `step_ms` each (ops, then one Adam update per variable); every
    `save_every`-th step a checkpoint run after the training run; `queue_threads` threads
    calling Session.run every 0.25 ms (a queue runner's enqueue run running `queue_op`, ops on
    their own executor thread) over the whole window. The training run's ops take 4.9 ms of it
    (waiting on its dequeue the rest), or all of it with `busy_runs`."""
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    main = host.line("python", line_id=1)
    comp = host.line("tf_Compute/11", line_id=11)
    run_id = iter(range(100, 100_000))

    def run(line, start, dur, ops_on, ops, slack=4_000):
        rid = next(run_id)
        line.event("SessionRun", start, dur, _r=1, **({"_pt": 2, "_p": rid} if ids else {}))
        proc = {"_ct": 2, "_c": rid} if ids else {}
        t = start + 20_000
        for name, d in ops:
            ops_on.event("ExecutorState::Process", t, d + slack, **proc)
            ops_on.event(name, t + 2_000, d)
            t += d + slack + 1_000
        ops_on.event("ExecutorDoneCallback", t, 3_000, **proc)

    for i in range(steps):
        t0 = int(i * step_ms * MS)
        if marker:
            main.event("train", t0, int(step_ms * MS) - 1000, step_num=i, _r=1)
        ops = [(f"dense_{k}/MatMul:_MklMatMul", 2 * MS if busy_runs else MS) for k in range(4)]
        if updates:
            ops += [(f"Adam/update_w{k}/ResourceApplyAdam:ResourceApplyAdam", 200_000)
                    for k in range(4)]
        train_ms = step_ms * 0.6 if save_every else step_ms * 0.9
        run(main, t0, int(train_ms * MS), comp, ops)
        if save_every and i % save_every == save_every - 1:
            run(main, t0 + int(step_ms * 0.7 * MS), int(step_ms * 0.2 * MS), comp,
                [("save/SaveV2:SaveV2", MS)])
    for q in range(queue_threads):
        line = host.line("python", line_id=2 + q)
        qcomp = host.line(f"tf_Compute/{12 + q}", line_id=12 + q)
        # Two 10 µs ops a run, each in 60 µs of executor time.
        for t in range(q * 50_000, int(steps * step_ms * MS), 250_000):
            run(line, t, 200_000, qcomp, [(queue_op, 10_000),
                                          ("ParseSingleExample:ParseExampleV2", 10_000)],
                slack=50_000)
    return b


def _steps(tmp_path, b: XSpaceBuilder):
    b.write(tmp_path)
    return step_breakdown(load_run(tmp_path).events)


def test_steps_are_the_training_runs(tmp_path):
    steps = _steps(tmp_path, session_trace(save_every=3))
    assert steps.source == "session:SessionRun"
    assert steps.line == "python" and steps.thread == ("host", "/host:CPU", 1)
    # Steps start at the training runs; the checkpoint runs (steps 2 and 5) sit inside steps.
    assert steps.table["start_ns"].tolist() == [i * 10 * MS for i in range(6)]
    assert steps.table["dur_ns"].tolist()[:5] == [10 * MS] * 5


def test_queue_runner_threads_are_not_steps(tmp_path):
    """Two threads calling Session.run 40 times a step, their runs overlapping the training
    run's updates: the run ids tie each update to the training run (placed by time alone, the
    updates would make a queue runner's thread the step-driving one, with 18 steps)."""
    steps = _steps(tmp_path, session_trace(queue_threads=2))
    assert steps.source == "session:SessionRun" and steps.thread == ("host", "/host:CPU", 1)
    assert len(steps.table) == 6


def test_without_run_ids_a_run_holds_the_updates_that_start_in_it(tmp_path):
    """JSON traces may drop the context ids: the update ops' times place them, which holds for
    one calling thread (a checkpoint run between two training runs updates nothing)."""
    b = session_trace(save_every=3, ids=False)
    steps = _steps(tmp_path, b)
    assert not len(present_stat(load_run(tmp_path).events, "producer")[0])
    assert steps.table["start_ns"].tolist() == [i * 10 * MS for i in range(6)]


def test_runs_without_updates_are_all_steps(tmp_path):
    """An inference or evaluation loop updates nothing: every run of the busiest thread."""
    steps = _steps(tmp_path, session_trace(save_every=3, updates=False))
    assert steps.source == "session:SessionRun"
    assert len(steps.table) == 8  # 6 runs and 2 checkpoint runs


def test_one_run_is_no_steps(tmp_path):
    assert _steps(tmp_path, session_trace(steps=1)).source == "none"


def test_step_markers_come_first(tmp_path):
    assert _steps(tmp_path, session_trace(marker=True)).source == "markers:train"


def test_run_ids_are_read_only_from_traces_with_session_runs(tmp_path):
    """A TF2 trace carries `_p`/`_c` on hundreds of thousands of thread-pool and function-run
    events, which no detector reads: left out of the table."""
    b = session_trace()
    b.write(tmp_path / "session")
    ev = load_run(tmp_path / "session").events
    assert len(present_stat(ev, "producer")[0]) == 6 and len(present_stat(ev, "consumer")[0]) > 6
    tf2 = XSpaceBuilder()
    line = tf2.plane("/host:CPU").line("python", line_id=1)
    for i in range(3):
        line.event("FunctionRun", i * MS, MS // 2, _pt=1, _p=7 + i)
        line.event("ExecutorState::Process", i * MS + 1000, 1000, _ct=1, _c=7 + i)
    tf2.write(tmp_path / "tf2")
    ev = load_run(tmp_path / "tf2").events
    for col in ("producer", "consumer"):
        assert not len(present_stat(ev, col)[0])


def test_chrome_trace_reads_run_ids_with_session_runs(tmp_path):
    events = [{"ph": "X", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}
              for name, tid, ts, dur, args in (
                  ("SessionRun", 1, 0, 900, {"_r": 1, "_p": 5}),
                  ("ExecutorState::Process", 2, 10, 100, {"_c": 5}),
                  ("FunctionRun", 1, 1000, 10, {"_p": 9}))]
    path = tmp_path / "t.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    ev, _ = read_chrome_trace(path, "h")
    rows, values = present_stat(ev, "producer")
    assert sorted(values.tolist()) == [5, 9] and present_stat(ev, "consumer")[1].tolist() == [5]


def test_queue_runners_executor_time_is_not_the_steps_dispatch(tmp_path):
    """The queue runners' runs execute on executor threads too (168 ops a step, 2 of every 3
    executor microseconds outside an op): their framework time is input work, and
    kernel_launch_overhead must not read it as the step's dispatch overhead (it read `medium`,
    27% of the step, before)."""
    b = session_trace(queue_threads=2)
    b.write(tmp_path)
    report = analyze(tmp_path)
    xs, xe = other_runs_work(report.ctx.events, report.ctx.steps.thread)
    assert len(xs) > 0 and (xe > xs).all()
    mine = other_runs_work(report.ctx.events, ("host", "/host:CPU", 2))
    assert len(mine[0]) and not np.isin(mine[0], xs).all()
    launch = {f.id: f for f in report.findings}.get("kernel_launch_overhead")
    assert launch is None or launch.severity == "low", launch


@pytest.mark.parametrize("queue_threads", [0, 2])
def test_session_trace_is_analyzed(tmp_path, queue_threads):
    session_trace(queue_threads=queue_threads).write(tmp_path)
    report = analyze(tmp_path)
    assert report.ctx.n_steps >= 5 and report.ctx.steps.source == "session:SessionRun"
    assert report.ctx.fractions["host_compute"] > 0.4


def test_other_runs_work_is_exactly_the_other_threads_runs(tmp_path):
    """The executor events consuming the ids of runs made on other threads, nothing else (no
    thread-pool region or function run that happens to consume an id)."""
    b = session_trace(queue_threads=1)
    b.plane("/host:CPU").line("tf_Compute/30", line_id=30).event(
        "ExecutorState::Process", 5 * MS, MS, _ct=1, _c=99_999)  # no SessionRun produced it
    b.write(tmp_path)
    events = load_run(tmp_path).events
    queue = other_runs_work(events, ("host", "/host:CPU", 1))
    # 240 queue-runner runs (every 0.25 ms for 60 ms), each 2 Process events and a callback.
    assert len(queue[0]) == 240 * 3
    assert len(other_runs_work(events, None)[0]) == 0
    # From a thread that makes no run, every run is another thread's: the training runs too.
    assert len(other_runs_work(events, ("host", "/host:CPU", 11))[0]) == 240 * 3 + 6 * 9


def test_run_ids_of_two_hosts_are_not_mixed(tmp_path):
    """Step ids count the runs of one process: two workers' traces reuse them (100, 101, ...
    here). A run's work is its own host's events consuming its id, not the other host's."""
    session_trace().write(tmp_path, host="a")
    session_trace(busy_runs=True).write(tmp_path, host="b")
    events = load_run(tmp_path).events
    rows, keys = session_runs(events, ("a", "/host:CPU", 1))
    # Both workers' training threads are line 1 of /host:CPU: the host tells them apart.
    assert len(rows) == 6 and (events["host"].iloc[rows] == "a").all()
    starts, ends = runs_work(events, keys)
    # 6 runs of 8 ops: 8 Process events and a callback each, all on host a (busy runs on b
    # last 2 ms an op, on a 1 ms or 0.2 ms).
    assert len(starts) == 6 * 9 and (ends - starts).max() < 1.1 * MS


def test_without_run_ids_queue_runners_do_not_drive_the_steps(tmp_path):
    """Without ids, updates are placed by time, and the queue runners' short runs overlap them
    (more runs of theirs hold an update's start than the training thread has runs): the thread
    whose updating runs last longest is the training one."""
    steps = _steps(tmp_path, session_trace(queue_threads=2, ids=False))
    assert steps.thread == ("host", "/host:CPU", 1) and len(steps.table) == 6
