"""Summaries of the OS sampler data (recadvisor/capture/layout.py) over the step windows.

Thread roles (docs/trace-signals.md, "Sampler"): /proc thread names do not say which thread is
which in TF 2.21 — the threads that run the `tf_Compute` and `tf_data_*` trace lines carry the
process's own name, while the pthreads named `tf_Compute` sit idle. Trace line ids are not tids
either. So each OS thread is matched to the trace line whose busy time agrees best with the
samples where the thread was running (phi correlation over sample instants), and takes that
line's role: `tf_data*` lines are `input`, the step-driving line `main`, other host lines `compute`.
The thread with tid == pid is `main` outright (phi matched it to tf.data lines on the default
preset); threads that match nothing fall back to their name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.events import EndTimes, cat_mask, is_device_plane
from analyzers.signals.step_waits import step_input_waits
from analyzers.steps import inside, inside_merged, merge_intervals

INPUT_PREFIXES = ("tf_data",)
# Why a detector that needs the sampler could not judge a run: the start of its Skipped reason.
NO_SAMPLER = ("no OS sampler data in this run (capture it with `recadvisor capture` or the "
              "reference trainer)")


MIN_AGREEMENT = 0.3  # phi correlation of "thread running" and "line busy" over the samples
MIN_MARGIN = 0.15  # over the best line of any other role


def _phi(a: np.ndarray, b: np.ndarray) -> float:
    """Matthews correlation of two boolean series; 0 when either is constant (a line busy all
    the time, or a thread always running, says nothing about which is which)."""
    n11 = float((a & b).sum())
    n10 = float((a & ~b).sum())
    n01 = float((~a & b).sum())
    n00 = float((~a & ~b).sum())
    den = (n11 + n10) * (n01 + n00) * (n11 + n01) * (n10 + n00)
    return (n11 * n00 - n10 * n01) / den**0.5 if den > 0 else 0.0


def _line_role(line: str, main_line: str | None) -> str:
    if line == main_line:
        return "main"
    return "input" if line.startswith(INPUT_PREFIXES) else "compute"


def _name_role(name: str, tid: int, pid: int) -> str:
    if tid == pid:
        return "main"
    if name.startswith(INPUT_PREFIXES):
        return "input"
    return "other"


def thread_roles(ctx: Context, th: pd.DataFrame) -> dict[int, str]:
    """OS tid → role, by agreement of its running samples with trace line activity (phi)."""
    t_all = th["t_ns"].to_numpy()
    busy = _lines_busy_at(ctx, t_all)
    running_all = (th["state"].astype(str) == "R").to_numpy()
    roles: dict[int, str] = {}
    for tid, rows in th.groupby("tid").indices.items():
        first = th.iloc[rows[0]]
        pid = int(first["pid"]) if "pid" in th else -1
        if int(tid) == pid:
            # The thread Python starts runs the training loop (Keras fit, custom loops): known for
            # sure, where phi matching is not (its line is busy through every step marker, and
            # the default preset's main thread matched the tf.data lines best).
            roles[int(tid)] = "main"
            continue
        running = running_all[rows]
        # Best agreement per role; every thread follows the step's rhythm a little, so a role
        # is given only when it beats every other role by MIN_MARGIN.
        best: dict[str, float] = {}
        if running.sum() >= 2:
            for line, on in busy.items():
                role = _line_role(line, ctx.main_line)
                best[role] = max(best.get(role, -1.0), _phi(running, on[rows]))
        ranked = sorted(best.items(), key=lambda kv: -kv[1])
        if ranked and ranked[0][1] >= MIN_AGREEMENT and (
                len(ranked) == 1 or ranked[0][1] - ranked[1][1] >= MIN_MARGIN):
            roles[int(tid)] = ranked[0][0]
        elif ranked and ranked[0][1] >= MIN_AGREEMENT:
            roles[int(tid)] = "unknown"
        else:
            roles[int(tid)] = _name_role(str(first["name"]), int(tid), pid)
    return roles


def _lines_busy_at(ctx: Context, t: np.ndarray) -> dict[str, np.ndarray]:
    """Per host trace line: at each instant of `t`, whether the line is inside an event other
    than an input wait."""
    return {line: inside_merged(t, s, e) for line, (s, e) in _busy_spans(ctx).items()}


def _busy_spans(ctx: Context) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per host trace line, its busy time as merged spans: built once per run (the thread roles
    and the core sharing both test instants against them; ~130 ms on a 6.8M-event trace)."""
    return ctx.memo("busy_spans", lambda: _line_spans(ctx))


def _line_spans(ctx: Context) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One line's events at a time: the table keeps each line's events together (the xplane decoder
    emits them line by line), so a line is a few slices of it; a copy of the table's busy rows
    grouped by line cost ~100 MB on a 2.3M-event trace. Tables not laid out that way (merged
    Chrome traces) are grouped by one stable sort of the line codes instead."""
    ev = ctx.events
    keep = cat_mask(ev["plane"], lambda p: not is_device_plane(p))
    if ctx.n_hosts > 1:
        # The sampler watched one machine: only its lines can agree with its threads, and the
        # other hosts' lines of the same name (tf_Compute/11 on every worker) would merge in.
        keep &= cat_mask(ev["host"], lambda h: h == ctx.sampler_host)
    keep &= cat_mask(ev["kind"], lambda k: k != "input_wait")
    # XLA:CPU's BlockUntilReady stays busy: the thread that waits in it for its cluster was in R
    # at every sampler sweep (docs/trace-signals.md, "Input producers slow the model's ops").
    codes = ev["line"].array.codes
    start, end = ev["start_ns"].to_numpy(), EndTimes(ev)
    order, grouped = None, codes
    cuts = np.flatnonzero(grouped[1:] != grouped[:-1]) + 1
    if len(cuts) > 4 * (len(ev["line"].cat.categories) + 1):
        order = np.argsort(codes, kind="stable")
        grouped = codes[order]
        cuts = np.flatnonzero(grouped[1:] != grouped[:-1]) + 1
    parts: dict[int, list] = {}
    for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(codes)], strict=True):
        if b > a:
            parts.setdefault(int(grouped[a]), []).append(
                slice(a, b) if order is None else order[a:b])
    names = ev["line"].cat.categories
    spans: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for code, slices in parts.items():
        if code < 0:
            continue
        s = np.concatenate([start[r][keep[r]] for r in slices])
        if not len(s):
            continue
        e = np.concatenate([end[r][keep[r]] for r in slices])
        spans[str(names[code])] = merge_intervals(s, e, overwrite=True)  # fresh copies
    return spans


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
    saturated_share: float  # share of samples with at least as many runnable threads as CPUs
    wall_s: float  # first to last sample inside the steps
    input_cpu_share: float  # input threads' CPU time / the process's CPU time
    cpu_utilization: float  # process CPU time / (wall × CPUs)
    d_threads_by_name: dict[str, int]


# Fewer sweeps than this while the model runs say too little about who held the cores.
MIN_SHARING_SWEEPS = 8
# Contention below this slowdown is within the sampler's noise: not counted.
MIN_SLOWDOWN = 1.1


@dataclass
class CoreSharing:
    """How the model's threads shared the CPUs while they ran (sweeps inside steps and outside
    input waits). Fair scheduling gives each of `runnable` threads N/`runnable` of the N cores;
    alone, the model's `model_threads` would each get min(1, N/`model_threads`)."""

    sweeps: int
    runnable: float  # the process's threads in R per sweep
    # The model's threads among them, the larger of two counts that each miss some:
    traced_threads: float  # compute lines busy in the trace + the main thread in R (misses
    # intra-op threads, which record no events on CPU, and dispatch between small ops)
    waking_threads: float | None  # threads runnable while the model runs beyond while the step
    # waits for input (None without enough sweeps in waits)
    n_cpus: int

    @property
    def model_threads(self) -> float:
        return max(self.traced_threads, self.waking_threads or 0.0)

    @property
    def slowdown(self) -> float:
        """How much longer the model's ops took for sharing the cores (>= 1)."""
        d, n = self.model_threads, self.n_cpus
        return max(1.0, self.runnable * min(d, n) / (n * d)) if d > 0 else 1.0

    @property
    def counted_slowdown(self) -> float:
        """The slowdown an estimate counts: 1 below MIN_SLOWDOWN."""
        return self.slowdown if self.slowdown >= MIN_SLOWDOWN else 1.0


def core_sharing(ctx: Context) -> CoreSharing | None:
    return ctx.memo("core_sharing", lambda: _core_sharing(ctx))


def _core_sharing(ctx: Context) -> CoreSharing | None:
    th, n_cpus = ctx.sampler_threads, ctx.n_cpus
    # Sweeps of several processes (hosts) cannot be set against one trace's lines, nor one
    # machine's sweeps against a trace of several whose sampled one is not known.
    if (th is None or th.empty or not n_cpus or ctx.steps.table.empty or "pid" not in th
            or th["pid"].nunique() > 1 or ctx.sampler_host is None):
        return None
    th = threads_in_steps(ctx)
    running = (th["state"].astype(str) == "R").to_numpy()
    sweep_ts, sweep_of = np.unique(th["ts_ns"].to_numpy(), return_inverse=True)
    t = np.zeros(len(sweep_ts), np.int64)
    t[sweep_of] = th["t_ns"].to_numpy(np.int64)
    # Wherever the step waits: inside a tf.function the get-next op runs on an executor
    # thread, and the Python thread's call covers the wait and the model alike.
    waits = step_input_waits(ctx, ("start_ns", "end_ns"), host=ctx.sampler_host)
    in_wait = inside(t, waits["start_ns"].to_numpy(np.int64), waits["end_ns"].to_numpy(np.int64))
    model_runs = ~in_wait
    if model_runs.sum() < MIN_SHARING_SWEEPS:
        return None
    runnable = np.bincount(sweep_of, weights=running, minlength=len(t))
    # The main thread is the one OS thread known for sure (tid == pid); its trace line is always
    # "busy" inside the step marker, so the sampler says when it really runs.
    main = np.bincount(sweep_of, weights=running & (th["tid"] == th["pid"]).to_numpy(),
                       minlength=len(t))
    lines = np.zeros(len(t))
    for line, (s, e) in _busy_spans(ctx).items():
        if _line_role(line, ctx.main_line) == "compute":
            lines += inside_merged(t, s, e)
    traced = float(lines[model_runs].mean() + main[model_runs].mean())
    waking = None
    if in_wait.sum() >= MIN_SHARING_SWEEPS:
        # Per thread, how much more often it is runnable while the model runs than while the
        # step waits: the producers run in both, the model's threads (intra-op ones included)
        # only in the first.
        row_runs = model_runs[sweep_of]
        tid = th["tid"].to_numpy()
        # Both phases have sweeps (checked above), so both columns exist.
        by_phase = pd.DataFrame({"tid": tid, "runs": row_runs, "R": running}).groupby(
            ["tid", "runs"])["R"].mean().unstack(fill_value=0.0)
        waking = float((by_phase[True] - by_phase[False]).clip(lower=0).sum())
    return CoreSharing(sweeps=int(model_runs.sum()), runnable=float(runnable[model_runs].mean()),
                       traced_threads=traced, waking_threads=waking, n_cpus=n_cpus)


def main_thread_states(ctx: Context, steps: np.ndarray) -> tuple[dict[str, float], int] | None:
    """The states of the process's main thread (tid == pid, the thread Python starts, which runs
    the training loop in Keras fit and in most custom loops) over the sampler sweeps inside the
    steps flagged in `steps` (a mask over the step table): share per state, and the sample count.
    None without sampler data of one process, or without a sample in those steps. Not the
    thread_roles match by phi, which labelled that thread poorly (`input` on the default
    preset, `unknown` on a loop sleeping every 5th step) before it took tid == pid as the main
    thread outright."""
    th, t = ctx.sampler_threads, ctx.steps.table
    if th is None or th.empty or "pid" not in th or th["pid"].nunique() > 1 or t.empty:
        return None
    main = th[(th["tid"] == th["pid"]).to_numpy()]
    row = ctx.steps.row_at(main["t_ns"].to_numpy(np.int64))
    keep = (row >= 0) & steps[np.maximum(row, 0)]
    if not keep.any():
        return None
    states = main["state"].astype(str).to_numpy()[keep]
    names, counts = np.unique(states, return_counts=True)
    return {str(k): float(c) / len(states) for k, c in zip(names, counts, strict=True)}, len(states)


def sweep_intervals(process: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """The process table in time order, the middle (ns) of each interval between consecutive
    sweeps, and whether the interval counts. An interval's CPU figures are those of its later
    row (over (t[i-1], t[i]]: `p[col].to_numpy()[1:]`); one where the sampler fell behind (a gap
    three times the usual) does not count."""
    p = process.sort_values("t_ns")
    t = p["t_ns"].to_numpy(np.int64)
    gap = np.diff(t)
    ok = (gap > 0) & (gap <= 3 * np.median(gap)) if len(gap) else np.zeros(0, bool)
    return p, t[:-1] + gap // 2, ok


def within_steps(df: pd.DataFrame, ctx: Context) -> pd.DataFrame:
    t = ctx.steps.table
    if t.empty:
        return df
    lo, hi = int(t["start_ns"].min()), int(t["end_ns"].max())
    inside = df[(df["t_ns"] >= lo) & (df["t_ns"] <= hi)]
    return inside if len(inside) else df


def threads_in_steps(ctx: Context) -> pd.DataFrame | None:
    """The sampler's thread rows over the steps (all of them when none falls inside)."""
    def build() -> pd.DataFrame | None:
        th = ctx.sampler_threads
        return None if th is None or th.empty else within_steps(th, ctx)
    return ctx.memo("sampler_threads", build)


def step_thread_roles(ctx: Context) -> dict[int, str]:
    """thread_roles over the sampler's rows within the steps, once per run (the summary and the
    core use both ask). Needs sampler data."""
    return ctx.memo("thread_roles", lambda: thread_roles(ctx, threads_in_steps(ctx)))


def _thread_cpu(ctx: Context) -> pd.DataFrame:
    """Per thread (tid) over the steps: CPU seconds in user and kernel mode (the counters are
    cumulative: last sample minus first; 0 where the sampler did not record them) and whether a
    sweep found it in D. Needs sampler data."""
    def build() -> pd.DataFrame:
        th = threads_in_steps(ctx)
        per = th.assign(user=th.get("user_s", 0.0), kernel=th.get("system_s", 0.0),
                        d=(th["state"].astype(str) == "D").to_numpy()).groupby("tid").agg(
            u0=("user", "min"), u1=("user", "max"), k0=("kernel", "min"),
            k1=("kernel", "max"), d=("d", "any"))
        return pd.DataFrame({"user": (per["u1"] - per["u0"]).clip(lower=0),
                             "kernel": (per["k1"] - per["k0"]).clip(lower=0), "d": per["d"]})
    return ctx.memo("thread_cpu", build)


def summarize(ctx: Context) -> SamplerSummary | None:
    return ctx.memo("sampler_summary", lambda: _summarize(ctx))


def _summarize(ctx: Context) -> SamplerSummary | None:
    th = threads_in_steps(ctx)
    if th is None:
        return None
    n_cpus = ctx.n_cpus or 1
    ts = np.sort(th["ts_ns"].unique())
    n_samples = len(ts)
    hz = (n_samples - 1) / ((ts[-1] - ts[0]) / 1e9) if n_samples > 1 and ts[-1] > ts[0] else 0.0
    state = th["state"].astype(str)
    per_sample = pd.DataFrame({"ts": th["ts_ns"], "D": state == "D", "R": state == "R"}).groupby(
        "ts").sum()
    role_of = step_thread_roles(ctx)
    per_thread = _thread_cpu(ctx)
    used = per_thread["user"] + per_thread["kernel"]
    role = per_thread.index.map(role_of)
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
        saturated_share=float((per_sample["R"] >= n_cpus).mean()),
        wall_s=float(wall),
        input_cpu_share=float(used[role == "input"].sum() / total) if total else 0.0,
        cpu_utilization=float(total / (wall * n_cpus)) if wall > 0 else 0.0,
        d_threads_by_name={str(k): int(v) for k, v in d_names.items()},
    )


# Kernel CPU the reader threads spend per MB they read from the device with large reads: the
# `dstate_io` preset's fix (256 KB reads, readahead off) measured 0.27-0.34 ms/MB on the dev VM
# (docs/trace-signals.md, "Threads in D state"). Kernel time beyond it is per-request overhead.
LARGE_READ_KERNEL_S_PER_MB = 0.3e-3


@dataclass
class IoThreads:
    """The threads sampled in D state at least once over the steps (a thread that is in D 10% of
    the time is seen in ~30 sweeps with 96% chance), and what their reads cost the CPUs."""

    threads: int
    kernel_s: float  # their system CPU seconds over the window
    process_cpu_s: float  # every sampled thread's CPU seconds over the window
    read_mb: float | None  # bytes the process(es) read from the device (/proc io), None unknown

    @property
    def kernel_share(self) -> float:
        return self.kernel_s / self.process_cpu_s if self.process_cpu_s > 0 else 0.0

    @property
    def kernel_ms_per_mb(self) -> float | None:
        return self.kernel_s / self.read_mb * 1e3 if self.read_mb else None

    @property
    def avoidable_kernel_share(self) -> float:
        """Their kernel CPU beyond what the same bytes cost in large reads, as a share of the
        process's CPU (all of it when the bytes read are unknown)."""
        needed = (self.read_mb or 0.0) * LARGE_READ_KERNEL_S_PER_MB
        spare = max(0.0, self.kernel_s - needed)
        return spare / self.process_cpu_s if self.process_cpu_s > 0 else 0.0


def io_threads(ctx: Context) -> IoThreads | None:
    """None without sampler data, or without its CPU counters."""
    th = ctx.sampler_threads
    if th is None or th.empty or not {"user_s", "system_s"} <= set(th.columns):
        return None
    per = _thread_cpu(ctx)
    return IoThreads(threads=int(per["d"].sum()), kernel_s=float(per["kernel"][per["d"]].sum()),
                     process_cpu_s=float((per["user"] + per["kernel"]).sum()),
                     read_mb=_device_read_mb(ctx))


def _device_read_mb(ctx: Context) -> float | None:
    """MB the sampled processes read from storage (not the page cache) over the steps."""
    p = ctx.sampler_process
    if p is None or p.empty or "read_bytes" not in p:
        return None
    return _grown_mb(within_steps(p, ctx), "read_bytes")


def _grown_mb(p: pd.DataFrame, col: str) -> float:
    """How much a cumulative byte counter grew over the rows, per process summed, in MB."""
    g = p.groupby("pid")[col] if "pid" in p else p[col]
    return float(np.sum(g.max() - g.min())) / 1e6


@dataclass
class ReadVolume:
    """What the sampled processes read over the steps (/proc/<pid>/io, cumulative counters)."""

    mb_per_s: float  # bytes returned by read calls (rchar): page cache, network FS, pipes too
    device_mb_per_s: float | None  # bytes from block devices (read_bytes)
    step_s: float  # the mean step

    @property
    def mb_per_step(self) -> float:
        return self.mb_per_s * self.step_s

    @property
    def device_mb_per_step(self) -> float | None:
        return None if self.device_mb_per_s is None else self.device_mb_per_s * self.step_s

    def numbers(self) -> dict[str, float | None]:
        device = self.device_mb_per_step
        return {"read_mb_per_step": round(self.mb_per_step, 3),
                "read_mb_per_s": round(self.mb_per_s, 1),
                "device_read_mb_per_step": None if device is None else round(device, 3)}

    def note(self) -> str:
        device = self.device_mb_per_step
        if device is None:
            where = ""
        elif device < 0.05 * self.mb_per_step:
            where = (", almost none of it from block devices (the page cache served it, or a "
                     "network file system, which counts only here)")
        elif device <= 1.1 * self.mb_per_step:
            where = f", {device:.2f} MB of it from block devices ({self.device_mb_per_s:.0f} MB/s)"
        else:
            where = (f"; block devices delivered more, {device:.2f} MB per step "
                     f"({self.device_mb_per_s:.0f} MB/s): readahead that went unused or was "
                     "dropped from the page cache before it was read")
        return (f"sampler: the process read {self.mb_per_step:.2f} MB per step through read "
                f"calls ({self.mb_per_s:.0f} MB/s over the steps){where}")


def read_volume(ctx: Context) -> ReadVolume | None:
    """None without the sampler's `rchar_bytes` (logdirs sampled before 2026-11-24) or with
    fewer than two process rows over the steps."""
    p = ctx.sampler_process
    if p is None or p.empty or "rchar_bytes" not in p or not ctx.steps.found:
        return None
    p = within_steps(p, ctx)
    p = p[p["rchar_bytes"] >= 0]  # -1: /proc/<pid>/io was unreadable at that sweep
    span = (p["t_ns"].max() - p["t_ns"].min()) / 1e9 if len(p) > 1 else 0.0
    if span <= 0:
        return None
    return ReadVolume(mb_per_s=_grown_mb(p, "rchar_bytes") / span,
                      device_mb_per_s=(_grown_mb(p, "read_bytes") / span if "read_bytes" in p
                                       else None),
                      step_s=ctx.steps.mean_step_ns() / 1e9)
