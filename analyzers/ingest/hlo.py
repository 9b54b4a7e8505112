"""The XLA programs a TF profile saves, read for what each compiled op ran for.

XLA:CPU runs a compiled cluster as thunks named after its HLO instructions (`MatMul.44`,
`compare_select_fusion.4`: docs/trace-signals.md, "XLA on the CPU"), with no TF op in the event.
The profiler saves each compiled module's `HloProto` as an "Hlo Proto" stat on the
`/host:metadata` plane, and each instruction's `OpMetadata` names the TF op it came from
(`op_type`, `op_name`). This reads the entry computations' instructions: their TF op, opcode,
whether they hold a matmul, and their operands (docs/trace-signals.md, "One-hot features
multiplied").

The schema is the subset of xla/service/hlo.proto and xla/xla_data.proto read here, declared in
code like the xplane's (`xplane_schema`): protobuf skips the fields it does not declare.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

METADATA_PLANE = "/host:metadata"
HLO_STAT = "Hlo Proto"
_PACKAGE = "recadvisor.hlo"

_T = descriptor_pb2.FieldDescriptorProto

# Per message, its fields read here: "name number type", the type a scalar's or a message's.
_MESSAGES: dict[str, str] = {
    "HloProto": "hlo_module 1 HloModuleProto",
    "HloModuleProto": "entry_computation_name 2 string, computations 3 *HloComputationProto, "
                      "entry_computation_id 6 int64",
    "HloComputationProto": "name 1 string, instructions 2 *HloInstructionProto, id 5 int64",
    "HloInstructionProto": "name 1 string, opcode 2 string, metadata 7 OpMetadata, "
                           "custom_call_target 28 string, id 35 int64, operand_ids 36 *int64, "
                           "called_computation_ids 38 *int64",
    "OpMetadata": "op_type 1 string, op_name 2 string",
}
_SCALARS = {"string": _T.TYPE_STRING, "int64": _T.TYPE_INT64}


def fields(message: str) -> list[tuple[str, int, int, int, str]]:
    """A message's fields as (name, number, type, label, message type or "")."""
    out = []
    for spec in _MESSAGES[message].split(", "):
        name, number, kind = spec.split()
        label = _T.LABEL_REPEATED if kind.startswith("*") else _T.LABEL_OPTIONAL
        kind = kind.lstrip("*")
        ftype = _SCALARS.get(kind, _T.TYPE_MESSAGE)
        out.append((name, int(number), ftype, label, "" if kind in _SCALARS else kind))
    return out


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(name="recadvisor/hlo.proto", package=_PACKAGE,
                                            syntax="proto3")
    for name in _MESSAGES:
        msg = fd.message_type.add(name=name)
        for fname, number, ftype, label, type_name in fields(name):
            f = msg.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = f".{_PACKAGE}.{type_name}"
    return fd


_pool = descriptor_pool.DescriptorPool()
_pool.Add(_file_descriptor())
HloProto = message_factory.GetMessages([_file_descriptor()], pool=_pool)[f"{_PACKAGE}.HloProto"]


@dataclass(frozen=True)
class HloOp:
    """One instruction of a compiled module's entry computation."""

    tf_op: str  # its TF op as `op_name:op_type`, "" when XLA recorded none
    opcode: str  # "fusion", "dot", "custom-call", "bitcast"...
    operands: tuple[str, ...]  # the instructions it reads
    has_dot: bool  # a dot, a fusion holding one, or a oneDNN matmul call


def _tf_op(instr) -> str:
    md = instr.metadata
    return f"{md.op_name}:{md.op_type}" if md.op_name and md.op_type else ""


def _is_dot(instr) -> bool:
    return instr.opcode in ("dot", "convolution") or (
        instr.opcode == "custom-call" and "matmul" in instr.custom_call_target.lower())


def hlo_ops(proto: bytes) -> dict[str, HloOp]:
    """A serialized HloProto's entry-computation instructions by name (empty when it does not
    parse)."""
    msg = HloProto()
    try:
        msg.ParseFromString(proto)
    except DecodeError:
        return {}
    module = msg.hlo_module
    by_id = {c.id: c for c in module.computations}
    entry = by_id.get(module.entry_computation_id) or next(
        (c for c in module.computations if c.name == module.entry_computation_name), None)
    if entry is None:
        return {}
    names = {i.id: i.name for i in entry.instructions}
    ops: dict[str, HloOp] = {}
    for instr in entry.instructions:
        inner = [j for cid in instr.called_computation_ids if cid in by_id
                 for j in by_id[cid].instructions] if instr.opcode == "fusion" else []
        ops[instr.name] = HloOp(
            tf_op=_tf_op(instr),
            opcode=instr.opcode,
            operands=tuple(names[o] for o in instr.operand_ids if o in names),
            has_dot=_is_dot(instr) or any(_is_dot(j) for j in inner),
        )
    return ops


def plane_hlo_ops(plane) -> dict[str, HloOp]:
    """Every module's entry instructions on a decoded `/host:metadata` XPlane; a name that two
    modules give different ops is left out (a thunk's event does not name its module)."""
    stat_ids = {k for k, m in plane.stat_metadata.items() if m.name == HLO_STAT}
    out: dict[str, HloOp] = {}
    clashes: set[str] = set()
    for meta in plane.event_metadata.values():
        for stat in meta.stats:
            if stat.metadata_id in stat_ids and stat.bytes_value:
                for name, op in hlo_ops(stat.bytes_value).items():
                    if out.setdefault(name, op) != op:
                        clashes.add(name)
    for name in clashes:
        del out[name]
    return out
