"""Reading the XLA modules a TF profile saves (`analyzers/ingest/hlo.py`): the schema against
TensorFlow's own descriptors, the entry instructions of a built `HloProto`, and a trace whose
`/host:metadata` plane holds one, read through `load_run`."""

from __future__ import annotations

import pytest
from google.protobuf import descriptor_pb2

from analyzers.ingest.hlo import _MESSAGES, HLO_STAT, METADATA_PLANE, HloOp, fields, hlo_ops
from analyzers.ingest.logdir import load_run
from tests.analyzers.traces import host_trace
from tests.analyzers.xla_modules import ONE_HOT_FUSED, ONE_HOT_MODULE, build_module


def test_entry_instructions():
    ops = hlo_ops(build_module(ONE_HOT_MODULE, ONE_HOT_FUSED))
    assert set(ops) == {"arg0.1", "arg1.1", "compare_select_fusion.4", "MatMul.44", "MatMul.74",
                        "custom-call.2", "add_dot_fusion"}  # not the fused computations' own
    assert ops["MatMul.44"] == HloOp(tf_op="functional/dense/MatMul:MatMul", opcode="dot",
                                     operands=("compare_select_fusion.4", "arg1.1"),
                                     has_dot=True)
    assert ops["compare_select_fusion.4"].tf_op == "functional/category_encoding/one_hot:OneHot"
    # A fusion holding a dot is a matmul, a oneDNN matmul call too; the one-hot's is not.
    assert ops["add_dot_fusion"].has_dot and ops["custom-call.2"].has_dot
    assert not ops["compare_select_fusion.4"].has_dot
    assert ops["arg0.1"].tf_op == "" and not ops["arg0.1"].has_dot


def test_bytes_that_are_not_a_module():
    assert hlo_ops(b"\xff\xff\xff") == {}
    assert hlo_ops(b"") == {}


def test_schema_matches_tensorflow():
    """Each field read here has TensorFlow's number and type (hlo.proto, xla_data.proto)."""
    pytest.importorskip("tensorflow")
    from tensorflow.compiler.xla import xla_data_pb2
    from tensorflow.compiler.xla.service import hlo_pb2

    theirs = {}
    for module in (hlo_pb2, xla_data_pb2):
        fd = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(fd)
        theirs |= {m.name: {f.name: (f.number, f.type, f.label) for f in m.field}
                   for m in fd.message_type}
    for message in _MESSAGES:
        for name, number, ftype, label, _ in fields(message):
            assert theirs[message][name] == (number, ftype, label), f"{message}.{name}"


def test_modules_on_the_metadata_plane_reach_the_run(tmp_path):
    """Two modules: a name both give the same instruction is kept, one they disagree on is
    left out (a thunk's event does not say which module ran it)."""
    other = [dict(spec) for spec in ONE_HOT_MODULE]
    other[3] = {**other[3], "tf": ("functional/other/MatMul", "MatMul")}

    def add(b, host, main, comp, t0, i):
        if i == 0:
            for k, module in enumerate((ONE_HOT_MODULE, other)):
                b.plane(METADATA_PLANE).event_metadata_stat(
                    f"module_{k}", HLO_STAT, build_module(module, ONE_HOT_FUSED))
    _, path = host_trace(tmp_path, steps=2, per_step=add)
    run = load_run(path)
    assert "MatMul.74" in run.hlo_ops and "MatMul.44" not in run.hlo_ops
