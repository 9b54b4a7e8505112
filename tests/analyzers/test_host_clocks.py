"""Several hosts' clocks lined up on the collectives they share (analyzers/host_clocks.py,
docs/trace-signals.md, "Clocks of several hosts"): code-built two-worker traces whose all-reduce
ends at 92 ms of each 100 ms step on both, one worker's clock set ahead; and the recorded gloo
ranks, one of them given another machine and a clock 5 ms ahead."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analyzers.host_clocks import AGREE_NS, consensus, host_offset
from analyzers.ingest.logdir import load_run
from analyzers.report import analyze
from tests.analyzers.test_detectors import by_id
from tests.analyzers.traces import MS, host_trace

GLOO = Path(__file__).parent / "data" / "pytorch-cpu-gloo"


def _worker(tmp: Path, name: str, *, compute_ms: float = 30, **trace) -> None:
    """A worker computing `compute_ms`, then in the all-reduce until 92 ms of each step."""
    def add(b, host, main, comp, t0, i):
        start = t0 + MS // 2 + int(compute_ms * MS) + 1000
        host.line("collective_ops/3", line_id=3).event(
            "sgd/CollectiveReduceV2:CollectiveReduceV2", start, t0 + 92 * MS - start)
    host_trace(tmp, steps=6, compute_ms=compute_ms, per_step=add, host_name=name, **trace)


def _pair(tmp: Path, skew_ns: int, names=("worker_a", "worker_b"), **b_trace) -> Path:
    """worker_b computes 45 ms against worker_a's 30: worker_a waits 15 ms a step for it."""
    _worker(tmp, names[0])
    _worker(tmp, names[1], compute_ms=45, clock_ns=skew_ns, **b_trace)
    return tmp


@pytest.mark.parametrize("skew_ms", [7, -7, 30])
def test_a_clock_ahead_or_behind_is_lined_up(tmp_path, skew_ms):
    """On their clocks as recorded, worker_b's steps ran 7 or 30 ms late or 7 ms early. Left
    so, 7 ms ahead, worker_a's 15 ms wait read as 22 ms (`high`, 1.28x, instead of `medium`,
    1.18x), and 30 ms ahead the straggler was not found at all."""
    plain = analyze(_pair(tmp_path / "plain", 0))
    skewed = analyze(_pair(tmp_path / "skewed", skew_ms * MS))
    assert plain.run.clock_offsets == {}
    assert skewed.run.clock_offsets == {"worker_b": -skew_ms * MS}
    assert skewed.to_dict()["hardware"]["clock_offsets_ms"] == {"worker_b": -skew_ms}
    assert plain.to_dict()["hardware"]["clock_offsets_ms"] == {}
    assert any(f"worker_b moved {-skew_ms:+.2f} ms (6 of 6 steps' last collective ends agree "
               "within 0 µs)" in w for w in skewed.run.warnings)
    assert skewed.ctx.steps.median_step_ns() == plain.ctx.steps.median_step_ns() == 100 * MS
    a, b = by_id(plain)["straggler_worker"], by_id(skewed)["straggler_worker"]
    assert b.numbers == a.numbers and b.speedup == a.speedup
    assert a.numbers["others_wait_ms"] == pytest.approx(15, abs=0.1)


def test_processes_of_one_machine_share_its_clock(tmp_path):
    """Two workers of one machine (`<host>_<port>` files of TF's remote capture) that both record
    its wall clock are never moved, whatever their collectives say."""
    report = analyze(_pair(tmp_path, 7 * MS, names=("vm_6001", "vm_6002")))
    assert report.ctx.one_machine == "vm" and report.run.clock_offsets == {}
    assert not any("clocks" in w for w in report.run.warnings)


def test_an_offset_of_a_step_is_a_numbering_not_a_clock(tmp_path):
    """worker_b numbers its steps from 1: its step k ends its all-reduce 100 ms after worker_a's
    step k, in every step alike. Between two wall clocks that is no clock's error: nothing is
    moved, and the warning says the workers cannot be set against each other."""
    report = analyze(_pair(tmp_path, 0, first_step=1))
    assert report.run.clock_offsets == {}
    warning = next(w for w in report.run.warnings if "clocks disagree" in w)
    assert "worker_b reads 100.00 ms behind, over half a step" in warning


def _bounds(ref: list[tuple[float, float]], other: list[tuple[float, float]]) -> pd.DataFrame:
    """Per step (ms): the reference's and the other host's last collective start and end."""
    rows = [{"last_start_ref": rs * MS, "last_end_ref": re * MS,
             "last_start": s * MS, "last_end": e * MS}
            for (rs, re), (s, e) in zip(ref, other, strict=True)]
    return pd.DataFrame(rows).astype(np.int64)


def test_ends_that_disagree_give_the_least_move_that_makes_every_step_possible():
    """The straggler joins at 31 ms and both leave at ~33 ms, but its recorded ends wander by
    milliseconds (a thread descheduled on busy cores): no agreement. Recorded 5 ms ahead, it
    joins the all-reduce after the other has left it in three steps (its start 36.6 ms against
    the other's 33.2 ms end, the latest by 3.4 ms): moved back just enough, -3.4 ms."""
    ref = [(11, 33.0), (11, 38.0), (11, 33.2), (11, 36.0)]
    other = [(36, 37.9), (36.5, 38.0), (36.6, 41.0), (37, 44.0)]
    o = host_offset(_bounds(ref, other), "b")
    assert o is not None and o.bound and o.offset_ns == -3.4 * MS
    assert o.possible == (-26.9 * MS, -3.4 * MS)
    # On one clock (the same steps 5 ms earlier) every step is possible and nothing moves.
    same = [(s - 5, e - 5) for s, e in other]
    assert host_offset(_bounds(ref, same), "b") is None
    # Impossible by 0.1 ms only: within how a start or an end is recorded, nothing moves.
    near = [(s - 3.3, e - 3.3) for s, e in other]
    assert host_offset(_bounds(ref, near), "b") is None


def test_the_agreeing_steps_are_the_offset():
    diff = np.array([10, 16, 9, -52, -5143, -2411]) * 1000  # gloo's balanced ranks, in µs
    offset, group = consensus(diff)
    assert len(group) == 4 and offset == 9500 and group.max() - group.min() <= 2 * AGREE_NS
    assert consensus(np.array([45, 20, 4759, -2978, 2150, 3162]) * 1000) is None  # 2 of 6
    assert consensus(np.array([0, 0])) is None  # too few steps to agree


def _moved(source: Path, target: Path, machine: str, ahead_ns: int) -> None:
    """A Kineto trace as if written on another machine whose clock runs `ahead_ns` ahead."""
    doc = json.loads(gzip.decompress(source.read_bytes()))
    doc["host_name"] = machine
    doc["baseTimeNanoseconds"] += ahead_ns
    target.write_bytes(gzip.compress(json.dumps(doc).encode()))


@pytest.mark.parametrize("job", ["balanced", "straggler"])
def test_recorded_ranks_on_two_machines(tmp_path, job):
    """The gloo ranks (2 busy cores: some steps' gloo ends a few ms apart), rank 1 on another
    machine with its clock 5 ms ahead. Balanced, 4 of 6 steps agree: moved -4.99 ms. The
    straggler's ends never agree (rank 0 waits, its gloo threads descheduled): rank 1 is moved
    -3.27 ms, the least that has it leave no all-reduce before rank 0 joined it, and the
    straggler's wait reads 22.8 ms a step against 21.4 ms on one clock (16.7 ms unmoved)."""
    same, apart = tmp_path / "same", tmp_path / "apart"
    for d in (same, apart):
        d.mkdir()
        (d / "rank0.pt.trace.json.gz").write_bytes((GLOO / f"{job}_rank0.json.gz").read_bytes())
    (same / "rank1.pt.trace.json.gz").write_bytes((GLOO / f"{job}_rank1.json.gz").read_bytes())
    _moved(GLOO / f"{job}_rank1.json.gz", apart / "rank1.pt.trace.json.gz", "vm2", 5 * MS)
    moved = load_run(apart).clock_offsets["rank1"]
    if job == "balanced":
        assert moved == pytest.approx(-5 * MS, abs=0.05 * MS)
    else:
        assert -5 * MS < moved <= -3 * MS
        a = by_id(analyze(same))["straggler_worker"]
        b = by_id(analyze(apart))["straggler_worker"]
        assert b.numbers["straggler"] == a.numbers["straggler"] == "rank1"
        assert b.numbers["others_wait_ms"] == pytest.approx(a.numbers["others_wait_ms"],
                                                            rel=0.1)
