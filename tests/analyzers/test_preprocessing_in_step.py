"""`preprocessing_in_step` on code-built traces: hashing through strings, string ops and
vocabulary lookups on the step's threads, and the same ops where they cost the step nothing."""

from __future__ import annotations

import pytest

from analyzers.detectors.preprocessing_in_step import INTEGER_HASH_COST
from analyzers.report import analyze
from tests.analyzers.traces import MS, gpu_trace, host_trace

ID = "preprocessing_in_step"


def _ops(*ops: tuple[str, float], line: str = "tf_Compute/12"):
    """Per step, on `line`, the (name, ms) ops one after another from 1 ms into the step."""
    def add(b, host, main, comp, t0, i):
        thread = host.line(line, line_id=12)
        t = t0 + MS
        for name, ms in ops:
            thread.event(name, t, int(ms * MS))
            t += int(ms * MS)
    return add


def _finding(tmp_path, *ops: tuple[str, float], line: str = "tf_Compute/12"):
    report = analyze(host_trace(tmp_path, compute_ms=20, per_step=_ops(*ops, line=line))[1])
    return {f.id: f for f in report.findings}.get(ID)


def test_keras_hashing_of_integer_ids(tmp_path):
    """Grappler's fused op (TF >= 2.7) under Keras' Hashing layers: 12 ms of the 100 ms step,
    all but an integer hash's share of it saved."""
    f = _finding(tmp_path, *((f"functional/hash_C{k}/hash:_TensorToHashBucketFast", 3.0)
                             for k in range(4)))
    assert f is not None and f.numbers["causes"] == ["ints_as_strings"]
    assert f.step_fraction == pytest.approx(0.12, abs=0.002)
    assert f.speedup == pytest.approx(1 / (1 - 0.12 * (1 - INTEGER_HASH_COST)), rel=0.01)
    assert f.severity == "medium" and "integer" in f.remedy
    assert f.top_events[0]["name"].endswith(":_TensorToHashBucketFast")


def test_unfused_as_string_then_hash_is_one_cause(tmp_path):
    """Before TF 2.7 (or without grappler) the pair runs as two ops: the hash of a formatted id
    is part of formatting it, not a string feature's hashing."""
    f = _finding(tmp_path, ("input_layer/C1_hash/AsString:AsString", 8.0),
                 ("input_layer/C1_hash/to_hash_bucket_fast:StringToHashBucketFast", 6.0),
                 ("input_layer/C2_hash/to_hash_bucket_fast:StringToHashBucketFast", 2.0))
    assert f.numbers["causes"] == ["ints_as_strings", "string_ops"]
    assert f.numbers["ints_as_strings_fraction"] == pytest.approx(0.14, abs=0.002)
    assert f.numbers["string_ops_fraction"] == pytest.approx(0.02, abs=0.002)
    assert "tf.data.AUTOTUNE" in f.remedy and "integer" in f.remedy


def test_formatting_without_hashing_is_a_string_op(tmp_path):
    """An AsString with no hash in its scope (numbers formatted for a StringJoin) is a string op,
    and a hash with no AsString beside it hashes a string feature: neither is ints as strings."""
    f = _finding(tmp_path, ("report/AsString:AsString", 5.0),
                 ("report/StringJoin:StringJoin", 2.0),
                 ("features/C1_hash/StringToHashBucketFast:StringToHashBucketFast", 3.0))
    assert f.numbers["causes"] == ["string_ops"]
    assert f.numbers["string_ops_fraction"] == pytest.approx(0.10, abs=0.002)
    assert "integer" not in f.remedy


def test_vocabulary_lookups_in_the_model(tmp_path):
    f = _finding(tmp_path, ("model/string_lookup/None_Lookup/LookupTableFindV2:LookupTableFindV2",
                            8.0))
    assert f.numbers["causes"] == ["vocabulary_lookups"]
    assert f.speedup == pytest.approx(1 / 0.92, rel=0.01) and f.severity == "medium"
    assert "dataset.map" in f.remedy and "integer" not in f.remedy


@pytest.mark.parametrize("line", ["tf_data_private_threadpool/31", "tf_data_iterator_resource/7"])
def test_the_same_ops_in_the_input_pipeline_are_not_in_the_step(tmp_path, line):
    """On tf.data's threads the hashing overlaps the step (input_preprocessing judges it)."""
    assert _finding(tmp_path, ("hash_C1/hash:_TensorToHashBucketFast", 12.0),
                    ("string_lookup/LookupTableFindV2:LookupTableFindV2", 8.0), line=line) is None


def test_a_little_hashing_is_no_finding(tmp_path):
    assert _finding(tmp_path, ("hash_C1/hash:_TensorToHashBucketFast", 1.0),
                    ("dense/MatMul:MatMul", 10.0)) is None


def test_ops_running_side_by_side_save_their_union(tmp_path):
    """Two threads hashing at the same time for 10 ms: 10% of the step, not 20%."""
    def add(b, host, main, comp, t0, i):
        for k in (12, 13):
            host.line(f"tf_Compute/{k}", line_id=k).event(
                f"hash_C{k}/hash:_TensorToHashBucketFast", t0 + MS, 10 * MS)
    f = {f.id: f for f in analyze(host_trace(tmp_path, compute_ms=20, per_step=add)[1]).findings}
    assert f[ID].step_fraction == pytest.approx(0.10, abs=0.002)


@pytest.mark.parametrize(("at_ms", "found"), [(70.0, True), (20.0, False)])
def test_gpu_host_hashing_counts_only_while_the_device_idles(tmp_path, at_ms, found):
    """A GPU step of 60 ms of kernels from ~0.1 ms: 10 ms of host hashing after them holds the
    device up; the same 10 ms while the kernels run costs nothing."""
    run = gpu_trace(tmp_path, devices=1, kernel_ms=60,
                    host_op=("hash/StringToHashBucketFast:_TensorToHashBucketFast", at_ms, 10.0))
    f = {f.id: f for f in analyze(run).findings}.get(ID)
    assert (f is not None) == found
    if found:
        assert f.numbers["exposed_fraction"] == pytest.approx(1.0, abs=0.01)
        assert f.step_fraction == pytest.approx(0.10, abs=0.005)


@pytest.mark.parametrize(("op", "ms", "named"), [
    ("hash_C1/hash:_TensorToHashBucketFast", 40, True),
    ("ParseExample/ParseExampleV2:ParseExampleV2", 40, False),
    # All of the map's ops, but a millisecond against a 60 ms wait: the wait is not hashing.
    ("hash_C1/hash:_TensorToHashBucketFast", 1, False)])
def test_hashing_through_strings_in_an_input_bound_pipeline(tmp_path, op, ms, named):
    """Steps wait 60 ms on producers whose map spends 40 ms a step formatting ids to hash them:
    an input cause with an integer-hash remedy (and not this finding); a map that only parses
    is no such cause."""
    def add(b, host, main, comp, t0, i):
        host.line("tf_data_private_threadpool/31", line_id=31).event(op, t0 + MS, ms * MS)
    report = analyze(host_trace(tmp_path, wait_ms=60, per_step=add)[1])
    found = {f.id: f for f in report.findings}
    assert ID not in found
    f = found.get("input_preprocessing")
    assert (f is not None and "ints_as_strings" in f.numbers["causes"]) == named
    if named:
        assert "integer arithmetic" in f.remedy
    if ms == 1:
        assert "io_stall" in found and f is None


def test_gpu_hashing_between_copies_is_not_counted_twice(tmp_path):
    """15 ms of host hashing after a device→host copy, the device idle: this finding takes them,
    and host_device_pingpong, which counts the step's exposed host compute, leaves them out."""
    run = gpu_trace(tmp_path, devices=1, kernel_ms=60, pingpong_ms=0.1,
                    host_op=("hash/StringToHashBucketFast:_TensorToHashBucketFast", 61, 15))
    found = {f.id: f for f in analyze(run).findings}
    assert found[ID].step_fraction == pytest.approx(0.15, abs=0.005)
    pingpong = found.get("host_device_pingpong")
    assert pingpong is None or pingpong.step_fraction < 0.05, pingpong
