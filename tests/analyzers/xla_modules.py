"""XLA modules for code-built traces: a serialized `HloProto` the way the profiler saves one on
the `/host:metadata` plane, and a `host_trace` step that runs its thunks."""

from __future__ import annotations

from analyzers.ingest.hlo import HLO_STAT, METADATA_PLANE, HloProto
from tests.analyzers.traces import MS


def build_module(instructions: list[dict], fused: dict[int, list[dict]] | None = None) -> bytes:
    """A serialized HloProto: entry computation 1 of `instructions` (dicts of name, opcode,
    tf (op_name, op_type), operands (names), calls (computation ids), target), and fused
    computations by id."""
    proto = HloProto()
    module = proto.hlo_module
    module.entry_computation_name, module.entry_computation_id = "main", 1
    ids: dict[str, int] = {}
    called = [(cid, f"fused_{cid}", instrs) for cid, instrs in (fused or {}).items()]
    for cid, name, instrs in (*called, (1, "main", instructions)):
        comp = module.computations.add(name=name, id=cid)
        for spec in instrs:
            ids[spec["name"]] = len(ids) + 1
            ins = comp.instructions.add(name=spec["name"], opcode=spec["opcode"],
                                        id=ids[spec["name"]])
            if "tf" in spec:
                ins.metadata.op_name, ins.metadata.op_type = spec["tf"]
            ins.operand_ids.extend(ids[o] for o in spec.get("operands", ()))
            ins.called_computation_ids.extend(spec.get("calls", ()))
            ins.custom_call_target = spec.get("target", "")
    return proto.SerializeToString()


ONE_HOT_MODULE = [
    {"name": "arg0.1", "opcode": "parameter"},
    {"name": "arg1.1", "opcode": "parameter"},
    {"name": "compare_select_fusion.4", "opcode": "fusion", "operands": ["arg0.1"],
     "calls": [2], "tf": ("functional/category_encoding/one_hot", "OneHot")},
    {"name": "MatMul.44", "opcode": "dot", "operands": ["compare_select_fusion.4", "arg1.1"],
     "tf": ("functional/dense/MatMul", "MatMul")},
    {"name": "MatMul.74", "opcode": "dot", "operands": ["compare_select_fusion.4", "arg1.1"],
     "tf": ("gradient_tape/functional/dense/MatMul/MatMul", "MatMul")},
    {"name": "custom-call.2", "opcode": "custom-call", "operands": ["arg1.1"],
     "target": "__onednn$matmul", "tf": ("functional/dense_2/MatMul", "MatMul")},
    {"name": "add_dot_fusion", "opcode": "fusion", "operands": ["custom-call.2", "arg1.1"],
     "calls": [3], "tf": ("functional/dense_3/BiasAdd", "BiasAdd")},
]
# The one-hot's fused computation (2), and a bias-add fused into its dot (3).
ONE_HOT_FUSED = {2: [{"name": "iota.1", "opcode": "iota"},
                     {"name": "compare.2", "opcode": "compare"},
                     {"name": "select.3", "opcode": "select"}],
                 3: [{"name": "dot.9", "opcode": "dot"}, {"name": "add.10", "opcode": "add"}]}


def compiled(module: list[dict], thunks: list[tuple[str, float]], span_ms: float = 0):
    """`host_trace`'s `per_step`: an XLA module saved on the metadata plane (first step), and
    its thunks (name, ms) on the compute thread from 51 ms, 0.5 ms apart: XLA runs them in its
    schedule's order, so nothing but the module ties a dot to its operands. `span_ms`: the
    module's run (`CpuExecutable::ExecuteAsyncOnStream`) on the Python thread from 51 ms."""
    def add(b, host, main, comp, t0, i):
        if span_ms:
            main.event("CpuExecutable::ExecuteAsyncOnStream", t0 + 51 * MS, int(span_ms * MS))
        if i == 0:
            b.plane(METADATA_PLANE).event_metadata_stat(
                "a_inference_train_step_42__.7", HLO_STAT, build_module(module, ONE_HOT_FUSED))
        t = t0 + 51 * MS
        for name, ms in thunks:
            comp.event(name, t, int(ms * MS))
            t += int(ms * MS) + MS // 2
    return add
