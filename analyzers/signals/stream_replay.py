"""Replay of a GPU's streams with some events shortened: when would each kernel, copy and
collective have ended (docs/trace-signals.md, "Kernel precision")?

A stream event starts at the latest of its launch (the host call that queued it, paired by
host and correlation id), its stream's previous event's end plus the gap the GPU left between
them, and, when it waited beyond both, the end of the event of another stream of its GPU that
ended just before it (a stream waiting on an event). A host that waited for its GPU (a
synchronize, a blocking copy: `sync` events) gets there sooner when the event it waited for ends
sooner, and so do the launches after it. Replayed with the recorded durations, the recorded GPU
traces end where they are recorded; with shorter ones, a step shortens only where the GPU was
the critical path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.events import EndTimes, cat_mask, is_device_plane, present_stat
from analyzers.quantiles import median

# The in_steps kinds that hold a GPU stream: kernels, collectives and copies.
STREAM_KINDS = ("device_compute", "collective", "h2d", "d2h", "d2d")
# A stream event that starts within this of what it followed (its launch, the event before it
# on its stream) waited for nothing else: queued kernels start 1-2 µs apart on Kineto's V100,
# 3-5 µs in TF's GPU traces. Past it, one waited for another stream's event when one ended just
# before, else for the GPU itself (a launched event) or for the host (an unpaired one).
QUEUED_GAP_NS = 10_000
# A kernel that waited beyond its launch and its own stream, starting within this of another
# stream's kernel end on its GPU, waited for that kernel (a stream waiting on an event: the
# gradients before their all-reduce, the all-reduce before the update).
DEP_NS = 20_000
# A host wait for the GPU (a synchronize, a blocking copy) that returns within this of a stream
# event's end waited for that event (the V100 trace's pageable cudaMemcpyAsync returns 45 µs
# before its copy ends; synchronizes 3-21 µs after the last kernel).
WAIT_NS = 100_000
# Replays that pass each such wait along, at most (a chain compute -> all-reduce -> update is
# 2 deep; each host wait in a step adds one): the replay stops once nothing moves.
PASSES = 16


@dataclass(frozen=True)
class Launches:
    """Per stream event (rows of `k`), the host call that queued it: its start and end (-1 where
    none pairs), and whether most events paired."""
    start: np.ndarray
    end: np.ndarray
    paired: bool

    def select(self, rows: np.ndarray) -> Launches:
        return Launches(self.start[rows], self.end[rows], self.paired)


def launches(ctx: Context, k: pd.DataFrame) -> Launches:
    """Each stream event's launch: of the host events of its host and correlation id, the one
    that started last before it (the enclosing op carries the id too, and starts first; ids
    repeat across processes and sessions)."""
    none = Launches(np.full(len(k), -1, np.int64), np.full(len(k), -1, np.int64), False)
    if "correlation_id" not in k:
        return none
    corr = np.asarray(k["correlation_id"], dtype=np.int64)
    if not (corr >= 0).any():
        return none
    ev = ctx.events
    rows, ids = present_stat(ev, "correlation_id")
    on_host = ~cat_mask(ev["plane"], is_device_plane)[rows]
    rows, ids = rows[on_host], ids[on_host]
    if not len(rows):
        return none
    starts = ev["start_ns"].to_numpy(np.int64)
    calls = pd.DataFrame({"host": ev["host"].array.codes[rows], "corr": ids,
                          "start": starts[rows], "end": EndTimes(ev)[rows]}
                         ).sort_values("start", kind="stable")
    kernels = pd.DataFrame({"host": k["host"].array.codes, "corr": corr,
                            "at": k["start_ns"].to_numpy(np.int64),
                            "row": np.arange(len(k))}).sort_values("at", kind="stable")
    paired = pd.merge_asof(kernels, calls.assign(at=calls["start"]), on="at",
                           by=["host", "corr"], direction="backward")
    ok = paired["end"].notna().to_numpy() & (paired["corr"].to_numpy() >= 0)
    rows_ok = paired["row"].to_numpy()[ok]
    out = Launches(none.start.copy(), none.end.copy(), bool(ok.mean() >= 0.5))
    out.start[rows_ok] = paired["start"].to_numpy()[ok].astype(np.int64)
    out.end[rows_ok] = paired["end"].to_numpy()[ok].astype(np.int64)
    return out


def _segments(k: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Row order by (step, host, device plane, stream, start), and each row's segment id (one per
    step and stream) in that order."""
    keys = [k["step_idx"].to_numpy(), *(k[c].array.codes for c in ("host", "plane", "line"))]
    order = np.lexsort((k["start_ns"].to_numpy(), *reversed(keys)))
    sorted_keys = np.stack([np.asarray(x)[order] for x in keys])
    new = np.ones(len(order), bool)
    new[1:] = (sorted_keys[:, 1:] != sorted_keys[:, :-1]).any(axis=0)
    return order, np.cumsum(new) - 1


def _segmented_cummax(x: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Running maximum of `x` within each segment (`seg` ids contiguous)."""
    return pd.Series(x).groupby(seg, sort=False).cummax().to_numpy()


def _replay_ends(ready: np.ndarray, dur: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Each kernel's end when it starts at max(its ready time, the previous kernel's end) on
    its stream (rows in stream order, `seg` ids contiguous): end_i = C_i + max over j <= i in
    the segment of (ready_j - C_(j-1)), C the running sum of durations."""
    c = np.cumsum(dur)
    return c + _segmented_cummax(ready - (c - dur), seg)


def _dependencies(k: pd.DataFrame, order: np.ndarray, start: np.ndarray, ends: np.ndarray,
                  waited: np.ndarray) -> np.ndarray:
    """Per kernel (in `order`), the kernel of another stream of its GPU and step that ended
    last, at most DEP_NS, before it started, for those that `waited`; -1 elsewhere."""
    step = k["step_idx"].to_numpy()[order]
    planes = len(k["plane"].cat.categories)
    device = (k["host"].array.codes.astype(np.int64) * planes + k["plane"].array.codes)[order]
    line = k["line"].array.codes[order]
    rows = np.arange(len(order))
    found = pd.merge_asof(
        pd.DataFrame({"t": start[waited].astype(np.int64), "step": step[waited],
                      "device": device[waited], "row": rows[waited], "line": line[waited]}
                     ).sort_values("t"),
        pd.DataFrame({"t": ends.astype(np.int64), "step": step, "device": device, "dep": rows,
                      "dep_line": line}).sort_values("t"),
        on="t", by=["step", "device"], direction="backward", tolerance=DEP_NS)
    ok = found["dep"].notna().to_numpy() & (found["dep_line"].to_numpy() != found["line"])
    dep = np.full(len(order), -1, np.int64)
    dep[found["row"].to_numpy()[ok]] = found["dep"].to_numpy()[ok].astype(np.int64)
    return dep


def replay(k: pd.DataFrame, launched_by: Launches, new_dur: np.ndarray,
           waits: pd.DataFrame | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each stream event's end (rows of `k`, in_steps rows of device planes) replayed with its
    recorded duration, and with `new_dur`. A kernel starts when its launch returned (or, a
    call that returned after it started, such as a blocking copy, when the call began), its
    stream's previous kernel ended (plus the gap the GPU left between them),
    and the kernel of another stream it waited for ended. `waits` (in_steps rows of the hosts'
    `sync` events: host, step_idx, start_ns, end_ns) are the hosts waiting for their GPU: one
    that ends sooner brings the host's later launches forward. With the recorded durations the
    replay gives back the recorded ends."""
    order, seg = _segments(k)
    start = k["start_ns"].to_numpy(np.int64)[order].astype(np.float64)
    dur = k["dur_ns"].to_numpy(np.int64)[order].astype(np.float64)
    r = launched_by.end[order].astype(np.float64)
    issued = launched_by.start[order].astype(np.float64)
    ends = start + dur
    first = np.ones(len(order), bool)
    first[1:] = seg[1:] != seg[:-1]
    # Earlier than any start or launch: "no bound".
    floor = float(min(start.min(), r.min(), issued.min())) - 1.0 if len(start) else 0.0
    prev_end = np.full(len(order), floor)
    prev_end[1:] = _segmented_cummax(ends, seg)[:-1]
    prev_end[first] = floor  # what came before a stream's first kernel is another step's
    paired = r >= 0
    launched = np.where(paired, np.where(r <= start, r, np.minimum(issued, start)), floor)
    # An event that started later than its launch and its stream allowed waited for something
    # else: an event of another stream (an event wait: gradients before their all-reduce), or
    # the GPU itself (TF's queued kernels start 3-5 µs, at times 10 µs and more, after the one
    # before them: a delay that moves with the stream). An unpaired event after a gap waited
    # for the host, or for something unknown: it keeps its start.
    slack = start - np.maximum(launched, prev_end)
    waited = slack > QUEUED_GAP_NS
    dep = _dependencies(k, order, start, ends, waited)
    has_dep = dep >= 0
    latency = np.where(has_dep, start - ends[np.maximum(dep, 0)], 0.0)
    fixed = waited & ~has_dep & ~paired
    # Ready times: a launch (paired), none beyond the queue (unpaired, queued), its own start
    # (fixed), or its dependency's end plus the same latency (its start as recorded, then
    # recomputed as the dependency moves). What the host did comes earlier by as much as its
    # last wait for the GPU before it ended earlier.
    base = np.where(fixed | has_dep, start, np.where(paired, launched, floor))
    host = _HostWaits(k, order, ends, np.where(paired, launched, start), waits)
    # The GPU's own delay before an event (1-2 µs between queued kernels on the V100, 3-5 µs in
    # TF's GPU traces) stays after the fix: replayed without it, the Kineto V100 steps ran a
    # median 0.2 ms ahead of the trace.
    gap = np.where(has_dep | fixed, 0.0, np.clip(slack, 0, None))
    old = _replay_ends(base, dur + gap, seg)
    new_dur = np.asarray(new_dur, np.float64)[order] + gap
    rd = base.copy()
    for _ in range(PASSES):
        new = _replay_ends(rd, new_dur, seg)
        moved = base - host.shifts(new)
        moved[has_dep] = new[dep[has_dep]] + latency[has_dep]
        if np.allclose(moved, rd, rtol=0.0, atol=1.0):
            break
        rd = moved
    new = _replay_ends(rd, new_dur, seg)
    back = np.empty_like(order)
    back[order] = np.arange(len(order))
    return old[back], new[back]


class _HostWaits:
    """The hosts' waits for their GPU (`sync` events), each tied to the stream event that ended
    within WAIT_NS of its return (a blocking copy returns a little before its copy ends); and,
    per stream event, the last wait of its host and step that ended before the
    host launched it (`at`)."""

    def __init__(self, k: pd.DataFrame, order: np.ndarray, ends: np.ndarray, at: np.ndarray,
                 waits: pd.DataFrame | None) -> None:
        self.n = len(order)
        if waits is None or waits.empty:
            self.count = 0
            return
        w = pd.DataFrame({"host": waits["host"].array.codes,
                          "step": waits["step_idx"].to_numpy(),
                          "start": waits["start_ns"].to_numpy(np.int64),
                          "t": waits["end_ns"].to_numpy(np.int64)}
                         ).sort_values(["host", "step", "t"], kind="stable")
        w["wait"] = np.arange(len(w))
        step = k["step_idx"].to_numpy()[order]
        hosts = k["host"].array.codes[order]
        events = pd.DataFrame({"t": ends.astype(np.int64), "host": hosts, "step": step,
                               "dep": np.arange(self.n)}).sort_values("t")
        self.count = len(w)
        self.start = w["start"].to_numpy(np.float64)
        self.end = w["t"].to_numpy(np.float64)
        # The event that ended last before the host returned; else one ending just after that
        # the host had queued before it began to wait (a blocking copy's own copy), never one
        # queued after the wait.
        before, after = (pd.merge_asof(w.sort_values("t"), events, on="t", by=["host", "step"],
                                       direction=d, tolerance=WAIT_NS).sort_values("wait")
                         ["dep"].fillna(-1).to_numpy(np.int64) for d in ("backward", "forward"))
        after[(after >= 0) & (at[np.maximum(after, 0)] > self.start)] = -1
        self.dep = np.where(before >= 0, before, after)
        self.latency = np.where(self.dep >= 0, self.end - ends[np.maximum(self.dep, 0)], 0.0)
        self.first = np.ones(self.count, bool)
        keys = w[["host", "step"]].to_numpy()
        self.first[1:] = (keys[1:] != keys[:-1]).any(axis=1)
        last = pd.merge_asof(
            pd.DataFrame({"t": at.astype(np.int64), "host": hosts, "step": step,
                          "row": np.arange(self.n)}).sort_values("t"),
            w[["t", "host", "step", "wait"]].sort_values("t"),
            on="t", by=["host", "step"], direction="backward").sort_values("row")
        self.last = last["wait"].fillna(-1).to_numpy(np.int64)

    def shifts(self, new: np.ndarray) -> np.ndarray:
        """How much earlier each stream event's host got to its launch, with the stream events
        ending at `new`: each wait ends when its event does (plus the same latency), or when
        the host gets there, itself earlier by the waits before it."""
        if not self.count:
            return np.zeros(self.n)
        shift = np.zeros(self.count)
        for j in range(self.count):
            arrival = self.start[j] - (0.0 if self.first[j] else shift[j - 1])
            ready = (new[self.dep[j]] + self.latency[j] if self.dep[j] >= 0
                     else arrival + self.end[j] - self.start[j])
            shift[j] = self.end[j] - max(arrival, ready)
        return np.where(self.last >= 0, shift[np.maximum(self.last, 0)], 0.0)


def step_shrink(k: pd.DataFrame, launched_by: Launches, new_dur: np.ndarray,
                waits: pd.DataFrame | None = None) -> float:
    """ns the steps shorten when the kernels take `new_dur`: per step, the latest end of all its
    streams, replayed with the old durations against the new."""
    old, new = replay(k, launched_by, new_dur, waits)
    steps = k["step_idx"].to_numpy()
    last_old = pd.Series(old).groupby(steps).max()
    last_new = pd.Series(new).groupby(steps).max()
    return float((last_old - last_new).clip(lower=0).sum())


def queue_delay_us(k: pd.DataFrame, launched_by: Launches) -> float | None:
    """The median time kernels waited between their launch's return and their start (µs)."""
    if not launched_by.paired:
        return None
    ok = launched_by.end >= 0
    delay = k["start_ns"].to_numpy(np.int64)[ok] - launched_by.end[ok]
    return median(np.clip(delay, 0, None)) / 1e3 if len(delay) else None
