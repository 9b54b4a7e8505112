"""`straggler_worker`: one worker the others wait for in their all-reduce, and why (code-built
two-worker CPU traces: each worker's file holds its own steps, 100 ms each)."""

from __future__ import annotations

import pytest

from analyzers.report import analyze
from tests.analyzers.test_detectors import by_id
from tests.analyzers.traces import MS, host_trace


def _worker(tmp_path, name: str, *, compute_ms: float = 30, extra_ms=lambda i: 0.0,
            idle_ms: float = 0.0, wait_ms: float = 0.0, steps: int = 6,
            joins=lambda i: True) -> None:
    """A worker computing `compute_ms` (after `wait_ms` for input), then `extra_ms(step)` more,
    then idle `idle_ms` (no event: Python or GC), then in the all-reduce until 92 ms (in the
    steps `joins` says)."""
    def add(b, host, main, comp, t0, i):
        t = t0 + MS // 2 + int((wait_ms + compute_ms) * MS)
        if extra_ms(i):
            comp.event("extra/MatMul:MatMul", t, int(extra_ms(i) * MS))
        start = t + int((extra_ms(i) + idle_ms) * MS) + 1000
        if joins(i):
            host.line("collective_ops/3", line_id=3).event(
                "sgd/CollectiveReduceV2:CollectiveReduceV2", start, t0 + 92 * MS - start)
    host_trace(tmp_path, steps=steps, compute_ms=compute_ms, wait_ms=wait_ms, per_step=add,
               host_name=name)


def _finding(tmp_path):
    return by_id(analyze(tmp_path)).get("straggler_worker")


@pytest.mark.parametrize(("slow", "cause"), [
    ({"compute_ms": 45}, "compute"),
    ({"wait_ms": 15}, "input"),
    ({"idle_ms": 15}, "untraced"),
])
def test_one_worker_holds_the_other_up(tmp_path, slow, cause):
    """worker_b is 15 ms late to the all-reduce every step, for a longer compute, a longer wait
    for its input or time no event covers: worker_a waits for it 15 ms of each 100 ms step."""
    _worker(tmp_path, "worker_a")
    _worker(tmp_path, "worker_b", **slow)
    f = _finding(tmp_path)
    assert f is not None and f.numbers["straggler"] == "worker_b", f and f.evidence
    assert f.numbers["cause"] == cause and f.numbers["steps_held_up"] == 6
    assert f.numbers["others_wait_ms"] == pytest.approx(15, abs=0.1)
    assert f.step_fraction == pytest.approx(0.15, abs=0.002) and f.severity == "medium"
    assert f.speedup == pytest.approx(1 / 0.85, rel=0.01)
    assert "worker_b" in f.title
    # A TF job's remedy names TF's APIs (a PyTorch job's: test_recorded_traces).
    if cause != "untraced":
        assert ("tf.distribute" if cause == "compute" else ".xplane.pb") in f.remedy
    if cause == "compute":
        assert f.numbers["compute_ms"] == pytest.approx(45, abs=0.5)
        assert f.numbers["others_compute_ms"] == pytest.approx(30, abs=0.5)
    if cause == "input":
        assert f.numbers["input_ms"] == pytest.approx(15, abs=0.5)


def test_balanced_workers_have_no_straggler(tmp_path):
    _worker(tmp_path, "worker_a")
    _worker(tmp_path, "worker_b")
    assert _finding(tmp_path) is None


def test_a_straggler_that_changes_from_step_to_step_is_none(tmp_path):
    """Each worker is 20 ms late in every other step: nobody holds the others up in most."""
    _worker(tmp_path, "worker_a", extra_ms=lambda i: 20.0 * (i % 2))
    _worker(tmp_path, "worker_b", extra_ms=lambda i: 20.0 * (1 - i % 2))
    assert _finding(tmp_path) is None
    # Late in 5 steps of 6: that one is the straggler, and only those steps count.
    _worker(tmp_path / "mostly", "worker_a")
    _worker(tmp_path / "mostly", "worker_b", extra_ms=lambda i: 20.0 * (i != 3))
    f = _finding(tmp_path / "mostly")
    assert f.numbers["straggler"] == "worker_b" and f.numbers["steps_held_up"] == 5
    assert f.numbers["cause"] == "compute"


def test_one_worker_or_no_collective_is_no_straggler(tmp_path):
    _worker(tmp_path, "worker_a")
    assert _finding(tmp_path) is None  # one host
    host_trace(tmp_path / "two", compute_ms=30, host_name="worker_a")
    host_trace(tmp_path / "two", compute_ms=50, host_name="worker_b")
    assert _finding(tmp_path / "two") is None  # no all-reduce: nobody waits for anybody


@pytest.mark.parametrize(("slow", "left"), [({"compute_ms": 45}, 0.0), ({"idle_ms": 15}, 0.15)])
def test_collective_overhead_leaves_the_idle_wait_to_the_straggler(tmp_path, slow, left):
    """worker_a waits 15 ms a step in its all-reduce for worker_b. While b computes the
    breakdown counts compute; while b is idle (no event) nobody computes and it counts
    collective time, which is the straggler's, not the exchange's."""
    _worker(tmp_path, "worker_a")
    _worker(tmp_path, "worker_b", **slow)
    found = by_id(analyze(tmp_path))
    coll = found["collective_overhead"]
    assert found["straggler_worker"].numbers["collective_fraction"] == pytest.approx(
        left, abs=0.002)
    assert coll.numbers.get("left_to_straggler", 0.0) == pytest.approx(left, abs=0.002)
    # The exchange itself, from b's join (45.5 ms) to 92 ms of each 100 ms step, either way.
    assert coll.step_fraction == pytest.approx(0.465, abs=0.005)


def test_three_workers_the_saving_is_the_next_slowest(tmp_path):
    """w2 computes 50 ms, w1 35 and w0 30, and a chief that trains nothing sorts first: w2 holds
    both up, and were it as fast as w1 the step would lose w1's 15 ms wait, not w0's 20."""
    host_trace(tmp_path, steps=6, compute_ms=20, host_name="a_chief")  # no all-reduce
    for name, ms in (("w0", 30), ("w1", 35), ("w2", 50)):
        _worker(tmp_path, name, compute_ms=ms)
    f = _finding(tmp_path)
    assert f.numbers["straggler"] == "w2" and f.numbers["cause"] == "compute"
    assert f.numbers["others_wait_ms"] == pytest.approx(15, abs=0.1)
    assert f.numbers["others_compute_ms"] == pytest.approx(32.5, abs=0.5)  # median of 30, 35
    assert "the least delayed of them waits" in f.evidence[0]


@pytest.mark.parametrize("case", ["traced_for_fewer_steps", "joins_once"])
def test_a_worker_missing_from_the_all_reduce_holds_nobody_up(tmp_path, case):
    """A worker the profiler caught for 2 steps of the other's 8, or a chief in one all-reduce
    of 6 steps: in the steps it is in none, it waited for nobody and nobody waited for it (the
    others' whole exchange there had read as a wait for it: a high 1.9-2x finding)."""
    if case == "traced_for_fewer_steps":
        _worker(tmp_path, "w0", steps=8)
        _worker(tmp_path, "w1", steps=2)
    else:
        _worker(tmp_path, "w0")
        _worker(tmp_path, "w1")
        _worker(tmp_path, "z_chief", joins=lambda i: i == 0)
    assert _finding(tmp_path) is None
    coll = by_id(analyze(tmp_path))["collective_overhead"]
    assert "left_to_straggler" not in coll.numbers


def test_the_idle_wait_is_the_least_delayed_workers(tmp_path):
    """Three workers: worker_a joins the all-reduce at 30 ms, worker_b idles 10 ms first (no
    event), worker_c, the straggler, 20 ms. From 30 to 50 ms nobody computes and worker_a's
    all-reduce runs, but worker_b waits only 10 ms: the wait nobody computes through, which
    collective_overhead leaves to this finding, is that least delayed worker's."""
    _worker(tmp_path, "worker_a")
    _worker(tmp_path, "worker_b", idle_ms=10)
    _worker(tmp_path, "worker_c", idle_ms=20)
    f = _finding(tmp_path)
    assert f.numbers["straggler"] == "worker_c" and f.numbers["cause"] == "untraced"
    assert f.numbers["others_wait_ms"] == pytest.approx(10, abs=0.1)
    assert f.numbers["collective_fraction"] == pytest.approx(0.10, abs=0.002)
