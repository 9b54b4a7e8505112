"""Chrome trace-event JSON (`*.trace.json.gz`, `*.json`) → event table rows.

Writers seen: TF/xprof's trace export (one pid per xplane plane, named by a `process_name` metadata
event such as `/device:GPU:0`; one tid per line; display names, with the xplane name in
`args.long_name`: docs/trace-signals.md, "Chrome trace JSON") and the PyTorch profiler (host pid
with `cpu_op`, `cuda_runtime`, `user_annotation` events; GPU events in `kernel`, `gpu_memcpy`,
`gpu_memset` categories with `args.device`; `ProfilerStep#N` annotations mark steps), both as
complete (`X`) events; `B`/`E` pairs of other writers are paired into complete events. Times are
microseconds.
"""

from __future__ import annotations

import codecs
import contextlib
import gc
import gzip
import json
import math
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from analyzers.events import (
    GPU_ANNOTATIONS_LINE,
    SESSION_RUN,
    SESSION_STATS,
    TEXT_STATS,
    TIMELINE_RUN,
    build_events,
    stat_aliases,
)
from analyzers.ingest.chrome_events import EXTRA_ALIASES, Event, RunDecoder
from analyzers.ingest.json_chunks import NotATrace, TraceJsonError, TraceText

# Kineto before PyTorch 1.10 named the GPU's categories `Kernel`, `Memcpy`, `Memset`
# (docs/trace-signals.md, "PyTorch DataLoader").
_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync",
             "Kernel", "Memcpy", "Memset"}
# xprof's view JSON prefixes the host: `vm /host:CPU`, `vm /device:GPU:0`.
_PLANE = re.compile(r"(?:^|\s)(/(?:host|device):\S+)$")
_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
# A TF1 timeline names one process per device and role: `<device> Compute` (its ops, or a GPU
# tracer's streams, copies and syncs), `<device> Tensors`, and `Allocators`. TF 2.x GPU step
# stats name kernel streams `stream:N`, copy streams `stream:N<MemcpyH2D>`, events of no known
# kind `stream:`, and the host's stream syncs `sync` (docs/trace-signals.md, "TF1 RunMetadata
# timelines").
_TIMELINE_PID = re.compile(r"^(?:/job:(?P<job>[^/]+)/replica:\d+/task:(?P<task>\d+))?"
                           r"(?P<device>/device:(?P<type>[A-Za-z_]+):(?P<index>\d+))"
                           r"(?:/(?P<sub>stream:(?P<stream>\d*)(?:<(?P<copy>\w+)>)?|stream:all|"
                           r"memcpy|sync))? (?:Compute|Tensors)$")
_FILE_STEP = re.compile(r"(\d+)(?:\.json(?:\.gz)?)$")
# Bytes of the file read (and decompressed) at a time.
_PIECE_BYTES = 1 << 20
RECORD_COLUMNS = ["ph", "name", "cat", "pid", "tid", "ts", "dur", "args"]


def _text_pieces(path: Path) -> Iterator[str]:
    """The file's text, decompressed and decoded a piece at a time, as json.loads would decode
    it (UTF-8, or the UTF-16/32 it detects). Read errors surface as the pieces are taken."""
    with open(path, "rb") as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        f = gzip.GzipFile(fileobj=raw) if gzipped else raw
        piece = f.read(_PIECE_BYTES)
        decoder = codecs.getincrementaldecoder(json.detect_encoding(piece))("surrogatepass")
        while piece:
            yield decoder.decode(piece)
            piece = f.read(_PIECE_BYTES)
        yield decoder.decode(b"", final=True)


def read_chrome_trace(path: Path, host: str,
                      warnings: list[str] | None = None) -> tuple[pd.DataFrame, int]:
    """Return (events, t0 in unix ns or 0 when the trace's clock is not the wall clock); what
    the file cannot tell is appended to `warnings`."""
    # A trace is millions of small dicts that hold no cycles: the collector's passes over them
    # as they are made took ~30% of the read (docs/trace-signals.md, "Reading Chrome traces").
    # Each piece's dicts are freed before the next is parsed: the collector never sees them.
    with _gc_paused():
        return _read(path, host, warnings)


def _read(path: Path, host: str, warnings: list[str] | None) -> tuple[pd.DataFrame, int]:
    if Path(path).stat().st_size == 0:
        raise ValueError(f"{path}: empty trace file")
    columns = _Columns()
    doc = TraceText(_text_pieces(path), decode=columns.decoder.decode,
                    convert=columns.decoder.convert)
    try:
        for run in doc.chunks():
            columns.add(run)
            del run  # freed before the next run is parsed, not after
    except (TraceJsonError, OSError, EOFError, zlib.error, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a readable JSON trace ({e})") from None
    except NotATrace:
        raise NotATrace(f"{path}: JSON without a traceEvents list: not a Chrome trace") from None
    if "returnedEventsSize" in doc.members and warnings is not None:
        # TensorBoard's trace viewer fetches this view and asks for each event's details by uid.
        warnings.append(f"{Path(path).name}: xprof's trace-viewer view JSON carries display names "
                        "only (no op scopes, input-pipeline stage paths or step numbers) and may "
                        "leave small events out; analyze the .xplane.pb it was made from")
    columns.add_begin_end()
    if not columns.n:
        return build_events(**_no_rows(host)), 0
    timeline = _timeline_devices(columns.proc_names)
    if timeline is not None:
        # A TF1 timeline is one Session.run (a few MB): read again, whole, for its records.
        records = [e for chunk in TraceText(_text_pieces(path)).chunks() for e in chunk
                   if isinstance(e, dict)]
        xs = [e for e in records if e.get("ph") == "X"] + _begin_end_records(records)
        return _read_timeline(path, pd.DataFrame.from_records(xs, columns=RECORD_COLUMNS),
                              timeline)
    return columns.table(host, _base_ns(doc.members.get("baseTimeNanoseconds")))


def _base_ns(value: object) -> int:
    """Kineto's `baseTimeNanoseconds`: the unix time its timestamps count from (0: none)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _Columns:
    """The event table's columns, gathered a piece of the trace at a time. What depends on the
    whole trace (process and thread names, which Kineto writes last; the first timestamp; names
    that only TF1 sessions use) is resolved in table(): events keep codes of their names and
    of their places (pid, tid, category, GPU device) meanwhile."""

    def __init__(self) -> None:
        self.proc_names: dict = {}
        self.thread_names: dict = {}
        self.n = 0
        self.ts: list[np.ndarray] = []
        self.dur: list[np.ndarray] = []
        self.name_codes: list[np.ndarray] = []
        self.name_index: dict[str, int] = {}
        self.place_codes: list[np.ndarray] = []
        self.place_index: dict[tuple, int] = {}
        self.stats: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        self.begin_end: list[dict] = []
        # Every stat a trace may carry: the TF1 session stats are dropped in table() when the
        # trace has no Session.run.
        self.aliases = stat_aliases(True)
        self.aliases.update(EXTRA_ALIASES)
        self.decoder = RunDecoder(list(self.aliases))
        # column -> the args keys that fill it (`num_bytes`, `bytes_transferred`, `Bytes`, ...).
        self.columns: dict[str, list[str]] = {}
        for key, col in self.aliases.items():
            self.columns.setdefault(col, []).append(key)

    def add(self, events: list[Event]) -> None:
        # Metadata, B/E pairs, instants and counters are few beside the complete events.
        other = [e for e in events if e.ph != "X"]
        xs = [e for e in events if e.ph == "X"] if other else events
        for e in other:
            if e.ph == "M" and e.name in ("process_name", "thread_name"):
                name = self.decoder.column([e.args], "name")[0]
                pid, tid = _hashable(e.pid), _hashable(e.tid)
                if e.name == "process_name":
                    self.proc_names[pid] = str(pid if name is None else name)
                else:
                    self.thread_names[(pid, tid)] = str(tid if name is None else name)
            elif e.ph in ("B", "E"):
                self.begin_end.append(self._record(e))
        if xs:
            self._add_complete(xs)

    def add_begin_end(self) -> None:
        if self.begin_end:
            self._add_complete(self.decoder.convert(_begin_end_records(self.begin_end)))
            self.begin_end = []

    def _record(self, e: Event) -> dict:
        return {"ph": e.ph, "name": e.name, "cat": e.cat, "pid": e.pid, "tid": e.tid,
                "ts": e.ts, "dur": e.dur, "args": self.decoder.args_dict(e.args)}

    def _add_complete(self, xs: list[Event]) -> None:
        n = len(xs)
        self.ts.append(_numbers([e.ts for e in xs]))
        self.dur.append(_numbers([e.dur for e in xs]))
        args = [e.args for e in xs]
        cats = _texts([e.cat for e in xs])
        # A GPU event's plane comes from its device arg (the pid's name when it has none).
        devices = self.decoder.column(args, "device")
        places = [(e.pid, e.tid, c, (e.pid if d is None else d) if c in _GPU_CATS else None)
                  for e, d, c in zip(xs, devices, cats, strict=True)]
        index = self.place_index
        try:
            codes = [index.setdefault(k, len(index)) for k in places]
        except TypeError:  # a list or object where an id belongs
            codes = [index.setdefault(k, len(index))
                     for k in (tuple(map(_hashable, k)) for k in places)]
        self.place_codes.append(np.array(codes, dtype=np.int64))
        # xprof's trace-viewer export names an event by its metadata's short display name
        # (`ReadVariableOp`, `Iterator::BatchV2`) and keeps the xplane name in `args.long_name`
        # (`scope/op:ReadVariableOp`, `Iterator::Root::Prefetch::BatchV2`): the detectors key on
        # the latter (docs/trace-signals.md, "Chrome trace JSON").
        names = _texts([e.name for e in xs])
        long_names = self.decoder.column(args, "long_name")
        if long_names.count(None) < n:
            names = [n if x is None else _text(x) for n, x in zip(names, long_names, strict=True)]
        codes, uniq = pd.factorize(np.array(names, dtype=object))
        index = self.name_index
        known = np.array([index.setdefault(u, len(index)) for u in uniq.tolist()],
                         dtype=np.int64)
        self.name_codes.append(known[codes])
        for col, keys in self.columns.items():
            parts = []
            for key in keys:
                values = self.decoder.column(args, key)
                if values.count(None) < n:
                    parts.append(_stat_values(values, col in TEXT_STATS))
            rows, values = _one_per_row(parts)
            if len(rows):
                got = self.stats.setdefault(col, ([], []))
                got[0].append(rows + self.n)
                got[1].append(values)
        self.n += n

    def table(self, host: str, base_ns: int = 0) -> tuple[pd.DataFrame, int]:
        ts, dur = np.concatenate(self.ts), np.concatenate(self.dur)
        t0_us = ts.min()
        names = list(self.name_index)
        codes = np.concatenate(self.name_codes)
        stats: dict = {col: (np.concatenate(rows), np.concatenate(values))
                       for col, (rows, values) in self.stats.items()
                       if SESSION_RUN in self.name_index or col not in SESSION_STATS}
        step_of = np.array([int(m.group(1)) if (m := _STEP_NAME.match(u)) else -1
                            for u in names], dtype=np.int64)
        if (step_of >= 0).any():
            col = np.full(self.n, -1, dtype=np.int64)
            if "step_num" in stats:
                col[stats["step_num"][0]] = stats["step_num"][1]
            step = step_of[codes]
            col[step >= 0] = step[step >= 0]
            stats["step_num"] = col
        place_codes = np.concatenate(self.place_codes)
        plane, line, line_id = self._places()
        events = build_events(
            host=host,
            plane=(place_codes, plane),
            line=(place_codes, line),
            line_id=line_id[place_codes],
            name_codes=codes,
            names=names,
            start_ns=np.round((ts - t0_us) * 1000).astype(np.int64),
            dur_ns=np.round(dur * 1000).astype(np.int64),
            stats=stats,
        )
        # Kineto since PyTorch ~2.0 counts from `baseTimeNanoseconds` (ranks' files line up on
        # it: docs/trace-signals.md, "Clocks of several hosts"); before, its microseconds were
        # unix time. Timestamps of other writers are relative.
        if base_ns:
            t0_ns = base_ns + int(round(t0_us * 1000))
        else:
            t0_ns = int(t0_us * 1000) if t0_us > 1e15 else 0
        return events, t0_ns

    def _places(self) -> tuple[list[str], list[str], np.ndarray]:
        """Each place's plane, line and line id."""
        # xprof's view JSON prefixes the host: `vm /host:CPU`.
        pid_plane = {}
        for pid in {k[0] for k in self.place_index}:
            pname = self.proc_names.get(pid, str(pid))
            m = _PLANE.search(pname)
            pid_plane[pid] = m.group(1) if m else pname
        planes, lines, tids = [], [], []
        for pid, tid, cat, device in self.place_index:
            pname = pid_plane[pid]
            if cat in _GPU_CATS:
                planes.append(pname if pname.startswith("/device:") else f"/device:GPU:{device}")
            else:
                planes.append(pname if pname.startswith("/") else "/host:CPU")
            # Kineto copies a CPU annotation onto the stream of the kernels it launched: a span
            # over them, not device work of its own (docs/trace-signals.md, "PyTorch GPU
            # traces").
            lines.append(GPU_ANNOTATIONS_LINE if cat == "gpu_user_annotation"
                         else self.thread_names.get((pid, tid), _tid_text(tid)))
            tids.append(tid)
        tid_values = pd.Series(tids, dtype=object)
        tid = pd.to_numeric(tid_values, errors="coerce")
        named = tid.isna() & tid_values.notna()
        if named.any():
            # Threads named by text ("io"): one distinct negative id each, not one -1 for all (a
            # thread is (plane, line id) downstream).
            tid[named] = -2 - pd.factorize(tid_values[named].astype(str))[0]
        return planes, lines, tid.fillna(-1).astype(np.int64).to_numpy()


def _stat_values(values: list, text: bool) -> tuple[np.ndarray, np.ndarray]:
    """The rows that carry a stat and its values there: text as str; numbers as int64, where
    they are whole (an int, a finite float, or digits) and not -1 (a stat column's "none")."""
    rows = [i for i, v in enumerate(values) if v is not None]
    present = [values[i] for i in rows]
    if text:
        return np.array(rows, dtype=np.int64), np.array([str(v) for v in present], dtype=object)
    out = None
    if all(v.__class__ is int for v in present):
        with contextlib.suppress(OverflowError):
            out = np.array(present, dtype=np.int64)
    if out is None:
        kept = [(i, int(v)) for i, v in zip(rows, present, strict=True) if _whole(v)]
        rows, out = [i for i, _ in kept], np.array([v for _, v in kept], dtype=np.int64)
    rows_a = np.array(rows, dtype=np.int64)
    real = out != -1
    return rows_a[real], out[real]


def _one_per_row(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """One column's (rows, values) from its keys' parts, in row order; where an event carries
    several of the keys, the later key's value (in the alias table's order)."""
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object)
    rows = np.concatenate([r for r, _ in parts])
    values = np.concatenate([v for _, v in parts])
    # np.unique keeps each row's first occurrence: taken from the reversed arrays, its last.
    _, first = np.unique(rows[::-1], return_index=True)
    keep = len(rows) - 1 - first
    return rows[keep], values[keep]


def _whole(value: object) -> bool:
    """A number a stat column can hold: an int, a finite float, or digits."""
    if isinstance(value, str):
        return value.isdigit()
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _text(value: object) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _texts(values: list) -> list[str]:
    # Most are str already: the class test is cheaper than a call per value.
    return [v if v.__class__ is str else _text(v) for v in values]


def _numbers(values: list) -> np.ndarray:
    """Floats of a column of JSON numbers (0 where missing or not a number)."""
    try:
        out = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        out = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(np.float64)
    return np.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0)


def _timeline_devices(proc_names: dict) -> dict | None:
    """pid → its device match, when every named process is a TF1 timeline's; else None."""
    found = {pid: m for pid, name in proc_names.items() if (m := _TIMELINE_PID.match(name))}
    if not found or any(pid not in found and name != "Allocators"
                        for pid, name in proc_names.items()):
        return None
    return found


def _read_timeline(path: Path, ev: pd.DataFrame, devices: dict) -> tuple[pd.DataFrame, int]:
    """A TF1 RunMetadata timeline (docs/trace-signals.md, "TF1 RunMetadata timelines"): one
    Session.run's ops, each `Op` event named by its op type with the node in `args.name`, on
    lanes the writer assigned (not threads), in unix microseconds. Ops placed on a device run on
    the host's executor threads; a GPU tracer's kernels and copies sit on `<gpu>/stream:N`
    (copies on `stream:N<MemcpyH2D>` in TF 2.x), repeated on `<gpu>/stream:all` (kernels) and
    `<gpu>/memcpy` (copies); `<gpu>/sync` holds the host's stream syncs. The file is marked as one
    step (TIMELINE_RUN, numbered by the digits ending its name: ProfilerHook's global step)."""
    tracer = {pid: m for pid, m in devices.items()
              if m["sub"] not in (None, "sync") and m["type"].upper() != "CPU"}
    # stream:all and memcpy repeat the per-stream events: read them only when there are none.
    split = {m["device"] for m in tracer.values() if m["stream"]}
    kept = [pid for pid, m in devices.items()
            if not (pid in tracer and m["sub"] in ("stream:all", "memcpy")
                    and m["device"] in split)]
    ev = ev[ev["pid"].isin(kept)].reset_index(drop=True)
    if ev.empty:
        raise ValueError(f"{path}: a TF1 timeline with no op events")
    # The job and task of any device (a GPU stream's process names none).
    named = next((m for m in devices.values() if m["job"]), None)
    host = f"{named['job']}:{named['task']}" if named else "host"
    pid = ev["pid"]
    on_device = pid.isin(list(tracer)).to_numpy()
    planes = pid.map({p: m["device"] if p in tracer else "/host:CPU"
                      for p, m in devices.items()}).to_numpy(dtype=object)
    lines = pid.map({p: m["sub"] if p in tracer else f"{m['device']} {m['sub'] or 'ops'}"
                     for p, m in devices.items()}).to_numpy(dtype=object)
    # Host ops as the profiler names them (`scope/op:Type`); a device event by its op or copy
    # type, which is what names kernels' and copies' kinds: a TF 2.x copy stream names the
    # direction its events' own names (the issuing op) do not.
    op = ev["name"].fillna("").astype(str)
    copy = pid.map({p: m["copy"] for p, m in devices.items()})
    op = op.where(copy.isna(), copy.astype(object)).astype(str)
    node = ev["args"].map(lambda a: a.get("name") if isinstance(a, dict) else None)
    own = ~on_device & node.notna().to_numpy() & (node != op).to_numpy()
    names = np.where(own, node.astype(str) + ":" + op, op).astype(object)
    ts, dur = _numbers(ev["ts"].tolist()), _numbers(ev["dur"].tolist())
    # Lanes of one process are its rows: ids by (process, lane), whatever their types.
    line_ids = pd.factorize(pid.astype(str) + "\x00" + ev["tid"].astype(str))[0].astype(np.int64)
    start, end = ts.min(), (ts + dur).max()
    # One more row: the run itself, on a line of its own.
    uniq, codes = np.unique(np.append(names, TIMELINE_RUN), return_inverse=True)
    number = _FILE_STEP.search(Path(path).name)
    step = np.full(len(codes), -1, dtype=np.int64)
    # Without a number in the name, the run's start (µs) tells files apart.
    step[-1] = int(number.group(1)) if number else int(start)
    root = np.full(len(codes), -1, dtype=np.int64)
    root[-1] = 1
    events = build_events(
        host=host, plane=np.append(planes, "/host:CPU"), line=np.append(lines, "Session.run"),
        line_id=np.append(line_ids, -1), name_codes=codes, names=list(uniq),
        start_ns=np.round(np.append(ts - start, 0.0) * 1000).astype(np.int64),
        dur_ns=np.round(np.append(dur, end - start) * 1000).astype(np.int64),
        stats={"step_num": step, "root": root})
    return events, int(start * 1000)


def _begin_end_records(records: list[dict]) -> list[dict]:
    be = [e for e in records if e.get("ph") in ("B", "E")]
    if not be:
        return []
    return _begin_end_pairs(pd.DataFrame.from_records(be, columns=RECORD_COLUMNS)).to_dict(
        "records")


def _begin_end_pairs(frame: pd.DataFrame) -> pd.DataFrame:
    """`B`/`E` duration events as complete (`X`) rows. On one thread they nest like a stack:
    ranked by time (file order breaking ties), each event gets the depth it opens or closes, and
    at each depth an opening and the closing that follows it are one event. The name and args
    are the opening's (the closing's args added); openings never closed and closings never
    opened are dropped."""
    be = frame[frame["ph"].isin(("B", "E"))].copy()
    be["ts"] = pd.to_numeric(be["ts"], errors="coerce")
    be = be[be["ts"].notna()]
    be["order"] = np.arange(len(be))
    # Threads numbered by their (pid, tid) text: writers mix int and str ids, which do not sort.
    be["thread"] = pd.factorize(be["pid"].astype(str) + "\x00" + be["tid"].astype(str))[0]
    be = be.sort_values(["thread", "ts", "order"], kind="stable")
    opens = (be["ph"] == "B").to_numpy()
    thread = be["thread"].to_numpy()
    depth = pd.Series(np.where(opens, 1, -1)).groupby(thread).cumsum().to_numpy()
    be["level"] = np.where(opens, depth, depth + 1)
    be = be.sort_values(["thread", "level", "ts", "order"], kind="stable")
    is_b = (be["ph"] == "B").to_numpy()
    same = ((be["thread"].to_numpy()[1:] == be["thread"].to_numpy()[:-1])
            & (be["level"].to_numpy()[1:] == be["level"].to_numpy()[:-1]))
    start = np.flatnonzero(is_b[:-1] & ~is_b[1:] & same)
    b, e = be.iloc[start], be.iloc[start + 1]
    args = [{**(x if isinstance(x, dict) else {}), **(y if isinstance(y, dict) else {})}
            for x, y in zip(b["args"], e["args"], strict=True)]
    return pd.DataFrame({"ph": "X", "name": b["name"].to_numpy(), "cat": b["cat"].to_numpy(),
                         "pid": b["pid"].to_numpy(), "tid": b["tid"].to_numpy(),
                         "ts": b["ts"].to_numpy(),
                         "dur": e["ts"].to_numpy() - b["ts"].to_numpy(), "args": args})


def _hashable(value: object) -> object:
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def _tid_text(tid: object) -> str:
    # Metadata rows without a tid turn the column into floats: 8.0 is thread 8.
    if isinstance(tid, float) and tid.is_integer():
        return str(int(tid))
    return str(tid)


def _no_rows(host: str) -> dict:
    empty_o, empty_i = np.array([], dtype=object), np.array([], dtype=np.int64)
    return dict(host=host, plane=empty_o, line=empty_o, line_id=empty_i, name_codes=empty_i,
                names=[], start_ns=empty_i, dur_ns=empty_i, stats={})
