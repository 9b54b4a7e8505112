"""File names inside one profile run folder, `LOGDIR/plugins/profile/<run>/`.

See shared/ARCHITECTURE.md. Capture writes these and the analyzers read them; both import the
names from here so the contract has one definition. Nothing here imports TensorFlow.

Sampler files are Parquet, one row per sample:

- `<host>.threads.parquet` — one row per (sample, thread) of the profiled process:
  `ts_ns` int64 (wall clock, `time.time_ns()`, the clock of xplane timestamps once the
  `Task Environment` plane's `profile_start_time` is added), `pid` int32, `tid` int32,
  `name` string (thread name, /proc comm), `state` string (one letter as in /proc: R, S, D, ...),
  `user_s`, `system_s` float64 (cumulative CPU seconds of the thread),
  `blkio_ticks` int64 (cumulative delay-accounted block-I/O wait, /proc .../stat field 42; 0 when
  the kernel does not account it).
- `<host>.process.parquet` — one row per sample: `ts_ns` int64, `pid` int32, `cpu_percent` float64
  (process, 100 = one core), `rss_bytes` int64, `read_bytes`, `write_bytes` int64 (cumulative,
  /proc/<pid>/io), `num_threads` int32, `system_cpu_percent` float64 (whole machine,
  100 = all cores), `iowait_s` float64 (cumulative machine iowait seconds), `n_cpus` int32,
  `user_s`, `system_s` float64 (cumulative process CPU seconds), `rchar_bytes` int64 (cumulative
  bytes returned by read calls, page cache and network file systems included; since 2026-11-24,
  absent before). Since 2026-11-29 (absent before; `recadvisor.capture.cpu_limits`):
  `affinity_cpus` int32 (the CPUs the process may run on), `cpu_quota` float64 (its cgroup's CPU
  quota in cores, -1 without one), and the quota group's cumulative `cpu.stat` counters
  `cpu_periods`, `cpu_throttled_periods` int64 and `cpu_throttled_s` float64 (throttled time
  summed over the CPUs the group was stopped on; -1 without a quota or when unreadable).
  Since 2026-11-30: `children_s` float64 (cumulative CPU seconds of the process's children that
  exited and were waited for: /proc/<pid>/stat cutime + cstime; live children's CPU is in the
  others file), and, later that day (absent before), `live_children_s` float64 (cumulative CPU
  seconds of the live descendants the scans found, read at every sweep from then on: their
  utime + stime + cutime + cstime, counted from their first read for those alive at the first
  scan, from their start for later ones; a descendant that exits leaves the sum, its CPU then
  in `children_s` once waited for).
- `<host>.others.parquet` (since 2026-11-30; absent before) — the machine's other processes, scanned
  about once a second (less often where a scan would take more than half the sampler's CPU budget: a
  host with thousands of processes) and at the first and last sweeps: a row per process whose CPU
  moved since the scan before (every process at the first scan): `ts_ns` int64, `pid`, `ppid` int32,
  `name` string (comm), `cmd` string (its command line, 200 characters at most, read once its CPU
  moves after the first scan; '' before that and for kernel threads), `cpu_s` float64 (cumulative
  user + system CPU seconds), `start_ticks` int64 (its start in clock ticks after boot: with the
  pid, one process), `sampled_pid` int32 (the process the other files sample: its descendants are
  the job's own, data loader workers and such) and `sampler_pid` int32 (the sampler's process).
"""

THREADS_SUFFIX = ".threads.parquet"
PROCESS_SUFFIX = ".process.parquet"
OTHERS_SUFFIX = ".others.parquet"
XPLANE_SUFFIX = ".xplane.pb"
