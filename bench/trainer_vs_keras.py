"""The `clean` reference trainer beside a plain Keras `model.fit` DLRM of the same shape, and both
against a roofline for this machine, measured in one run.

Keras side: what a typical user writes — one Embedding layer per feature, Adam for everything, the
same synthetic dataset read as per-example TFRecords through map(parse_single_example) -> batch ->
prefetch. Roofline: the step's FLOPs at the matmul peak measured here, its (lower-bound) bytes at
the memory bandwidth measured here; the bound is the larger of the two times.

    .venv/bin/python bench/trainer_vs_keras.py [--repeats 3] [--steps 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from rich.console import Console
from rich.table import Table

from reference_model.config import TrainConfig
from reference_model.model import dense_layer_sizes
from reference_model.presets import get_preset
from reference_model.schema import Schema


def step_cost(cfg: TrainConfig, num_cat: int) -> tuple[float, float]:
    """(FLOPs, bytes) of one training step of the DLRM in `cfg` (forward + backward).

    FLOPs: every matmul (MLP layers and the interaction's batched matmul) costs 2*MACs forward
    and twice that backward. Bytes, a lower bound: gathered embedding rows read for the lookup
    and read+written for the update, plus each activation written forward and read backward.
    """
    b, dim = cfg.batch_size, cfg.embedding_dim
    bottom, top_in, top = dense_layer_sizes(cfg, num_cat)
    macs = 0
    acts = 0
    prev = 13
    for w in bottom:
        macs += prev * w
        acts += w
        prev = w
    n = num_cat + 1
    macs += n * n * dim
    acts += n * n + n * dim
    prev = top_in
    for w in top:
        macs += prev * w
        acts += w
        prev = w
    flops = 3 * 2 * macs * b
    emb_bytes = b * num_cat * dim * 4
    bytes_ = 3 * emb_bytes + 2 * acts * b * 4
    return float(flops), float(bytes_)


def _median_seconds(fn, arg, runs: int = 10) -> float:
    import numpy as np

    fn(arg)  # trace and warm up
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn(arg).numpy()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def machine_peaks() -> tuple[float, float]:
    """(matmul FLOP/s, memory bytes/s) measured with TensorFlow on this machine, medians."""
    import tensorflow as tf

    a = tf.random.normal((2048, 2048))
    flops = 2 * 2048**3 / _median_seconds(tf.function(lambda x: tf.matmul(x, x)), a)
    x = tf.random.normal((32 * 1024 * 1024,))
    bw = 2 * x.shape[0] * 4 / _median_seconds(tf.function(lambda v: v * 2.0), x)
    return flops, bw


def keras_worker(steps: int, warmup: int) -> dict:
    import numpy as np
    import tensorflow as tf

    from reference_model.data.records import parse_single
    from reference_model.schema import CAT_NAMES, DENSE_NAMES, LABEL_NAME
    from reference_model.train import default_cache_root, resolve_dataset

    keras = tf.keras
    cfg = get_preset("clean").config().replace(record_format="example", parse="per_example")
    _, manifest = resolve_dataset(cfg, None, default_cache_root())
    schema = manifest.schema
    bottom, _, top = dense_layer_sizes(cfg, schema.num_cat)

    def to_inputs(f):
        dense = tf.math.log1p(tf.stack([f[k] for k in DENSE_NAMES], axis=-1))
        cats = {k: f[k] for k in CAT_NAMES}
        return {"dense_features": dense, **cats}, f[LABEL_NAME]

    ds = (
        tf.data.TFRecordDataset(manifest.files("train"), num_parallel_reads=tf.data.AUTOTUNE)
        .repeat()
        .map(lambda s: parse_single(s, schema), num_parallel_calls=tf.data.AUTOTUNE)
        .batch(cfg.batch_size, drop_remainder=True)
        .map(to_inputs, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )
    dense_in = keras.Input((13,), name="dense_features")
    cat_in = [keras.Input((), dtype="int64", name=k) for k in CAT_NAMES]
    x = dense_in
    for w in bottom:
        x = keras.layers.Dense(w, activation="relu")(x)
    embs = [
        keras.layers.Embedding(c, cfg.embedding_dim)(i)
        for c, i in zip(schema.cardinalities, cat_in, strict=True)
    ]
    n = schema.num_cat + 1
    rows, cols = np.tril_indices(n, k=-1)

    class DotInteraction(keras.layers.Layer):
        def call(self, bottom_out, emb_list):
            feats = keras.ops.stack([bottom_out, *emb_list], axis=1)
            z = keras.ops.matmul(feats, keras.ops.transpose(feats, (0, 2, 1)))
            flat = keras.ops.reshape(z, (-1, n * n))
            pairs = keras.ops.take(flat, rows * n + cols, axis=1)
            return keras.ops.concatenate([bottom_out, pairs], axis=1)

    y = DotInteraction()(x, embs)
    for i, w in enumerate(top):
        y = keras.layers.Dense(w, activation=None if i == len(top) - 1 else "relu")(y)
    model = keras.Model([dense_in, *cat_in], y)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
    )

    class Timer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times = []

        def on_train_batch_end(self, batch, logs=None):
            self.times.append(time.perf_counter())

    timer = Timer()
    model.fit(ds, epochs=1, steps_per_epoch=warmup + steps, verbose=0, callbacks=[timer])
    t = timer.times[warmup - 1 :]
    return {
        "samples_per_s": cfg.batch_size * steps / (t[-1] - t[0]),
        "step_ms": 1e3 * statistics.median(b - a for a, b in zip(t, t[1:], strict=False)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--worker", choices=["keras", "peaks"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker == "keras":
        print(json.dumps(keras_worker(args.steps, warmup=5)))
        return 0
    if args.worker == "peaks":
        print(json.dumps(machine_peaks()))
        return 0

    def sub(extra: list[str]) -> dict:
        proc = subprocess.run([sys.executable, *extra], capture_output=True, text=True, timeout=900)
        if proc.returncode:
            raise SystemExit(f"bench worker failed: {proc.stderr.strip().splitlines()[-1:]}")
        out = proc.stdout.strip()
        # `recadvisor train --json` prints indented JSON; the workers print one line last.
        return json.loads(out) if out.startswith("{") else json.loads(out.splitlines()[-1])

    console = Console(stderr=True)
    ours, theirs = [], []
    for r in range(args.repeats):
        m = sub(
            [
                "-m",
                "recadvisor",
                "train",
                "--preset",
                "clean",
                "--json",
                "--no-progress",
                "--steps",
                str(args.steps),
            ]
        )
        ours.append((m["samples_per_s"], m["step_time_ms"]["p50"]))
        k = sub([__file__, "--worker", "keras", "--steps", str(args.steps)])
        theirs.append((k["samples_per_s"], k["step_ms"]))
        console.log(
            f"repeat {r + 1}: recadvisor clean {ours[-1][0]:,.0f} samples/s, "
            f"keras fit {theirs[-1][0]:,.0f} samples/s"
        )
    peak_flops, peak_bw = sub([__file__, "--worker", "peaks"])
    cfg = get_preset("clean").config()
    flops, bytes_ = step_cost(cfg, Schema().num_cat)
    roof_ms = 1e3 * max(flops / peak_flops, bytes_ / peak_bw)
    ours_sps = statistics.median(x[0] for x in ours)
    theirs_sps = statistics.median(x[0] for x in theirs)
    ours_ms = 1e3 * cfg.batch_size / ours_sps
    theirs_ms = 1e3 * cfg.batch_size / theirs_sps
    table = Table(
        title=f"clean preset vs Keras model.fit, batch {cfg.batch_size} (medians of {args.repeats})"
    )
    for c in ("job", "samples/s", "ratio to Keras", "step ms", "roofline ms", "% of roofline"):
        table.add_column(c, justify="left" if c == "job" else "right")
    table.add_row(
        "recadvisor train --preset clean",
        f"{ours_sps:,.0f}",
        f"{ours_sps / theirs_sps:.2f}x",
        f"{ours_ms:.1f}",
        f"{roof_ms:.1f}",
        f"{100 * roof_ms / ours_ms:.0f}%",
    )
    table.add_row(
        "Keras model.fit (per-example tf.data)",
        f"{theirs_sps:,.0f}",
        "1.00x",
        f"{theirs_ms:.1f}",
        f"{roof_ms:.1f}",
        f"{100 * roof_ms / theirs_ms:.0f}%",
    )
    Console(width=160).print(table)
    print(
        f"roofline inputs: {flops / 1e9:.2f} GFLOP and {bytes_ / 1e6:.1f} MB per step; "
        f"measured peaks {peak_flops / 1e9:.0f} GFLOP/s (2048^3 matmul), "
        f"{peak_bw / 1e9:.1f} GB/s (streaming scale)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
