"""Summaries of the OS sampler data (recadvisor/capture/layout.py) over the step windows.

Thread roles come from thread names: TF names its pools (`tf_data_*` for tf.data, `tf_Compute`,
`tf_inter_op`, `tf_numa_*_Eigen`, ... for op execution); Linux keeps 15 characters of a name, so
matching is by prefix (docs/trace-signals.md, "Sampler").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.context import Context

INPUT_PREFIXES = ("tf_data",)


def thread_role(name: str) -> str:
    if name.startswith(INPUT_PREFIXES):
        return "input"
    if name.startswith("tf_") or "Eigen" in name:
        return "compute"
    return "other"


@dataclass
class SamplerSummary:
    samples: int
    hz: float
    n_cpus: int
    d_state_share: float  # share of thread-samples in D
    mean_d_threads: float  # threads in D per sample
    max_d_threads: int
    mean_runnable: float  # threads in R per sample
    oversubscribed_share: float  # share of samples with more runnable+D threads than CPUs
    input_cpu_share: float  # input threads' CPU time / the process's CPU time
    cpu_utilization: float  # process CPU time / (wall × CPUs)
    d_threads_by_name: dict[str, int]


def _within_steps(df: pd.DataFrame, ctx: Context) -> pd.DataFrame:
    t = ctx.steps.table
    if t.empty:
        return df
    lo, hi = int(t["start_ns"].min()), int(t["end_ns"].max())
    inside = df[(df["t_ns"] >= lo) & (df["t_ns"] <= hi)]
    return inside if len(inside) else df


def summarize(ctx: Context) -> SamplerSummary | None:
    th = ctx.run.threads
    if th is None or th.empty:
        return None
    th = _within_steps(th, ctx)
    n_cpus = ctx.n_cpus or 1
    ts = np.sort(th["ts_ns"].unique())
    n_samples = len(ts)
    hz = (n_samples - 1) / ((ts[-1] - ts[0]) / 1e9) if n_samples > 1 and ts[-1] > ts[0] else 0.0
    state = th["state"].astype(str)
    per_sample = pd.DataFrame({"ts": th["ts_ns"], "D": state == "D", "R": state == "R"}).groupby(
        "ts").sum()
    roles = th["name"].astype(str).map(thread_role)
    cpu = th.assign(cpu=th.get("user_s", 0.0) + th.get("system_s", 0.0), role=roles.values)
    # CPU seconds per thread over the window: last sample minus first (counters are cumulative).
    per_thread = cpu.groupby("tid").agg(first=("cpu", "min"), last=("cpu", "max"),
                                        role=("role", "first"))
    used = (per_thread["last"] - per_thread["first"]).clip(lower=0)
    total = float(used.sum())
    wall = (ts[-1] - ts[0]) / 1e9 if n_samples > 1 else 0.0
    d_names = th[state == "D"]["name"].astype(str).value_counts().head(8)
    return SamplerSummary(
        samples=n_samples,
        hz=float(hz),
        n_cpus=n_cpus,
        d_state_share=float((state == "D").mean()),
        mean_d_threads=float(per_sample["D"].mean()),
        max_d_threads=int(per_sample["D"].max()),
        mean_runnable=float(per_sample["R"].mean()),
        oversubscribed_share=float(((per_sample["R"] + per_sample["D"]) > n_cpus).mean()),
        input_cpu_share=float(used[per_thread["role"] == "input"].sum() / total) if total else 0.0,
        cpu_utilization=float(total / (wall * n_cpus)) if wall > 0 else 0.0,
        d_threads_by_name={str(k): int(v) for k, v in d_names.items()},
    )
