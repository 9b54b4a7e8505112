"""Which machine a traced process ran on, where its trace or its file's name says."""

from __future__ import annotations

import re

# TF's remote capture names each worker's file `<host>_<port>` (docs/trace-signals.md).
_WORKER_PORT = re.compile(r"^(.+)_(\d{4,5})$")


def one_machine(hosts: list[str], recorded: dict[str, str] | None = None) -> str | None:
    """The machine all traced processes run on, when their traces say so: the machine a trace
    records (`recorded`, PyTorch's `host_name`), else one named by the file (`<host>_<port>`)."""
    recorded = recorded or {}
    found = [recorded.get(h) or (m.group(1) if (m := _WORKER_PORT.match(h)) else None)
             for h in hosts]
    if len(hosts) > 1 and all(found) and len(set(found)) == 1:
        return found[0]
    return None
