"""The run metadata file beside the xplane: config, throughput, step times, devices, versions.

Plain JSON with no TensorFlow import, so analyzers and the dashboard read it directly.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
from pathlib import Path
from typing import Any

METADATA_FILE = "recadvisor_run.json"
SCHEMA_VERSION = 1


def host_facts() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
    }


def write_run_metadata(run_dir: Path, metadata: dict[str, Any]) -> Path:
    """Write atomically: a reader never sees half a file, and a crash keeps the previous one."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / METADATA_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"schema_version": SCHEMA_VERSION, **metadata}, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def read_run_metadata(run_dir: Path) -> dict[str, Any] | None:
    path = Path(run_dir) / METADATA_FILE
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"run metadata {path} is unreadable: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"run metadata {path} is not a JSON object")
    return data
