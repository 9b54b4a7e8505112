"""Write TF-style `*.xplane.pb` files from code, for tests (no TensorFlow import).

    b = XSpaceBuilder()
    host = b.plane("/host:CPU")
    main = host.line("python3", line_id=1)
    main.event("train", 0, 100_000_000, step_num=0, _r=1)
    host.line("tf_Compute/1").event("dense/MatMul:MatMul", 30_000_000, 60_000_000)
    run_dir = b.write(tmp_path)          # tmp_path/plugins/profile/<run>/host.xplane.pb

What TensorFlow writes, and what this mirrors (checked on real TF 2.21 traces):
- planes `/host:CPU` (one line per thread: the Python thread, `tf_Compute/<id>`,
  `tf_data_iterator_resource/<id>`, ...), `/host:metadata`, and a last `Task Environment` plane
  with no lines whose stats are `profile_start_time`, `profile_stop_time` (uint64 unix ns) and
  `profile_options` (bytes); stat metadata ids 1, 2, 3.
- event and stat metadata are interned per plane, ids from 1; an XStat's `ref_value` is the id of a
  stat metadata entry whose name is the string (TF stores repeated strings that way).
- XLine.timestamp_ns is relative to `profile_start_time` (in the real traces, a few µs after it);
  XEvent.offset_ps is relative to its line's timestamp, duration_ps is the length.
- host event stats: step markers carry `step_num` and `_r`=1 (root); tf.data events carry
  `element_id`, `id`, `parent_id`, ...; large ids are written as uint64 when they exceed int64.

GPU planes (from the CUPTI collector, xla/backends/profiler/gpu/cupti_collector.cc); see
`gpu_line_names()` for how stream lines are named and which stats kernels and copies carry.
"""

from __future__ import annotations

from pathlib import Path

from analyzers.ingest.xplane_schema import XLine, XPlane, XSpace, XStat

DEFAULT_PROFILE_START_NS = 1_790_000_000_000_000_000
_INT64_MAX = 2**63 - 1
TASK_ENV_PLANE = "Task Environment"


class Ref(str):
    """A string stat written as `ref_value`: the id of a stat metadata entry named by the string."""


def gpu_line_names() -> None:
    """How TensorFlow (XLA's CUPTI collector) names GPU planes and lines, for building GPU traces.

    - Plane per device: `/device:GPU:<ordinal>` (GpuPlaneName). Host-side CUDA driver API calls
      (cuLaunchKernel, cuMemcpyHtoDAsync, ...) go to the host plane `/host:CUPTI` on lines
      named `Host Threads/<thread id>`, with a `device_id` stat.
    - Device lines: one per CUDA stream, line id = stream id, named `Stream #<id>` followed by
      the event types seen on it in parentheses, comma-separated: `Stream #7(Kernel)`,
      `Stream #14(MemcpyH2D)`, `Stream #20(Kernel,MemcpyD2H,Memset)`. A line with CUPTI
      overhead events is named `CUPTI overhead`. XLA later adds derived lines
      (`XLA Ops`, `XLA Modules`, `TensorFlow Ops`, `Steps`) when it post-processes a trace;
      the raw capture has only the stream lines.
    - Event names: the demangled kernel name; copies are named by type (`MemcpyH2D`,
      `MemcpyD2H`, `MemcpyD2D`, `MemcpyP2P`, `MemcpyOther`, `Memset`).
    - Event stats: `correlation_id` (int, links a device event to its host launch),
      `context_id` (str `$$<n>`), `tf_op` (ref, `scope/op:Type` of the launching op),
      kernels `kernel_details` (ref to `regs:32 static_shared:0 dynamic_shared:0 grid:1,1,1
      block:128,1,1 occ_pct:50`) and `theoretical_occupancy_pct`; copies `memcpy_details`
      (ref to `kind_src:pageable kind_dst:device size:4096 dest:0 async:0`), memsets
      `memset_details`.
    - `group_id` (which step an event belongs to) is not in the raw capture: xprof adds it when
      it groups events (GroupTfEvents) during conversion.
    """


def _intern(ids: dict[str, int], table, name: str) -> int:
    """The id of `name` in a metadata map (XPlane.event_metadata / stat_metadata), added if new."""
    mid = ids.get(name)
    if mid is None:
        mid = ids[name] = len(ids) + 1
        table[mid].id = mid
        table[mid].name = name
    return mid


class LineBuilder:
    def __init__(self, plane: PlaneBuilder, msg: XLine) -> None:
        self._plane = plane
        self._msg = msg

    @property
    def message(self) -> XLine:
        return self._msg

    def event(self, name: str, start_ns: int, dur_ns: int, **stats) -> LineBuilder:
        """Add an event starting at `start_ns` (same clock as the line's `timestamp_ns`: relative
        to the profile start when the space has a Task Environment plane, absolute otherwise)."""
        return self.event_ps(name, (start_ns - self._msg.timestamp_ns) * 1000, dur_ns * 1000,
                             **stats)

    def event_ps(self, name: str, offset_ps: int, duration_ps: int, **stats) -> LineBuilder:
        """Add an event with the raw wire values (picoseconds from the line's timestamp)."""
        ev = self._msg.events.add(metadata_id=self._plane.event_metadata_id(name),
                                  offset_ps=offset_ps, duration_ps=duration_ps)
        for key, value in stats.items():
            self._plane.fill_stat(ev.stats.add(), key, value)
        return self


class PlaneBuilder:
    def __init__(self, msg: XPlane) -> None:
        self._msg = msg
        self._event_ids: dict[str, int] = {}
        self._stat_ids: dict[str, int] = {}
        self._lines: dict[tuple[str, int], LineBuilder] = {}

    @property
    def message(self) -> XPlane:
        return self._msg

    @property
    def name(self) -> str:
        return self._msg.name

    def line(self, name: str, line_id: int | None = None, timestamp_ns: int = 0) -> LineBuilder:
        """The line named `name` (created on first use). Without `line_id`, a line of that name
        is reused, or a new one gets the next free id (0, 1, 2, ... in creation order)."""
        if line_id is None:
            for (n, _), lb in self._lines.items():
                if n == name:
                    return lb
            line_id = len(self._msg.lines)
        key = (name, line_id)
        if key not in self._lines:
            msg = self._msg.lines.add(id=line_id, display_id=0, name=name,
                                      timestamp_ns=timestamp_ns)
            self._lines[key] = LineBuilder(self, msg)
        return self._lines[key]

    def event_metadata_id(self, name: str, display_name: str = "") -> int:
        """Intern an event name (ids from 1, like TF's XPlaneBuilder)."""
        mid = _intern(self._event_ids, self._msg.event_metadata, name)
        if display_name:
            self._msg.event_metadata[mid].display_name = display_name
        return mid

    def event_metadata_stat(self, name: str, stat: str, value) -> None:
        """A stat on an event name's metadata (XEventMetadata.stats), as TF writes the XLA
        modules it saves on `/host:metadata`."""
        self.fill_stat(self._msg.event_metadata[self.event_metadata_id(name)].stats.add(), stat,
                       value)

    def stat_metadata_id(self, name: str) -> int:
        """Intern a stat name or a `Ref` string value (one id space, ids from 1)."""
        return _intern(self._stat_ids, self._msg.stat_metadata, name)

    def fill_stat(self, stat: XStat, name: str, value) -> None:
        stat.metadata_id = self.stat_metadata_id(name)
        if isinstance(value, Ref):
            stat.ref_value = self.stat_metadata_id(str(value))
        elif isinstance(value, bool | int):
            if value > _INT64_MAX:
                stat.uint64_value = value
            else:
                stat.int64_value = value
        elif isinstance(value, float):
            stat.double_value = value
        elif isinstance(value, str):
            stat.str_value = value
        elif isinstance(value, bytes | bytearray):
            stat.bytes_value = bytes(value)
        else:
            raise TypeError(f"stat {name!r}: unsupported value type {type(value).__name__}")

    def stat(self, name: str, value) -> None:
        """A plane-level stat (XPlane.stats)."""
        self.fill_stat(self._msg.stats.add(), name, value)

    def max_end_ns(self) -> int:
        ends = [line.timestamp_ns + (e.offset_ps + e.duration_ps) // 1000
                for line in self._msg.lines for e in line.events]
        return max(ends, default=0)


class XSpaceBuilder:
    def __init__(self, profile_start_ns: int | None = DEFAULT_PROFILE_START_NS) -> None:
        """`profile_start_ns=None`: no Task Environment plane, and line timestamps are absolute."""
        self.profile_start_ns = profile_start_ns
        self.profile_stop_ns: int | None = None  # default: start + the last event's end
        self.hostnames: list[str] = []
        self._planes: dict[str, PlaneBuilder] = {}

    def plane(self, name: str, plane_id: int = 0) -> PlaneBuilder:
        """The plane named `name`, created on first use (TF writes id 0 on host planes)."""
        if name not in self._planes:
            self._planes[name] = PlaneBuilder(XPlane(id=plane_id, name=name))
        return self._planes[name]

    def to_message(self, hostname: str | None = None) -> XSpace:
        space = XSpace()
        for pb in self._planes.values():
            space.planes.append(pb.message)
        if self.profile_start_ns is not None and TASK_ENV_PLANE not in self._planes:
            env = PlaneBuilder(XPlane(id=0, name=TASK_ENV_PLANE))
            stop = self.profile_stop_ns
            if stop is None:
                last = max((pb.max_end_ns() for pb in self._planes.values()), default=0)
                stop = self.profile_start_ns + max(last, 1)
            env.message.stats.add(metadata_id=env.stat_metadata_id("profile_start_time"),
                                  uint64_value=self.profile_start_ns)
            env.message.stats.add(metadata_id=env.stat_metadata_id("profile_stop_time"),
                                  uint64_value=stop)
            space.planes.append(env.message)
        space.hostnames.extend(self.hostnames or ([hostname] if hostname else []))
        return space

    def to_bytes(self, hostname: str | None = None) -> bytes:
        return self.to_message(hostname).SerializeToString()

    def write(self, logdir: Path, run: str = "2026_01_01_00_00_00", host: str = "host") -> Path:
        """Write `logdir/plugins/profile/<run>/<host>.xplane.pb`; return the run folder."""
        run_dir = Path(logdir) / "plugins" / "profile" / run
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / f"{host}.xplane.pb").write_bytes(self.to_bytes(host))
        return run_dir
