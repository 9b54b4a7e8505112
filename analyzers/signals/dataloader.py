"""PyTorch DataLoader fetches: which iterator the training loop waits on, and what runs inside
the wait.

The profiler names each fetch after the iterator class (docs/trace-signals.md, "PyTorch
DataLoader"): `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__` loads the batch in the
training process itself (num_workers=0), so the wait *is* the loading: the dataset's
`__getitem__`, its transforms and the collate, with the torch ops among them traced inside the
fetch on the training thread (events._mark_loader_work makes them part of the wait).
`_MultiProcessingDataLoaderIter.__next__` takes a batch the worker processes made; their work is
not in the trace, only the wait for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from analyzers.context import Context
from analyzers.events import LOADER_FETCH
from analyzers.findings import MAX_SAVING, heaviest_events
from analyzers.steps import inside_merged, merge_intervals

IN_PROCESS = "_SingleProcessDataLoaderIter"
WORKERS = "_MultiProcessingDataLoaderIter"


@dataclass
class LoaderFetches:
    # The iterator class holding most of the fetch time; None: no DataLoader fetch.
    iterator: str | None = None
    fetches: int = 0  # that iterator's fetches in the steps
    all_fetches: int = 0  # every DataLoader's
    fetch_ms_per_step: float = 0.0  # that iterator's fetches' union on the training thread
    fetches_per_step: float = 0.0
    op_ms_per_step: float = 0.0  # torch ops inside its fetches (the outermost ones)
    ops_per_fetch: float = 0.0
    top_ops: list[dict] = field(default_factory=list)  # heaviest_events over the window

    @property
    def in_process(self) -> bool:
        return self.iterator == IN_PROCESS

    @property
    def ms_per_fetch(self) -> float:
        return self.fetch_ms_per_step / self.fetches_per_step if self.fetches_per_step else 0.0

    def workers_to_keep_up(self, rest_ms: float, step_ms: float) -> int | None:
        """Worker processes that, each loading a batch as long as a fetch takes now, have the
        step's batches ready while the rest of the step runs, plus one to absorb jitter; None
        when the step is nearly all loading: the count would grow without bound, past any
        host's cores (findings.MAX_SAVING caps the saving there too)."""
        if rest_ms < (1 - MAX_SAVING) * step_ms:
            return None
        return max(2, math.ceil(self.fetch_ms_per_step / rest_ms) + 1)


def loader_fetches(ctx: Context) -> LoaderFetches:
    return ctx.memo("dataloader", lambda: _fetches(ctx))


def _fetches(ctx: Context) -> LoaderFetches:
    fetch = ctx.in_steps(kinds=("input_wait",), name=LOADER_FETCH.match,
                         thread=ctx.steps.thread, columns=("name", "start_ns", "end_ns"))
    if fetch.empty:
        return LoaderFetches()
    iterator = fetch["name"].astype(str).str.extract(LOADER_FETCH, expand=False)
    dur = fetch["end_ns"] - fetch["start_ns"]
    # A job can read two loaders (training data in process, another with workers): the one its
    # thread spends most time fetching from is the one that holds the step up.
    main = str(dur.groupby(iterator).sum().idxmax())
    mine = fetch[(iterator == main).to_numpy()]
    fs, fe = merge_intervals(mine["start_ns"].to_numpy(np.int64),
                             mine["end_ns"].to_numpy(np.int64))
    n_steps = max(ctx.n_steps, 1)
    out = LoaderFetches(iterator=main, fetches=len(mine), all_fetches=len(fetch),
                        fetch_ms_per_step=float((fe - fs).sum()) / 1e6 / n_steps,
                        fetches_per_step=len(mine) / n_steps)
    ops = ctx.in_steps(kinds=("input_wait",), thread=ctx.steps.thread,
                       name=lambda n: n.startswith("aten::"),
                       columns=("name", "start_ns", "end_ns", "dur_ns"))
    s, e = ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
    # Inside this iterator's fetches only (another loader's fetches hold their own ops; an op
    # starting in a fetch ends in it: events on one thread nest).
    mine_ops = inside_merged(s, fs, fe)
    ops, s, e = ops[mine_ops].reset_index(drop=True), s[mine_ops], e[mine_ops]
    if ops.empty:
        return out
    # The outermost ops only (aten::to holds aten::copy_): an op starting before the latest end
    # of the ops ahead of it (by start, longest first) is nested in one of them.
    order = np.lexsort((-e, s))
    latest = np.maximum.accumulate(e[order])
    outer = np.zeros(len(s), dtype=bool)
    outer[order] = np.concatenate(([True], s[order][1:] >= latest[:-1]))
    out.op_ms_per_step = float((e - s)[outer].sum()) / 1e6 / n_steps
    out.ops_per_fetch = int(outer.sum()) / len(mine)
    out.top_ops = heaviest_events(ops, n=3, where=outer)
    return out
