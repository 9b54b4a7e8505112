"""Find profile runs in a TensorBoard logdir and load one into the event table.

Accepted inputs: a logdir (runs under `plugins/profile/<run>/`), one run folder, or one trace file.
A run folder holds `<host>.xplane.pb` files (several hosts are merged on their wall clocks), or
Chrome trace JSON (`*.trace.json.gz`, `*.json`), plus optional sampler and metadata files.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from analyzers.events import empty_events
from analyzers.host_clocks import describe, read_offsets, shift_hosts
from analyzers.ingest.chrome_trace import NotATrace, read_chrome_trace
from analyzers.ingest.hlo import HloOp
from analyzers.ingest.kineto_header import KinetoHeader, kineto_header
from analyzers.ingest.sampler import (
    OTHERS_COLUMNS,
    PROCESS_COLUMNS,
    THREAD_COLUMNS,
    read_sampler_file,
)
from analyzers.ingest.xplane import (
    SLOW_DECODER_WARNING,
    compiled_decoder_built,
    read_gzipped_xplane,
    read_xplane,
)
from analyzers.machines import one_machine
from recadvisor.capture.layout import OTHERS_SUFFIX, PROCESS_SUFFIX, THREADS_SUFFIX, XPLANE_SUFFIX
from recadvisor.capture.metadata import METADATA_FILE

# Above this size the protobuf fallback's slowness is worth a warning (~1 s per 4 MB).
SLOW_DECODER_BYTES = 4 << 20

JSON_SUFFIXES = (".trace.json.gz", ".trace.json", ".pt.trace.json", ".json.gz", ".json")
# What a file's name ends with after its host's name, longest first.
# A gzipped xplane is read when named directly (`recadvisor analyze profile.xplane.pb.gz`), not
# looked for in folders: a run folder holding both would count its trace twice.
GZ_XPLANE_SUFFIX = XPLANE_SUFFIX + ".gz"
HOST_SUFFIXES = (GZ_XPLANE_SUFFIX, XPLANE_SUFFIX, ".pt.trace.json.gz", ".pt.trace.json",
                 *JSON_SUFFIXES)


@dataclass
class RunData:
    name: str
    run_dir: Path
    events: pd.DataFrame
    t0_unix_ns: int
    hosts: list[str]
    trace_files: list[Path]
    threads: pd.DataFrame | None = None
    process: pd.DataFrame | None = None
    others: pd.DataFrame | None = None  # the machine's other processes (`.others.parquet`)
    metadata: dict | None = None
    warnings: list[str] = field(default_factory=list)
    # host → the machine it ran on, where its trace records one (PyTorch's `host_name`).
    machines: dict[str, str] = field(default_factory=dict)
    # The ranks of the PyTorch job the traces come from (`distributedInfo`), when recorded.
    world_size: int | None = None
    # (chosen, count): the PyTorch profiling cycle read, from 1, of a folder holding several.
    cycle: tuple[int, int] | None = None
    # host -> ns added to its times (and its sampler's) to put them on the reference host's
    # clock, for hosts whose clocks disagree (analyzers/host_clocks.py).
    clock_offsets: dict[str, int] = field(default_factory=dict)
    # GPU -> its compute capability (major, minor), where the trace records it: Kineto's
    # `deviceProperties` (keyed by the GPU's name) or the xplane device planes' `compute_cap_*`
    # stats (keyed by the plane).
    gpus: dict[str, tuple[int, int]] = field(default_factory=dict)
    # XLA thunk name -> the HLO instruction it runs, from the xplanes' saved modules
    # (analyzers/ingest/hlo.py); a name the hosts' modules disagree on is left out.
    hlo_ops: dict[str, HloOp] = field(default_factory=dict)


def _trace_files(folder: Path) -> list[Path]:
    xplanes = sorted(folder.glob(f"*{XPLANE_SUFFIX}"))
    if xplanes:
        return xplanes
    return sorted(
        p for p in folder.iterdir()
        if p.is_file() and p.name.endswith(JSON_SUFFIXES) and p.name != METADATA_FILE
    )


# Trace names that make a folder a run folder (`*.pt.trace.json` included): plain `*.json` is
# left out, as tuning outputs and metadata (summary.json, recadvisor_run.json) are JSON too,
# except the TF1 timelines Estimator's ProfilerHook names `timeline-<global step>.json`.
TIMELINE_PATTERNS = ("timeline-*.json", "timeline-*.json.gz")
WALK_PATTERNS = (f"*{XPLANE_SUFFIX}", "*.trace.json", "*.trace.json.gz", *TIMELINE_PATTERNS)
SKIPPED_FOLDERS = ("site-packages", "node_modules")


def find_runs(path: Path) -> list[Path]:
    """Run folders (or single trace files) under `path`, oldest first."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    if path.is_file():
        return [path]
    if _holds(path, [p for p in WALK_PATTERNS if p not in TIMELINE_PATTERNS]):
        return [path]
    root = path / "plugins" / "profile"
    runs = [p for p in root.iterdir() if p.is_dir() and _trace_files(p)] if root.is_dir() else []
    # A model_dir with profiler runs and ProfilerHook timelines: the runs, as TensorBoard shows.
    if not runs and _holds(path, TIMELINE_PATTERNS):
        return [path]
    # A folder of logdirs, or a nonstandard layout: look deeper.
    runs = sorted(runs, key=lambda p: (p.name, str(p))) or walk_runs(path)
    if runs:
        return runs
    # A folder whose only JSON is plain `*.json` is a run only when nothing deeper is one:
    # `recadvisor analyze TUNE_OUT` opens its profiles, not its summary.json.
    if _trace_files(path):
        return [path]
    raise ValueError(f"{path}: no profile runs (no *.xplane.pb or trace JSON) found")


def _holds(folder: Path, patterns) -> bool:
    return any(next(folder.glob(pattern), None) for pattern in patterns)


def walk_runs(root: Path) -> list[Path]:
    """Every run folder at any depth under `root` (skipping hidden folders and installed
    packages), oldest first: for tools that browse a tree of logdirs rather than open one."""
    found = {f.parent for f in walk_files(root, WALK_PATTERNS) if f.is_file()}
    return sorted(found, key=lambda p: (p.name, str(p)))


def walk_files(root: Path, patterns: tuple[str, ...]) -> Iterator[Path]:
    """Files under `root` whose name matches one of `patterns`, at any depth, in one walk that
    never enters hidden folders (.venv, .git), site-packages or node_modules: a dashboard root
    holding a virtualenv used to be walked through all of it (once per pattern) and filtered
    after. Symlinked folders are not entered, as with `Path.rglob`."""
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders
                               if not d.startswith(".") and d not in SKIPPED_FOLDERS)
        for name in files:
            if any(fnmatch.fnmatchcase(name, p) for p in patterns):
                yield Path(folder) / name


def select_run(path: Path, run: str | None = None) -> Path:
    runs = find_runs(path)
    if run is None:
        return runs[-1]
    for r in runs:
        if r.name == run or str(r) == run:
            return r
    names = ", ".join(r.name for r in runs)
    raise ValueError(f"{path}: no run named {run!r} (runs: {names})")


# The PyTorch profiler's tensorboard_trace_handler names each trace
# `<worker>.<timestamp>.pt.trace.json[.gz]` (worker = `<hostname>_<pid>` unless given; the
# timestamp in ms, or ns in newer releases), and writes one file per profiling cycle of a
# `schedule(..., repeat=n)` into the same folder (docs/trace-signals.md, "PyTorch cycles").
KINETO_NAME = re.compile(r"^(?P<worker>.+)\.(?P<stamp>\d{10,20})\.pt\.trace\.json(\.gz)?$")


# `--run cycle:K` (or `RUN:cycle:K`): each worker's K-th profiling cycle, 1 the first, -1 the last.
CYCLE_SPEC = re.compile(r"^(?:(?P<run>.+?)[/:])?cycle[:= ]?(?P<k>-?\d+)$")


@dataclass
class Cycles:
    files: list[Path]  # the files to read: one cycle of each worker, and files of other names
    left_out: int  # the workers' other cycles
    count: int  # the most cycles any worker has (1 when none has several)
    chosen: int  # the cycle read, from 1


def choose_cycles(files: list[Path], headers: dict[Path, KinetoHeader] | None = None,
                  cycle: int = -1) -> Cycles:
    """Each PyTorch worker's `cycle`-th trace (from 1; negative counts from the last) when a
    folder holds several per worker. Files of other names are kept as they are. A worker is its
    name and, where its header records one, its rank: ranks given one `worker_name` are not
    cycles of one process. The workers' cycles are told apart by order, not by time: the ranks
    of one cycle write their files milliseconds to seconds apart."""
    headers = headers or {}
    cycles: dict[tuple[str, int | None], list[tuple[int, Path]]] = {}
    kept = []
    for f in files:
        m = KINETO_NAME.match(f.name)
        if m is None:
            kept.append(f)
        else:
            rank = headers[f].rank if f in headers else None
            cycles.setdefault((m["worker"], rank), []).append((int(m["stamp"]), f))
    count = max((len(c) for c in cycles.values()), default=1)
    if cycle == 0 or abs(cycle) > count:
        raise ValueError(f"no profiling cycle {cycle}: the workers have {count} (1 to {count}, "
                         "or -1 for the last)")
    for (worker, _), c in cycles.items():
        if abs(cycle) > len(c):
            raise ValueError(f"no profiling cycle {cycle} of worker {worker}: it has {len(c)}")
        kept.append(sorted(c)[cycle if cycle < 0 else cycle - 1][1])
    left_out = sum(len(c) - 1 for c in cycles.values())
    # Ranks in their order (unranked files first, by name): the hosts are listed as read.
    kept.sort(key=lambda f: (f.parent, _rank(headers.get(f)), f.name))
    return Cycles(kept, left_out, count, cycle if cycle > 0 else count + 1 + cycle)


def _run_and_cycle(path: Path, run: str | None) -> tuple[Path, int]:
    """The run `--run` names, and which PyTorch profiling cycle to read: a name that is no
    run's may be `[RUN:]cycle:K`."""
    m = CYCLE_SPEC.match(run) if run is not None else None
    try:
        return select_run(path, run), -1
    except ValueError:
        if m is None:
            raise
    return select_run(path, m["run"]), int(m["k"])


def _rank(header: KinetoHeader | None) -> int:
    return -1 if header is None or header.rank is None else header.rank


def _host_of(file: Path, header: KinetoHeader | None = None) -> str:
    """The file's worker name; for one rank of several, the rank first unless the name says it
    (`tensorboard_trace_handler` names a worker `<hostname>_<pid>`, which no report reader can
    map to a rank)."""
    m = KINETO_NAME.match(file.name)
    if m is not None:
        name = m["worker"]
    else:
        name = next((file.name[: -len(s)] or "host" for s in HOST_SUFFIXES
                     if file.name.endswith(s)), file.stem)
    if header is None or header.rank is None or (header.world_size or 0) < 2:
        return name
    if re.search(rf"(?i)rank[-_. ]?{header.rank}(?!\d)", name):
        return name
    return f"rank {header.rank} ({name})"


def load_run(path: Path, run: str | None = None) -> RunData:
    target, cycle = _run_and_cycle(path, run)
    files = [target] if target.is_file() else _trace_files(target)
    run_dir = target.parent if target.is_file() else target
    parts: list[tuple[pd.DataFrame, int]] = []
    hosts = []
    machines: dict[str, str] = {}
    world_sizes = []
    gpus: dict[str, tuple[int, int]] = {}
    hlo_ops: dict[str, HloOp] = {}
    clashes: set[str] = set()
    warnings: list[str] = []
    headers = {f: h for f in files
               if not f.name.endswith((XPLANE_SUFFIX, GZ_XPLANE_SUFFIX))
               and (h := kineto_header(f)) is not None}
    chosen = choose_cycles(files, headers, cycle)
    files = chosen.files
    if chosen.left_out:
        # Merged, the cycles would read as workers (or one window with a long idle gap).
        warnings.append(
            f"{chosen.left_out} other PyTorch profiling cycle(s) in {run_dir.name} left out: "
            f"cycle {chosen.chosen} of {chosen.count} of each worker is analyzed (--run cycle:K "
            f"picks another, K from 1 to {chosen.count})")
    for f in files:
        host = _host_of(f, headers.get(f))
        if f.name.endswith((XPLANE_SUFFIX, GZ_XPLANE_SUFFIX)):
            if (SLOW_DECODER_WARNING not in warnings and not compiled_decoder_built()
                    and f.stat().st_size > SLOW_DECODER_BYTES):
                warnings.append(SLOW_DECODER_WARNING)
            read = read_xplane if f.name.endswith(XPLANE_SUFFIX) else read_gzipped_xplane
            x = read(f, host)
            parts.append((x.events, x.t0_unix_ns))
            gpus.update(_plane_capabilities(x.plane_stats))
            for name, op in x.hlo_ops.items():
                if hlo_ops.setdefault(name, op) != op:
                    clashes.add(name)
        else:
            try:
                parts.append(read_chrome_trace(f, host, warnings))
            except NotATrace:
                # A folder of plain *.json traces (TF1 timelines in a model_dir) may hold other
                # JSON too (hyperparameters, configs): left out when a trace is beside it.
                if len(files) == 1:
                    raise
                warnings.append(f"{f.name}: not a trace (no traceEvents list): left out")
                continue
        # A TF1 timeline names its host by the job and task in its device names: every
        # timeline-<step>.json of one worker is one host.
        got = parts[-1][0]["host"]
        hosts.append(str(got.iloc[0]) if len(got) else host)
        if (header := headers.get(f)) is not None:
            if header.machine:
                machines[hosts[-1]] = header.machine
            if header.world_size:
                world_sizes.append(header.world_size)
            gpus.update({name or f"GPU {i}": (major, minor)
                         for i, (name, major, minor) in enumerate(header.gpus)})
    if not parts:
        raise ValueError(f"{run_dir}: none of its JSON files is a trace (no traceEvents list)")
    t0 = min((t for _, t in parts if t), default=0)
    frames = []
    for events, t_host in parts:
        if t_host and t0:
            events = events.assign(start_ns=events["start_ns"] + (t_host - t0))
        frames.append(events)
    events = _concat(frames)
    offsets = {}
    distinct = list(dict.fromkeys(hosts))
    # Processes of one machine that all record its wall clock share it: nothing to line up.
    shared = all(t for _, t in parts) and one_machine(distinct, machines) is not None
    if len(distinct) > 1 and not shared:
        clocked = {h for h, (_, t) in zip(hosts, parts, strict=True) if t}
        reference, found = read_offsets(events, distinct, clocked)
        if found:
            events = shift_hosts(events, found)
            offsets = {o.host: o.offset_ns for o in found if o.taken}
            warnings.append(describe(found, reference))
    events.attrs["t0_unix_ns"] = t0
    data = RunData(name=run_dir.name if not target.is_file() else target.name, run_dir=run_dir,
                   events=events, t0_unix_ns=t0, hosts=hosts, trace_files=files,
                   warnings=warnings, machines=machines,
                   world_size=max(world_sizes, default=None),
                   cycle=(chosen.chosen, chosen.count) if chosen.count > 1 else None,
                   clock_offsets=offsets, gpus=gpus,
                   hlo_ops={k: v for k, v in hlo_ops.items() if k not in clashes})
    _attach_side_files(data, run_dir)
    return data


def gpu_model(name: str) -> str:
    """The GPU model a `RunData.gpus` key names: Kineto's device name, or "" for an xplane
    device plane (`/device:GPU:0`), which records no model."""
    return "" if name.startswith("/device:") else name


def _plane_capabilities(plane_stats: dict[str, dict[str, object]]
                        ) -> dict[str, tuple[int, int]]:
    out = {}
    for plane, stats in plane_stats.items():
        major, minor = stats.get("compute_cap_major"), stats.get("compute_cap_minor", 0)
        if isinstance(major, int) and isinstance(minor, int) and major > 0:
            out[plane] = (major, minor)
    return out


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return empty_events()
    if len(frames) == 1:
        return frames[0]
    from pandas.api.types import union_categoricals

    out = {}
    columns = list(frames[0].columns)
    columns += [c for f in frames[1:] for c in f.columns if c not in columns]
    for col in columns:
        if isinstance(next(f for f in frames if col in f)[col].dtype, pd.CategoricalDtype):
            # A text stat some files lack (events.py) is all missing there.
            parts = [f[col].array if col in f else
                     pd.Categorical.from_codes(np.full(len(f), -1, np.int8), categories=[])
                     for f in frames]
            out[col] = union_categoricals(parts, ignore_order=True)
        else:
            out[col] = pd.concat([f[col] for f in frames], ignore_index=True)
    return pd.DataFrame(out).sort_values("start_ns", kind="stable", ignore_index=True)


def _attach_side_files(data: RunData, run_dir: Path) -> None:
    meta_path = run_dir / METADATA_FILE
    if meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text())
            data.metadata = meta if isinstance(meta, dict) else None
        except (OSError, json.JSONDecodeError) as e:
            data.warnings.append(f"run metadata {meta_path.name} unreadable: {e}")
    threads = sorted(run_dir.glob(f"*{THREADS_SUFFIX}"))
    process = sorted(run_dir.glob(f"*{PROCESS_SUFFIX}"))
    others = sorted(run_dir.glob(f"*{OTHERS_SUFFIX}"))
    if not data.t0_unix_ns and (threads or process):
        data.warnings.append("trace has no wall-clock origin: sampler data cannot be aligned")
        return
    try:
        if threads:
            data.threads = _sampled(threads, THREADS_SUFFIX, THREAD_COLUMNS, data.t0_unix_ns,
                                    data.clock_offsets)
        if process:
            data.process = _sampled(process, PROCESS_SUFFIX, PROCESS_COLUMNS, data.t0_unix_ns,
                                    data.clock_offsets)
        if others:
            data.others = _sampled(others, OTHERS_SUFFIX, OTHERS_COLUMNS, data.t0_unix_ns,
                                   data.clock_offsets)
    except ValueError as e:
        data.warnings.append(str(e))


def _sampled(files: list[Path], suffix: str, required: tuple[str, ...],
             t0_unix_ns: int, offsets: dict[str, int]) -> pd.DataFrame:
    """One kind of sampler file of every host, with the `host` each came from (its file name):
    machines' thread and process ids repeat (docs/trace-signals.md, "Several hosts"). A
    sampler is on its machine's clock: it moves with that host's trace."""
    frames = [read_sampler_file(p, required, t0_unix_ns) for p in files]
    hosts = [p.name[: -len(suffix)] for p in files]
    for frame, host in zip(frames, hosts, strict=True):
        if host in offsets:
            frame["t_ns"] += offsets[host]
    out = pd.concat(frames, ignore_index=True)
    out["host"] = pd.Categorical(np.repeat(hosts, [len(f) for f in frames]))
    return out
