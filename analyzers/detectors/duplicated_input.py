"""`duplicated_input`: several input pipelines read and parse the same data.

A hybrid-parallel recommender needs every sample's categorical features on every device (each
holds a piece of every table), so a job run as one process per device often has each process
load and parse the whole global batch itself: the host does the input work once per device.
Seed 001 loads on the first worker and broadcasts to the others instead (32% faster). The same
waste shows when data-parallel workers are not sharded and each reads every file.

Signals (docs/trace-signals.md, "Input read more than once"): the files the readers open (the
`filename` stat of TFRecord readers):
- within one process, each file opened k >= 2 times in a burst, the opens of a burst closer than
  CLOSE_REOPEN of the time the readers take to open each file seen once (pipelines with the
  same seed open each file together; one pipeline reopens a file an epoch later, or, at an epoch
  boundary of a reshuffled list, one file sooner), and the training thread pulling k batches a
  step (`Iterator::Root` calls on the training thread, one per pipeline): a single pipeline
  whose interleave has more slots than files also opens each file twice at once, and pulls one
  batch;
- across hosts (workers profiled into one run), the same files opened by several hosts: sharded
  workers read disjoint files;
- in one worker's trace, a `Shard` stage above the record readers (`...::Shard::...::TFRecord`,
  its `num_shards` stat): the elements are sharded after reading, so every worker reads every
  record and keeps 1 in num_shards (tf.distribute's AutoShardPolicy.DATA, or dataset.shard
  after the reader); sharding the file list puts the stage below the interleave, on file names.

Estimate: the fix leaves one pipeline's work of the `copies`. The exposed wait: producers with
1/copies of the work produce that much faster (bounded by the model's compute). The contention
on hosts without an accelerator (the sampler's runnable threads, as `input_preprocessing`
measures it): when no CPU-heavy cause of the pipeline's own is named, one pipeline's producers
fit beside the model (the trainer's `clean` run: runnable threads within the model's own count),
so the copies take all of it; otherwise (copies - 1)/copies of the threads beyond the model's.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.events import cat_mask
from analyzers.findings import Finding, speedup_from_saving
from analyzers.signals.input_pipeline import (
    MIN_INPUT_WAIT,
    READERS,
    RESHAPING_CAUSES,
    analyze_input_pipeline,
    file_opens,
    pipeline_causes,
    some_paths,
    step_before_fix,
)
from analyzers.signals.os_sampler import core_sharing

ID = "duplicated_input"
# A reopen within this share of one pass over the files seen (the time the readers take to open
# each of them once) is another pipeline's: the duplicated pipelines opened a file 0-41 ms apart
# against 450 ms a pass (docs/trace-signals.md, "Input read more than once").
CLOSE_REOPEN = 0.25
MIN_FILES = 2
MIN_SHARE = 0.5  # of the files opened in the window, read more than once
MIN_COPIES = 1.5  # opens of a file per burst (median over the files), and batches per step

# A Shard stage with a record reader below it (stage paths, element indices dropped): elements
# sharded after they were read.
_SHARD_ABOVE_READER = re.compile(rf"::Shard::.*::({'|'.join(READERS)})$")
_SHARD_STAGE = re.compile(r"::Shard(\[\d+\])?$")


@dataclass(frozen=True)
class Duplication:
    how: str  # "pipelines" (in one process), "hosts", or "shard" (elements sharded after reading)
    copies: float  # pipelines, hosts or shards reading each record, median
    files: list[str]  # the files read more than once (all files seen, for "shard")
    seen: int  # files opened in the window
    gap_ms: float | None  # within a process: median time between one file's close opens
    pass_ms: float | None  # within a process: one pass over the files seen
    batches_per_step: float  # Iterator::Root calls per step and host
    stage: str | None = None  # "shard": the stage path reading records below the Shard stage


def duplication(ctx: Context) -> Duplication | None:
    opens = file_opens(ctx)
    files = opens["filename"].nunique() >= MIN_FILES
    stage = next((p for p in analyze_input_pipeline(ctx).stage_paths
                  if _SHARD_ABOVE_READER.search(p)), None)
    if not files and stage is None:
        return None
    batches = _batches_per_step(ctx)
    found = None
    if files:
        found = _across_hosts(opens, batches)
        if found is None and batches >= MIN_COPIES:
            # One pipeline pulls one batch a step, even when its interleave has more slots than
            # files and reads two epochs of one file side by side (a Keras job over 8 files with
            # cycle_length 16 opened each twice within milliseconds).
            found = _within_process(opens, batches)
    if found is None and stage is not None:
        found = _sharded_after_reading(ctx, stage, opens, batches)
    return found


def _sharded_after_reading(ctx: Context, stage: str, opens: pd.DataFrame, batches: float
                           ) -> Duplication | None:
    ev = ctx.events
    shards = ev["num_shards"][cat_mask(ev["name"], _SHARD_STAGE.search)].to_numpy(np.int64)
    counts = shards[shards > 0]
    if not len(counts) or np.median(counts) < MIN_COPIES:
        return None
    files = sorted(set(opens["filename"]))
    return Duplication(how="shard", copies=float(np.median(counts)), files=files, seen=len(files),
                       gap_ms=None, pass_ms=None, batches_per_step=batches, stage=stage)


def _across_hosts(opens: pd.DataFrame, batches: float) -> Duplication | None:
    if opens["host"].nunique() < 2:
        return None
    hosts = opens.groupby("filename")["host"].nunique()
    dup = hosts[hosts >= 2]
    if len(dup) < MIN_FILES or len(dup) < MIN_SHARE * len(hosts):
        return None
    # Over every file opened, as within a process: files one host reads are no copies.
    return Duplication(how="hosts", copies=float(hosts.median()), files=sorted(dup.index),
                       seen=len(hosts), gap_ms=None, pass_ms=None, batches_per_step=batches)


def _within_process(opens: pd.DataFrame, batches: float) -> Duplication | None:
    best = None
    for _, g in opens.groupby("host", sort=True):
        seen = g["filename"].nunique()
        span = int(g["start_ns"].max() - g["start_ns"].min())
        if len(g) < 2 * MIN_FILES or span <= 0:
            continue
        pass_ns = span * seen / len(g)
        g = g.sort_values(["filename", "start_ns"], kind="stable")
        same = (g["filename"] == g["filename"].shift()).to_numpy()
        gap = g["start_ns"].diff().to_numpy()
        close = same & (gap < CLOSE_REOPEN * pass_ns)
        per_file = pd.DataFrame({"f": g["filename"].to_numpy(), "close": close,
                                 "burst": ~close}).groupby("f").sum()
        # Opens per burst, over every file seen: k pipelines open each file k times a burst.
        copies = float(((per_file["close"] + per_file["burst"]) / per_file["burst"]).median())
        dup = per_file[per_file["close"] > 0]
        if copies < MIN_COPIES or len(dup) < MIN_FILES or len(dup) < MIN_SHARE * seen:
            continue
        # One pipeline's pass over the files: the bursts, not the opens, are its files. (The
        # threshold took all opens: k times stricter with k copies, a margin kept.)
        found = Duplication(how="pipelines", copies=copies, files=sorted(dup.index), seen=seen,
                            gap_ms=float(np.median(gap[close])) / 1e6,
                            pass_ms=span * seen / int(per_file["burst"].sum()) / 1e6,
                            batches_per_step=batches)
        if best is None or found.copies > best.copies:
            best = found
    return best


def _file_list(files: list[str]) -> str:
    """A few of the files (some_paths), their common folder said once."""
    folder = os.path.commonpath(files) if len(files) > 1 and all(
        f.startswith("/") for f in files) else ""
    return (f"in {folder}: " if folder else "") + some_paths(files, shown=4)


def _batches_per_step(ctx: Context) -> float:
    """Root-iterator calls per step and host on the training thread: one per pipeline it pulls
    from. Other threads' roots are no witness: a multi-device iterator's thread pulls from one
    pipeline for every device."""
    roots = ctx.in_steps(name="Iterator::Root".__eq__, line=ctx.main_line or None,
                         columns=("host", "step_idx"))
    if roots.empty:
        return 0.0
    per_step = np.bincount(roots["step_idx"].to_numpy(), minlength=ctx.n_steps)
    return float(np.median(per_step)) / ctx.hosts_holding(roots["host"])


def detect(ctx: Context) -> Finding | None:
    dup = duplication(ctx)
    if dup is None:
        return None
    k = dup.copies
    step_ms = ctx.steps.median_step_ns() / 1e6
    wait = ctx.fractions.get("input_wait", 0.0)
    exposed = wait if wait >= MIN_INPUT_WAIT else 0.0
    compute = step_ms * (1 - exposed)
    pipe = analyze_input_pipeline(ctx)
    own_cpu_work = set(pipeline_causes(ctx, pipe)) - RESHAPING_CAUSES
    sharing = (core_sharing(ctx) if not ctx.has_accelerator and dup.how != "hosts" else None)
    slowdown = sharing.counted_slowdown if sharing else 1.0
    if slowdown > 1 and own_cpu_work:
        d, n = sharing.model_threads, sharing.n_cpus
        left = d + (sharing.runnable - d) / k
        slowdown_after = max(1.0, left * min(d, n) / (n * d))
    else:
        slowdown_after = 1.0
    after = compute / slowdown * slowdown_after
    if exposed:
        # One pipeline's work, produced k times faster, bounded by the model's compute.
        after = max(after, step_ms / k)
    before, inflated = step_before_fix(ctx, after, step_ms)
    saved = 1 - after / before if before else 0.0
    batches = dup.batches_per_step
    if dup.how == "shard":
        evidence = [f"a Shard stage above the readers keeps 1 in {k:g} of the records: every "
                    f"worker reads and parses every record and drops the others' "
                    f"(`{dup.stage}`)"]
        if dup.files:
            evidence.append(f"the readers opened {dup.seen} file(s): {_file_list(dup.files)}")
    else:
        where = (f"{k:g} hosts" if dup.how == "hosts"
                 else f"{k:g} input pipelines in one process")
        evidence = [f"{len(dup.files)} of the {dup.seen} files the readers opened were read by "
                    f"{where}: {_file_list(dup.files)}"]
    if dup.gap_ms is not None:
        evidence.append(
            f"the opens of one file came {dup.gap_ms:.1f} ms apart (median), while one pass over "
            f"the {dup.seen} files takes {dup.pass_ms:.0f} ms: copies read side by side, not "
            "the next epoch")
    if dup.how == "pipelines":
        evidence.append(f"the training thread pulled {batches:g} batches per step "
                        "(Iterator::Root calls per step)")
    if exposed:
        evidence.append(f"{wait:.0%} of step time the training thread waits for the next batch")
    if slowdown > 1:
        evidence.append(
            f"CPU contention: {sharing.runnable:.1f} of the process's threads runnable while the "
            f"model's ops ran, {sharing.model_threads:.1f} of them the model's, on "
            f"{sharing.n_cpus} CPUs: its ops took {slowdown:.2f}x as long (sampler, "
            f"{sharing.sweeps} sweeps); with one pipeline "
            + (f"{slowdown_after:.2f}x" if slowdown_after > 1 else "none (no CPU-heavy cause of "
               "its own: one pipeline's producers fit beside the model)"))
    evidence.append(f"estimate: after the fix a step is {after:.1f} ms against "
                    + (f"the untraced median step ({before:.1f} ms, run metadata)" if inflated
                       else f"the {before:.1f} ms profiled step"))
    broadcast = ("load on the first worker and broadcast the batch to the others (seed 001: "
                 "32% faster over NVLink)")
    shard_files = ("shard the files, not the records: AutoShardPolicy.FILE (with at least as "
                   "many files as workers) or dataset.shard(num_workers, worker_index) on the "
                   "file list before the interleave, so workers read disjoint files")
    if dup.how == "shard":
        remedy = (f"{shard_files[0].upper()}{shard_files[1:]}; AutoShardPolicy.DATA (what AUTO "
                  "falls back to when files cannot be sharded) and a shard after the reader make "
                  f"every worker read everything. Where every worker needs every sample "
                  f"(hybrid-parallel embeddings), {broadcast}.")
        title = f"Input read {k:g} times over: every worker reads every record and keeps 1 in {k:g}"
    else:
        remedy = ("Read and parse each batch once: one input pipeline whose batch is split among "
                  f"the devices in one process, or, one process per device, {broadcast}; where "
                  f"each worker needs only its share, {shard_files}.")
        title = (f"Input read and parsed {k:g} times: every "
                 f"{'worker' if dup.how == 'hosts' else 'pipeline'} loads the same data")
    return Finding(
        id=ID,
        title=title,
        step_fraction=min(1.0, max(0.0, 1 - after / before)) if before else 0.0,
        speedup=speedup_from_saving(saved),
        evidence=evidence,
        remedy=remedy,
        numbers={"copies": k, "files_read_more_than_once": len(dup.files),
                 "files_opened": dup.seen, "how": dup.how,
                 "reopen_gap_ms": None if dup.gap_ms is None else round(dup.gap_ms, 3),
                 "pass_ms": None if dup.pass_ms is None else round(dup.pass_ms, 3),
                 "batches_per_step": round(batches, 2),
                 "input_wait_fraction": round(wait, 4), "median_step_ms": round(step_ms, 3),
                 "contention_slowdown": round(slowdown, 3),
                 "slowdown_after": round(slowdown_after, 3)},
        config_changes=({"input_loading": "broadcast"}
                        if (ctx.config or {}).get("input_loading") == "per_device" else {}),
    )
