"""PyTorch DataLoader fetches: which iterator the training loop waits on, and what runs inside
the wait.

The profiler names each fetch after the iterator class (docs/trace-signals.md, "PyTorch
DataLoader"): `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__` loads the batch in the
training process itself (num_workers=0), so the wait *is* the loading: the dataset's
`__getitem__`, its transforms and the collate, with the torch ops among them traced inside the
fetch on the training thread. `_MultiProcessingDataLoaderIter.__next__` takes a batch the worker
processes made; their work is not in the trace, only the wait for it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from analyzers.context import Context
from analyzers.events import LOADER_FETCH_PREFIX
from analyzers.steps import merge_intervals

_FETCH = re.compile(re.escape(LOADER_FETCH_PREFIX) + r"_(?P<iter>\w+?)DataLoaderIter\.__next__$")
IN_PROCESS = "SingleProcess"
WORKERS = "MultiProcessing"


@dataclass
class LoaderFetches:
    iterator: str | None = None  # IN_PROCESS, WORKERS, another class's stem, or None: no fetch
    fetch_ms_per_step: float = 0.0  # the fetches' union on the training thread, per step
    op_ms_per_step: float = 0.0  # torch ops inside the fetches (outermost ones), per step
    ops_per_fetch: float = 0.0
    top_ops: list[tuple[str, float, int]] = field(default_factory=list)  # name, ms, calls

    @property
    def in_process(self) -> bool:
        return self.iterator == IN_PROCESS

    def workers_to_keep_up(self, rest_ms: float) -> int:
        """Worker processes that each load a batch in `fetch_ms_per_step` while the step does
        the rest: enough that one is always ready, and one more to absorb jitter."""
        if rest_ms <= 0:
            return 2
        return max(2, math.ceil(self.fetch_ms_per_step / rest_ms) + 1)


def loader_fetches(ctx: Context) -> LoaderFetches:
    return ctx.memo("dataloader", lambda: _fetches(ctx))


def _fetches(ctx: Context) -> LoaderFetches:
    fetch = ctx.in_steps(kinds=("input_wait",), name=_FETCH.match, thread=ctx.steps.thread,
                         columns=("name", "start_ns", "end_ns"))
    if fetch.empty:
        return LoaderFetches()
    kinds = fetch["name"].astype(str).str.extract(_FETCH, expand=False).value_counts()
    fs, fe = merge_intervals(fetch["start_ns"].to_numpy(np.int64),
                             fetch["end_ns"].to_numpy(np.int64))
    n_steps = max(ctx.n_steps, 1)
    out = LoaderFetches(iterator=str(kinds.index[0]),
                        fetch_ms_per_step=float((fe - fs).sum()) / 1e6 / n_steps)
    # The torch ops a fetch holds are part of its wait (events._mark_loader_work).
    ops = ctx.in_steps(kinds=("input_wait",), thread=ctx.steps.thread,
                       name=lambda n: n.startswith("aten::"),
                       columns=("name", "start_ns", "end_ns"))
    if ops.empty:
        return out
    s, e = ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
    # The outermost ops only (aten::to holds aten::copy_): an op starting before the latest end
    # of the ops sorted ahead of it is nested in one of them.
    order = np.lexsort((-e, s))
    s, e = s[order], e[order]
    latest = np.maximum.accumulate(e)
    outer = np.ones(len(s), dtype=bool)
    outer[1:] = s[1:] >= latest[:-1]
    top = ops.iloc[order[outer]]
    dur = (e - s)[outer]
    out.op_ms_per_step = float(dur.sum()) / 1e6 / n_steps
    out.ops_per_fetch = len(top) / len(fetch)
    by_name = (top.assign(ms=dur / 1e6).groupby("name", observed=True)["ms"]
               .agg(["sum", "size"]).sort_values("sum", ascending=False).head(3))
    out.top_ops = [(str(n), round(float(r["sum"]) / n_steps, 3), round(int(r["size"]) / n_steps))
                   for n, r in by_name.iterrows()]
    return out
