"""A run of Chrome trace events decoded straight into typed records by msgspec.

The standard library's parser makes a dict of every event and of its args, with every key the
writer put there: a PyTorch CPU op carries ~10 args the analyzers never read (`External id`,
`Record function id`, `Input Dims`, ...). msgspec decodes the text into `Event` records with
just the fields read, and args into `Args` records with just the keys a stat column is made of;
other keys are skipped in C, and the records are not tracked by the cyclic collector
(docs/trace-signals.md, "Reading Chrome traces").

A run the records do not allow (args that are a list or null, an element that is not an object,
a number beyond a double) or that msgspec does not parse but Python does (NaN, Infinity, lone
surrogates) is parsed by `json.loads` and converted in Python, with the same result.
"""

from __future__ import annotations

import json
from operator import attrgetter
from typing import Any

import msgspec

# Args keys read into stat columns, besides the TF stat names (events.stat_aliases): PyTorch's
# `correlation` links a kernel to its launch (its `External id` links CPU ops to each other and
# would overwrite it, so it is not read), and its bytes, device and collective group size.
EXTRA_ALIASES = {"correlation": "correlation_id", "Bytes": "bytes", "bytes": "bytes",
                 "device": "device_id", "Group size": "group_size"}
# Args keys read for other purposes: xprof's export keeps the xplane name in `long_name`;
# metadata events name their process or thread in `name`.
NAME_KEYS = ("long_name", "name")


class Event(msgspec.Struct, gc=False):
    """An element of `traceEvents`, its fields as the writer typed them (any JSON value); `args`
    is a record of RunDecoder's args type (its `empty` one when the event has none)."""

    ph: Any = None
    name: Any = None
    cat: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: Any = None


class RunDecoder:
    """Decodes the text of a JSON array of events (`[...]`) into a list of Events, reading from
    args the keys `arg_keys` and NAME_KEYS. `decode` returns None when the text is not JSON (a
    cut in the wrong place), where `json.loads` would raise."""

    def __init__(self, arg_keys: list[str]) -> None:
        self.keys = list(dict.fromkeys([*arg_keys, *NAME_KEYS]))
        # Field names are attribute names; the keys (`Group size`, `_r`) are their JSON names.
        self.attr = {key: f"k{i}" for i, key in enumerate(self.keys)}
        self.args_type = msgspec.defstruct(
            "Args", [(self.attr[k], Any, msgspec.field(name=k, default=None)) for k in self.keys],
            gc=False, frozen=True, module=__name__)
        # One record shared by every event without args: a column is read from all events alike.
        self.empty = self.args_type()
        typed = msgspec.defstruct(
            "TypedEvent", [("args", self.args_type, self.empty)], bases=(Event,), gc=False,
            module=__name__)
        self._typed = msgspec.json.Decoder(list[typed])

    def decode(self, text: str) -> list[Event] | None:
        try:
            return self._typed.decode(text)
        except msgspec.DecodeError:  # ValidationError included
            pass
        # What the records do not allow, and what Python's parser takes but msgspec does not
        # (NaN, Infinity, lone surrogates), is read as the standard library reads it.
        try:
            return self.convert(json.loads(text))
        except json.JSONDecodeError:
            return None

    def convert(self, elements: list) -> list[Event]:
        """The Events of elements already decoded into builtins (objects only)."""
        attr, args_type = self.attr, self.args_type
        events = []
        for e in elements:
            if not isinstance(e, dict):
                continue
            a = e.get("args")
            record = (args_type(**{attr[k]: a[k] for k in self.keys if k in a})
                      if isinstance(a, dict) else self.empty)
            events.append(Event(ph=e.get("ph"), name=e.get("name"), cat=e.get("cat"),
                                pid=e.get("pid"), tid=e.get("tid"), ts=e.get("ts"),
                                dur=e.get("dur"), args=record))
        return events

    def column(self, args: list, key: str) -> list:
        """The value of `key` in each of the args records (None where unset)."""
        return list(map(attrgetter(self.attr[key]), args))

    def args_dict(self, record: object) -> dict:
        """An args record as the dict of its set keys."""
        return {k: v for k in self.keys if (v := getattr(record, self.attr[k])) is not None}
