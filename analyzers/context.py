"""Everything detectors read: the step breakdown, the main (step-driving) thread, device facts and
the optional sampler/metadata, computed once per run; and the events of a few kinds clipped to the
steps, built on request (a clipped copy of the whole table would cost more than the table)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from analyzers.events import (
    EndTimes,
    Thread,
    cat_mask,
    chunks,
    is_device_plane,
    is_torch_op,
    present_values,
)
from analyzers.ingest.logdir import RunData
from analyzers.machines import one_machine
from analyzers.scaling import metadata_device_count
from analyzers.steps import Steps, clip_to_steps, covered_outside, step_breakdown

_CPU_DEVICE = re.compile(r"device:CPU:(\d+)")
# MirroredStrategy names replica i's ops `replica_i/...` (replica 0 has no prefix) and its
# multi-device iterator reads `GetNextFromShard<i>` (docs/trace-signals.md, "Devices").
_REPLICA = re.compile(r"(?:^|/)replica_(\d+)/|^GetNextFromShard(\d+)$")
# What Context.in_steps can give: event columns, then the step index and the clipped times.
IN_STEP_COLUMNS = ("host", "plane", "line", "line_id", "name", "op_type", "kind",
                   "step_idx", "start_ns", "end_ns", "dur_ns")
_CLIPPED = ("step_idx", "start_ns", "end_ns", "dur_ns")
# A rendezvous key's source and destination devices (docs/trace-signals.md, "Parameter servers").
_KEY_TASKS = re.compile(r"^/job:([^/;]+)/replica:\d+/task:(\d+)/[^;]*;[^;]*;"
                        r"/job:([^/;]+)/replica:\d+/task:(\d+)/")
PS_JOB = "ps"
# Context._placement codes for events not held whole by one step.
OUTSIDE, CROSSES = -1, -2


@dataclass
class Context:
    run: RunData
    steps: Steps

    _memo: dict[str, Any] = field(default_factory=dict)

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """Signals several detectors share are computed once per run."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    @classmethod
    def build(cls, run: RunData) -> Context:
        return cls(run=run, steps=step_breakdown(run.events))

    @property
    def events(self) -> pd.DataFrame:
        return self.run.events

    @cached_property
    def fractions(self) -> dict[str, float]:
        return self.steps.fractions()

    @cached_property
    def total_step_ns(self) -> int:
        return int(self.steps.table["dur_ns"].sum())

    @property
    def n_steps(self) -> int:
        return len(self.steps.table)

    def in_steps(self, kinds: Iterable[str] | None = None, *,
                 line: str | Callable[[str], object] | None = None,
                 name: Callable[[str], object] | None = None,
                 plane: Callable[[str], object] | None = None,
                 thread: Thread | None = None,
                 host: str | None = None,
                 columns: Iterable[str] = IN_STEP_COLUMNS) -> pd.DataFrame:
        """The events of `kinds`, on `line` (a name, or a test of the name), `thread` ((host,
        plane, line id) such as Steps.thread: several threads share the line name `python`) and
        `host`, whose name and plane pass `name` and `plane` (each filter only when given),
        clipped to the step windows: one row per part of an event inside a step (an event
        spanning two steps appears twice, each part with its clipped times), in event order.
        Only the asked `columns` (of IN_STEP_COLUMNS) are built: detectors ask for a few kinds
        and columns, so no clipped copy of the whole table is ever made."""
        ev = self.events
        columns = list(columns)
        tests = [("kind", None if kinds is None else set(kinds).__contains__),
                 ("line", line.__eq__ if isinstance(line, str) else line), ("name", name),
                 ("plane", plane), ("host", None if host is None else host.__eq__)]
        if thread is not None:
            host_name, plane_name, line_id = thread
            tests += [("host", host_name.__eq__), ("plane", plane_name.__eq__),
                      ("line_id", str(line_id).__eq__)]
        mask = None
        for col, keep in tests:
            if keep is not None:
                rows = cat_mask(ev[col], keep)
                mask = rows if mask is None else mask & rows
        if mask is None:
            mask = np.ones(len(ev), dtype=bool)
        starts = ev["start_ns"].to_numpy(np.int64)
        ends = EndTimes(ev)
        place = self._placement
        # Categorical columns travel as their codes (views, no copy).
        taken = {c: _values(ev[c]) for c in columns if c not in _CLIPPED}
        # Filled block by block: one part per selected event unless some span several steps.
        out = {c: np.empty(int(mask.sum()), dtype=taken[c].dtype if c in taken else np.int64)
               for c in columns}
        n = 0
        for block in chunks(len(ev)):
            rows = np.flatnonzero(mask[block]) + block.start
            step = place[rows]
            whole = step >= 0
            if whole.all():
                s, e = starts[rows], ends[rows]
            else:
                rows, step, s, e = self._clip_rows(rows, step, whole, starts, ends)
            part = {"step_idx": step, "start_ns": s, "end_ns": e, "dur_ns": e - s}
            for c in columns:
                if n + len(rows) > len(out[c]):
                    out[c] = _grown(out[c], n + len(rows))
                out[c][n:n + len(rows)] = part[c] if c in part else taken[c][rows]
            n += len(rows)
        df = {c: out[c][:n] for c in columns}
        for c in taken:
            if isinstance(ev[c].dtype, pd.CategoricalDtype):
                df[c] = pd.Categorical.from_codes(df[c], dtype=ev[c].dtype, validate=False)
        return pd.DataFrame(df, columns=columns, copy=False)

    @cached_property
    def windows(self) -> tuple[np.ndarray, np.ndarray]:
        """The step windows' (starts, ends), ns."""
        return (self.steps.table["start_ns"].to_numpy(np.int64),
                self.steps.table["end_ns"].to_numpy(np.int64))

    @cached_property
    def _placement(self) -> np.ndarray:
        """Per event, the step that holds it whole; OUTSIDE when it lies before the first step
        or after the last, or has no length (in_steps never returns such parts); CROSSES for the
        rest, which in_steps clips (events crossing a step boundary, and any in a gap between
        steps, which clipping drops). Computed once, so in_steps gathers instead of searching
        and clipping every row."""
        ev = self.events
        w_start, w_end = self.windows
        place = np.full(len(ev), OUTSIDE, dtype=np.min_scalar_type(-max(len(w_start), 2)))
        if not len(w_start):
            return place
        starts = ev["start_ns"].to_numpy(np.int64)
        ends = EndTimes(ev)
        for block in chunks(len(ev)):
            s, e = starts[block], ends[block]
            k = np.searchsorted(w_start, s, side="right") - 1
            kk = np.maximum(k, 0)
            whole = (k >= 0) & (e <= w_end[kk])  # steps never overlap (steps._chain)
            # clip_to_steps keeps a part only if it has a duration; whole events keep theirs.
            none = (whole & (e <= s)) | (e <= w_start[0]) | (s >= w_end[-1])
            place[block] = np.where(whole & (e > s), k, np.where(none, OUTSIDE, CROSSES))
        return place

    def _clip_rows(self, rows: np.ndarray, step: np.ndarray, whole: np.ndarray,
                   starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, ...]:
        """in_steps' rows with their step and clipped times, the events that are not whole in a
        step clipped part by part, all in event order (an event's parts in step order)."""
        crossing = rows[step == CROSSES]
        kept = rows[whole]
        if not len(crossing):  # only events outside every step were left out: order holds
            return kept, step[whole], starts[kept], ends[kept]
        idx, c_step, c_s, c_e = clip_to_steps(starts[crossing], ends[crossing], *self.windows)
        src = np.concatenate((kept, crossing[idx]))
        order = np.argsort(src, kind="stable")
        parts = (src, np.concatenate((step[whole], c_step)),
                 np.concatenate((starts[kept], c_s)), np.concatenate((ends[kept], c_e)))
        return tuple(a[order] for a in parts)

    def compiled_ops(self, name: Callable[[str], object],
                     columns: Iterable[str] = IN_STEP_COLUMNS) -> pd.DataFrame:
        """`in_steps` rows of XLA thunks whose TF op (from the compiled modules the profiler
        saved, `RunData.hlo_ops`) passes `name`, with that TF op (`op_name:op_type`) as their
        name: what a detector keyed on TF op names reads of a compiled step (docs/trace-signals.md,
        "One-hot features multiplied")."""
        hlo = self.run.hlo_ops
        columns = list(columns)
        if not hlo or "name" not in columns:
            return pd.DataFrame(columns=columns)
        rows = self.in_steps(name=lambda n: n in hlo and hlo[n].tf_op and name(hlo[n].tf_op),
                             columns=columns)
        thunks = rows["name"].astype("category")
        ops = np.array([hlo[t].tf_op if t in hlo else "" for t in map(str, thunks.cat.categories)]
                       + [""], dtype=object)
        return rows.assign(name=pd.Categorical(ops[thunks.array.codes]))

    def present_tf_ops(self) -> list[str]:
        """The TF op names the events hold, with those of the compiled modules' instructions."""
        return self.memo("present_tf_ops", lambda: [
            *self.present("name"), *dict.fromkeys(op.tf_op for op in self.run.hlo_ops.values()
                                                  if op.tf_op)])

    def present(self, col: str) -> list[str]:
        """The distinct values of a categorical event column that some event holds (a pass over
        every row, so once per column and run)."""
        return self.memo(f"present:{col}", lambda: present_values(self.events[col]))

    @cached_property
    def device_planes(self) -> list[str]:
        return sorted(p for p in self.present("plane") if is_device_plane(p))

    @property
    def has_accelerator(self) -> bool:
        return bool(self.device_planes)

    @cached_property
    def kernels(self) -> pd.DataFrame:
        """The device kernels in the steps (host, start_ns, end_ns), none without an
        accelerator: host work the device does not wait for costs the step nothing."""
        return self.in_steps(kinds=("device_compute",), plane=is_device_plane,
                             columns=("host", "start_ns", "end_ns"))

    def kernel_idle_share(self, *parts: pd.DataFrame, kernels: bool = True) -> float:
        """The share of a worker's step time the intervals of `parts` (in_steps frames with
        `host`, `start_ns`, `end_ns`; their union) cover while no kernel of their own host runs
        (with `kernels` False: at all): each host's against its own GPUs, averaged over the
        hosts that hold rows (one worker's share, as worker_steps counts)."""
        total = self.total_step_ns
        if total <= 0 or not any(len(p) for p in parts):
            return 0.0
        hosts = np.concatenate([p["host"].array.codes for p in parts])
        s = np.concatenate([p["start_ns"].to_numpy(np.int64) for p in parts])
        e = np.concatenate([p["end_ns"].to_numpy(np.int64) for p in parts])
        k = self.kernels if kernels else self.kernels.iloc[:0]
        k_host = k["host"].array.codes
        ks, ke = k["start_ns"].to_numpy(np.int64), k["end_ns"].to_numpy(np.int64)
        held = np.unique(hosts)
        ns = sum(covered_outside(s[hosts == h], e[hosts == h], ks[k_host == h], ke[k_host == h])
                 for h in held)
        return ns / len(held) / total

    @cached_property
    def hosts(self) -> list[str]:
        """The hosts (one trace file each: a machine, or one worker process of a multi-worker
        job) that hold events."""
        return self.present("host")

    @property
    def n_hosts(self) -> int:
        return max(len(self.hosts), 1)

    @property
    def one_machine(self) -> str | None:
        """The machine every trace file's process ran on (`localhost` for workers captured on
        one machine), when the traces or the files' names say so: they then share its cores."""
        return one_machine(self.hosts, self.run.machines)

    @cached_property
    def host_tasks(self) -> dict[str, tuple[str, int]]:
        """host → (job, task index) of the TF server it traced, read from the rendezvous keys of
        its cross-process sends, which name the sending device first ("/job:ps/replica:0/
        task:0/device:CPU:0;...;/job:worker/..."): a parameter-server job's ("ps") hosts and its
        workers. Empty for a process that sends to no other (its keys carry one task at both
        ends, "/job:localhost/")."""
        ev = self.events
        if "rendezvous" not in ev:
            return {}
        rows = np.flatnonzero(ev["rendezvous"].array.codes >= 0)
        # A send runs in its sender's process; a receive (TF1 timelines) in its receiver's.
        ops = ev["op_type"].cat.categories
        sends = np.array(["Send" in str(t) for t in ops] + [False])
        host = ev["host"].array.codes[rows].astype(np.int64)
        key = ev["rendezvous"].array.codes[rows].astype(np.int64)
        send = sends[ev["op_type"].array.codes[rows]].astype(np.int64)
        width = len(ev["rendezvous"].cat.categories)
        combos = np.unique((host * width + key) * 2 + send)
        votes: dict[str, dict[tuple[str, int], int]] = {}
        for c in combos.tolist():
            h, k, is_send = ev["host"].cat.categories[c // 2 // width], (c // 2) % width, c % 2
            m = _KEY_TASKS.match(str(ev["rendezvous"].cat.categories[k]))
            if m is None or m.group(1, 2) == m.group(3, 4):
                continue  # not across processes: no job of its own to read
            job, task = m.group(1, 2) if is_send else m.group(3, 4)
            own = votes.setdefault(str(h), {})
            own[(job, int(task))] = own.get((job, int(task)), 0) + 1
        return {h: max(v, key=v.__getitem__) for h, v in votes.items()}

    @cached_property
    def host_roles(self) -> dict[str, int]:
        """How many hosts each job traced ({"ps": 1, "worker": 2}); empty when no trace names
        its job."""
        roles: dict[str, int] = {}
        for job, _ in sorted(self.host_tasks.values()):
            roles[job] = roles.get(job, 0) + 1
        return roles

    @cached_property
    def ps_hosts(self) -> list[str]:
        """The hosts that traced parameter servers: they hold variables and run the updates
        and lookups the workers' steps send them, but no step of their own."""
        return [h for h, (job, _) in self.host_tasks.items() if job == PS_JOB]

    @property
    def step_host(self) -> str | None:
        """The step thread's host when the trace holds several (what one worker's own figures
        read), else None: no host to filter on."""
        thread = self.steps.thread
        return thread[0] if thread is not None and self.n_hosts > 1 else None

    @cached_property
    def _sampler_hosts(self) -> tuple[str | None, str | None]:
        """(the sampler files' host whose sweeps are read, the trace host they are set
        against). The files are named after their host, as the trace files are; with one trace
        file, a sampler under another name (the capture's hostname) is still its machine's.
        With several sampler hosts, the step thread's host is read when it has one."""
        threads = self.run.threads
        named = ([] if threads is None or "host" not in threads
                 else [str(h) for h in threads["host"].cat.categories])
        if len(named) > 1:
            step = self.steps.thread[0] if self.steps.thread is not None else None
            ours = [h for h in named if h in self.hosts]
            named = [step] if step in named else ours[:1]
        if not named:
            return None, None
        if named[0] in self.hosts:
            return named[0], named[0]
        return named[0], self.hosts[0] if len(self.hosts) == 1 else None

    @property
    def sampler_host(self) -> str | None:
        """The trace host whose lines the OS sampler's threads are set against; None when the
        trace holds several hosts and the sampler names none of them: one machine's sweeps
        cannot be matched to another's lines."""
        return self._sampler_hosts[1]

    @cached_property
    def sampler_threads(self) -> pd.DataFrame | None:
        """The sampler's thread sweeps of one machine (`_sampler_hosts`): two machines' thread
        and process ids repeat, so their sweeps are never mixed."""
        return self._one_sampler_host(self.run.threads)

    @cached_property
    def sampler_process(self) -> pd.DataFrame | None:
        return self._one_sampler_host(self.run.process)

    @cached_property
    def sampler_others(self) -> pd.DataFrame | None:
        """The sampled machine's other processes (capture since 2026-11-30; None before)."""
        return self._one_sampler_host(self.run.others)

    def _one_sampler_host(self, df: pd.DataFrame | None) -> pd.DataFrame | None:
        if df is None or "host" not in df:
            return df
        keep = (df["host"] == self._sampler_hosts[0]).to_numpy()
        if keep.all():
            return df
        # Threads of one machine and process sweeps of another are not one process's.
        return df[keep].reset_index(drop=True) if keep.any() else None

    def hosts_holding(self, host: pd.Series, where: np.ndarray | None = None) -> int:
        """How many hosts the `in_steps` rows (their categorical `host` column; `where`, the
        rows counted) come from, at least 1."""
        if self.n_hosts == 1:
            return 1
        codes = host.array.codes if where is None else host.array.codes[where]
        # A count per code, not a sort: the rows can be millions (input work).
        return max(int(np.count_nonzero(np.bincount(codes[codes >= 0]))), 1) if len(codes) else 1

    def worker_steps(self, host: pd.Series, where: np.ndarray | None = None) -> int:
        """What turns a count or a total over `in_steps` rows into one worker's figure per step:
        the steps times the hosts those rows come from. Each host runs every step and does its
        own share of the work, so a sum over several hosts' traces is theirs together
        (docs/trace-signals.md, "Several hosts"); only the hosts that hold the work count, so a
        chief's own work is not spread over its workers."""
        return max(self.n_steps, 1) * self.hosts_holding(host, where)

    @cached_property
    def devices_per_host(self) -> int:
        """The most devices one host drives: what a single process copies to, launches on, or
        holds table replicas for."""
        if self.device_planes:
            if self.n_hosts == 1:
                return len(self.device_planes)
            return int(self._host_device_pairs.groupby("host").size().max())
        from_meta = metadata_device_count(self.run.metadata or {})
        if from_meta:
            return from_meta
        names = self.present("name")
        ids = {m for n in names for m in _CPU_DEVICE.findall(n)}
        replicas = [int(a or b) + 1 for n in names for a, b in _REPLICA.findall(n)]
        return max(len(ids), max(replicas, default=1), 1)

    @cached_property
    def n_devices(self) -> int:
        """Devices over all hosts: each host's device planes (every host of a multi-host GPU run
        names its own `/device:GPU:0`), or on CPU hosts, the replicas one host's op names show
        times the hosts (the workers of a multi-worker job run the same graph)."""
        if self.device_planes and self.n_hosts > 1:
            pairs = self._host_device_pairs
            return int((~pairs["host"].isin(self.ps_hosts)).sum())
        # A parameter server holds variables, not a replica of the model.
        return self.devices_per_host * max(self.n_hosts - len(self.ps_hosts), 1)

    @cached_property
    def collective_group_size(self) -> int | None:
        """The most participants a collective has (`group_size` stats), when the trace tells:
        more than its devices when other workers' traces are not in it. Without such stats (a
        PyTorch gloo trace), the job's world size its trace records."""
        if "group_size" in self.events:
            values = np.asarray(self.events["group_size"].array.sp_values)
            values = values[values > 0]
            if len(values):
                return int(values.max())
        return self.run.world_size

    @cached_property
    def _host_device_pairs(self) -> pd.DataFrame:
        """The distinct (host, device plane) pairs, from the category codes."""
        ev = self.events
        rows = np.flatnonzero(cat_mask(ev["plane"], is_device_plane))
        host, plane = (_values(ev[c])[rows].astype(np.int64) for c in ("host", "plane"))
        width = len(ev["plane"].cat.categories)
        pairs = np.unique(host * width + plane)
        return pd.DataFrame({"host": ev["host"].cat.categories[pairs // width],
                             "plane": ev["plane"].cat.categories[pairs % width]})

    @cached_property
    def framework(self) -> str:
        """"pytorch" when the trace holds PyTorch operator events (`aten::...`), else
        "tensorflow": remedies name the framework's own APIs."""
        return "pytorch" if any(is_torch_op(n) for n in self.present("name")) else "tensorflow"

    @cached_property
    def untraced_step_ms(self) -> float | None:
        """The median step measured outside the profiler, when the run metadata has it (the
        reference trainer's)."""
        p50 = ((self.run.metadata or {}).get("step_time_ms") or {}).get("p50")
        return float(p50) if isinstance(p50, int | float) and p50 > 0 else None

    @cached_property
    def n_cpus(self) -> int | None:
        process = self.sampler_process
        if process is not None and "n_cpus" in process:
            return int(process["n_cpus"].iloc[0])
        meta = self.run.metadata or {}
        cpus = (meta.get("host") or {}).get("cpus") if isinstance(meta.get("host"), dict) else None
        return int(cpus) if cpus else None

    @cached_property
    def cpu_limits(self) -> tuple[int | None, float | None]:
        """The sampled process's CPU affinity (CPUs it may run on) and cgroup quota (cores),
        each None when not recorded (sampler data before 2026-11-29) or not set."""
        process = self.sampler_process
        if process is None or not len(process):
            return None, None
        affinity = (int(process["affinity_cpus"].iloc[0])
                    if "affinity_cpus" in process and process["affinity_cpus"].iloc[0] > 0
                    else None)
        quota = (float(process["cpu_quota"].iloc[0])
                 if "cpu_quota" in process and process["cpu_quota"].iloc[0] > 0 else None)
        return affinity, quota

    @cached_property
    def usable_cpus(self) -> float | None:
        """The CPUs the sampled process could use (affinity capped by its cgroup quota), the
        machine's count for sampler data written before the sampler recorded it (2026-11-29)."""
        affinity, quota = self.cpu_limits
        usable = float(affinity) if affinity is not None else (
            None if self.n_cpus is None else float(self.n_cpus))
        return min(usable, quota) if quota is not None and usable is not None else usable

    @cached_property
    def call_threads(self) -> list[tuple[str, Thread]]:
        """(line name, thread) of the step host's threads that make the step calls: the step
        thread; on a parameter-server worker, every RPC thread the coordinator's calls land on
        (a worker's calls alternate between two: docs/trace-signals.md, "Parameter servers")."""
        thread, line = self.steps.thread, self.steps.line
        if thread is None or line is None:
            return []
        source = self.steps.source
        if not source.startswith("function:") or not self.ps_hosts:
            return [(line, thread)]
        ev = self.events
        calls = ev[cat_mask(ev["name"], source.removeprefix("function:").__eq__)
                   & cat_mask(ev["host"], thread[0].__eq__)]
        pairs = calls[["line", "plane", "line_id"]].drop_duplicates()
        return [(str(n), (thread[0], str(p), i)) for n, p, i in pairs.itertuples(index=False)]

    @property
    def main_line(self) -> str | None:
        """The thread driving the steps: where the step markers or train-function calls live."""
        return self.steps.line

    @cached_property
    def config(self) -> dict[str, Any] | None:
        cfg = (self.run.metadata or {}).get("config")
        return cfg if isinstance(cfg, dict) else None


def _values(col: pd.Series) -> np.ndarray:
    """A column's values as stored: a categorical's codes, without a copy."""
    return col.array.codes if isinstance(col.dtype, pd.CategoricalDtype) else col.to_numpy()


def _grown(a: np.ndarray, n: int) -> np.ndarray:
    b = np.empty(max(n, 2 * len(a)), dtype=a.dtype)
    b[:len(a)] = a
    return b
