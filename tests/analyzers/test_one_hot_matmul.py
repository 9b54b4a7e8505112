"""`one_hot_matmul` on code-built traces (an encoding handed to a matmul on its thread, through
a concatenation, TF1 gradient names and updates, GPU kernels named by their tf_op, XLA thunks
tied by a saved module; a label one-hot, a histogram's one-hot, a consumer on another thread, a
compiled lookup) and on recorded TF 2.21 traces of
`python tests/analyzers/foreign_jobs.py DIR MODE` (tensorflow-cpu 2.21 on 2026-11-29, 2 cores;
the xplanes gzipped in data/tf2.21):
- `multihot_dense.xplane.pb.gz`: one feature of 10 ids out of 10,000,
  `CategoryEncoding(output_mode="count")` into `Dense(16, use_bias=False)`: 6.7-7.1 ms a step
  untraced (medians of 3 runs) against 3.2-3.9 ms for `multihot_embedding.xplane.pb.gz`, the
  same function as an `Embedding` summed over the ids;
- `wide_onehot.xplane.pb.gz`: 8 features' one-hots (10,000 ids each) concatenated into one
  linear unit: 27.6-29.2 ms against 1.9-2.7 ms as `Embedding(80_000, 1)` summed;
- `onehot_dense_xla.xplane.pb.gz`: 8 one-hot features into `Dense(16, use_bias=False)` each,
  compiled by XLA (`jit_compile=True`): 39.5-47.2 ms a step against 6.0-9.4 ms with
  `Embedding(10_000, 16)` (`onehot_embedding_xla`);
- `session_indicator_column.xplane.pb.gz`: the 8 features as TF1 feature columns,
  `indicator_column` through `input_layer` (a `OneHot` and a `Sum` each, concatenated), then a
  256-128-1 MLP with `AdagradOptimizer`: 222.8-339.1 ms a step against 3.9-5.5 ms with
  `embedding_column(c, 16)` (`session_embedding_column.xplane.pb.gz`);
- `session_onehot.xplane.pb.gz`: a TF1 Session loop of `tf.one_hot(ids, V) @ w` per feature
  with `AdamOptimizer`: 28.6-31.2 ms against 2.4-2.7 ms with lookups and SGD on the tables
  (`session_embedding_sparse`), 7.1-8.1 ms with lookups and Adam kept.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzers.detectors.one_hot_matmul import _gradient_of
from analyzers.report import analyze
from tests.analyzers.traces import MS, gpu_trace, host_trace, recorded_logdir
from tests.analyzers.xla_modules import ONE_HOT_MODULE, compiled

DATA = Path(__file__).parent / "data" / "tf2.21"
GAP = 3_000  # ns between an op and the successor its thread runs next (TF 2.21: 1-10 us)


def by_id(report):
    return {f.id: f for f in report.findings}


def recorded(tmp: Path, name: str):
    return analyze(recorded_logdir(tmp, DATA / name, "2026_11_29_23_30_00"))


def chain(ops: list[tuple[str, float]], at_ms: float = 51, gap_ns: int = GAP):
    """`host_trace`'s `per_step`: `ops` (name, ms) on the compute thread from `at_ms` into each
    step (its model ops end at 50.5 ms with compute_ms=50), `gap_ns` apart; a name of None
    leaves a millisecond idle."""
    def add(b, host, main, comp, t0, i):
        t = t0 + int(at_ms * MS)
        for name, ms in ops:
            if name is not None:
                comp.event(name, t, int(ms * MS))
            t += int(ms * MS) + gap_ns
    return add


@pytest.mark.parametrize(("name", "forward", "expected"), [
    ("StatefulPartitionedCall/gradient_tape/functional/dense/MatMul/MatMul:_MklMatMul",
     {"StatefulPartitionedCall/functional/dense/MatMul"}, True),
    ("gradients/MatMul_2_grad/MatMul_1:MatMul", {"MatMul_2"}, True),
    # Another layer's gradient, whose name only starts like the forward op's.
    ("gradient_tape/functional/dense_1/MatMul/MatMul:MatMul", {"functional/dense/MatMul"}, False),
    ("gradients/MatMul_21_grad/MatMul_1:MatMul", {"MatMul_2"}, False),
    # The forward op itself.
    ("functional/dense/MatMul:MatMul", {"functional/dense/MatMul"}, False),
])
def test_gradient_names(name, forward, expected):
    assert _gradient_of(name, forward) is expected


def test_one_hot_handed_to_a_matmul_is_found(tmp_path):
    """A 5 ms OneHot whose thread runs the 10 ms matmul it feeds 3 us later, and the matmul's
    15 ms weight gradient, after 50 ms of model ops: 30 of the 80 ms of busy time, of the 80%
    of the step ops cover."""
    _, path = host_trace(tmp_path, steps=6, compute_ms=50, per_step=chain([
        ("functional/category_encoding/one_hot:OneHot", 5),
        ("functional/dense/MatMul:_MklMatMul", 10),
        (None, 1),
        ("gradient_tape/functional/dense/MatMul/MatMul:_MklMatMul", 15)]))
    f = by_id(analyze(path))["one_hot_matmul"]
    assert f.numbers["encodings_per_step"] == 1 and f.numbers["matmuls"] == 1
    assert f.numbers["encodings_fraction"] == pytest.approx(5 / 80 * 0.8, abs=0.005)
    assert f.numbers["backward_fraction"] == pytest.approx(15 / 80 * 0.8, abs=0.005)
    assert f.step_fraction == pytest.approx(0.30, abs=0.01)
    assert f.speedup == pytest.approx(1 / 0.7, rel=0.03) and f.severity == "high"
    assert "Embedding(V, D)" in f.remedy and "dense/MatMul" in f.evidence[0]


@pytest.mark.parametrize("ops", [
    # A label one-hot into the loss: no matmul after it.
    [("one_hot:OneHot", 5),
     ("softmax_cross_entropy_with_logits:SoftmaxCrossEntropyWithLogits", 10)],
    # A histogram's bucketing, followed by the model's matmul.
    [("loss/write_summary/buckets/one_hot:OneHot", 5), ("functional/dense/MatMul:MatMul", 10)],
    # The matmul ran 1 ms later: not the successor the encoding's thread picked.
    [("functional/category_encoding/one_hot:OneHot", 5), (None, 1),
     ("functional/dense/MatMul:MatMul", 10)],
])
def test_one_hot_that_feeds_no_matmul_is_not_found(tmp_path, ops):
    _, path = host_trace(tmp_path, steps=6, compute_ms=50, per_step=chain(ops))
    assert "one_hot_matmul" not in by_id(analyze(path))


def test_embedding_lookups_are_not_found(tmp_path):
    _, path = host_trace(tmp_path, steps=6, compute_ms=50, per_step=chain([
        ("functional/embedding/GatherV2:ResourceGather", 5),
        ("functional/dense/MatMul:_MklMatMul", 10)]))
    assert "one_hot_matmul" not in by_id(analyze(path))


def test_concatenated_one_hots_and_a_fused_matmul(tmp_path):
    """Three encodings whose thread moves on to other ops, the last one's to the concatenation
    and the fused matmul (named after its BiasAdd; its gradient after the layer's MatMul). The
    two named like the linked one count; `lambda/one_hot` is left out and said so."""
    slice_ = ("functional/strided_slice_1:StridedSlice", 0.01)
    _, path = host_trace(tmp_path, steps=6, compute_ms=50, per_step=chain([
        ("functional/category_encoding_1/one_hot:OneHot", 4), slice_, (None, 0.5),
        ("functional/category_encoding_2/one_hot:OneHot", 4), slice_, (None, 0.5),
        ("functional/lambda/one_hot:OneHot", 4), slice_, (None, 0.5),
        ("functional/category_encoding_3/one_hot:OneHot", 4),
        ("functional/concatenate/concat:ConcatV2", 6),
        ("functional/dense/BiasAdd:_MklNativeFusedMatMul", 8),
        (None, 0.5),
        ("gradient_tape/functional/dense/MatMul/MatMul:_MklMatMul", 8)]))
    f = by_id(analyze(path))["one_hot_matmul"]
    assert f.numbers["encodings_per_step"] == 3
    busy = 50 + 16 + 6 + 8 + 8 + 3 * 0.01
    assert f.numbers["layout_fraction"] > 0 and f.numbers["backward_fraction"] > 0
    covered = f.numbers["encodings_fraction"] / (12 / busy)
    assert f.numbers["backward_fraction"] == pytest.approx(8 / busy * covered, rel=0.01)
    assert any("1 encoding op name(s) never seen" in e for e in f.evidence)


def test_tf1_gradient_names(tmp_path):
    """A TF1 graph: `one_hot_2` into `MatMul_2`, its gradient `gradients/MatMul_2_grad/MatMul_1`
    and the dense update that gradient's thread runs next; another layer's gradient and update
    are not counted."""
    _, path = host_trace(tmp_path, steps=6, compute_ms=50, per_step=chain([
        ("one_hot_2:OneHot", 5), ("MatMul_2:_MklMatMul", 10), (None, 1),
        ("gradients/MatMul_2_grad/MatMul_1:_MklMatMul", 15),
        ("GradientDescent/update_w2/ResourceApplyGradientDescent:ResourceApplyGradientDescent",
         2), (None, 1),
        ("gradients/MatMul_3_grad/MatMul_1:_MklMatMul", 5),
        ("GradientDescent/update_w3/ResourceApplyGradientDescent:ResourceApplyGradientDescent",
         2)]))
    f = by_id(analyze(path))["one_hot_matmul"]
    busy = 50 + 5 + 10 + 15 + 2 + 5 + 2
    covered = f.numbers["encodings_fraction"] / (5 / busy)
    assert f.numbers["backward_fraction"] == pytest.approx(15 / busy * covered, rel=0.01)
    # The update its gradient hands to is replaced by a rows-only one; the other layer's stays.
    assert f.numbers["updates"] == 1
    assert f.numbers["updates_fraction"] == pytest.approx(2 / busy * covered, rel=0.01)
    assert not any("TF1's Adam" in e for e in f.evidence)


def test_gpu_kernels_named_by_their_tf_op(tmp_path):
    """One GPU, 20 kernels of 3 ms back to back: the OneHot's, its matmul's and the matmul's
    gradient's among them (their tf_op); 3 of 20 kernels of the 60% of the step they cover."""
    def tf_op(d, k):
        return {0: "functional/category_encoding/one_hot:OneHot",
                1: "functional/dense/MatMul:MatMul",
                10: "gradient_tape/functional/dense/MatMul/MatMul:MatMul"}.get(
                    k, f"functional/dense_{k}/Relu:Relu")
    path = gpu_trace(tmp_path, devices=1, tf_op=tf_op)
    f = by_id(analyze(path))["one_hot_matmul"]
    assert f.numbers["on"] == "kernels"
    assert f.step_fraction == pytest.approx(3 / 20 * 0.6, abs=0.01)
    assert f.severity == "medium"


def test_gpu_trace_without_one_hot_kernels(tmp_path):
    path = gpu_trace(tmp_path, devices=1, tf_op=lambda d, k: f"dense_{k}/MatMul:MatMul")
    assert "one_hot_matmul" not in by_id(analyze(path))


def test_recorded_multi_hot_feature(tmp_path):
    f = by_id(recorded(tmp_path, "multihot_dense.xplane.pb.gz"))["one_hot_matmul"]
    assert f.severity == "high" and 1.3 < f.speedup < 2.5
    assert f.numbers["encodings_per_step"] == 1 and f.numbers["matmuls"] == 1
    assert f.numbers["backward_fraction"] > 0.1 and f.numbers["updates"] == 0
    assert "DenseBincount" in f.evidence[0]


def test_recorded_embeddings_read_no_one_hot(tmp_path):
    assert "one_hot_matmul" not in by_id(recorded(tmp_path, "multihot_embedding.xplane.pb.gz"))


def test_recorded_wide_part(tmp_path):
    """All 8 encodings counted though the concatenation's thread came from one of them."""
    f = by_id(recorded(tmp_path, "wide_onehot.xplane.pb.gz"))["one_hot_matmul"]
    assert f.severity == "high" and f.numbers["layout_fraction"] > 0.1
    assert f.numbers["matmuls"] == 1 and f.numbers["encodings_per_step"] == 8
    assert not any("left out" in e for e in f.evidence)


def test_recorded_tf1_session(tmp_path):
    """TF1 names: `gradients/matmul_3_grad/MatMul_1`, each handing to its table's
    `ResourceApplyAdam`; the evidence warns that TF1's Adam keeps its whole-table work."""
    f = by_id(recorded(tmp_path, "session_onehot.xplane.pb.gz"))["one_hot_matmul"]
    assert f.severity == "high" and f.numbers["encodings_per_step"] == 8
    assert f.numbers["backward_fraction"] > 0.2 and f.numbers["updates"] == 8
    assert 7 < f.speedup < 14
    assert any("TF1's Adam" in e for e in f.evidence)


def test_compiled_one_hot_read_from_the_module(tmp_path):
    """XLA thunks: the one-hot fusion, the dot reading it and the gradient dot, as in
    test_one_hot_handed_to_a_matmul_is_found but tied by the module's operands."""
    _, path = host_trace(tmp_path, steps=6, compute_ms=50, per_step=compiled(ONE_HOT_MODULE, [
        ("compare_select_fusion.4", 5), ("MatMul.44", 10), ("MatMul.74", 15)]))
    f = by_id(analyze(path))["one_hot_matmul"]
    assert f.numbers["encodings_per_step"] == 1 and f.numbers["matmuls"] == 1
    assert f.numbers["backward_fraction"] == pytest.approx(15 / 80 * 0.8, abs=0.01)
    assert "MatMul.44 (dense/MatMul)" in f.evidence[0]
    assert any("compiled by XLA" in e for e in f.evidence)


def test_compiled_work_off_the_traced_threads(tmp_path):
    """The gradient dot's thunk ends at its hand-off to Eigen's pool (50 us) while the module
    runs 39 ms: the thunks stand for the module's time by their traced time (here all of it,
    39% of the step, where their own intervals cover 15%); a thunk of another op takes its
    part."""
    _, path = host_trace(tmp_path, steps=6, compute_ms=50, per_step=compiled(ONE_HOT_MODULE, [
        ("compare_select_fusion.4", 5), ("MatMul.44", 10), ("MatMul.74", 0.05)], span_ms=39))
    f = by_id(analyze(path))["one_hot_matmul"]
    assert f.step_fraction == pytest.approx(0.39, abs=0.01)
    module = [*ONE_HOT_MODULE, {"name": "multiply_add_fusion", "opcode": "fusion",
                                "tf": ("adam/AssignAddVariableOp", "AssignAddVariableOp")}]
    _, path = host_trace(tmp_path / "adam", steps=6, compute_ms=50, per_step=compiled(module, [
        ("compare_select_fusion.4", 5), ("MatMul.44", 10), ("MatMul.74", 0.05),
        ("multiply_add_fusion", 15.05)], span_ms=39))
    f = by_id(analyze(path))["one_hot_matmul"]
    assert f.step_fraction == pytest.approx(0.39 / 2, abs=0.01)


def test_compiled_concatenation_of_one_hots(tmp_path):
    """Two one-hot fusions concatenated (through a bitcast) into one dot: both encodings and
    the concatenation count."""
    module = [*ONE_HOT_MODULE[:3],
              {"name": "compare_select_fusion.5", "opcode": "fusion", "operands": ["arg0.1"],
               "calls": [2], "tf": ("functional/category_encoding_1/one_hot", "OneHot")},
              {"name": "concat.1", "opcode": "concatenate",
               "operands": ["compare_select_fusion.4", "compare_select_fusion.5"],
               "tf": ("functional/concatenate/concat", "ConcatV2")},
              {"name": "bitcast.2", "opcode": "bitcast", "operands": ["concat.1"]},
              {"name": "MatMul.44", "opcode": "dot", "operands": ["bitcast.2", "arg1.1"],
               "tf": ("functional/dense/MatMul", "MatMul")}]
    _, path = host_trace(tmp_path, steps=6, compute_ms=50, per_step=compiled(module, [
        ("compare_select_fusion.4", 4), ("compare_select_fusion.5", 4), ("concat.1", 6),
        ("MatMul.44", 10)]))
    f = by_id(analyze(path))["one_hot_matmul"]
    assert f.numbers["encodings_per_step"] == 2 and f.numbers["layout_fraction"] > 0


def test_compiled_lookup_is_not_found(tmp_path):
    """The same module with the dot reading its weights only (a lookup's rows, a parameter)
    and the one-hot fusion feeding a reduction: no matmul multiplies a one-hot."""
    module = [dict(spec) for spec in ONE_HOT_MODULE]
    module[3] = {**module[3], "operands": ["arg0.1", "arg1.1"]}
    module[4] = {**module[4], "operands": ["arg1.1"]}
    module.append({"name": "reduce.3", "opcode": "reduce", "operands": ["compare_select_fusion.4"],
                   "tf": ("loss/Sum", "Sum")})
    _, path = host_trace(tmp_path, steps=6, compute_ms=50, per_step=compiled(module, [
        ("compare_select_fusion.4", 5), ("MatMul.44", 10), ("reduce.3", 1)]))
    assert "one_hot_matmul" not in by_id(analyze(path))


def test_compiled_matmul_named_after_a_one_hot_is_no_encoding(tmp_path):
    """A fusion holding a dot whose metadata names a OneHot, read by the next layer's dot: that
    dot multiplies the fusion's product, not a one-hot."""
    module = [*ONE_HOT_MODULE[:2],
              {"name": "dot_fusion.1", "opcode": "fusion", "operands": ["arg0.1", "arg1.1"],
               "calls": [3], "tf": ("functional/category_encoding/one_hot", "OneHot")},
              {"name": "MatMul.50", "opcode": "dot", "operands": ["dot_fusion.1", "arg1.1"],
               "tf": ("functional/dense_2/MatMul", "MatMul")}]
    _, path = host_trace(tmp_path, steps=6, compute_ms=50, per_step=compiled(module, [
        ("dot_fusion.1", 10), ("MatMul.50", 10)]))
    assert "one_hot_matmul" not in by_id(analyze(path))


def test_recorded_compiled_one_hot(tmp_path):
    """XLA thunks (`compare_select_fusion.4`, `MatMul.44`), tied by the module the profiler
    saved; the weight gradients' dots run off the traced threads (a lower bound)."""
    f = by_id(recorded(tmp_path, "onehot_dense_xla.xplane.pb.gz"))["one_hot_matmul"]
    assert f.severity == "high" and f.numbers["encodings_per_step"] == 8
    assert f.numbers["matmuls"] == 8 and 3.0 < f.speedup < 7.0
    assert any("compiled by XLA" in e for e in f.evidence)


def test_recorded_feature_columns(tmp_path):
    """indicator_column: each one-hot summed, then concatenated, into the first matmul (layout
    ops on the chain); the embedding_column twin reads neither this nor a dense update (its
    Adagrad sums duplicate rows before a row-sparse apply)."""
    f = by_id(recorded(tmp_path / "i", "session_indicator_column.xplane.pb.gz"))["one_hot_matmul"]
    assert f.capped and f.numbers["encodings_per_step"] == 8
    assert f.numbers["layout_fraction"] > 0 and f.numbers["matmuls"] == 1
    found = by_id(recorded(tmp_path / "e", "session_embedding_column.xplane.pb.gz"))
    assert not {"one_hot_matmul", "dense_embedding_update"} & set(found)
