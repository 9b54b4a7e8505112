"""Analyzer speed and memory: `recadvisor analyze LOGDIR --format json` against xprof, cold.

Each measurement is a fresh process: ours runs the whole CLI (imports, decode, event table, steps,
detectors, JSON); xprof converts the same xplane files to `overview_page`,
`input_pipeline_analyzer` and (when the installed xprof has it) `smart_suggestion`, in one process,
with `use_saved_result=False`, on a private copy of the run folder (xprof writes cache files beside
the xplane). Peak RSS is the child's own `ru_maxrss`, read by a small launcher that forks it, not
a polled estimate.

Targets: the logdirs given, else every /tmp/pl/* logdir that exists, plus two generated traces: a
tiny one (the fixed cost of starting Python and importing) and one of --events events (default 5M;
written once by a vectorized serializer and cached under /tmp/recadvisor_bench); with
--real-seconds S also a large real TF trace (the `default` preset profiled for S seconds, recorded
once and cached there too): a generated trace carries ~22 bytes per event, a TF one ~44.

    .venv/bin/python bench/analyzer_speed.py [LOGDIR ...] [--repeats 3] [--events 5000000]
        [--real-seconds 45] [--mode cli|python] [--no-xprof] [--no-generated] [--json out.json]
    .venv/bin/python bench/analyzer_speed.py --profile LOGDIR   # cProfile load_run + step_breakdown
"""

from __future__ import annotations

import argparse
import compileall
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from analyzers.ingest.logdir import select_run  # noqa: E402
from analyzers.ingest.xplane import read_xplane  # noqa: E402
from tests.analyzers.xspace_builder import XSpaceBuilder  # noqa: E402

WORK = Path("/tmp/recadvisor_bench")
GOALS = {"speedup_vs_xprof": 5.0, "events_per_s": 2e6, "rss_per_file": 3.0}
XPROF_TOOLS = ("overview_page", "input_pipeline_analyzer", "smart_suggestion")
CLI = REPO / ".venv" / "bin" / "recadvisor"
PYTHON_MODE = (
    "import sys\nfrom analyzers.ingest.logdir import load_run\n"
    "from analyzers.steps import step_breakdown\n"
    "r = load_run(sys.argv[1])\ns = step_breakdown(r.events)\nprint(len(r.events), s.source)\n"
)
XPROF_CHILD = (
    "import json, sys, time\n"
    "from xprof.convert.raw_to_tool_data import xspace_to_tool_data\n"
    "out = {}\n"
    "for tool in sys.argv[1].split(','):\n"
    "    t = time.perf_counter()\n"
    "    data, _ = xspace_to_tool_data(sys.argv[2:], tool, {'use_saved_result': False})\n"
    "    out[tool] = [round(time.perf_counter() - t, 3), len(data or b'')]\n"
    "print(json.dumps(out))\n"
)


# --------------------------------------------------------------------------- measuring


@dataclass
class Measured:
    wall_s: float
    peak_rss_mb: float
    rc: int
    stdout: str
    stderr: str


# The command runs under a small launcher that forks it and reports getrusage(RUSAGE_CHILDREN):
# a child started straight from this (large) process would inherit this process's RSS as the floor
# of its ru_maxrss on Linux, while a fork of the small launcher starts near zero.
LAUNCHER = (
    "import json, os, resource, sys, time\n"
    "t = time.perf_counter()\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.execvp(sys.argv[2], sys.argv[2:])\n"
    "_, status = os.waitpid(pid, 0)\n"
    "wall = time.perf_counter() - t\n"
    "rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "with open(sys.argv[1], 'w') as f:\n"
    "    json.dump({'wall_s': wall, 'maxrss_kb': rss}, f)\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def run_measured(cmd: list[str], timeout: float, env: dict | None = None) -> Measured:
    """Run `cmd` and return its wall time and its own peak RSS (the launcher's wait)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(suffix=".json") as report:
        proc = subprocess.Popen([sys.executable, "-S", "-c", LAUNCHER, report.name, *cmd],
                                stdout=out, stderr=err, env=env, cwd=REPO,
                                start_new_session=True)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
        try:
            usage = json.loads(Path(report.name).read_text())
        except (OSError, json.JSONDecodeError):
            return Measured(float(timeout), 0.0, proc.returncode or -9, stdout,
                            stderr + f"\nno result within {timeout:.0f} s")
        return Measured(usage["wall_s"], usage["maxrss_kb"] / 1024, proc.returncode, stdout,
                        stderr)


def quiet_env() -> dict:
    env = dict(os.environ)
    env.update(TF_CPP_MIN_LOG_LEVEL="3", GLOG_minloglevel="2", PYTHONHASHSEED="0")
    return env


def compile_project() -> None:
    """Byte-compile the project's packages, as an installed copy is after its first run: with
    PYTHONDONTWRITEBYTECODE set (some sandboxes and CI images set it) an editable install would
    otherwise compile ~40 modules from source in every measured process (~50 ms), while xprof's
    site-packages were compiled by pip."""
    for package in ("analyzers", "recadvisor", "reference_model"):
        compileall.compile_dir(REPO / package, quiet=1)


def ours_cmd(logdir: Path, mode: str) -> list[str]:
    if mode == "cli":
        return [str(CLI), "analyze", str(logdir), "--format", "json"]
    return [sys.executable, "-c", PYTHON_MODE, str(logdir)]


def check_ours(m: Measured, mode: str) -> str | None:
    """An error line, or None when the run produced a report."""
    if m.rc not in (0, 3):
        return (m.stderr.strip().splitlines() or [f"exit {m.rc}"])[-1][:120]
    if mode == "cli":
        try:
            json.loads(m.stdout)
        except json.JSONDecodeError:
            return "no JSON report on stdout"
    return None


def xprof_tools() -> tuple[str, ...]:
    spec = importlib.util.find_spec("xprof")
    if spec is None or not spec.submodule_search_locations:
        return ()
    src = Path(next(iter(spec.submodule_search_locations))) / "convert" / "raw_to_tool_data.py"
    text = src.read_text() if src.exists() else ""
    return tuple(t for t in XPROF_TOOLS if f"'{t}'" in text or f'"{t}"' in text)


def xprof_copy(label: str, files: list[Path]) -> list[Path]:
    """A private run folder for xprof (it writes `*.smart_suggestion.pb` etc. beside the input)."""
    folder = WORK / "xprof" / label
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    out = []
    for f in files:  # a copy, not a link: the inputs stay untouched whatever xprof writes
        shutil.copyfile(f, folder / f.name)
        out.append(folder / f.name)
    return out


def clear_xprof_cache(files: list[Path]) -> None:
    keep = {f.name for f in files}
    for p in files[0].parent.iterdir():
        if p.name not in keep:
            p.unlink() if p.is_file() else shutil.rmtree(p)


# --------------------------------------------------------------------------- generated traces


def _vlen(v: np.ndarray) -> np.ndarray:
    """Bytes of each value as a protobuf varint (v: uint64)."""
    n = np.ones(v.shape, dtype=np.int64)
    x = v >> np.uint64(7)
    while True:
        more = x != 0
        if not more.any():
            return n
        n += more
        x = x >> np.uint64(7)


class _Writer:
    """Writes one protobuf message per row into a shared byte buffer, field by field."""

    def __init__(self, row_sizes: np.ndarray) -> None:
        self.sizes = row_sizes
        self.buf = np.zeros(int(row_sizes.sum()), dtype=np.uint8)
        self.cur = np.concatenate(([0], np.cumsum(row_sizes)[:-1])).astype(np.int64)

    def byte(self, value: int, rows: np.ndarray) -> None:
        self.buf[self.cur[rows]] = value
        self.cur[rows] += 1

    def varint(self, v: np.ndarray, n: np.ndarray, rows: np.ndarray) -> None:
        v, n, pos = v[rows], n[rows], self.cur[rows]
        for k in range(int(n.max(initial=0))):
            sel = n > k
            low = (v[sel] >> np.uint64(7 * k)) & np.uint64(0x7F)
            cont = (n[sel] > k + 1).astype(np.uint64) << np.uint64(7)
            self.buf[pos[sel] + k] = (low | cont).astype(np.uint8)
        self.cur[rows] += n


def _varint_bytes(value: int) -> bytes:
    value &= 2**64 - 1
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint_bytes(number << 3 | 2) + _varint_bytes(len(payload)) + payload


def encode_events(mid: np.ndarray, offset_ps: np.ndarray, dur_ps: np.ndarray,
                  stats: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> tuple[np.ndarray,
                                                                                   np.ndarray]:
    """XLine.events fields (tag 4, framed) for each row; stats: (has, metadata id, int64 value).
    Returns (bytes, per-row sizes)."""
    u = np.uint64
    mid_u, off_u, dur_u = mid.astype(u), offset_ps.astype(u), dur_ps.astype(u)
    n_mid, n_off, n_dur = _vlen(mid_u), _vlen(off_u), _vlen(dur_u)
    body = 3 + n_mid + n_off + n_dur
    enc_stats = []
    for has, smid, value in stats:
        smid_u, val_u = smid.astype(u), value.astype(u)  # int64 two's complement, as protobuf
        n_smid, n_val = _vlen(smid_u), _vlen(val_u)
        stat_len = 2 + n_smid + n_val
        n_len = _vlen(stat_len.astype(u))
        body = body + np.where(has, 1 + n_len + stat_len, 0)
        enc_stats.append((has, smid_u, n_smid, val_u, n_val, stat_len.astype(u), n_len))
    n_body = _vlen(body.astype(u))
    w = _Writer(1 + n_body + body)
    rows = np.arange(len(mid))
    w.byte(0x22, rows)  # XLine.events
    w.varint(body.astype(u), n_body, rows)
    w.byte(0x08, rows)
    w.varint(mid_u, n_mid, rows)
    w.byte(0x10, rows)
    w.varint(off_u, n_off, rows)
    w.byte(0x18, rows)
    w.varint(dur_u, n_dur, rows)
    for has, smid_u, n_smid, val_u, n_val, stat_len, n_len in enc_stats:
        r = np.flatnonzero(has)
        w.byte(0x22, r)  # XEvent.stats
        w.varint(stat_len, n_len, r)
        w.byte(0x08, r)
        w.varint(smid_u, n_smid, r)
        w.byte(0x20, r)  # XStat.int64_value
        w.varint(val_u, n_val, r)
    assert (w.cur == np.cumsum(w.sizes)).all()
    return w.buf, w.sizes


def _op_names() -> list[str]:
    names = []
    for j in range(24):
        names += [f"model/dense_{j}/MatMul:MatMul", f"model/dense_{j}/BiasAdd:BiasAdd",
                  f"model/dense_{j}/Relu:Relu",
                  f"gradient_tape/model/dense_{j}/MatMul/MatMul_1:MatMul",
                  f"Adam/update_{j}/ResourceApplyAdam:ResourceApplyAdam"]
    names += [f"model/embedding_{k}/embedding_lookup:ResourceGather" for k in range(26)]
    return names + ["ExecutorState::Process", "ThreadpoolListener::StartRegion"]


def generate_trace(n_events: int, logdir: Path, seed: int = 0) -> Path:
    """A TF-like host trace of about n_events events: a Python thread with `train` step markers
    (step_num, _r), IteratorGetNext and the train function call; four tf_Compute threads running
    `scope/op:Type` ops (a third with stats); two tf.data threads. Returns the xplane path."""
    rng = np.random.default_rng(seed)
    step_ns = 10_000_000
    compute_lines, per_compute, data_lines, per_data = 4, 110, 2, 28
    per_step = 4 + compute_lines * per_compute + data_lines * per_data
    steps = max(2, -(-n_events // per_step))
    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    ops = _op_names()
    op_ids = np.array([host.event_metadata_id(n) for n in ops])
    main_ids = [host.event_metadata_id(n) for n in
                ("train", "IteratorGetNext", "__inference_train_function_5921", "EagerExecute")]
    data_ids = np.array([host.event_metadata_id("Iterator::Root::Prefetch::ParallelMapV2",
                                                "Iterator::ParallelMapV2"),
                         host.event_metadata_id("ParallelMapProduce")])
    s_step, s_root, s_id, s_elem = (host.stat_metadata_id(n) for n in
                                    ("step_num", "_r", "id", "element_id"))
    lines = [(1, "python3")] + [(4996884925063970884 + i, f"tf_Compute/{4996884925063970884 + i}")
                                for i in range(compute_lines)]
    lines += [(-3462892858678164814 - i, f"tf_data_iterator_resource/{-3462892858678164814 - i}")
              for i in range(data_lines)]
    step_starts = np.arange(steps, dtype=np.int64) * step_ns
    line_blobs = []
    for li, (line_id, line_name) in enumerate(lines):
        if li == 0:  # train marker, input wait, function call, eager op
            rel = np.array([0, 0, 1_000_000, 9_100_000])
            dur = np.array([9_500_000, 1_000_000, 8_000_000, 100_000])
            mids = np.tile(main_ids, steps)
        else:
            per = per_compute if li <= compute_lines else per_data
            slot = step_ns // per
            rel = np.arange(per) * slot
            dur = (slot * rng.uniform(0.3, 0.9, size=per)).astype(np.int64)
            pool = op_ids if li <= compute_lines else data_ids
            mids = pool[rng.integers(0, len(pool), size=per * steps)]
        k = len(rel)
        start = (step_starts[:, None] + rel[None, :]).ravel()
        durs = np.tile(dur, steps) + rng.integers(0, 1000, size=k * steps)
        stats = []
        if li == 0:
            is_marker = np.tile(np.arange(k) == 0, steps)
            step_no = np.repeat(np.arange(steps), k)
            stats = [(is_marker, np.full(k * steps, s_step), step_no),
                     (is_marker, np.full(k * steps, s_root), np.ones(k * steps, np.int64))]
        else:
            has = rng.random(k * steps) < 0.35
            big = rng.integers(-2**62, 2**62, size=k * steps)
            stats = [(has, np.full(k * steps, s_id if li <= compute_lines else s_elem), big)]
        blob, _ = encode_events(mids, start * 1000, durs * 1000, stats)
        header = (_varint_bytes(1 << 3) + _varint_bytes(line_id) + _field(2, line_name.encode())
                  + _varint_bytes(3 << 3) + _varint_bytes(0))
        line_len = len(header) + len(blob)
        line_blobs.append(_varint_bytes(3 << 3 | 2) + _varint_bytes(line_len) + header)
        line_blobs.append(blob.tobytes())
        del blob
    b.profile_stop_ns = b.profile_start_ns + steps * step_ns
    space = b.to_message("gen")
    host_msg, env_msg = space.planes
    plane_bytes = host_msg.SerializeToString() + b"".join(line_blobs)
    data = (_field(1, plane_bytes) + _field(1, env_msg.SerializeToString())
            + _field(4, b"gen"))
    run_dir = Path(logdir) / "plugins" / "profile" / "2026_01_01_00_00_00"
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "gen.xplane.pb"
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return path


def generated_logdir(n_events: int) -> Path:
    logdir = WORK / f"generated_{n_events}"
    path = logdir / "plugins" / "profile" / "2026_01_01_00_00_00" / "gen.xplane.pb"
    if not path.exists():
        t = time.perf_counter()
        generate_trace(n_events, logdir)
        print(f"generated {path} ({path.stat().st_size / 1e6:.0f} MB) in "
              f"{time.perf_counter() - t:.1f} s", file=sys.stderr)
    return logdir


def real_logdir(seconds: float) -> Path:
    """A real TF trace: the reference trainer's `default` preset profiled for `seconds` (45 s
    gives ~6.8M events, 303 MB), recorded once and cached. Needs the `tf` extra."""
    logdir = WORK / f"real_default_{seconds:g}s"
    if not any(logdir.glob("plugins/profile/*/*.xplane.pb")):
        shutil.rmtree(logdir, ignore_errors=True)
        cmd = [str(CLI), "train", "--preset", "default", "--logdir", str(logdir),
               "--profile-seconds", f"{seconds:g}", "--steps", "5", "--no-progress"]
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=quiet_env())
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
            raise SystemExit(f"analyzer_speed: could not record the real trace: {tail}")
        print(f"recorded {logdir} in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return logdir


# --------------------------------------------------------------------------- targets


@dataclass
class Target:
    label: str
    logdir: Path
    files: list[Path]
    events: int = 0
    file_mb: float = 0.0
    ours: list[Measured] = field(default_factory=list)
    xprof: list[Measured] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def count_events(files: list[Path]) -> int:
    """Events in the xplane files (cached by path, size and mtime)."""
    cache_path = WORK / "event_counts.json"
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    total = 0
    for f in files:
        st = f.stat()
        key = f"{f.resolve()}:{st.st_size}:{st.st_mtime_ns}"
        if key not in cache:
            cache[key] = len(read_xplane(f, "count").events)
        total += cache[key]
    WORK.mkdir(parents=True, exist_ok=True)
    cache_path.write_text(json.dumps(cache, indent=0))
    return total


def make_target(label: str, logdir: Path) -> Target:
    run = select_run(logdir)
    files = [run] if run.is_file() else sorted(run.glob("*.xplane.pb"))
    t = Target(label, logdir, files)
    t.file_mb = sum(f.stat().st_size for f in files) / 1e6
    t.events = count_events(files) if files else 0
    return t


def default_targets(n_events: int, generated: bool) -> list[Target]:
    out = [make_target(p.name, p) for p in sorted(Path("/tmp/pl").glob("*"))
           if p.is_dir() and (p / "plugins" / "profile").is_dir()]
    if generated:
        out.append(make_target("generated-tiny", generated_logdir(1_000)))
        out.append(make_target(f"generated-{n_events / 1e6:g}M", generated_logdir(n_events)))
    return out


# --------------------------------------------------------------------------- main


def warm(files: list[Path]) -> None:
    """Read the inputs once before each run, so both tools start from the page cache whatever
    ran before (xprof's 8 GB runs on the 303 MB trace; the VM reclaims idle pages on its own):
    the comparison is of the analyzers, not of the disk."""
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(16 << 20):
                pass


def measure(targets: list[Target], args, tools: tuple[str, ...], console: Console) -> None:
    env = quiet_env()
    copies = {t.label: xprof_copy(t.label, t.files) for t in targets if tools and t.files}
    # Interleave targets across repeats so machine noise hits all alike.
    for r in range(args.repeats):
        for t in targets:
            warm(t.files)
            m = run_measured(ours_cmd(t.logdir, args.mode), args.timeout, env)
            err = check_ours(m, args.mode)
            if err:
                t.errors.append(f"ours: {err}")
            else:
                t.ours.append(m)
            line = f"[{r + 1}/{args.repeats}] {t.label}: ours {m.wall_s:.2f} s " \
                   f"{m.peak_rss_mb:.0f} MB"
            if t.label in copies:
                clear_xprof_cache(copies[t.label])
                warm(copies[t.label])
                cmd = [sys.executable, "-c", XPROF_CHILD, ",".join(tools),
                       *map(str, copies[t.label])]
                x = run_measured(cmd, args.timeout, env)
                if x.rc == 0:
                    t.xprof.append(x)
                    per_tool = " ".join(f"{k} {v[0]:.2f}" for k, v in json.loads(x.stdout).items())
                    line += f", xprof {x.wall_s:.2f} s {x.peak_rss_mb:.0f} MB ({per_tool})"
                else:
                    t.errors.append(f"xprof exit {x.rc}: "
                                    f"{(x.stderr.strip().splitlines() or ['?'])[-1][:100]}")
            console.log(line)


def results(targets: list[Target]) -> list[dict]:
    rows = []
    for t in targets:
        ours_s = statistics.median(m.wall_s for m in t.ours) if t.ours else None
        rss = max((m.peak_rss_mb for m in t.ours), default=None)
        xprof_s = statistics.median(m.wall_s for m in t.xprof) if t.xprof else None
        xprof_rss = max((m.peak_rss_mb for m in t.xprof), default=None)
        rows.append({
            "target": t.label, "logdir": str(t.logdir), "events": t.events,
            "file_mb": round(t.file_mb, 3), "ours_s": ours_s,
            "events_per_s": t.events / ours_s if ours_s else None,
            "peak_rss_mb": rss, "rss_per_file": rss / t.file_mb if rss and t.file_mb else None,
            "xprof_s": xprof_s, "xprof_rss_mb": xprof_rss,
            "xprof_over_ours": xprof_s / ours_s if xprof_s and ours_s else None,
            "runs": len(t.ours), "errors": t.errors,
        })
    return rows


def print_table(rows: list[dict], args, tools: tuple[str, ...], load: str) -> None:
    what = "recadvisor analyze --format json" if args.mode == "cli" else \
        "python: load_run + step_breakdown"
    title = (f"Analyzer speed: {what} vs xprof ({', '.join(tools) or 'not run'}), fresh process "
             f"each, median of {args.repeats}; {os.cpu_count()} CPUs, load average {load}"
             f"\nGoals: xprof/ours >= "
             f"{GOALS['speedup_vs_xprof']:g}x, >= {GOALS['events_per_s'] / 1e6:g}M events/s, "
             f"peak RSS <= {GOALS['rss_per_file']:g}x file size")
    table = Table(title=title)
    for col in ("logdir", "events", "file MB", "ours s", "runs", "events/s", "peak RSS MB",
                "RSS/file", "xprof s", "xprof RSS MB", "xprof/ours"):
        table.add_column(col, justify="left" if col == "logdir" else "right")

    def mark(value, goal, fmt, higher_is_better=True):
        if value is None:
            return "-"
        ok = value >= goal if higher_is_better else value <= goal
        return f"{fmt.format(value)} {'ok' if ok else 'MISS'}"

    for r in rows:
        table.add_row(
            r["target"], f"{r['events']:,}", f"{r['file_mb']:.2f}",
            f"{r['ours_s']:.2f}" if r["ours_s"] else "failed",
            f"{r['runs']}/{args.repeats}",
            mark(r["events_per_s"], GOALS["events_per_s"], "{:,.0f}"),
            f"{r['peak_rss_mb']:.0f}" if r["peak_rss_mb"] else "-",
            mark(r["rss_per_file"], GOALS["rss_per_file"], "{:.1f}x", higher_is_better=False),
            f"{r['xprof_s']:.2f}" if r["xprof_s"] else "-",
            f"{r['xprof_rss_mb']:.0f}" if r["xprof_rss_mb"] else "-",
            mark(r["xprof_over_ours"], GOALS["speedup_vs_xprof"], "{:.2f}x"),
        )
    Console(width=170).print(table)
    for r in rows:
        for e in r["errors"]:
            print(f"{r['target']}: {e}", file=sys.stderr)


def profile(logdir: Path, top: int) -> None:
    """Where the time of load_run + step_breakdown goes (in this process, warm imports)."""
    import cProfile
    import pstats

    from analyzers.ingest.logdir import load_run
    from analyzers.steps import step_breakdown

    load_run(generated_logdir(1_000))  # imports out of the way
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    run = load_run(logdir)
    t_load = time.perf_counter() - t
    step_breakdown(run.events)
    prof.disable()
    total = time.perf_counter() - t
    print(f"{logdir}: {len(run.events):,} events, load_run {t_load:.2f} s, "
          f"step_breakdown {total - t_load:.2f} s (under cProfile)")
    for key in ("tottime", "cumulative"):
        pstats.Stats(prof).sort_stats(key).print_stats(top)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logdirs", nargs="*", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--events", type=int, default=5_000_000, help="size of the generated trace")
    ap.add_argument("--mode", choices=("cli", "python"), default="cli",
                    help="cli: the whole `recadvisor analyze`; python: load_run + step_breakdown")
    ap.add_argument("--no-xprof", action="store_true")
    ap.add_argument("--no-generated", action="store_true")
    ap.add_argument("--real-seconds", type=float, default=0, metavar="S",
                    help="also a real TF trace: the default preset profiled for S seconds "
                    "(recorded once, cached; 45 gives ~6.8M events)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per process")
    ap.add_argument("--json", dest="json_out", type=Path, help="also write the rows here")
    ap.add_argument("--profile", action="store_true",
                    help="cProfile load_run + step_breakdown on each logdir instead")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args(argv)
    WORK.mkdir(parents=True, exist_ok=True)

    if args.profile:
        for logdir in args.logdirs or [generated_logdir(args.events)]:
            profile(logdir, args.top)
        return 0
    if args.mode == "cli" and not CLI.exists():
        ap.error(f"{CLI} not found: install the project (pip install -e .) or use --mode python")
    targets = ([make_target(p.name, p) for p in args.logdirs] if args.logdirs
               else default_targets(args.events, not args.no_generated))
    if args.real_seconds > 0:
        if not CLI.exists():
            ap.error(f"{CLI} not found: --real-seconds records with `recadvisor train`")
        targets.append(make_target(f"real-default-{args.real_seconds:g}s",
                                   real_logdir(args.real_seconds)))
    if not targets:
        ap.error("no logdirs given and none found under /tmp/pl")
    tools = () if args.no_xprof else xprof_tools()
    console = Console(stderr=True)
    compile_project()
    load_before = os.getloadavg()[0]
    measure(targets, args, tools, console)
    rows = results(targets)
    print_table(rows, args, tools, f"{load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    if args.json_out:
        args.json_out.write_text(json.dumps(rows, indent=2))
    return 0 if all(r["ours_s"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
