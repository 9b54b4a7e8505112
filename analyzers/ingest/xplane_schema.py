"""The XSpace/XPlane protobuf schema, declared in code so the analyzers parse `*.xplane.pb` without
TensorFlow, xprof or a protoc step.

Field numbers and types are the wire format TensorFlow writes (tsl/profiler/protobuf/xplane.proto);
tests check them against TensorFlow's own descriptor when TensorFlow is installed. The messages
live in a private descriptor pool under their own package name, so they never clash with
TensorFlow's classes when both are loaded in one process.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "recadvisor.xplane"

_T = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _T.LABEL_OPTIONAL, _T.LABEL_REPEATED
_I64, _U64, _DBL = _T.TYPE_INT64, _T.TYPE_UINT64, _T.TYPE_DOUBLE
_STR, _BYTES, _MSG = _T.TYPE_STRING, _T.TYPE_BYTES, _T.TYPE_MESSAGE

# (name, number, type, label, message type or "", oneof index or None)
_MESSAGES: dict[str, tuple[list[str], list[tuple]]] = {
    "XSpace": ([], [
        ("planes", 1, _MSG, _REP, "XPlane", None),
        ("errors", 2, _STR, _REP, "", None),
        ("warnings", 3, _STR, _REP, "", None),
        ("hostnames", 4, _STR, _REP, "", None),
    ]),
    "XPlane": ([], [
        ("id", 1, _I64, _OPT, "", None),
        ("name", 2, _STR, _OPT, "", None),
        ("lines", 3, _MSG, _REP, "XLine", None),
        ("event_metadata", 4, _MSG, _REP, "XPlane.EventMetadataEntry", None),
        ("stat_metadata", 5, _MSG, _REP, "XPlane.StatMetadataEntry", None),
        ("stats", 6, _MSG, _REP, "XStat", None),
    ]),
    "XLine": ([], [
        ("id", 1, _I64, _OPT, "", None),
        ("display_id", 10, _I64, _OPT, "", None),
        ("name", 2, _STR, _OPT, "", None),
        ("display_name", 11, _STR, _OPT, "", None),
        ("timestamp_ns", 3, _I64, _OPT, "", None),
        ("duration_ps", 9, _I64, _OPT, "", None),
        ("events", 4, _MSG, _REP, "XEvent", None),
    ]),
    "XEvent": (["data"], [
        ("metadata_id", 1, _I64, _OPT, "", None),
        ("offset_ps", 2, _I64, _OPT, "", 0),
        ("num_occurrences", 5, _I64, _OPT, "", 0),
        ("duration_ps", 3, _I64, _OPT, "", None),
        ("stats", 4, _MSG, _REP, "XStat", None),
    ]),
    "XStat": (["value"], [
        ("metadata_id", 1, _I64, _OPT, "", None),
        ("double_value", 2, _DBL, _OPT, "", 0),
        ("uint64_value", 3, _U64, _OPT, "", 0),
        ("int64_value", 4, _I64, _OPT, "", 0),
        ("str_value", 5, _STR, _OPT, "", 0),
        ("bytes_value", 6, _BYTES, _OPT, "", 0),
        ("ref_value", 7, _U64, _OPT, "", 0),
    ]),
    "XEventMetadata": ([], [
        ("id", 1, _I64, _OPT, "", None),
        ("name", 2, _STR, _OPT, "", None),
        ("display_name", 4, _STR, _OPT, "", None),
        ("metadata", 3, _BYTES, _OPT, "", None),
        ("stats", 5, _MSG, _REP, "XStat", None),
        ("child_id", 6, _I64, _REP, "", None),
    ]),
    "XStatMetadata": ([], [
        ("id", 1, _I64, _OPT, "", None),
        ("name", 2, _STR, _OPT, "", None),
        ("description", 3, _STR, _OPT, "", None),
    ]),
}

# XPlane's two map fields, declared as protobuf encodes maps: a nested entry message per map.
_MAP_ENTRIES = {"EventMetadataEntry": "XEventMetadata", "StatMetadataEntry": "XStatMetadata"}


def _add_fields(msg: descriptor_pb2.DescriptorProto, fields: list[tuple]) -> None:
    for name, number, ftype, label, type_name, oneof in fields:
        f = msg.field.add(name=name, number=number, type=ftype, label=label)
        if type_name:
            f.type_name = f".{_PACKAGE}.{type_name}"
        if oneof is not None:
            f.oneof_index = oneof


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    fd = descriptor_pb2.FileDescriptorProto(
        name="recadvisor/xplane.proto", package=_PACKAGE, syntax="proto3"
    )
    for name, (oneofs, fields) in _MESSAGES.items():
        msg = fd.message_type.add(name=name)
        for o in oneofs:
            msg.oneof_decl.add(name=o)
        _add_fields(msg, fields)
        if name == "XPlane":
            for entry, value in _MAP_ENTRIES.items():
                nested = msg.nested_type.add(name=entry)
                nested.options.map_entry = True
                _add_fields(nested, [("key", 1, _I64, _OPT, "", None),
                                     ("value", 2, _MSG, _OPT, value, None)])
    return fd


_pool = descriptor_pool.DescriptorPool()
_file = _pool.Add(_file_descriptor())
_classes = message_factory.GetMessages([_file_descriptor()], pool=_pool)

XSpace = _classes[f"{_PACKAGE}.XSpace"]
XPlane = _classes[f"{_PACKAGE}.XPlane"]
XLine = _classes[f"{_PACKAGE}.XLine"]
XEvent = _classes[f"{_PACKAGE}.XEvent"]
XStat = _classes[f"{_PACKAGE}.XStat"]
XEventMetadata = _classes[f"{_PACKAGE}.XEventMetadata"]
XStatMetadata = _classes[f"{_PACKAGE}.XStatMetadata"]
