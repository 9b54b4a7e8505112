"""The reference training run: warm-up, a timed window (samples/s), then a profiled window.

samples/s is measured *outside* the profiled window: the profiler slows small steps a lot, so the
throughput the tuner optimizes and the speedups the analyzers estimate must not come from it.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from reference_model.config import TrainConfig

# Training iterators are never destroyed while the process runs. TF 2.21 can deadlock tearing down
# a running tf.data iterator: the destructor cancels, and SleepDataset's cancel callback (our
# storage emulation) waits on a mutex its iterator holds while pulling from its input; caught with
# py-spy at the end of ~1 in 12 `small_ops_no_xla` runs, CPU idle. Processes that train leave
# without the interpreter's teardown (recadvisor.cli.exit_process).
_ABANDONED_ITERATORS: list[Any] = []


def has_abandoned_iterators() -> bool:
    return bool(_ABANDONED_ITERATORS)


def default_cache_root() -> Path:
    import os

    base = os.environ.get("RECADVISOR_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "recadvisor"
    )
    return Path(base) / "data"


def _progress(total: int | None, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit="step",
        disable=None if enabled else True,
        leave=False,
        file=sys.stderr,
    )


def resolve_dataset(cfg: TrainConfig, data_dir: Path | None, cache_root: Path):
    from reference_model.data.cache import DatasetSpec, ensure_dataset
    from reference_model.data.manifest import Manifest
    from reference_model.schema import Schema

    if data_dir is not None:
        manifest = Manifest.load(data_dir)
        wanted = (cfg.record_format, cfg.compression)
        have = (manifest.format, manifest.compression)
        if wanted != have:
            raise ValueError(
                f"--data {data_dir} holds {have[0]}/{have[1]} records but the configuration asks "
                f"for {wanted[0]}/{wanted[1]}: drop --data to use a cached variant"
            )
        if manifest.format == "prebatched" and cfg.batch_size % manifest.rows_per_record:
            raise ValueError(
                f"--data {data_dir} has {manifest.rows_per_record} rows per record, which does "
                f"not divide --batch-size {cfg.batch_size}"
            )
        return data_dir, manifest
    schema = Schema(
        cardinalities=cfg.cardinalities or Schema().cardinalities, payload_bytes=cfg.payload_bytes
    )
    spec = DatasetSpec(
        schema=schema,
        fmt=cfg.record_format,
        rows_per_record=cfg.rows_per_record if cfg.record_format == "prebatched" else 1,
        compression=cfg.compression,
        num_examples=cfg.train_examples,
        eval_examples=cfg.eval_examples,
        num_shards=cfg.shards,
        seed=cfg.data_seed,
    )
    path = ensure_dataset(cache_root, spec)
    return path, Manifest.load(path)


def evaluate_auc(model, manifest, cfg: TrainConfig) -> float:
    from reference_model.metrics import roc_auc
    from reference_model.pipeline import build_dataset, host_casting_layer

    ds = build_dataset(cfg, manifest, split="eval")
    scores, labels = [], []
    for batch in ds:
        dense, ids, lab = host_casting_layer(batch) if cfg.cast == "host" else batch
        scores.append(model.predict(dense, ids).numpy())
        labels.append(lab.numpy())
    if not scores:
        raise ValueError("the eval split is smaller than one batch")
    return roc_auc(np.concatenate(labels), np.concatenate(scores))


def run_training(
    cfg: TrainConfig,
    *,
    logdir: Path | None,
    data_dir: Path | None = None,
    cache_root: Path | None = None,
    preset: str | None = None,
    evaluate: bool = False,
    progress: bool = True,
    python_trace: bool = False,
    measure_seconds: float | None = None,
    on_measure_step: Callable[[int, float], None] | None = None,
) -> dict[str, Any]:
    """Train; returns the run metadata (also written beside the xplane when `logdir` is given).

    `measure_seconds` ends the timed window early once that much time has passed (the tuner gives
    every trial the same time, whatever its step time); `on_measure_step(steps_done, elapsed_s)`
    is called after each timed step (the tuner's intermediate throughput reports).
    """
    t_start = time.time()
    cfg.validate()
    from reference_model.devices import setup_devices

    devices = setup_devices(cfg.devices, cfg.intra_op_threads, cfg.inter_op_threads)

    import tensorflow as tf

    from recadvisor.capture import ProfileWindow, write_run_metadata
    from reference_model.hybrid import HybridDLRM
    from reference_model.pipeline import build_dataset, host_casting_layer
    from reference_model.storage import PageCacheEvictor

    tf.random.set_seed(cfg.seed)
    data_path, manifest = resolve_dataset(cfg, data_dir, cache_root or default_cache_root())
    model = HybridDLRM(cfg, devices, manifest.schema.cardinalities, manifest.schema.num_dense)
    # Per-device loading builds the same pipeline once per device: the same files, seed and
    # order, each iterator yielding the whole global batch.
    iterators = [iter(build_dataset(cfg, manifest))
                 for _ in range(devices.count if cfg.input_loading == "per_device" else 1)]
    _ABANDONED_ITERATORS.extend(iterators)

    def unreadable(e: tf.errors.OpError) -> ValueError:
        # A truncated or corrupt record surfaces inside TF's reader; the iterator stays in
        # _ABANDONED_ITERATORS (its teardown can block), and the process reports and exits.
        return ValueError(f"unreadable data in {data_path}: {_error_reason(e.message)}")

    def next_batch(iterator) -> Any:
        try:
            batch = next(iterator)
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            raise unreadable(e) from None
        return host_casting_layer(batch) if cfg.cast == "host" else batch

    def step() -> Any:
        if cfg.fetches_in_step:
            try:
                return model.step_next(iterators[0])
            except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
                if "IteratorGetNext" not in e.message:
                    raise
                raise unreadable(e) from None
        batches = [next_batch(it) for it in iterators]
        if len(batches) == 1:
            dense, ids, labels = batches[0]
        else:
            dense, ids, labels = (list(x) for x in zip(*batches, strict=True))
        if cfg.input_copy == "serial":
            x = model.serial_copies(dense, ids, labels)
            return model.step_placed(x.dense, x.ids, x.labels)
        return model.step_host(dense, ids, labels)

    evictor = (
        PageCacheEvictor(manifest.files("train"))
        if cfg.evict_page_cache
        else contextlib.nullcontext()
    )
    step_ms: list[float] = []
    losses: list[float] = []
    window: dict[str, Any] = {}
    run_dir = None
    with evictor:
        with _progress(cfg.warmup_steps, "warm-up", progress) as bar:
            for _ in range(cfg.warmup_steps):
                losses.append(float(step()))
                bar.update()
        t0 = time.perf_counter()
        with _progress(cfg.measure_steps, "measure", progress) as bar:
            for i in range(cfg.measure_steps):
                s = time.perf_counter()
                losses.append(float(step()))  # float() waits for the step: honest per-step times
                now = time.perf_counter()
                step_ms.append((now - s) * 1e3)
                bar.update()
                if on_measure_step is not None:
                    on_measure_step(i + 1, now - t0)
                if measure_seconds is not None and now - t0 >= measure_seconds:
                    break
        measure_s = time.perf_counter() - t0
        measured = len(step_ms)
        if logdir is not None and cfg.profile_steps > 0:
            first = cfg.warmup_steps + measured
            with (
                # The window lasts profile_steps *and* profile_seconds: no total known ahead.
                _progress(None if cfg.profile_seconds > 0 else cfg.profile_steps, "profile",
                          progress) as bar,
                ProfileWindow(logdir, python_tracer_level=1 if python_trace else 0) as win,
            ):
                i = first
                t_prof = time.perf_counter()
                while (i < first + cfg.profile_steps
                       or time.perf_counter() - t_prof < cfg.profile_seconds):
                    with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                        losses.append(float(step()))
                    bar.update()
                    i += 1
            run_dir = win.run_dir
            window = {
                "start_unix_ns": win.start_ns,
                "end_unix_ns": win.end_ns,
                "first_step": first,
                "last_step": i - 1,
                "sampler": win.sampler_info,
            }
    auc = evaluate_auc(model, manifest, cfg) if evaluate else None
    samples_per_s = cfg.samples_per_step * measured / measure_s if measured else None
    meta: dict[str, Any] = {
        "tool": "recadvisor.reference_model",
        "preset": preset,
        "config": cfg.to_dict(),
        "command": sys.argv,
        "samples_per_s": samples_per_s,
        "step_time_ms": _percentiles(step_ms),
        "measured_steps": measured,
        "measured_s": round(measure_s, 3),
        "profile_window": window or None,
        "final_loss": losses[-1] if losses else None,
        "eval_auc": auc,
        "devices": {"kind": devices.kind, "count": devices.count, "names": list(devices.names)},
        "dataset": {
            "dir": str(data_path),
            "format": manifest.format,
            "compression": manifest.compression,
            "rows_per_record": manifest.rows_per_record,
        },
        "versions": _versions(tf),
        "wall_s": round(time.time() - t_start, 2),
    }
    if run_dir is not None:
        from recadvisor.capture.metadata import host_facts

        meta["host"] = host_facts()
        meta["run_dir"] = str(run_dir)
        write_run_metadata(run_dir, meta)
    return meta


def _error_reason(message: str) -> str:
    """The reader's own words in a TF error: an eager op's follow its `{{function_node ...}}`;
    a step function's (graph execution) precede the `[[{{node ...}}]]` line, after a
    `(0) DATA_LOSS:` prefix when several devices report it."""
    lines = message.splitlines()
    for before, line in zip(lines, lines[1:], strict=False):
        if "[[{{node" in line:
            return re.sub(r"^\s*\(\d+\) [A-Z_]+:\s*", "", before).strip()
    return message.split("}} ")[-1].split(" [Op:")[0].splitlines()[0]


def _percentiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    a = np.asarray(values)
    return {
        "p50": round(float(np.percentile(a, 50)), 3),
        "p90": round(float(np.percentile(a, 90)), 3),
        "p99": round(float(np.percentile(a, 99)), 3),
        "mean": round(float(a.mean()), 3),
    }


def _versions(tf) -> dict[str, str]:
    import platform

    import recadvisor

    return {
        "tensorflow": tf.__version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "recadvisor": getattr(recadvisor, "__version__", "0"),
    }
