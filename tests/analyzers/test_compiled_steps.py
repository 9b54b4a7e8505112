"""Detectors keyed on TF op names in XLA-compiled steps: the thunks read as the TF ops the saved
modules name (`Context.compiled_ops`), weighed by `signals/compiled.py`. Code-built traces and
recorded TF 2.21 ones of `python tests/analyzers/foreign_jobs.py DIR MODE` (2026-11-29, 2
cores; gzipped in data/tf2.21):
- `embedding_adam_xla.xplane.pb.gz`: the 1,000,000 x 32 table's custom loop with Keras 3's Adam
  on every variable, compiled by XLA: 58.7-86.9 ms a step untraced (medians of 3 runs) against
  5.9-9.7 ms for `embedding_sparse_xla.xplane.pb.gz`, the table updated by a scatter and Adam
  for the dense layer only (6.1x, 10.2x, 10.6x by pair).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzers.report import analyze
from analyzers.signals.compiled import compiled_share
from tests.analyzers.traces import host_trace, recorded_logdir
from tests.analyzers.xla_modules import compiled

DATA = Path(__file__).parent / "data" / "tf2.21"


def by_id(report):
    return {f.id: f for f in report.findings}


def _module(update: str) -> list[dict]:
    """A compiled step over a table: its lookup, then Keras 3 Adam's densified gradient and
    whole-table updates (`dense`), or a scatter of the looked-up rows (`scatter`)."""
    ops = [{"name": "arg0.1", "opcode": "parameter"},
           {"name": "gather.1", "opcode": "gather", "operands": ["arg0.1"],
            "tf": ("embedding_lookup", "ResourceGather")}]
    if update == "dense":
        ops += [{"name": "wrapped_scatter", "opcode": "fusion", "operands": ["arg0.1"],
                 "tf": ("adam/UnsortedSegmentSum", "UnsortedSegmentSum")},
                {"name": "multiply_add_fusion.5", "opcode": "fusion",
                 "operands": ["wrapped_scatter"],
                 "tf": ("adam/AssignAddVariableOp", "AssignAddVariableOp")},
                {"name": "divide_subtract_fusion.2", "opcode": "fusion",
                 "operands": ["multiply_add_fusion.5"],
                 "tf": ("adam/AssignSubVariableOp", "AssignSubVariableOp")}]
    else:
        ops.append({"name": "scatter.3", "opcode": "scatter", "operands": ["arg0.1"],
                    "tf": ("ResourceScatterSub", "ResourceScatterSub")})
    return ops


DENSE_THUNKS = [("gather.1", 2), ("wrapped_scatter", 5), ("multiply_add_fusion.5", 20),
                ("divide_subtract_fusion.2", 10)]


def test_compiled_dense_update_of_a_table(tmp_path):
    """Adam's thunks (35 of the thunks' 37 ms traced) inside a module that runs 45 ms: read as
    `adam/...` ops, each standing for its share of the module's time; the lookup's 2 ms
    likewise, SPARSE_LOOKUPS of it kept."""
    from analyzers.detectors.dense_embedding_update import SPARSE_LOOKUPS

    _, path = host_trace(tmp_path, steps=6, compute_ms=50, per_step=compiled(
        _module("dense"), DENSE_THUNKS, span_ms=45))
    f = by_id(analyze(path))["dense_embedding_update"]
    assert f.numbers["causes"] == ["dense_optimizer"]
    assert f.step_fraction == pytest.approx((35 - SPARSE_LOOKUPS * 2) / 37 * 0.45, abs=0.01)
    assert any("compiled by XLA" in e for e in f.evidence)
    assert f.top_events[0]["name"] == "adam/AssignAddVariableOp:AssignAddVariableOp"


def test_compiled_row_sparse_update_is_not_found(tmp_path):
    _, path = host_trace(tmp_path, steps=6, compute_ms=50, per_step=compiled(
        _module("scatter"), [("gather.1", 2), ("scatter.3", 4)], span_ms=10))
    assert "dense_embedding_update" not in by_id(analyze(path))


def test_thunks_stand_for_the_modules_time(tmp_path):
    """Two thunks of 5 and 15 ms traced in a module that runs 40 ms of each 100 ms step."""
    _, path = host_trace(tmp_path, steps=4, compute_ms=50, per_step=compiled(
        _module("dense")[:3], [("gather.1", 5), ("wrapped_scatter", 15)], span_ms=40))
    ctx = analyze(path).ctx
    assert compiled_share(ctx, 5e6 * 4) == pytest.approx(0.40 * 5 / 20, abs=0.005)
    # No module span (a runtime that writes none): the thunks' own intervals.
    _, path = host_trace(tmp_path / "bare", steps=4, compute_ms=50, per_step=compiled(
        _module("dense")[:3], [("gather.1", 5), ("wrapped_scatter", 15)]))
    ctx = analyze(path).ctx
    assert compiled_share(ctx, 5e6 * 4) == pytest.approx(0.20 * 5 / 20, abs=0.005)


def test_recorded_compiled_adam_on_a_table(tmp_path):
    """Before: no finding at all (the thunks, `multiply_add_fusion.5`..., name no TF op)."""
    f = by_id(analyze(recorded_logdir(tmp_path, DATA / "embedding_adam_xla.xplane.pb.gz")))[
        "dense_embedding_update"]
    assert f.severity == "high" and f.numbers["causes"] == ["dense_optimizer"]
    assert 2.5 < f.speedup < 12
    assert "2 UnsortedSegmentSum per step" in f.evidence[0]


def test_recorded_compiled_scatter_reads_no_dense_update(tmp_path):
    report = analyze(recorded_logdir(tmp_path, DATA / "embedding_sparse_xla.xplane.pb.gz"))
    assert "dense_embedding_update" not in by_id(report)
