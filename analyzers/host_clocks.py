"""Clock offsets between the hosts of one run, read from the collectives they share.

Each worker's trace is on its own machine's clock, and the files are merged on those clocks
(or, for a file with no wall-clock origin, on its first event). Two machines' clocks disagree by
whatever their time sync leaves (tens of microseconds to milliseconds), and a file without an
origin can be off by a whole step. A detector that sets one worker's events against another's in
time (`straggler_worker`'s waits, `collective_overhead`'s peer waits, the step windows running
from the earliest worker's start to the latest one's end) then reads the skew as work or waiting.

A synchronous collective (an all-reduce, all-gather, all-to-all) returns on every participant
when the last one's data has arrived: its end is one instant on all of them, recorded late where
a thread is descheduled as it returns, never early. And nobody leaves it before the last one has
joined. Per step (numbered alike on every worker by its step markers), the differences between
two hosts' last collective ends that agree give the offset; the starts and ends bound it from
both sides (docs/trace-signals.md, "Clocks of several hosts").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from analyzers.events import EndTimes, cat_mask, is_device_plane
from analyzers.steps import find_step_windows

# Steps both hosts end a collective in, for an offset to be read at all.
MIN_STEPS = 3
# How far apart one collective's ends may fall on its participants and still read as one
# instant: the last chunk of a ring reaches each in turn, and a CPU thread descheduled as it
# returns records its end late (gloo on 2 busy cores: 4 of 6 steps within 70 µs, the other two
# 2.4 and 5.1 ms off). Differences within twice this of each other agree.
AGREE_NS = 100_000
# An offset below this is within that spread: the clocks are left as they are.
MIN_OFFSET_NS = 200_000
# Between two wall clocks, the largest offset taken, as a share of the reference's median step.
MAX_STEP_SHARE = 0.5
# Step sources whose steps carry numbers that line workers up.
_NUMBERED = ("markers:", "device:")


@dataclass(frozen=True)
class HostOffset:
    host: str
    offset_ns: int  # added to the host's times to put them on the reference host's clock
    agreeing: int  # steps whose end differences agree on it
    steps: int  # steps both hosts run collectives in
    spread_ns: int  # the agreeing differences' range
    possible: tuple[int, int]  # the offsets that keep every step's collectives possible
    bound: bool  # no agreement: the smallest move that makes every step possible
    taken: bool = True  # False: over half a step between wall clocks, left as recorded


def collective_bounds(events: pd.DataFrame) -> pd.DataFrame:
    """Per step number (index): the start of the last collective that starts in that step
    (`last_start`) and the latest end of one (`last_end`), for one host's events; empty without
    numbered steps or collectives."""
    windows, source, _ = find_step_windows(events)
    coll = events[(events["kind"] == "collective").to_numpy()]
    # The collectives themselves, not the C++ scopes around them: TF's executor callbacks
    # (`CollectiveExecutor::ExecuteAsync::Done`) start after the exchange is over, and c10d's
    # dispatcher ops (`c10d::allreduce_`) only enqueue it.
    device = cat_mask(coll["plane"], is_device_plane)
    coll = coll[device | ~cat_mask(coll["name"], lambda n: "::" in n)]
    empty = pd.DataFrame({"last_start": [], "last_end": []}, dtype=np.int64)
    empty.attrs["step_ns"] = 0.0
    if not len(windows) or not len(coll) or not source.startswith(_NUMBERED):
        return empty
    w = windows.sort_values("start_ns")
    w_start, w_end = w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64)
    start = coll["start_ns"].to_numpy(np.int64)
    end = EndTimes(coll)[:]
    at = np.searchsorted(w_start, start, side="right") - 1
    ok = at >= 0
    ok[ok] = start[ok] < w_end[at[ok]]
    if not ok.any():
        return empty
    steps = w["step"].to_numpy(np.int64)[at[ok]]
    out = pd.DataFrame({"last_start": start[ok], "last_end": end[ok]}).groupby(steps).max()
    out.attrs["step_ns"] = float(np.median(w_end - w_start))
    return out


def read_offsets(events: pd.DataFrame, hosts: list[str],
                 wall_clock: set[str]) -> tuple[str, list[HostOffset]]:
    """(reference host, offsets): every host's clock offset against the first host that runs
    collectives in numbered steps, where the steps say it differs. Hosts left out are on the
    reference's clock as far as their traces tell. Between two hosts that both record a wall
    clock (`wall_clock`) an offset is at most half a step: one larger is a step numbered
    differently on the two, not a clock (time sync keeps machines within milliseconds)."""
    bounds = {}
    codes = events["host"].array
    for host in hosts:
        mine = events[(codes == host)]
        if len(mine):
            got = collective_bounds(mine)
            if len(got) >= MIN_STEPS:
                bounds[host] = got
    if len(bounds) < 2:
        return "", []
    ref_host, ref = next(iter(bounds.items()))
    found = []
    for host, got in list(bounds.items())[1:]:
        both = ref.add_suffix("_ref").join(got, how="inner")
        offset = host_offset(both, host)
        if offset is None:
            continue
        if (host in wall_clock and ref_host in wall_clock
                and abs(offset.offset_ns) > MAX_STEP_SHARE * ref.attrs["step_ns"]):
            offset = replace(offset, taken=False)
        found.append(offset)
    return ref_host, found


def host_offset(both: pd.DataFrame, host: str) -> HostOffset | None:
    """The offset to add to a host's times, from its steps' collectives joined with the
    reference's (`last_start`, `last_end`, and the same with `_ref`), or None.

    Two facts about a synchronous collective bound it. Its ends are one instant, recorded late
    where a thread is descheduled as it returns, never early: most steps' end differences agree
    on the offset (`consensus`). And no participant leaves it before the last one has joined: in
    each step the latest collective end on either host comes after the latest collective start
    on the other, which bounds the offset from both sides. The agreed offset is taken when it
    keeps every step possible; else, when the clocks as recorded make some step impossible,
    the smallest move that makes them all possible (a bound: the true offset is at least that).
    """
    if len(both) < MIN_STEPS:
        return None
    lo = int((both["last_start_ref"] - both["last_end"]).max())
    hi = int((both["last_end_ref"] - both["last_start"]).min())
    if lo > hi:  # no one offset makes every step possible: the steps are not matched alike
        return None
    diff = (both["last_end_ref"] - both["last_end"]).to_numpy(np.int64)
    agreed = consensus(diff)
    if agreed is not None and lo <= agreed[0] <= hi:
        offset, group = agreed
        if abs(offset) < MIN_OFFSET_NS:
            return None
        return HostOffset(host, offset, len(group), len(diff), int(group.max() - group.min()),
                          (lo, hi), bound=False)
    offset = lo if lo > 0 else hi if hi < 0 else 0
    if abs(offset) < MIN_OFFSET_NS:  # every step possible, or nearly: nothing to move
        return None
    return HostOffset(host, offset, 0, len(diff), 0, (lo, hi), bound=True)


def consensus(diff: np.ndarray) -> tuple[int, np.ndarray] | None:
    """(median, members) of the largest group of per-step differences within 2 x AGREE_NS of
    each other, when it holds at least half the steps (and MIN_STEPS); else None: the steps do
    not agree on one offset."""
    d = np.sort(diff)
    if len(d) < MIN_STEPS:
        return None
    stop = np.searchsorted(d, d + 2 * AGREE_NS, side="right")
    sizes = stop - np.arange(len(d))
    first = int(sizes.argmax())
    group = d[first:stop[first]]
    if len(group) < max(MIN_STEPS, (len(d) + 1) // 2):
        return None
    return int(round(float(np.median(group)))), group


def shift_hosts(events: pd.DataFrame, offsets: list[HostOffset]) -> pd.DataFrame:
    """`events` with each offset host's times moved onto the reference clock, in time order."""
    start = events["start_ns"].to_numpy(np.int64).copy()
    codes = events["host"].array
    for o in offsets:
        if o.taken:
            start[(codes == o.host)] += o.offset_ns
    out = events.assign(start_ns=start)
    return out.sort_values("start_ns", kind="stable", ignore_index=True)


def describe(offsets: list[HostOffset], reference: str) -> str:
    """One line for the report: which clocks were moved, by how much, from what, and which
    disagree by more than a clock should."""
    parts = []
    for o in offsets:
        if not o.taken:
            parts.append(
                f"{o.host} reads {'at least ' if o.bound else ''}{abs(o.offset_ns) / 1e6:.2f} ms "
                f"{'ahead' if o.offset_ns < 0 else 'behind'}, over half a step: its step "
                "numbers may not match the others', so it was left on its own clock (what "
                "sets one worker against another in time, straggler_worker and the step "
                "windows, is unreliable)")
            continue
        if o.bound:
            why = (f"at least this: as recorded, some of its {o.steps} steps end a collective "
                   "before the other host joined it, and their ends do not agree on more")
        else:
            why = (f"{o.agreeing} of {o.steps} steps' last collective ends agree within "
                   f"{o.spread_ns / 1e3:.0f} µs")
        parts.append(f"{o.host} moved {o.offset_ns / 1e6:+.2f} ms ({why})")
    return (f"the hosts' clocks disagree (against {reference}'s, read from the collectives they "
            "share): " + "; ".join(parts))
