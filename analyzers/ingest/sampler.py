"""OS sampler files (recadvisor/capture/layout.py) → DataFrames on the trace's clock.

Adds `t_ns` = `ts_ns` − the run's `t0_unix_ns`, the same origin as the event table's `start_ns`.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

THREAD_COLUMNS = ("ts_ns", "tid", "name", "state")
PROCESS_COLUMNS = ("ts_ns", "cpu_percent")
OTHERS_COLUMNS = ("ts_ns", "pid", "ppid", "name", "cmd", "cpu_s", "start_ticks",
                  "sampled_pid", "sampler_pid")


def read_sampler_file(path: Path, required: tuple[str, ...], t0_unix_ns: int) -> pd.DataFrame:
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        raise ValueError(f"{path}: unreadable sampler file ({e})") from None
    missing = [c for c in required if c not in table.column_names]
    if missing:
        raise ValueError(f"{path}: sampler file lacks columns {', '.join(missing)}")
    df = table.to_pandas()
    df["t_ns"] = df["ts_ns"].astype("int64") - t0_unix_ns
    for col in ("name", "state"):
        if col in df:
            df[col] = df[col].astype("category")
    return df
