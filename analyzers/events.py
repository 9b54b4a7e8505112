"""The event table: one pandas DataFrame for every trace format (shared/ARCHITECTURE.md).

Columns
- `host`, `plane` (xplane plane or Chrome-trace process), `line` (thread or stream name): category
- `line_id`: category of int64 values (xplane line id, or Chrome tid): constant per line, so
  codes instead of an int64 per event
- `name`: category — the event name as the profiler wrote it
- `op_type`: category — TF op type (`scope/op:Type` → `Type`), else the name
- `kind`: category — what the event is, from generic TF/CUDA signals (KINDS below;
  docs/trace-signals.md lists the names behind each)
- `start_ns`, `dur_ns`: int64 nanoseconds; start is relative to the run's `t0_unix_ns` (kept in
  `df.attrs`), so sampler rows align by subtracting it. No end column: it would be another 8
  bytes per event (a quarter of the table); `EndTimes(df)[rows]` computes the ends of the rows
  asked for, and `with_end(df)` adds the column to a small selection
- stat columns (STAT_COLUMNS): sparse int64 with -1 for "absent" (most events carry none of
  them, so a sparse column costs only its present values), or category for text stats
  (TEXT_STATS), which are left out of a table where no event carries them (most traces have no
  `memcpy_details` or `tf_op`: GPU only): test `col in df` before reading one

Names are interned: every string column is categorical, so a million events cost a few integer
arrays, and classification runs once per distinct name, never per event.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd

# Output column ← the stat names that feed it (first found wins).
STAT_COLUMNS: dict[str, tuple[str, ...]] = {
    "step_num": ("step_num",),
    "group_id": ("group_id",),
    "correlation_id": ("correlation_id",),
    "device_id": ("device_id", "device_ordinal"),
    "memcpy_details": ("memcpy_details",),
    "bytes": ("bytes_transferred", "num_bytes", "size"),
    "tf_op": ("tf_op",),
    "root": ("_r",),
    "filename": ("filename",),  # the file a tf.data reader opens (TFRecordDataset)
    "num_shards": ("num_shards",),  # a tf.data Shard stage's shard count (dataset.shard, DATA)
    # A collective's participant count: TF's `CollectiveExecutor::CompleteParams` (2.21, not
    # kept in every run; not in 2.4), PyTorch's `record_param_comms` and NCCL kernels ("Group
    # size"). One worker's trace tells its peers this way (docs/trace-signals.md, "One worker's
    # trace").
    "group_size": ("group_size",),
    # A `_Send`'s rendezvous key, "SRC_DEVICE;incarnation;DST_DEVICE;edge;frame:iter": the
    # job and task of both ends (docs/trace-signals.md, "Parameter servers").
    "rendezvous": ("key",),
    # TraceMe context ids: a Session.run's `SessionRun` produces the id that its executor's
    # `ExecutorState::Process` events consume (docs/trace-signals.md, "TF1 sessions").
    "producer": ("_p",),
    "consumer": ("_c",),
}
TEXT_STATS = {"memcpy_details", "tf_op", "filename", "rendezvous"}
# DirectSession's event for one Session.run call, on the calling thread.
SESSION_RUN = "SessionRun"
# A worker's Session.run through a server (GrpcSession): its partition's dispatch on the calling
# thread, ended by a `RunGraphDone` (docs/trace-signals.md, "Parameter servers").
RUN_GRAPH = "RunGraph"
# One traced Session.run of a TF1 RunMetadata timeline (tf.compat.v1 `timeline.Timeline`, what
# Estimator's ProfilerHook writes as timeline-<step>.json): the reader adds it over each file's
# ops, since the file holds that one run and nothing marks it (docs/trace-signals.md,
# "TF1 RunMetadata timelines").
TIMELINE_RUN = "RunMetadata timeline"
# Read only from traces with Session.run calls, where they tie ops to runs: on a TF2 trace 1.7M
# of 4.6M events carry them (thread-pool and function-run events), +100 MB and +0.6 s to decode.
SESSION_STATS = frozenset({"producer", "consumer"})


def stat_aliases(has_session_runs: bool) -> dict[str, str]:
    """Stat name → table column, for a trace with or without Session.run calls."""
    return {alias: col for col, aliases in STAT_COLUMNS.items() for alias in aliases
            if has_session_runs or col not in SESSION_STATS}

KINDS = (
    "input_wait",  # the consumer blocked on the input pipeline (IteratorGetNext, DataLoader next)
    "input_work",  # work on tf.data threads (producers)
    "h2d",  # host → device copies
    "d2h",  # device → host copies
    "d2d",  # device ↔ device copies (incl. _Send/_Recv between logical devices, P2P)
    "collective",  # NCCL kernels, Collective* ops, XLA all-reduce/all-to-all, AllToAll
    "launch",  # CUDA runtime/driver launch calls on the host, and the TF ops that issue them
    "sync",  # the host blocked until the device catches up (cudaDeviceSynchronize, ...)
    "device_compute",  # kernels on an accelerator plane
    "host_op",  # a TF op (or XLA thunk/fusion) executed on a host thread
    "convert",  # host-side tensor creation: convert_to_tensor, tf.constant, eager casts
    "framework",  # TF runtime wrappers (EagerExecute, ExecutorState::Process, FunctionRun...)
    "other",
)

_INPUT_WAIT = re.compile(
    r"^(IteratorGetNext|IteratorGetNextAsOptional|"
    r"EagerLocalExecute: IteratorGetNext.*|MultiDeviceIteratorGetNextFromShard|"
    r"Iterator::Root.*|PrefetchConsume|enumerate\(DataLoader\).*)$"
)
# A PyTorch DataLoader fetch, named after the iterator class: `enumerate(DataLoader)#_Single
# ProcessDataLoaderIter.__next__` (signals/dataloader.py); one kind of input wait.
LOADER_FETCH = re.compile(r"^enumerate\(DataLoader\)#(?P<iterator>\w+)\.__next__$")
_GET_NEXT_OPS = frozenset({"IteratorGetNext", "IteratorGetNextAsOptional",
                           "MultiDeviceIteratorGetNextFromShard"})
# The consumer's side of GetNext, on whichever thread runs the IteratorGetNext op: in graph mode
# (Keras 3 `multi_step_on_iterator`) TF runs it on a tf_data_* thread, not the Python thread.
_CONSUMER_WAIT = re.compile(r"^(IteratorGetNextOp::DoCompute|IteratorGetNextAsOptionalOp::\w+|"
                            r"Iterator::Root)$")
_COLLECTIVE = re.compile(
    r"(?i)(nccl|^Collective|AllReduce|all-reduce|AllToAll|all-to-all|AllGather|all-gather|"
    r"ReduceScatter|reduce-scatter|collective-permute|CollectivePermute|NcclAllReduce)"
)
# PyTorch's gloo backend (CPU collectives) annotates each call on its threads as
# `gloo:all_reduce`, `gloo:broadcast`, ...: an op type of `all_reduce` by the `scope:Type` rule,
# which TF's CamelCase types never are (docs/trace-signals.md, "One worker's trace").
GLOO_PREFIX = "gloo:"
# Name scopes users and Keras give exchange code (`all_reduce/`, `all_to_all/`): host ops inside
# them are the collective's CPU implementation (e.g. AddN reduce-to-one between logical devices).
_SCOPE_COLLECTIVE = re.compile(r"(?i)(^|/)(all_reduce|allreduce|all_to_all|alltoall|all_gather|"
                               r"allgather|reduce_scatter|cross_replica_sum)(_\d+)?(/|$)")
_LAUNCH = re.compile(
    r"^(cu|cuda)(LaunchKernel|LaunchKernelEx|LaunchKernelExC|LaunchCooperativeKernel|"
    r"Memset\w*|GraphLaunch|EventRecord)(_v\d+)?$"
)
# Host copy calls wait for their copy: copy time, not launch overhead. The driver API's name
# gives the direction; the correlated device copy gives it for runtime calls, and tells a call
# that mostly waited for the stream to reach its copy (a `sync`) apart (_direct_copy_calls).
_CUDA_COPY = re.compile(r"^(cu|cuda)Memcpy\w*$")
_SYNC = re.compile(r"^(cu|cuda)(Device|Stream|Event|Ctx)Synchronize(_v\d+)?$")
# Kineto's `cuda_sync` events: a stream (or the host) waiting on another, on the device's row.
_DEVICE_SYNC = re.compile(r"^(Stream Wait Event|Stream Sync|Event Sync|Context Sync)$")
_CONVERT = re.compile(
    r"^(convert_to_tensor|tf\.constant|EagerLocalExecute: (Cast|_EagerConst|DeepCopy))$"
)
_FRAMEWORK = re.compile(
    r"^(EagerExecute|EagerKernelExecute|EagerLocalExecute.*|KernelAndDeviceFunc::Run(Async)?|"
    r"EagerService:\w+|"
    r"TFE_Py_\w+|FunctionRun|ExecutorState::.*|ExecutorDoneCallback|ParallelFor|"
    r"ThunkExecutor::Execute|BlockUntilReady|CpuExecutable::\w+|TraceContext|SessionRun|"
    r"RunGraph(Done)?|ThreadpoolListener::Record|TFE_DeleteTensorHandle|ValidateInputTypeAndPlacement|"
    r"InstantiatedCapturedFunction::\w+|tf\.function-graph_building|MemoryAllocation|"
    r"MemoryDeallocation|ExecutorPropagateOutputs|RemoteCallOp(Done)?|RemoteCall: Instantiate: .*)$"
)
# Backward-pass and optimizer-update ops, by name (`scope/op:Type`): TF2 GradientTape scopes, TF1
# `gradients/`, *Grad kernels, Apply* updates. Time that holds one trains; a function or marker
# whose calls run ops but none of these evaluates or predicts (docs/trace-signals.md, "Epochs and
# validation").
TRAINING_OP = re.compile(r"(?:^|/)(?:gradient_tape|gradients(?:_\d+)?)/|:\w*Grad$|"
                         r":(?:Resource)?(?:Sparse)?Apply[A-Z]\w*$")
# A new input iterator made from Python (iter(dataset), Keras fit each epoch; tf.distribute's
# MultiDeviceIterator under a strategy): the data started over (docs/trace-signals.md, "Epochs
# and validation").
NEW_ITERATOR = re.compile(r"^EagerLocalExecute: (MakeIterator|AnonymousIterator\w*|"
                          r"MultiDeviceIteratorInit|AnonymousMultiDeviceIterator\w*)$")
# Event kinds that are ops running (host ops, device kernels, the host's launches of them).
OP_KINDS = frozenset({"host_op", "launch", "device_compute"})
# Tracing a tf.function's Python body; conversions inside it are symbolic (graph construction).
GRAPH_BUILDING = "tf.function-graph_building"
_H2D = re.compile(r"(?i)^(MemcpyH2D|Memcpy HtoD.*|MemcpyHtoD.*|HostToDevice.*|EagerCopyToDevice)$")
_D2H = re.compile(r"(?i)^(MemcpyD2H|Memcpy DtoH.*|MemcpyDtoH.*|DeviceToHost.*)$")
_D2D = re.compile(r"(?i)^(MemcpyD2D|MemcpyP2P|Memcpy DtoD.*|Memcpy PtoP.*|MemcpyDtoD.*)$")
# Ops that call a function (tf.distribute's MultiDeviceIterator reaches the host iterator through
# a RemoteCall of its `_next_func`): the function's own ops and iterator stages have their own
# events, so the call itself is framework time.
_CALL_OPS = frozenset({"RemoteCall", "PartitionedCall", "StatefulPartitionedCall"})
# PyTorch's operator events (`cpu_op`): namespaced op names, nested (aten::linear > aten::addmm).
_TORCH_OP = re.compile(r"^(aten|autograd|c10d|_c10d_functional|torchvision|quantized|prim|"
                       r"fbgemm)::")
_SEND_RECV = re.compile(r"^(_Send|_Recv|_HostSend|_HostRecv|Send|Recv)\b")
# XLA:CPU's thunk executor marks each thunk's completion with a consumer TraceMe of its own,
# `end: <hlo op>`, 0.1-1 µs: a marker, not work (docs/trace-signals.md, "XLA on the CPU").
XLA_THUNK_END = "end: "


# Row block for the passes over the whole event table: their temporaries stay a few MB each
# instead of growing with the trace.
CHUNK = 1 << 16


def chunks(n: int, size: int = CHUNK) -> Iterator[slice]:
    """Row blocks covering range(n); one empty block when n is 0."""
    return (slice(a, min(a + size, n)) for a in range(0, max(n, 1), size))


def is_torch_op(name: str) -> bool:
    return bool(_TORCH_OP.match(name))


HOST_PLANE = "/host:CPU"
CUPTI_PLANE = "/host:CUPTI"


def is_device_plane(plane: str) -> bool:
    return plane.startswith("/device:") and not plane.startswith("/device:CPU")


def op_type_of(name: str) -> str:
    """TF host op events are `scope/op_name:OpType`; anything else is its own type."""
    if "::" in name:  # C++ scopes (Iterator::Root::..., ExecutorState::Process) are not ops
        return name
    head, sep, tail = name.rpartition(":")
    if sep and head and tail and " " not in tail and "/" not in tail and not tail.isdigit():
        return tail
    return name


# Lines xprof derives from the raw ones (xprof's xplane_schema names; docs/trace-signals.md,
# "GPU traces"): TF 2.2-2.4 saved them into the xplane, and xprof's JSON export has them. Their
# events repeat the kernels' time (a step, an op, a name scope spanning many kernels), so they
# feed no kind; the `Steps` line is read as a step source.
# The Chrome reader puts PyTorch's GPU user annotations (Kineto's copies of CPU annotations over
# the kernels they launched) on a line of their own, derived in the same sense.
GPU_ANNOTATIONS_LINE = "GPU user annotations"
STEPS_LINE = "Steps"
DERIVED_LINES = frozenset({
    STEPS_LINE, "Sparse Core Steps", "TensorFlow Ops", "Framework Ops", "TensorFlow Name Scope",
    "Framework Name Scope", "XLA Ops", "Async XLA Ops", "XLA Modules", "Launch Stats",
    "Source code", GPU_ANNOTATIONS_LINE,
})

# What classification may know of an event's thread: tf.data's threads, TF's other pools, derived
# lines, or anything else (Python, CUPTI, ...). Keeping it this coarse lets add_derived classify
# each (name, plane kind, line class) once instead of each event.
LINE_CLASSES = ("tf_data", "tf_pool", "derived", "other")


def line_class(line: str) -> str:
    if line.startswith("tf_data"):
        return "tf_data"
    if line in DERIVED_LINES:
        return "derived"
    return "tf_pool" if line.startswith("tf_") else "other"


def classify(name: str, op_type: str, device: bool, line_cls: str) -> str:
    if line_cls == "derived":
        return "other"
    if device:
        if _H2D.match(name):
            return "h2d"
        if _D2H.match(name):
            return "d2h"
        if _D2D.match(name):
            return "d2d"
        if _COLLECTIVE.search(name):
            return "collective"
        if _DEVICE_SYNC.match(name):
            return "sync"
        return "device_compute"
    if _CONSUMER_WAIT.match(name):
        return "input_wait"
    if line_cls == "tf_data":
        return "input_work"
    if _H2D.match(name):
        return "h2d"
    if _D2H.match(name):
        return "d2h"
    if _INPUT_WAIT.match(name) or op_type in _GET_NEXT_OPS:
        return "input_wait"
    if _CUDA_COPY.match(name):
        return "d2h" if "DtoH" in name else "d2d" if ("DtoD" in name or "Peer" in name) else "h2d"
    if _SYNC.match(name):
        return "sync"
    if _LAUNCH.match(name):
        return "launch"
    if (_COLLECTIVE.search(op_type) or _SCOPE_COLLECTIVE.search(name.split(":")[0])
            or name.startswith(GLOO_PREFIX)):
        return "collective"
    if _SEND_RECV.match(op_type) or name.startswith("_Send input") or name.startswith("_Recv"):
        return "d2d"
    if _CONVERT.match(name):
        return "convert"
    if _FRAMEWORK.match(name) or op_type in _CALL_OPS:
        return "framework"
    if line_cls == "tf_pool" and name.startswith(XLA_THUNK_END):
        return "framework"
    if op_type != name or (line_cls == "tf_pool" and "::" not in name) or _TORCH_OP.match(name):
        return "host_op"
    return "other"


# cat_mask compares codes one by one up to this many kept values, and gathers beyond.
_FEW_CODES = 8


def cat_mask(col: pd.Series, pred: Callable[[str], object]) -> np.ndarray:
    """`pred` evaluated once per distinct value of a categorical column, spread over the rows:
    string tests on a million events cost as much as on their few hundred distinct names."""
    cats = col.cat.categories
    flags = np.fromiter((bool(pred(str(c))) for c in cats), dtype=bool, count=len(cats))
    # `array.codes` is the stored array (`cat.codes` copies it).
    codes = col.array.codes
    kept = np.flatnonzero(flags)
    if len(kept) <= _FEW_CODES:
        # A few kept values (a kind, a thread name): comparing the (mostly 1-2 byte) codes is
        # ~40x faster than the gather below, which first widens every code to an index (0.3 vs
        # 14 ms on 6.8M rows).
        mask = np.zeros(len(codes), dtype=bool)
        for code in kept.tolist():
            mask |= codes == code
        return mask
    return np.append(flags, False)[codes]  # the extra slot reads code -1 (missing)


def cat_map(col: pd.Series, func: Callable[[str], object]) -> np.ndarray:
    """`func` applied once per distinct value; an object array over the rows (None if missing)."""
    cats = col.cat.categories
    values = np.array([func(str(c)) for c in cats] + [None], dtype=object)
    return values[col.array.codes]


def cat_codes_map(col: pd.Series, func: Callable[[str], object]) -> np.ndarray:
    """`func` applied once per distinct value, its distinct results numbered 0..k-1 (in first-seen
    category order) and spread over the rows as int32; -1 where `func` gives None/"" or the row is
    missing. A grouping key without an object array over the rows."""
    number: dict[object, int] = {}
    table = np.full(len(col.cat.categories) + 1, -1, dtype=np.int32)
    for i, c in enumerate(col.cat.categories):
        key = func(str(c))
        if key:
            table[i] = number.setdefault(key, len(number))
    return table[col.array.codes]


# A thread: (host, plane, line id). Line names repeat (every Python thread is `python`), and so
# do line ids across hosts: a thread id is per machine, and workers in containers all start
# their Python as the same low pid, whose main thread has that id (docs/trace-signals.md,
# "Several hosts").
Thread = tuple[str, str, object]


def on_thread(df: pd.DataFrame, thread: Thread | None) -> pd.DataFrame:
    """The rows of `df` (with `host`, `plane` and `line_id` columns) on `thread`, such as
    Steps.thread; all rows when it is unknown."""
    if thread is None or df.empty:
        return df
    keep = thread_mask(df, thread)
    return df if keep.all() else df[keep].reset_index(drop=True)


def thread_mask(df: pd.DataFrame, thread: Thread) -> np.ndarray:
    """Per row of `df` (with `host`, `plane` and `line_id` columns), whether it is on `thread`."""
    host, plane, line_id = thread
    return ((df["host"] == host) & (df["plane"] == plane) & (df["line_id"] == line_id)).to_numpy()


def present_values(col: pd.Series) -> list[str]:
    cats = col.cat.categories
    seen = np.zeros(len(cats) + 1, dtype=bool)
    seen[col.array.codes] = True  # no sort: a flag per category
    return [str(cats[c]) for c in np.flatnonzero(seen[:-1])]


def small_codes(n: int) -> np.dtype:
    """The narrowest signed integer dtype for category codes 0..n-1 and -1 (pandas' own rule),
    so code columns are built once at their final width instead of as int64 and narrowed."""
    for dtype in (np.int8, np.int16, np.int32):
        if n < np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int64)


def _categorical(codes: np.ndarray, categories: list) -> pd.Categorical:
    cats = pd.Index(categories, dtype=object) if not categories or isinstance(
        categories[0], str) else pd.Index(categories)
    return pd.Categorical.from_codes(codes, categories=cats)


# A column given as per-row values, or as (codes, values) so a million rows never become Python
# objects: codes index values, -1 for "missing" (a name the trace does not define).
Column = np.ndarray | tuple[np.ndarray, list]


def _intern(values: Column) -> pd.Categorical:
    """The column as a categorical; an absent code (-1) becomes "<unknown>"."""
    if not isinstance(values, tuple):
        return pd.Categorical(values)
    codes, names = values
    codes = np.asarray(codes)
    has_unknown = bool(len(codes)) and bool((codes < 0).any())
    if not has_unknown and all(a < b for a, b in zip(names, names[1:], strict=False)):
        # Already distinct and sorted (the xplane reader's codes): no per-row remapping.
        return _categorical(codes.astype(small_codes(len(names)), copy=False), list(names))
    uniq, inverse = np.unique(np.asarray(names, dtype=object), return_inverse=True)
    uniq = list(uniq)
    if has_unknown:
        uniq.append("<unknown>")
    # The last slot catches code -1: remap[-1] is "<unknown>" (or unused).
    remap = np.append(inverse, len(uniq) - 1).astype(small_codes(len(uniq)))
    return _categorical(remap[codes] if len(codes) else codes.astype(remap.dtype), uniq)


class EndTimes:
    """`start_ns + dur_ns` of any selection of an event table's rows (a slice, indices, a mask),
    computed for just those rows: the table has no end column."""

    def __init__(self, df: pd.DataFrame) -> None:
        self._start = df["start_ns"].to_numpy(np.int64)
        self._dur = df["dur_ns"].to_numpy(np.int64)

    def __getitem__(self, rows) -> np.ndarray:
        return self._start[rows] + self._dur[rows]


def with_end(df: pd.DataFrame) -> pd.DataFrame:
    """`df` (a small selection of events) with an `end_ns` column."""
    return df.assign(end_ns=df["start_ns"].to_numpy(np.int64) + df["dur_ns"].to_numpy(np.int64))


def build_events(
    *,
    host: str,
    plane: Column,
    line: Column,
    line_id: Column,
    name_codes: np.ndarray,
    names: list[str],
    start_ns: np.ndarray,
    dur_ns: np.ndarray,
    stats: dict[str, np.ndarray | tuple[np.ndarray, np.ndarray]],
) -> pd.DataFrame:
    """Assemble the table. `name_codes` index `names` (-1 = unknown name). A stat is a dense
    per-row array (-1 or None where absent) or (rows, values) for the rows that carry it."""
    n = len(start_ns)
    start_ns = np.asarray(start_ns, dtype=np.int64)
    dur_ns = np.asarray(dur_ns, dtype=np.int64)
    df = pd.DataFrame(
        {
            "host": _categorical(np.zeros(n, dtype=np.int8), [host]),
            "plane": _intern(plane),
            "line": _intern(line),
            "line_id": _intern(line_id),
            "name": _intern((name_codes, names)),
            "start_ns": start_ns,
            "dur_ns": dur_ns,
        },
        copy=False,  # the arrays are fresh: consolidating them would copy every column
    )
    for col in STAT_COLUMNS:
        rows, values = _sparse_stat(stats.get(col), col in TEXT_STATS)
        if col in TEXT_STATS:
            if not len(rows):
                continue  # absent: a column of "none" would still be a byte per event
            # Sorted as np.unique sorts (code points), without a fixed-width copy of every
            # value (1 s and 460 MB for 1M rendezvous keys).
            inv, uniq = pd.factorize(np.asarray(values, dtype=object), sort=True)
            if any(u.endswith("\x00") for u in uniq.tolist()):
                # The fixed-width copy dropped trailing NULs: the table keeps doing so.
                stripped = np.array([u.rstrip("\x00") for u in uniq.tolist()], dtype=object)
                inv, uniq = pd.factorize(stripped[inv], sort=True)
            codes = np.full(n, -1, dtype=small_codes(len(uniq)))
            codes[rows] = inv
            df[col] = _categorical(codes, list(uniq))
        else:
            df[col] = pd.arrays.SparseArray.from_indices(
                np.asarray(values, dtype=np.int64), indices=rows, length=n, fill_value=-1,
                dtype=np.int64)
    return add_derived(df)


def _sparse_stat(values, text: bool) -> tuple[np.ndarray, np.ndarray]:
    """(rows, values) of the rows that carry a stat, from either form build_events accepts."""
    if values is None:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object if text else np.int64)
    if isinstance(values, tuple):
        return values
    rows = np.flatnonzero(pd.notna(values) if text else values != -1)
    return rows, values[rows]


def present_stat(df: pd.DataFrame, col: str) -> tuple[np.ndarray, np.ndarray]:
    """(rows, values) of the events carrying stat `col` (value >= 0), in row order: a sparse
    column hands them over as stored, without a dense copy of the whole table."""
    values = df[col].array
    if isinstance(values, pd.arrays.SparseArray) and values.fill_value < 0:
        rows, values = values.sp_index.indices, values.sp_values
    else:
        values = stat(df, col)
        rows = np.arange(len(values))
    keep = values >= 0
    return rows[keep], values[keep]


def find_sorted(b: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per value of `a`, its position in the sorted array `b` and whether `b` holds it there: a
    binary search per value instead of np.isin's hash table over both (0.15 s for the row sets
    of a 6.8M-event trace)."""
    if not len(b):
        return np.zeros(len(a), dtype=np.intp), np.zeros(len(a), dtype=bool)
    pos = np.minimum(np.searchsorted(b, a), len(b) - 1)
    return pos, b[pos] == a


def in_sorted(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per value of `a`, whether the sorted array `b` holds it."""
    return find_sorted(b, a)[1]


def stat(df: pd.DataFrame, col: str) -> np.ndarray:
    """A stat column as a dense int64 array (-1 where absent)."""
    values = df[col].array
    if isinstance(values, pd.arrays.SparseArray):
        return values.to_numpy()
    return np.asarray(values, dtype=np.int64)


def add_derived(df: pd.DataFrame) -> pd.DataFrame:
    """`op_type` and `kind`, computed once per distinct (name, plane, line)."""
    if df.empty:
        df["op_type"] = pd.Categorical([])
        df["kind"] = pd.Categorical([], categories=KINDS)
        return df
    names = [*map(str, df["name"].cat.categories), "<unknown>"]  # last: code -1
    name_codes = df["name"].array.codes
    op_types = [op_type_of(n) for n in names[:-1]]
    op_uniq, op_inv = np.unique(np.asarray(op_types, dtype=object), return_inverse=True)
    # Lookup tables with one extra slot, so a row's -1 code reads the last one: no n-sized
    # np.where/np.maximum temporaries.
    op_map = np.append(op_inv, -1).astype(small_codes(len(op_uniq)))
    df["op_type"] = _categorical(op_map[name_codes], list(op_uniq))
    # Key = name × plane kind × line class; each key present is classified once.
    n_cls = len(LINE_CLASSES)
    on_device = np.array([is_device_plane(str(p)) for p in df["plane"].cat.categories] + [0],
                         dtype=np.int8)
    plane_role = on_device * np.int8(n_cls)
    line_role = np.array([LINE_CLASSES.index(line_class(str(x)))
                          for x in df["line"].cat.categories] + [n_cls - 1], dtype=np.int8)
    key_width = 2 * n_cls
    name_key = np.arange(len(names), dtype=np.int32) * key_width  # -1 codes: the last name
    plane_codes, line_codes = df["plane"].array.codes, df["line"].array.codes

    def keys(block: slice) -> np.ndarray:
        # A block at a time: a whole-table int32 key would be 4 bytes per event.
        return (name_key[name_codes[block]] + plane_role[plane_codes[block]]
                + line_role[line_codes[block]])

    seen = np.zeros(len(names) * key_width, dtype=bool)
    for block in chunks(len(df)):
        seen[keys(block)] = True
    table = np.full(len(seen), KINDS.index("other"), dtype=np.int8)
    all_ops = [*op_types, "<unknown>"]
    fetch_codes: set[int] = set()  # DataLoader fetches, found among the names that are waits
    for k in np.flatnonzero(seen):
        ni, c = divmod(int(k), key_width)
        device, cls = divmod(c, n_cls)
        table[k] = KINDS.index(classify(names[ni], all_ops[ni], bool(device), LINE_CLASSES[cls]))
        if table[k] == _INPUT_WAIT_KIND and LOADER_FETCH.match(names[ni]):
            fetch_codes.add(ni)
    kind = np.empty(len(df), dtype=np.int8)
    for block in chunks(len(df)):
        kind[block] = table[keys(block)]
    # CUDA API calls and the device work they issued carry a `correlation_id` (GPU traces only).
    rows, corr = present_stat(df, "correlation_id")
    if len(rows):
        device = on_device.astype(bool)[df["plane"].array.codes[rows]]
        _direct_copy_calls(df, kind, rows, corr, device)
        _mark_launches(df, kind, rows[~device])
    if fetch_codes:
        _mark_loader_work(df, kind, list(fetch_codes))
    df["kind"] = _categorical(kind, list(KINDS))
    return df


_HOST_OP, _LAUNCH_KIND = KINDS.index("host_op"), KINDS.index("launch")
_FRAMEWORK_KIND = KINDS.index("framework")
_SYNC_KIND = KINDS.index("sync")
_COPY_KINDS = tuple(KINDS.index(k) for k in ("h2d", "d2h", "d2d"))
_H2D_KIND, _D2H_KIND, _D2D_KIND = _COPY_KINDS
# The transfer of an iterator's output to the device that runs the step (not the `_Host*`
# variants: those keep a tensor in host memory on both ends).
_ITERATOR_TRANSFER = re.compile(
    r"^(?:[\w/]*/)?(?:IteratorGetNext|IteratorGetNextAsOptional|MultiDeviceIteratorGetNextFromShard)"
    r"(?:_\d+)?/_\d+:_(?:Send|Recv)$")
_RELABELED = (_HOST_OP, KINDS.index("other"))


def _direct_copy_calls(df: pd.DataFrame, kind: np.ndarray, rows: np.ndarray, corr: np.ndarray,
                       device: np.ndarray) -> None:
    """Relabel, in `kind`, host copy calls by the device copy CUPTI correlates with each: the
    runtime API's `cudaMemcpyAsync` does not name its direction, the device copy does (`Memcpy
    DtoH (Device -> Pageable)`); and a call that was still waiting when its copy began, for most
    of its time, was the host blocked until the stream reached the copy (a copy to pageable
    memory, `.item()`, `.cpu()`): `sync`, not copy time (docs/trace-signals.md, "PyTorch GPU
    traces": copy calls). Calls without a correlated device copy keep their name's kind.
    `rows`, `corr`: the events with a correlation id and the id; `device`: each on a device?"""
    copy = np.isin(kind[rows], _COPY_KINDS)
    rows, corr, device = rows[copy], corr[copy], device[copy]
    # One file at a time (build_events runs per trace file): correlation ids are unique in it.
    calls, call_corr = rows[~device], corr[~device]
    order = np.argsort(corr[device], kind="stable")
    copies, copy_corr = rows[device][order], corr[device][order]
    pos, found = find_sorted(copy_corr, call_corr)
    call, dev = calls[found], copies[pos[found]]
    starts, ends = df["start_ns"].to_numpy(), EndTimes(df)
    kind[call] = kind[dev]
    waited = ((ends[call] > starts[dev])
              & (2 * (starts[dev] - starts[call]) > ends[call] - starts[call]))
    kind[call[waited]] = _SYNC_KIND


def _mark_launches(df: pd.DataFrame, kind: np.ndarray, rows: np.ndarray) -> None:
    """Relabel, in `kind`, the host side of device work as launch time: host events carrying a
    `correlation_id` are CUDA API calls (CUPTI links each to its kernel or copy, whatever the
    call is named: TF 2.4 names a launch after its kernel), and an op event (TF's, or PyTorch's
    aten ops) around such a call on the same thread is a device op being dispatched, not host
    compute (docs/trace-signals.md, "GPU traces"); a TF send or receive that is mostly a
    host-device copy call is that copy. `rows`: the host events with a correlation id."""
    if not len(rows):
        return
    planes = list(df["plane"].cat.categories)
    # TF 2.5+ writes CUDA API calls on their own plane, one line per thread keyed by its id as
    # the `/host:CPU` plane keys TraceMe lines (xprof merges the two when it converts): a call
    # and the op that makes it share a line id across the two planes.
    same = np.arange(len(planes) + 1, dtype=np.int64)
    if CUPTI_PLANE in planes and HOST_PLANE in planes:
        same[planes.index(CUPTI_PLANE)] = planes.index(HOST_PLANE)
    kind[rows[np.isin(kind[rows], _RELABELED)]] = _LAUNCH_KIND
    call_thread = _thread_keys(df, same, rows)
    # TF's `_Send`/`_Recv` ops are d2d by their type (between logical CPU devices they are). On a
    # GPU trace, the iterator's transfers carry the batch to the device (the labels' send waits
    # beside the images' copy holding no call of its own), and one that is mostly a host-device
    # copy call is that copy: as d2d they outranked the copy in the breakdown (docs/trace-
    # signals.md, "Input copies inside the step").
    names = df["name"].cat.categories
    name_codes = df["name"].array.codes
    send_recv = np.array([bool(_SEND_RECV.match(str(t))) for t in df["op_type"].cat.categories]
                         + [False])
    sends = np.flatnonzero(kind == _D2D_KIND)
    sends = sends[send_recv[df["op_type"].array.codes[sends]]]
    batch_codes = [c for c in np.unique(name_codes[sends]).tolist()
                   if c >= 0 and _ITERATOR_TRANSFER.match(str(names[c]))]
    kind[sends[np.isin(name_codes[sends], batch_codes)]] = _H2D_KIND
    ops = np.flatnonzero(kind == _HOST_OP)
    ops = np.concatenate([ops, sends[kind[sends] == _D2D_KIND]])
    op_thread = _thread_keys(df, same, ops)
    keep = np.isin(op_thread, call_thread)
    ops, op_thread = ops[keep], op_thread[keep]
    if not len(ops):
        return
    starts, ends = df["start_ns"].to_numpy(), EndTimes(df)
    torch_op = np.array([is_torch_op(str(n)) for n in names] + [False])
    for t in np.unique(op_thread).tolist():
        op = ops[op_thread == t]
        calls = rows[call_thread == t]
        calls = calls[np.argsort(starts[calls], kind="stable")]
        # A thread makes one API call at a time, so of the calls starting inside an op the first
        # ends first: the op holds a call iff that one ends inside it. Every level of a nest of
        # ops (PyTorch's aten::linear > aten::addmm) is tested on its own.
        first = np.searchsorted(starts[calls], starts[op], side="left")
        inside = first < len(calls)
        holds = np.zeros(len(op), dtype=bool)
        holds[inside] = ends[calls[first[inside]]] <= ends[op[inside]]
        # A send or receive is a copy only when the copy call is most of it: the rest of a
        # `_Recv` is waiting for its peer (another worker, a parameter server), not copying.
        send = kind[op] == _D2D_KIND
        s_op, held = op[send & holds], calls[first[send & holds]]
        copy = (np.isin(kind[held], (_H2D_KIND, _D2H_KIND))
                & (2 * (ends[held] - starts[held]) > ends[s_op] - starts[s_op]))
        kind[s_op[copy]] = kind[held[copy]]
        op, first, holds = op[~send], first[~send], holds[~send]
        # An op that spends most of its time in calls waiting for the device (aten::item's copy
        # to pageable memory; aten::nonzero's launch, then its blocking copy of the count) is
        # that wait, not a dispatch. The calls do not overlap: their waits add up.
        waits = np.where(kind[calls] == _SYNC_KIND, ends[calls] - starts[calls], 0)
        waited = np.concatenate(([0], np.cumsum(waits)))
        last = np.searchsorted(starts[calls], ends[op], side="left")
        mostly_wait = 2 * (waited[last] - waited[first]) > ends[op] - starts[op]
        kind[op[holds]] = np.where(mostly_wait[holds], _SYNC_KIND, _LAUNCH_KIND)
        # A PyTorch op that launches nothing on a launching thread is bookkeeping around device
        # tensors (view, empty, narrow, as_strided...): dispatch cost, not host compute. TF ops
        # stay: a host-placed TF op there is real CPU work.
        idle = op[~holds]
        kind[idle[torch_op[name_codes[idle]]]] = _FRAMEWORK_KIND


_INPUT_WAIT_KIND = KINDS.index("input_wait")
_LOADER_NESTED = (_HOST_OP, _FRAMEWORK_KIND, KINDS.index("other"))


def _mark_loader_work(df: pd.DataFrame, kind: np.ndarray, fetch_codes: list[int]) -> None:
    """Relabel, in `kind`, the host work nested in a PyTorch DataLoader fetch on the fetching
    thread as the wait it is part of: with num_workers=0 the training thread loads the batch
    itself (`_SingleProcessDataLoaderIter.__next__` holding the transforms' and the collate's
    aten ops), and the step waits for all of it; as host compute those ops outranked the wait
    in the breakdown (docs/trace-signals.md, "PyTorch DataLoader"). Launches and copies inside
    keep their kinds. `fetch_codes`: the name codes of the fetches."""
    fetch = np.flatnonzero(np.isin(df["name"].array.codes, fetch_codes))
    # Only the fetches that are waits: Kineto's copy of an annotation on a GPU line is not one.
    fetch = fetch[kind[fetch] == _INPUT_WAIT_KIND]
    if not len(fetch):
        return
    planes = np.arange(len(df["plane"].cat.categories) + 1)
    fetch_thread = _thread_keys(df, planes, fetch)
    # Candidates: the nested kinds on the planes that fetch (PyTorch's host plane).
    cand = np.flatnonzero(np.isin(kind, _LOADER_NESTED)
                          & np.isin(df["plane"].array.codes, df["plane"].array.codes[fetch]))
    cand_thread = _thread_keys(df, planes, cand)
    starts, ends = df["start_ns"].to_numpy(), EndTimes(df)
    for t in np.unique(fetch_thread).tolist():
        f = fetch[fetch_thread == t]
        f = f[np.argsort(starts[f], kind="stable")]
        # The latest end of the fetches started so far: an event starting after fetch i and
        # ending by it lies inside one of them, even where fetches overlap.
        fs, fe = starts[f], np.maximum.accumulate(ends[f])
        rows = cand[cand_thread == t]
        i = np.searchsorted(fs, starts[rows], side="right") - 1
        inside = (i >= 0) & (ends[rows] <= fe[np.maximum(i, 0)])
        kind[rows[inside]] = _INPUT_WAIT_KIND


def _thread_keys(df: pd.DataFrame, plane_map: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The thread of each of `rows` as one (plane, line id) code: line names repeat across
    threads. One trace file is classified at a time (build_events), so thread ids never meet
    another process's. `plane_map`: plane code -> the plane whose threads it shares (one extra
    slot for code -1)."""
    width = len(df["line_id"].cat.categories) + 1
    return (plane_map[df["plane"].array.codes[rows]].astype(np.int64) * width
            + df["line_id"].array.codes[rows])


def empty_events() -> pd.DataFrame:
    return build_events(
        host="", plane=np.array([], dtype=object), line=np.array([], dtype=object),
        line_id=np.array([], dtype=np.int64), name_codes=np.array([], dtype=np.int64), names=[],
        start_ns=np.array([], dtype=np.int64), dur_ns=np.array([], dtype=np.int64), stats={},
    )
