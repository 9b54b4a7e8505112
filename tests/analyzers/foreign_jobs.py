"""Small TF jobs that are not ours, each with one generic anti-pattern or its fix, profiled with
plain TensorFlow APIs (`tf.profiler.experimental.start/stop`).

    python foreign_jobs.py LOGDIR MODE

MODE:
- `generator`: Keras fit fed by `Dataset.from_generator` doing per-example NumPy work.
- `pyfunc`: Keras fit whose map is a `tf.py_function`, num_parallel_calls=AUTOTUNE.
- `python_vectorized`: their fix, the same feature work as TF ops on whole batches in a parallel
  map (all three print their untraced step time before the profiled steps).
- `keras_eager`: Keras fit with run_eagerly=True (no tf.function, no step markers).
- `tensorboard_callback`: Keras fit profiled by `tf.keras.callbacks.TensorBoard(profile_batch=)`
  (the run lands in LOGDIR/train/plugins/profile/...).
- `keras_spe1` / `keras_spe8`: Keras fit of a small model on cached batches, one step per call
  (host overhead around each call) or steps_per_execution=8.
- `eager`: a custom loop whose step is plain Python (every op dispatched eagerly).
- `graph`: the same step wrapped in `tf.function`. `functions_eagerly`: wrapped, but under
  `tf.config.run_functions_eagerly(True)`.
- `retrace` / `stable`: a tf.function step called with a new Python float every step (retraced
  each time) or with a tensor.
- `mirrored4` / `mirrored1`: a custom loop under MirroredStrategy over 4 (or 1) logical CPU
  devices with a distributed dataset.
- `numpy_feed` / `dataset_feed`: a custom loop calling a `tf.function` step with float64 NumPy
  batches (converted on the Python thread every call, cast inside), or with float32 batches from
  a cached, prefetched tf.data pipeline.
- `records_gzip` / `records_plain` / `records_prebatched`: Keras fit on Criteo-like
  `tf.train.Example` TFRecord files read by a parallel interleave and parsed a batch at a time:
  one example per record, GZIP-compressed (`*.tfrecord.gz`) or not (`*.tfrecord`), or one whole
  batch per record (prebatched, seed 002). `records_naive`: the uncompressed files through the
  tutorial pipeline (one `TFRecordDataset`, each example parsed as it comes, then batch).
- `small_files` / `packed_files`: Keras fit on 8,192 examples of 260 bytes, one file per example
  read by `tf.io.read_file` in a map (the layout of per-sample image or .npy datasets), or the
  same bytes packed one batch per TFRecord and decoded a batch at a time.
- `many_shards` / `few_shards`: Keras fit on 32,768 examples of 260 bytes in TFRecord files of
  32-example records read by a 4-way parallel interleave: 1,024 files of one record each
  (over-sharded: 8 files opened per step at batch 256), or 8 files of 128 records; no profiler
  calls: run it under `recadvisor capture`.
- `pools_one` / `pools_inline` / `pools_default`: Keras fit of a 64-1024-1024-1 MLP on cached
  batches of 1,024, TF's intra- and inter-op pools set to one thread each, to one intra-op and
  two inter-op threads, or left to TF; no profiler
  calls: run it under `recadvisor capture` (the sampler is what sees idle cores).
- `steady`: the `pools_default` job as one fit() of 400 steps (120 in the tests' short runs); no
  profiler calls.
- `cold_small_reads` / `cold_large_reads`: Keras fit on 544 MB of TFRecords (16 KB of payload
  per example) kept cold (the reference trainer's page-cache evictor: dropped from the cache,
  readahead off), read by 16 readers with 4 KB buffers or by 4 with 256 KB buffers; no profiler
  calls: run it under `recadvisor capture` (the sampler is what sees D state).
- `multiworker`: two worker processes of MultiWorkerMirroredStrategy on this machine, a custom
  loop over a 64-512-512-1 MLP, 256 examples per worker: the gradients' all-reduce goes over RPC
  every step. Profiled the way TensorBoard's "capture profile" does it, a profiler server in each
  worker and one client call naming both: a `localhost_<port>.xplane.pb` per worker.
  `multiworker_compute`: the same two workers on one 64x64 layer with 16,384 examples each (16 KB
  of gradients, compute-bound). `<either>_single`: its global batch in one worker.
  `multiworker_files` / `multiworker_files_sharded`: the `multiworker` job reading 8 TFRecord
  files (32-row records) through a 2-way interleave, sharded by tf.distribute's
  `AutoShardPolicy.DATA` (every worker reads every file and keeps its share) or `FILE` (each
  worker reads its own 4 files).
  `multiworker_straggler` / `multiworker_slow_input`: the `multiworker` job in which worker 1
  runs 12 more 512x512 matmuls in its replica's step, ahead of the all-reduce, or builds its
  batches from a 60 ms Python function (3x a step): the other worker waits for it in
  every all-reduce.
- `embedding_adam` / `embedding_adagrad` / `embedding_read` / `embedding_sparse`: a custom loop
  over a 1,000,000 x 32 embedding table (26 ids per example, batch 1,024) and a 64-unit layer.
  `embedding_adam`: Keras 3's Adam on every variable (it densifies the table's gradient and
  updates every row); `embedding_adagrad`: Keras 3's Adagrad (every row, no densifying op).
  `embedding_read`: the table updated by a scatter, its rows gathered from a read of it (copied
  whole each step). `embedding_sparse`: rows looked up from the variable (ResourceGather) and
  updated by a scatter, Adam for the dense layer only. `embedding_sgd_clipped`: Keras 3's SGD
  with `global_clipnorm=1.0` on every variable (the norm is taken of a densified table
  gradient); `embedding_sgd_clip_first`: `tf.clip_by_global_norm` on the gradients, then SGD
  (sparse throughout); `embedding_sgd`: SGD without clipping. `<mode>_xla`: the step compiled
  by XLA (`jit_compile=True`), its batch fetched from Python before the call, 8 profiled steps.
- `onehot_dense` / `onehot_tf` / `onehot_embedding`: Keras fit of 8 categorical features of
  10,000 ids each (batch 512) into a 256-128-1 MLP, each feature encoded by
  `CategoryEncoding(output_mode="one_hot")` (or `tf.one_hot` in a Lambda) and multiplied by a
  `Dense(16, use_bias=False)`, or looked up by `Embedding(10_000, 16)`: the same function.
  `onehot_dense_xla` / `onehot_embedding_xla`: the first and the last compiled by XLA
  (`jit_compile=True`, 8 profiled steps).
  `multihot_dense` / `multihot_embedding`: one feature of 10 ids per example out of 10,000,
  `CategoryEncoding(output_mode="count")` into `Dense(16, use_bias=False)`, or `Embedding` summed
  over the ids. `wide_onehot` / `wide_embedding`: the 8 features' one-hots concatenated into one
  linear unit (a "wide" part), or `Embedding(80_000, 1)` of offset ids summed.
  `session_onehot` / `session_embedding`: a TF1 `Session` loop of the 8 one-hot features times
  a 10,000 x 16 weight each (`tf.one_hot(ids, V) @ w`), or `tf.nn.embedding_lookup(w, ids)`,
  `tf.compat.v1.train.AdamOptimizer`. `session_embedding_sparse`: the lookups with the tables
  updated by `GradientDescentOptimizer` (their rows only), Adam for the MLP.
  `session_indicator_column` / `session_embedding_column`: the same 8 features as TF1 feature
  columns through `input_layer` (`indicator_column` or `embedding_column(c, 16)` of
  `categorical_column_with_identity`), a 256-128-1 MLP, `AdagradOptimizer`.
- `periodic_checkpoint` / `periodic_gc` / `periodic_none`: a custom loop over a 250,000 x 64
  embedding table (a `tf.function` step of ~10 ms) that every 5th step writes a checkpoint of
  the table and layer (`tf.train.Checkpoint.write`), or calls `gc.collect()` with 1.5M Python
  lists alive (a Python-side vocabulary: the "collect to contain memory" habit), or does nothing
  more. The periodic work runs inside the step's `Trace` and in the untraced timing too.
  `periodic_gc_unprofiled` / `periodic_sleep_unprofiled`: the loop with `gc.collect()` or a
  200 ms `time.sleep` every 5th step, 80 steps, no profiler calls: for `recadvisor capture`.
- `keras_checkpoint`: Keras fit of a 64-2048-2048-1 MLP on batches of 64 with a
  `ModelCheckpoint` saving the weights (`.weights.h5`, 17 MB, through h5py) every 5 batches.
  Prints `untraced_step_ms=` without the callback and `untraced_step_ms_checkpoint=` with it.
- `keras_xla_from_start`: Keras fit of a 64-512-512-1 MLP with `jit_compile=True`, profiled
  from before its first step (its tracing and XLA compilation inside the window).
- `hashing_in_model` / `hashing_in_pipeline`: Keras fit of a small Criteo-like model (26 raw
  integer id columns, an 8-wide embedding of 10,000 rows each, 13 numbers, a 64-32-1 MLP) whose
  ids go through one `tf.keras.layers.Hashing` layer per column, inside the model, or in a
  parallel `dataset.map` before prefetch. `lookup_in_model`: 26 string columns through
  `StringLookup` layers (a 1,000-word vocabulary each) inside the model.
- `keras_epochs` / `keras_epochs_repeat`: Keras fit of a 64-512-512-1 MLP for 3 epochs of 12
  batches of 256 (a batched map, prefetch), profiled by the TensorBoard callback from the 8th to
  the 32nd batch: the window holds two epochs' ends. The dataset as it is (a new iterator every
  epoch) or repeated with steps_per_epoch=12 (one iterator). `keras_validation`: the first with
  `validation_data` of 24 batches, profiled around the whole fit (tf.profiler start/stop).
  `<either>_mirrored`: the first two under MirroredStrategy over 2 logical CPU devices (Keras
  distributes the dataset: per-device iterators each epoch).
- `pydataset` / `pydataset_threads` / `pydataset_processes`: Keras fit of a 64-256-1 MLP on a
  Keras 3 `PyDataset` whose `__getitem__` builds each batch of 256 rows one example at a time
  in NumPy (~4 ms a batch): one worker (Keras adds a tf.data prefetch), 4 worker threads, or 4
  worker processes (Keras' own queue, no tf.data prefetch). `pydataset_processes_unprofiled`:
  the last without profiler calls, for `recadvisor capture` (the workers are the job's own
  child processes; Keras starts new ones at each of its 3 `fit()` calls);
  `pydataset_processes_steady`: the same in one `fit()` of 400 steps (one set of workers).
- `session_per_example` / `session_batched`: a TF1-style graph-mode loop (`tf.compat.v1.Session`,
  `disable_eager_execution`) training a 64-256-256-1 MLP with `tf.compat.v1.train.AdamOptimizer`
  from a one-shot iterator over 16,384 `tf.train.Example` records: one example per record, parsed
  one at a time, then batched, no prefetch (the TF1 tutorial pipeline), or one whole batch per
  record, parsed a record at a time, prefetched. `session_checkpoint` / `session_none`: the
  batched loop plus a 250,000 x 64 lookup table (not trained) that a `tf.compat.v1.train.Saver`
  writes every 5th step, or no saver. `session_summaries`: `session_none` fetching
  `tf.compat.v1.summary.merge_all()` (a histogram of every variable, the table's among them,
  and the loss) with every run and writing it with a `FileWriter`. `session_queue`: the loop
  reading through queue runners
  (`string_input_producer`, `TFRecordReader`, `train.batch` with 2 threads), whose threads call
  Session.run thousands of times beside the training thread; `session_queue_data`: the same
  one-example records through tf.data instead (batched, parsed a batch at a time on AUTOTUNE
  threads, prefetched). No step markers in any of them: steps
  are the Session.run calls.
- `ps_adam` / `ps_sparse` / `ps_fetch_each`: ParameterServerStrategy on this machine: a
  coordinator (this process), two workers and one parameter server (`tf.distribute.Server`
  processes), a small Criteo-like model (8 tables of 100,000 x 16, 13 numbers, a 141-256-1
  MLP, batches of 512) trained by a custom loop the coordinator schedules. `ps_adam`: Keras 3's
  Adam on every variable (it densifies the tables' gradients; the update runs on the server).
  `ps_sparse`: the tables updated by `scatter_sub` of their rows, Adam for the MLP only; the
  coordinator schedules 4 steps, then joins. `ps_fetch_each`: `ps_sparse` fetching every step's
  loss (the workers take turns). `ps_hot`: `ps_sparse` with two servers and no variable
  partitioner, the first table looked up 64 times per example (a multi-hot feature, summed):
  its server does most of the work. Profiled by the profiler client on the workers' and
  servers' profiler ports: a `localhost_<port>.xplane.pb` each. `ps_loop4`: `ps_sparse` with
  4 batches per scheduled function (the per-call remedy; its `untraced_step_ms` is per batch).
- `ps_tf1_adam` / `ps_tf1_adagrad`: the same model in TF1 between-graph replication
  (`tf.compat.v1` graph mode, `replica_device_setter` over one "ps" task), two worker processes
  each running a `Session(server.target)` loop, with `tf.compat.v1.train.AdamOptimizer` (its
  whole moment slots scaled every step) or `AdagradOptimizer` (rows only); traced by the
  profiler client on the three processes. Prints worker 0's `untraced_step_ms`.
- `xla_varying_shapes` / `xla_static_shapes` / `xla_retrace`: a custom loop calling a
  `tf.function(jit_compile=True, reduce_retracing=True)` step over a 50,000 x 32 table with
  multi-hot ids padded to the batch's longest list: every other batch 64 ids long, the others
  a new length each (XLA compiles the step again for each), or every batch 64 long; `xla_retrace`
  without reduce_retracing (each new length retraces and recompiles). 3 warm-up steps, 20 timed
  untraced (`untraced_step_ms`, the mean), 12 profiled.
- `keras_xla_padded` / `keras_xla_fixed`: Keras fit (`jit_compile=True`) of an Embedding +
  pooling + Dense model on shuffled `padded_batch(64)` batches of long-tailed lengths (up to
  400), padded to each batch's longest list or to 400; 5 warm-up steps, then 30 with the
  TensorBoard callback profiling batches 5-16. Prints `fit_s=` (the 30 steps).
- `debug_none` / `debug_histograms` / `debug_histograms_rare` / `debug_histograms_every10` /
  `debug_histograms_eager` / `debug_dump` / `debug_check_numerics`: a custom loop over a
  250,000 x 64 embedding table (26 ids per example, batch 512) and a 1664-256-1 MLP, a
  `tf.function` step of ~11 ms: as it is; writing every variable's histogram and the loss from
  inside the step (`tf.summary`, every step, or under `record_if` every 100th or every 10th
  step); with tfdbg's `enable_dump_debug_info` (FULL_HEALTH); or with
  `tf.debugging.enable_check_numerics()`. 20 profiled steps (8 for `debug_histograms`, ~1 s
  each). `debug_histograms_eager`: the w1 and w2 histograms written eagerly from the Python loop
  after each call.
- `tfdata_debug` / `tfdata_nodebug`: Keras fit of a 64-256-1 MLP on batches of 256 mapped by
  20 TF ops (`num_parallel_calls=AUTOTUNE`, then `prefetch(AUTOTUNE)`), with or without
  `tf.data.experimental.enable_debug_mode()` (which runs the map as Python, sequentially,
  without the prefetch).
- `keras_histograms`: Keras fit of a 100,000 x 32 Embedding (26 ids per example, batch 512)
  and a 256-unit layer in epochs of 8 steps, with the TensorBoard callback's
  `histogram_freq=1` (every weight's histogram written eagerly at each epoch's end); prints
  `untraced_step_ms_none=` (3 epochs without the callback) and `untraced_step_ms=` (with it),
  then profiles 2 epochs.
Prints `untraced_step_ms=<x>` (the step timed before the profiler starts) for the custom loops.
"""

import atexit
import contextlib
import gc
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

logdir, mode = sys.argv[1], sys.argv[2]
# The tests' runs (their fixtures set FOREIGN_JOBS_SHORT=1) cut the untraced phases that only time
# a job for the docs (`untraced_step_ms=`) to a few steps: the tests read the profile alone. The
# numbers the docs quote come from runs without it.
SHORT = os.environ.get("FOREIGN_JOBS_SHORT") == "1"
if not mode.startswith("_"):
    # A job's scratch files (records, flag files, TF's autograph modules), its child processes'
    # too, go in one folder that leaves with it: ~150 runs a day left ~700 MB in /tmp.
    _scratch = tempfile.mkdtemp(prefix="foreign-job-")
    os.environ["TMPDIR"] = tempfile.tempdir = _scratch
    atexit.register(shutil.rmtree, _scratch, ignore_errors=True)
rng = np.random.default_rng(0)


def mlp(inputs: int, *hidden: int, **compile_args) -> tf.keras.Model:
    """An inputs-hidden...-1 ReLU MLP, compiled with Adam on a from-logits binary cross-entropy
    (`compile_args` go to compile)."""
    model = tf.keras.Sequential([tf.keras.Input((inputs,)),
                                 *(tf.keras.layers.Dense(h, "relu") for h in hidden),
                                 tf.keras.layers.Dense(1)])
    model.compile("adam", tf.keras.losses.BinaryCrossentropy(from_logits=True), **compile_args)
    return model


def fit_timed(model: tf.keras.Model, ds: tf.data.Dataset, timed: int, then: int,
              profile: bool = True, median: bool = False) -> None:
    """5 warm-up steps, `timed` steps timed untraced (printed as `untraced_step_ms=`, and with
    `median` the median interval between batch ends as `untraced_step_median_ms=`: a one-off
    stall inside the timed steps moves the mean), then `then` more steps under tf.profiler
    (without it when `profile` is off: the window of a job run under `recadvisor capture`)."""
    model.fit(ds, steps_per_epoch=5, epochs=1, verbose=0)
    ends: list[float] = []
    record = tf.keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: ends.append(time.perf_counter()))
    t = time.perf_counter()
    model.fit(ds, steps_per_epoch=timed, epochs=1, verbose=0,
              callbacks=[record] if median else None)
    print(f"untraced_step_ms={(time.perf_counter() - t) / timed * 1e3:.3f}", flush=True)
    if median:
        print(f"untraced_step_median_ms={np.median(np.diff(ends)) * 1e3:.3f}", flush=True)
    if profile:
        tf.profiler.experimental.start(logdir)
    model.fit(ds, steps_per_epoch=then, epochs=1, verbose=0)
    if profile:
        tf.profiler.experimental.stop()


def xy(rows: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Float32 rows of 64 features, a label and any payload -> (features, 0/1 label)."""
    return rows[..., :64], tf.cast(rows[..., 64:65] > 0, tf.float32)


def decode_rows(record: tf.Tensor, width: int = 65) -> tuple[tf.Tensor, tf.Tensor]:
    """A record of raw float32 rows `width` wide -> (features, label) of its rows."""
    return xy(tf.reshape(tf.io.decode_raw(record, tf.float32), (-1, width)))


def write_shards(files: list[str], per_record: int, rows_of) -> None:
    """32,768 examples spread evenly over `files`, TFRecord records of `per_record` rows each
    (`rows_of()` gives a record's float32 rows)."""
    for path in files:
        with tf.io.TFRecordWriter(path) as w:
            for _ in range(32768 // len(files) // per_record):
                w.write(rows_of().tobytes())


def keras_fit(ds: tf.data.Dataset, run_eagerly: bool = False, steps_per_execution: int = 1
              ) -> None:
    model = mlp(64, 256, run_eagerly=run_eagerly, steps_per_execution=steps_per_execution)
    model.fit(ds, steps_per_epoch=5, epochs=1, verbose=0)
    tf.profiler.experimental.start(logdir)
    model.fit(ds, steps_per_epoch=12 * steps_per_execution, epochs=1, verbose=0)
    tf.profiler.experimental.stop()


def dense_mlp(batch: int, hidden: int, jit_compile: bool | str = "auto"
              ) -> tuple[tf.data.Dataset, tf.keras.Model]:
    """A 64-hidden-hidden-1 Keras MLP compiled with Adam, and 64 cached batches of random rows."""
    x = rng.normal(size=(batch * 64, 64)).astype("float32")
    y = (x[:, :1] > 0).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).cache().repeat().prefetch(2)
    return ds, mlp(64, hidden, hidden, jit_compile=jit_compile)


def features(x: np.ndarray) -> np.ndarray:
    for _ in range(20):  # per-example Python feature engineering
        x = np.tanh(x) + 0.01
    return x


def mlp_step(layers: int):
    """One SGD step of a `layers`-deep 32-wide ReLU MLP on a fixed batch, as plain Python."""
    x = tf.constant(rng.normal(size=(256, 32)).astype("float32"))
    ws = [tf.Variable(tf.random.normal((32, 32)) * 0.1) for _ in range(layers)]

    def step(lr=0.01):
        with tf.GradientTape() as tape:
            h = x
            for w in ws:
                h = tf.nn.relu(h @ w)
            loss = tf.reduce_mean(h)
        for w, g in zip(ws, tape.gradient(loss, ws), strict=True):
            w.assign_sub(lr * g)
    return step


def tf1_id_batches(vocab: int, n_features: int, batch: int = 512) -> tuple[tf.Tensor, tf.Tensor]:
    """Graph mode on, then a TF1 graph's batches of `n_features` ids below `vocab` and 0/1
    labels (32 cached batches, repeated)."""
    tf.compat.v1.disable_eager_execution()
    ids_all = rng.integers(0, vocab, size=(batch * 32, n_features))
    y_all = rng.integers(0, 2, size=(batch * 32,)).astype("float32")
    return tf.compat.v1.data.make_one_shot_iterator(
        tf.data.Dataset.from_tensor_slices((ids_all, y_all)).batch(batch).cache().repeat()
        .prefetch(2)).get_next()


def tf1_mlp_loss(h: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
    """A 256-128-1 ReLU MLP over `h` (TF1 variables w0..w2) and its mean sigmoid
    cross-entropy against `y`."""
    v1 = tf.compat.v1
    for i, units in enumerate((256, 128, 1)):
        w = v1.get_variable(f"w{i}", [h.shape[-1], units],
                            initializer=v1.glorot_uniform_initializer())
        h = h @ w
        h = tf.nn.relu(h) if units > 1 else h
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=h[:, 0]))


def profile_loop(step, steps: int = 20, markers: bool = True, timed: int = 50,
                 median: bool = False) -> None:
    """5 warm-up steps, `timed` timed untraced (with `median`, their median too, as
    `untraced_step_median_ms=`), then `steps` profiled, each in a `train` step marker unless
    `markers` is false (the job's own calls are then all the trace has)."""
    for _ in range(5):
        step()
    times = []
    t = time.perf_counter()
    for _ in range(timed):
        step()
        times.append(time.perf_counter())
    print(f"untraced_step_ms={(time.perf_counter() - t) / timed * 1e3:.3f}", flush=True)
    if median:
        print(f"untraced_step_median_ms={np.median(np.diff([t, *times])) * 1e3:.3f}",
              flush=True)
    tf.profiler.experimental.start(logdir)
    for i in range(steps):
        with (tf.profiler.experimental.Trace("train", step_num=i, _r=1) if markers
              else contextlib.nullcontext()):
            step()
    tf.profiler.experimental.stop()


# Per-worker batch and layer widths of the multi-worker jobs.
_MULTIWORKER = {"multiworker": (256, (64, 512, 512, 1)), "multiworker_compute": (16384, (64, 256)),
                "multiworker_files": (256, (64, 512, 512, 1)),
                "multiworker_files_sharded": (256, (64, 512, 512, 1)),
                "multiworker_straggler": (256, (64, 512, 512, 1)),
                "multiworker_slow_input": (256, (64, 512, 512, 1))}
# The straggling worker's extra work: matmuls on its step, or a Python function on its batches.
STRAGGLER_MATMULS = 12
SLOW_INPUT_S = 0.06


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on localhost."""
    socks = [socket.socket() for _ in range(n)]
    for sock in socks:
        sock.bind(("localhost", 0))
    ports = [sock.getsockname()[1] for sock in socks]
    for sock in socks:
        sock.close()
    return ports


def multiworker(kind: str) -> None:
    """Start the workers, wait until they train, trace them all with the profiler client. A
    TF 2.21 worker now and then dies in native code while it is traced ("double free or
    corruption", 1 to 2 runs in 10 here; the other worker's all-reduce then fails): the whole run
    is tried again, from an empty logdir."""
    n = 1 if kind.endswith("_single") else 2
    with tempfile.TemporaryDirectory(prefix="mw-files-") as folder:
        if "_files" in kind:
            # The workers' TFRecord files, written once here: 8 files of 32-row records.
            files = [str(Path(folder) / f"part-{i}.tfrecord") for i in range(8)]
            write_shards(files, 32, lambda: rng.normal(size=(32, 65)).astype("float32"))
            os.environ["MW_FILES"] = json.dumps(files)
        for _ in range(4):
            shutil.rmtree(logdir, ignore_errors=True)
            out = _multiworker_once(kind, n)
            if len(list(Path(logdir).rglob("*.xplane.pb"))) == n:
                print(out, end="", flush=True)
                return
    raise SystemExit("the workers wrote no profile in 4 tries")


def _multiworker_once(kind: str, n: int) -> str:
    ports = free_ports(2 * n)
    flags = Path(tempfile.mkdtemp(prefix="workers-"))
    procs = [subprocess.Popen([sys.executable, __file__, logdir, "_worker", kind, str(i),
                               str(flags), *map(str, ports)], stdout=subprocess.PIPE, text=True)
             for i in range(n)]
    deadline = time.time() + 240
    while not all((flags / f"ready{i}").exists() for i in range(n)):
        if time.time() > deadline or any(p.poll() is not None for p in procs):
            for p in procs:
                p.kill()
            return ""
        time.sleep(0.2)
    # TF 2.21: each worker saves its own xplane, and the client then says it got none.
    with contextlib.suppress(RuntimeError):
        tf.profiler.experimental.client.trace(
            ",".join(f"grpc://localhost:{p}" for p in ports[n:]), logdir, duration_ms=1500)
    (flags / "stop").touch()
    return [p.communicate(timeout=120)[0] for p in procs][0]


def multiworker_worker(kind: str, index: int, flags: Path, ports: list[int]) -> None:
    n = len(ports) // 2
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"localhost:{p}" for p in ports[:n]]},
        "task": {"type": "worker", "index": index}})
    tf.profiler.experimental.server.start(ports[n + index])
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    per_worker, widths = _MULTIWORKER[kind.removesuffix("_single")]
    per_worker *= 2 // n  # a single worker takes the two workers' global batch
    with strategy.scope():
        ws = [tf.Variable(tf.random.normal((a, b)) * 0.05)
              for a, b in zip(widths, widths[1:], strict=False)]
        opt = tf.keras.optimizers.SGD(0.01)
    x = rng.normal(size=(per_worker * 8, 64)).astype("float32")
    y = (x[:, :1] > 0).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(per_worker * n).cache().repeat()
    if "_files" in kind:
        # Records read by each worker: with AutoShardPolicy.DATA every worker reads every file
        # and keeps its share of the batches; with FILE each reads its own files.
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.FILE if kind.endswith("_sharded")
            else tf.data.experimental.AutoShardPolicy.DATA)
        ds = (tf.data.Dataset.from_tensor_slices(json.loads(os.environ["MW_FILES"])).repeat()
              .interleave(tf.data.TFRecordDataset, cycle_length=2, num_parallel_calls=2)
              .map(decode_rows).unbatch().batch(per_worker * n).prefetch(2)
              .with_options(options))
    if kind == "multiworker_slow_input" and index == 1:
        def slow(a, b):
            time.sleep(SLOW_INPUT_S)
            return a, b

        def slow_batch(a, b):
            a2, b2 = tf.numpy_function(slow, [a, b], [tf.float32, tf.float32])
            return tf.ensure_shape(a2, a.shape), tf.ensure_shape(b2, b.shape)
        ds = ds.map(slow_batch)
    it = iter(strategy.experimental_distribute_dataset(ds))
    extra = tf.random.normal((512, 512)) * 0.01

    def replica(a, b):
        if kind == "multiworker_straggler" and index == 1:
            # Work the replica's step waits for: this worker joins the all-reduce late.
            m = extra
            for _ in range(STRAGGLER_MATMULS):
                m = tf.tanh(m @ extra)
            a = a + 0.0 * tf.reduce_sum(m)
        with tf.GradientTape() as tape:
            h = a
            for w in ws[:-1]:
                h = tf.nn.relu(h @ w)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
                tf.broadcast_to(b, (tf.shape(h)[0], widths[-1])), h @ ws[-1]))
        opt.apply_gradients(zip(tape.gradient(loss, ws), ws, strict=True))
        return loss

    @tf.function
    def step():
        return strategy.reduce("SUM", strategy.run(replica, next(it)), axis=None)
    for _ in range(10):
        step()
    t = time.perf_counter()
    for _ in range(50):
        step()
    float(step())
    print(f"untraced_step_ms={(time.perf_counter() - t) / 51 * 1e3:.3f}", flush=True)
    (flags / f"ready{index}").touch()
    i, deadline = 0, time.time() + 120
    while not (flags / "stop").exists() and time.time() < deadline:
        with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
            step()
        i += 1
    # Skip the interpreter's teardown: MultiWorkerMirroredStrategy can hang in it once the
    # other worker is gone.
    sys.stdout.flush()
    os._exit(0)


PS_TABLES, PS_ROWS, PS_DIM, PS_BATCH = 8, 100_000, 16, 512


def ps_server(job: str, index: int, cluster: dict, profiler_port: int) -> None:
    parent = os.getppid()

    def orphaned() -> None:  # a coordinator killed by a timeout leaves no server behind
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(1)
    threading.Thread(target=orphaned, daemon=True).start()
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=job, task_index=index,
                                  protocol="grpc", start=True)
    tf.profiler.experimental.server.start(profiler_port)
    server.join()


def ps_servers(kind: str) -> int:
    return 2 if kind == "ps_hot" else 1


def ps_job(kind: str) -> None:
    """A ParameterServerStrategy job (module docstring), tried again from an empty logdir when
    a server wrote no profile (as `multiworker` does). Each try's coordinator is a process of
    its own: a coordinator stays connected to the cluster it first joined."""
    for _ in range(3):
        shutil.rmtree(logdir, ignore_errors=True)
        try:
            out = subprocess.run([sys.executable, __file__, logdir, "_ps_coordinator", kind],
                                 stdout=subprocess.PIPE, text=True, timeout=240).stdout
        except subprocess.TimeoutExpired:
            continue  # its servers exit with it (ps_server)
        if len(list(Path(logdir).rglob("*.xplane.pb"))) == 2 + ps_servers(kind):
            print(out, end="", flush=True)
            return
    raise SystemExit("the servers wrote no profile in 3 tries")


def ps_coordinator(kind: str) -> None:
    servers = ps_servers(kind)
    n = 2 + servers
    p = free_ports(2 * n + 1)
    jobs = [("worker", 0), ("worker", 1), *(("ps", i) for i in range(servers))]
    cluster = {job: [f"localhost:{p[k]}" for k, (j, _) in enumerate(jobs) if j == job]
               for job in ("worker", "ps")}
    tasks = [(job, i, p[n + k]) for k, (job, i) in enumerate(jobs)]
    procs = [subprocess.Popen([sys.executable, __file__, logdir, "_ps_server", job, str(i),
                               json.dumps(cluster), str(port)]) for job, i, port in tasks]
    try:
        os.environ["TF_CONFIG"] = json.dumps({
            "cluster": {**cluster, "chief": [f"localhost:{p[2 * n]}"]},
            "task": {"type": "chief", "index": 0}})
        strategy = tf.distribute.experimental.ParameterServerStrategy(
            tf.distribute.cluster_resolver.TFConfigClusterResolver())
        coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
        _ps_train(kind, strategy, coordinator, [port for *_, port in tasks])
    finally:
        for proc in procs:
            proc.kill()
    # No teardown: the coordinator's threads spend seconds on RPCs to the servers just killed.
    sys.stdout.flush()
    os._exit(0)


def _ps_train(kind: str, strategy, coordinator, profiler_ports: list[int]) -> None:
    import keras
    with strategy.scope():
        tables = [tf.Variable(tf.random.uniform((PS_ROWS, PS_DIM), -0.05, 0.05))
                  for _ in range(PS_TABLES)]
        dense = [tf.Variable(tf.random.normal((PS_TABLES * PS_DIM + 13, 256), stddev=0.05)),
                 tf.Variable(tf.random.normal((256, 1), stddev=0.05))]
        adam = keras.optimizers.Adam(1e-3)

    def dataset_fn(_):
        n = PS_BATCH * 16
        ids = tf.random.uniform((n, PS_TABLES), 0, PS_ROWS, dtype=tf.int64, seed=1)
        x = tf.random.uniform((n, 13), seed=2)
        y = tf.cast(tf.random.uniform((n, 1), seed=3) > 0.5, tf.float32)
        return (tf.data.Dataset.from_tensor_slices((ids, x, y)).batch(PS_BATCH).cache()
                .repeat().prefetch(2))

    @tf.function
    def per_worker_dataset():
        return strategy.distribute_datasets_from_function(dataset_fn)
    it = iter(coordinator.create_per_worker_dataset(per_worker_dataset))

    @tf.function
    def step(iterator):
        def replica(batch):
            ids, x, y = batch
            with tf.GradientTape() as tape:
                rows = [tf.nn.embedding_lookup(t, ids[:, i]) for i, t in enumerate(tables)]
                if kind == "ps_hot":
                    hot = tf.math.floormod(ids[:, :1] * tf.range(1, 65, dtype=tf.int64), PS_ROWS)
                    rows[0] = tf.reduce_sum(tf.nn.embedding_lookup(tables[0], hot), 1)
                h = tf.nn.relu(tf.concat([*rows, x], 1) @ dense[0])
                loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(y, h @ dense[1]))
            grads = tape.gradient(loss, tables + dense)
            if kind == "ps_adam":
                adam.apply_gradients(zip(grads, tables + dense, strict=True))
            else:
                for t, g in zip(tables, grads, strict=False):
                    t.scatter_sub(tf.IndexedSlices(0.01 * g.values, g.indices))
                adam.apply_gradients(zip(grads[PS_TABLES:], dense, strict=True))
            return loss
        # `ps_loop4`: 4 batches per scheduled function, one RPC and dispatch for all of them.
        for _ in range(3 if kind == "ps_loop4" else 0):
            strategy.run(replica, args=(next(iterator),))
        return strategy.run(replica, args=(next(iterator),))
    per_call = 4 if kind == "ps_loop4" else 1

    def some_steps() -> int:
        if kind == "ps_fetch_each":
            coordinator.schedule(step, args=(it,)).fetch()
            return 1
        for _ in range(4):
            coordinator.schedule(step, args=(it,))
        coordinator.join()
        return 4 * per_call
    for _ in range(3):
        some_steps()
    t, n = time.perf_counter(), 0
    while time.perf_counter() < t + (0.5 if SHORT else 3):
        n += some_steps()
    print(f"untraced_step_ms={(time.perf_counter() - t) / n * 1e3:.3f}", flush=True)

    def trace():
        # TF 2.21: each server saves its own xplane, and the client may say it got none.
        with contextlib.suppress(RuntimeError):
            tf.profiler.experimental.client.trace(
                ",".join(f"grpc://localhost:{port}" for port in profiler_ports), logdir,
                duration_ms=3000)
    tracer = threading.Thread(target=trace)
    tracer.start()
    while tracer.is_alive():
        some_steps()
    tracer.join()


def tf1_ps_job(kind: str) -> None:
    p = free_ports(6)
    cluster = {"worker": [f"localhost:{p[0]}", f"localhost:{p[1]}"], "ps": [f"localhost:{p[2]}"]}
    flags = Path(tempfile.mkdtemp(prefix="tf1-ps-"))
    tasks = [("ps", 0, p[5]), ("worker", 0, p[3]), ("worker", 1, p[4])]
    procs = [subprocess.Popen([sys.executable, __file__, logdir, "_tf1_task", kind, job, str(i),
                               json.dumps(cluster), str(port), str(flags)],
                              stdout=subprocess.PIPE, text=True) for job, i, port in tasks]
    try:
        deadline = time.time() + 240
        while not all((flags / f"ready{i}").exists() for i in range(2)):
            if time.time() > deadline or any(q.poll() is not None for q in procs):
                raise SystemExit("the TF1 workers did not start")
            time.sleep(0.2)
        # 6 s: on a machine whose compute ran at half the speed, TF1 Adam's traced steps took
        # ~700 ms and a 3 s window held 3-4 of them.
        with contextlib.suppress(RuntimeError):
            tf.profiler.experimental.client.trace(
                ",".join(f"grpc://localhost:{port}" for *_, port in tasks), logdir, 6000)
        (flags / "stop").touch()
        print(procs[1].communicate(timeout=60)[0], end="", flush=True)
    finally:
        for q in procs:
            q.kill()
        shutil.rmtree(flags, ignore_errors=True)


def tf1_task(kind: str, job: str, index: int, cluster: dict, profiler_port: int,
             flags: Path) -> None:
    v1 = tf.compat.v1
    v1.disable_eager_execution()
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=job, task_index=index)
    tf.profiler.experimental.server.start(profiler_port)
    if job == "ps":
        server.join()
    with v1.device(v1.train.replica_device_setter(worker_device=f"/job:worker/task:{index}",
                                                  cluster=cluster)):
        tables = [v1.get_variable(f"table{i}", [PS_ROWS, PS_DIM],
                                  initializer=v1.random_uniform_initializer(-0.05, 0.05))
                  for i in range(PS_TABLES)]
        w = [v1.get_variable("w0", [PS_TABLES * PS_DIM + 13, 256]),
             v1.get_variable("w1", [256, 1])]
    with v1.device(f"/job:worker/task:{index}"):
        n = PS_BATCH * 16
        data = (rng.integers(0, PS_ROWS, (n, PS_TABLES)), rng.random((n, 13), dtype=np.float32),
                (rng.random((n, 1)) > 0.5).astype(np.float32))
        ds = tf.data.Dataset.from_tensor_slices(data).batch(PS_BATCH).cache().repeat()
        ids, x, y = v1.data.make_one_shot_iterator(ds.prefetch(2)).get_next()
        rows = [tf.nn.embedding_lookup(t, ids[:, i]) for i, t in enumerate(tables)]
        logits = tf.nn.relu(tf.concat([*rows, x], 1) @ w[0]) @ w[1]
        loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=logits))
    opt = (v1.train.AdamOptimizer(1e-3) if kind == "ps_tf1_adam"
           else v1.train.AdagradOptimizer(0.05))
    train = opt.minimize(loss)
    sess = v1.Session(server.target)
    if index == 0:
        sess.run(v1.global_variables_initializer())
    else:  # the chief initializes the variables on the server
        while len(sess.run(v1.report_uninitialized_variables())):
            time.sleep(0.5)
    for _ in range(10):
        sess.run(train)
    t, steps = time.perf_counter(), 0
    while time.perf_counter() < t + (0.5 if SHORT else 3):
        sess.run(train)
        steps += 1
    print(f"untraced_step_ms={(time.perf_counter() - t) / steps * 1e3:.3f}", flush=True)
    (flags / f"ready{index}").touch()
    deadline = time.time() + 120
    while not (flags / "stop").exists() and time.time() < deadline:
        sess.run(train)
    sys.stdout.flush()
    os._exit(0)  # no teardown: the server's side of the session may already be gone


if mode == "_ps_server":
    ps_server(sys.argv[3], int(sys.argv[4]), json.loads(sys.argv[5]), int(sys.argv[6]))
elif mode == "_ps_coordinator":
    ps_coordinator(sys.argv[3])
elif mode == "_tf1_task":
    tf1_task(sys.argv[3], sys.argv[4], int(sys.argv[5]), json.loads(sys.argv[6]),
             int(sys.argv[7]), Path(sys.argv[8]))
elif mode.startswith("ps_tf1_"):
    tf1_ps_job(mode)
elif mode.startswith("ps_"):
    ps_job(mode)
elif mode == "_worker":
    multiworker_worker(sys.argv[3], int(sys.argv[4]), Path(sys.argv[5]),
                       [int(a) for a in sys.argv[6:]])
elif mode.startswith("multiworker"):
    multiworker(mode)
elif mode == "generator":
    def gen():
        while True:
            x = features(rng.normal(size=64).astype("float32"))
            yield x, np.float32(x[0] > 0)
    spec = (tf.TensorSpec((64,), tf.float32), tf.TensorSpec((), tf.float32))
    ds = tf.data.Dataset.from_generator(gen, output_signature=spec).batch(256).prefetch(2)
    fit_timed(mlp(64, 256), ds, timed=40, then=12)
elif mode in ("pyfunc", "python_vectorized"):
    base = tf.data.Dataset.from_tensor_slices(
        (rng.normal(size=(8192, 64)).astype("float32"), np.zeros(8192, "float32"))).repeat()
    if mode == "pyfunc":
        ds = base.map(lambda x, y: tf.py_function(lambda a, b: (features(a.numpy()), b), [x, y],
                                                  [tf.float32, tf.float32]),
                      num_parallel_calls=tf.data.AUTOTUNE)
        ds = ds.map(lambda x, y: (tf.ensure_shape(x, (64,)), tf.ensure_shape(y, ())))
        ds = ds.batch(256)
    else:
        def tf_features(x: tf.Tensor) -> tf.Tensor:
            for _ in range(20):
                x = tf.tanh(x) + 0.01
            return x
        ds = base.batch(256).map(lambda x, y: (tf_features(x), y),
                                 num_parallel_calls=tf.data.AUTOTUNE)
    fit_timed(mlp(64, 256), ds.prefetch(2), timed=40, then=12)
elif mode == "tensorboard_callback":
    x = rng.normal(size=(65536, 32)).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, (x[:, 0] > 0).astype("float32"))).batch(512)
    model = mlp(32, 256)
    model.fit(ds.prefetch(2), epochs=1, verbose=0,
              callbacks=[tf.keras.callbacks.TensorBoard(logdir, profile_batch=(20, 40))])
elif mode == "keras_eager" or mode.startswith("keras_spe"):
    x = rng.normal(size=(16384, 64)).astype("float32")
    ds = (tf.data.Dataset.from_tensor_slices((x, (x[:, 0] > 0).astype("float32")))
          .batch(256).cache().repeat().prefetch(2))
    if mode == "keras_eager":
        keras_fit(ds, run_eagerly=True)
    else:
        keras_fit(ds, steps_per_execution=int(mode.removeprefix("keras_spe")))
elif mode in ("eager", "graph", "functions_eagerly"):
    if mode == "functions_eagerly":
        tf.config.run_functions_eagerly(True)
    step = mlp_step(12)
    profile_loop(step if mode == "eager" else tf.function(step), steps=30)
elif mode in ("retrace", "stable"):
    train = tf.function(mlp_step(6))
    calls = iter(range(10**6))

    def step():
        lr = 0.01 / (1 + next(calls))
        train(lr if mode == "retrace" else tf.constant(lr))
    profile_loop(step, steps=15)
elif mode.startswith("mirrored"):
    n = int(mode.removeprefix("mirrored"))
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(n)])
    x = rng.normal(size=(65536, 64)).astype("float32")
    y = (x[:, 0] > 0).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(1024).prefetch(2)
    it = iter(strategy.experimental_distribute_dataset(ds))
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input((64,)), tf.keras.layers.Dense(512, "relu"),
                                     tf.keras.layers.Dense(512, "relu"), tf.keras.layers.Dense(1)])
        opt = tf.keras.optimizers.SGD(0.01)

    @tf.function
    def step():
        def replica(a, b):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.keras.losses.binary_crossentropy(
                    b[:, None], model(a), from_logits=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss
        return strategy.run(replica, args=next(it))
    profile_loop(step, steps=15)
elif mode.startswith("records_"):
    gz, per_batch = mode == "records_gzip", mode == "records_prebatched"
    batch, n_records = 1024, 24 * 1024
    folder = Path(tempfile.mkdtemp(prefix="records-"))
    files = [str(folder / f"part-{i}.tfrecord{'.gz' if gz else ''}") for i in range(4)]
    rows = batch if per_batch else 1  # examples per record

    def feature(values: np.ndarray) -> tf.train.Feature:
        if values.dtype.kind == "f":
            return tf.train.Feature(float_list=tf.train.FloatList(value=values))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    for path in files:
        with tf.io.TFRecordWriter(path, tf.io.TFRecordOptions("GZIP" if gz else "")) as w:
            for _ in range(n_records // len(files) // rows):
                dense = rng.normal(size=(rows, 13)).astype("float32")
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    "dense": feature(dense.ravel()),
                    "cat": feature(rng.integers(0, 1 << 20, size=rows * 26)),
                    "label": feature((dense[:, 0] > 0).astype("float32")),
                })).SerializeToString())
    spec = {"dense": tf.io.FixedLenFeature((rows, 13), tf.float32),
            "cat": tf.io.FixedLenFeature((rows, 26), tf.int64),
            "label": tf.io.FixedLenFeature((rows,), tf.float32)}

    def to_xy(records):
        f = tf.io.parse_example(records, spec)
        f = {k: tf.reshape(v, (-1, *v.shape[2:])) for k, v in f.items()}  # records -> examples
        x = tf.concat([f["dense"], tf.cast(f["cat"] % 97, tf.float32) / 97.0], axis=1)
        return x, f["label"]
    if mode == "records_naive":
        # The tutorial pipeline: one reader, parse each example as it comes, no prefetch.
        ds = (tf.data.TFRecordDataset(files).repeat()
              .map(lambda r: to_xy(r[None])).unbatch().batch(batch))
    else:
        ds = (tf.data.Dataset.from_tensor_slices(files).repeat()
              .interleave(lambda f: tf.data.TFRecordDataset(f, "GZIP" if gz else ""),
                          cycle_length=2, num_parallel_calls=2)
              .batch(batch // rows).map(to_xy, num_parallel_calls=2).prefetch(2))
    fit_timed(mlp(39, 64), ds, timed=60, then=30)
elif mode in ("small_files", "packed_files"):
    # 8,192 examples of 64 features and a label, 260 bytes each: one file per example (as image
    # or .npy-per-sample datasets are stored), or the same bytes packed one batch per TFRecord.
    batch, n = 256, 8192
    folder = Path(tempfile.mkdtemp(prefix="files-"))
    rows = rng.normal(size=(n, 65)).astype("float32")
    if mode == "small_files":
        paths = [str(folder / f"ex_{i:05d}.bin") for i in range(n)]
        for path, row in zip(paths, rows, strict=True):
            row.tofile(path)
        ds = (tf.data.Dataset.from_tensor_slices(paths).repeat()
              .map(lambda p: xy(tf.io.decode_raw(tf.io.read_file(p), tf.float32)))
              .batch(batch).prefetch(2))
    else:
        packed = str(folder / "packed.tfrecord")
        with tf.io.TFRecordWriter(packed) as w:
            for b in range(0, n, batch):
                w.write(rows[b:b + batch].tobytes())
        ds = tf.data.TFRecordDataset(packed).repeat().map(decode_rows).prefetch(2)
    # 60 profiled steps, not 20: the packed job's wait share varies less (~1-2 ms steps).
    fit_timed(mlp(64, 256), ds, timed=200, then=60)
elif mode in ("many_shards", "few_shards"):
    # The same 32,768 examples (64 features and a label) in 32-example records: 1,024 files of
    # one record (written a few records per task, a common output of sharded ETL jobs), or 8.
    n_files, per_record = (1024 if mode == "many_shards" else 8), 32
    folder = Path(tempfile.mkdtemp(prefix="shards-"))
    files = [str(folder / f"part-{i:05d}.tfrecord") for i in range(n_files)]
    write_shards(files, per_record, lambda: rng.normal(size=(per_record, 65)).astype("float32"))
    ds = (tf.data.Dataset.from_tensor_slices(files).repeat()
          .interleave(tf.data.TFRecordDataset, cycle_length=4, num_parallel_calls=4)
          .map(decode_rows).unbatch().batch(256).prefetch(2))
    # No profiler calls: run it under `recadvisor capture`. Traced by tf.profiler alone (no
    # sampler), only the exposed wait is seen, 4-31% of the step from run to run, while most of
    # the files' cost is their set-up work on the cores the model uses.
    fit_timed(mlp(64, 256), ds, timed=300, then=300, profile=False)
    shutil.rmtree(folder, ignore_errors=True)
elif mode in ("pools_one", "pools_inline", "pools_default"):
    # Thread pools capped at one thread each, as a job that sets them for determinism or
    # inherits TF_NUM_INTRAOP_THREADS=1 has them; one intra-op thread and two inter-op ones (ops
    # run inline, two at a time where the graph allows); or left at 0 (TF sizes them to the CPUs).
    if mode != "pools_default":
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1 if mode == "pools_one" else 2)
    ds, model = dense_mlp(1024, 1024)
    # No profiler calls: run it under `recadvisor capture` (only the sampler sees the cores).
    fit_timed(model, ds, timed=60, then=10, profile=False)
elif mode == "steady":
    # The pools_default job in one fit() of 400 steps (no new iterator), no profiler calls: a
    # window under `recadvisor capture` beside another workload (tests/analyzers/cpu_hog.py).
    ds, model = dense_mlp(1024, 1024)
    model.fit(ds, steps_per_epoch=120 if SHORT else 400, epochs=1, verbose=0)
elif mode in ("cold_small_reads", "cold_large_reads"):
    # Keras fit on 544 MB of records, 16 KB of payload per example (the rest of a log line),
    # read cold as from storage far larger than RAM: the reference trainer's evictor drops the
    # files from the page cache and turns readahead off on the descriptors TF opens. 16 readers
    # with 4 KB buffers (each read one device request), or 4 readers with 256 KB buffers.
    from reference_model.storage import PageCacheEvictor
    batch, per_record, n_files = 256, 32, 8
    folder = Path(tempfile.mkdtemp(prefix="cold-", dir=os.environ.get("COLD_DIR")))
    files = [str(folder / f"part-{i}.tfrecord") for i in range(n_files)]
    width = 65 + 4096  # features, label, payload floats (16 KB: an image's worth)
    # 544 MB, so that each file stays open ~1.5 s between reopens: the evictor marks a new
    # descriptor within a few ms (every scan), and the reads before that still get readahead.
    payload = rng.normal(size=(per_record, width - 65)).astype("float32")
    write_shards(files, per_record, lambda: np.concatenate(
        [rng.normal(size=(per_record, 65)).astype("float32"), payload], axis=1))
    os.sync()
    small = mode == "cold_small_reads"
    ds = (tf.data.Dataset.from_tensor_slices(files).repeat()
          .interleave(lambda f: tf.data.TFRecordDataset(f, buffer_size=(4 if small else 256) << 10),
                      cycle_length=16 if small else 4, num_parallel_calls=16 if small else 4)
          .map(lambda r: decode_rows(r, width)).unbatch().batch(batch).prefetch(2))
    model = mlp(64, 512, 512)
    # Trace the train function on in-memory batches of the same spec first: tracing holds the
    # GIL for a second or more, the evictor's thread waits for it, and the readers the first fit
    # starts meanwhile read unmarked, with readahead (a run read 300 MB in 0.5 s that way).
    model.fit(tf.data.Dataset.from_tensor_slices(
        (np.zeros((batch, 64), "float32"), np.zeros((batch, 1), "float32"))).batch(batch),
        verbose=0)
    with PageCacheEvictor(files, scan_interval_s=0.005):
        fit_timed(model, ds, timed=100, then=100, profile=False)
    shutil.rmtree(folder, ignore_errors=True)
elif mode.startswith("embedding_"):
    vocab = 1_000_000
    ids = rng.integers(0, vocab, size=(64 * 1024, 26))
    labels = rng.random((64 * 1024, 1)).astype("float32")
    batches = iter(tf.data.Dataset.from_tensor_slices((ids, labels)).batch(1024).cache()
                   .repeat().prefetch(2))
    table = tf.Variable(tf.random.uniform((vocab, 32), -0.05, 0.05))
    w1 = tf.Variable(tf.random.normal((26 * 32, 64)) * 0.05)
    w2 = tf.Variable(tf.random.normal((64, 1)) * 0.05)
    opt = (tf.keras.optimizers.Adagrad() if mode == "embedding_adagrad"
           else tf.keras.optimizers.SGD(0.05, global_clipnorm=1.0)
           if mode == "embedding_sgd_clipped"
           else tf.keras.optimizers.SGD(0.05) if mode.startswith("embedding_sgd")
           else tf.keras.optimizers.Adam())

    xla = mode.endswith("_xla")
    mode = mode.removesuffix("_xla")

    def body(x, y):
        with tf.GradientTape() as tape:
            rows = (tf.gather(table.read_value(), x) if mode == "embedding_read"
                    else tf.nn.embedding_lookup(table, x))
            h = tf.nn.relu(tf.reshape(rows, (-1, 26 * 32)) @ w1)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(y, h @ w2))
        g_table, g1, g2 = tape.gradient(loss, [table, w1, w2])
        if mode == "embedding_sgd_clip_first":
            # tf.clip_by_global_norm keeps an IndexedSlices gradient sparse.
            (g_table, g1, g2), _ = tf.clip_by_global_norm([g_table, g1, g2], 1.0)
        if mode in ("embedding_adam", "embedding_adagrad") or mode.startswith("embedding_sgd"):
            opt.apply_gradients([(g_table, table), (g1, w1), (g2, w2)])
        else:
            table.scatter_sub(tf.IndexedSlices(0.05 * g_table.values, g_table.indices))
            opt.apply_gradients([(g1, w1), (g2, w2)])
    if xla:  # XLA compiles no iterator: the batch is fetched before the compiled call
        compiled_body = tf.function(body, jit_compile=True)
        profile_loop(lambda: compiled_body(*next(batches)), steps=8, median=True)
    else:
        profile_loop(tf.function(lambda: body(*next(batches))), steps=10,
                     timed=10 if SHORT else 50)
elif mode.startswith(("onehot_", "multihot_", "wide_")):
    vocab, width, n_features, batch = 10_000, 16, 8, 512
    labels = rng.integers(0, 2, size=(batch * 32, 1)).astype("float32")
    per_example = 10 if mode.startswith("multihot_") else n_features
    ids = rng.integers(0, vocab, size=(batch * 32, per_example))
    ds = tf.data.Dataset.from_tensor_slices((ids, labels)).batch(batch).cache().repeat()
    inputs = tf.keras.Input((per_example,), dtype="int64")
    if mode == "multihot_dense":
        h = tf.keras.layers.CategoryEncoding(num_tokens=vocab, output_mode="count")(inputs)
        h = tf.keras.layers.Dense(width, use_bias=False)(h)
    elif mode == "multihot_embedding":
        rows = tf.keras.layers.Embedding(vocab, width)(inputs)
        h = tf.keras.layers.Lambda(lambda t: tf.reduce_sum(t, 1), output_shape=(width,))(rows)
    elif mode == "wide_onehot":
        h = tf.keras.layers.Concatenate()([
            tf.keras.layers.CategoryEncoding(num_tokens=vocab, output_mode="one_hot")(inputs[:, i])
            for i in range(n_features)])
        h = tf.keras.layers.Dense(1)(h)
    elif mode == "wide_embedding":
        offsets = tf.constant(np.arange(n_features) * vocab, tf.int64)
        shifted = tf.keras.layers.Lambda(lambda t: t + offsets, output_shape=(n_features,))(inputs)
        rows = tf.keras.layers.Embedding(n_features * vocab, 1)(shifted)
        h = tf.keras.layers.Lambda(lambda t: tf.reduce_sum(t, 1), output_shape=(1,))(rows)
    else:
        columns = []
        for i in range(n_features):
            x = inputs[:, i]
            if mode in ("onehot_dense", "onehot_dense_xla"):
                x = tf.keras.layers.CategoryEncoding(num_tokens=vocab, output_mode="one_hot")(x)
            elif mode == "onehot_tf":
                x = tf.keras.layers.Lambda(lambda t: tf.one_hot(t, vocab),
                                           output_shape=(vocab,))(x)
            columns.append(tf.keras.layers.Embedding(vocab, width)(x)
                           if mode.startswith("onehot_embedding")
                           else tf.keras.layers.Dense(width, use_bias=False)(x))
        h = tf.keras.layers.Concatenate()(columns)
    for units in (256, 128):
        h = tf.keras.layers.Dense(units, "relu")(h)
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1)(h))
    xla = mode.endswith("_xla")
    model.compile("adam", tf.keras.losses.BinaryCrossentropy(from_logits=True), jit_compile=xla)
    fit_timed(model, ds.prefetch(2), timed=60, then=8 if xla else 16, median=True)
elif mode in ("session_indicator_column", "session_embedding_column"):
    # The Estimator-era Wide & Deep input: TF1 feature columns through input_layer.
    v1 = tf.compat.v1
    vocab, n_features = 10_000, 8
    ids, y = tf1_id_batches(vocab, n_features)
    categorical = [v1.feature_column.categorical_column_with_identity(f"c{i}", vocab)
                   for i in range(n_features)]
    columns = ([v1.feature_column.indicator_column(c) for c in categorical]
               if mode == "session_indicator_column"
               else [v1.feature_column.embedding_column(c, 16) for c in categorical])
    loss = tf1_mlp_loss(v1.feature_column.input_layer(
        {f"c{i}": ids[:, i:i + 1] for i in range(n_features)}, columns), y)
    train_op = v1.train.AdagradOptimizer(0.05).minimize(loss)
    sess = v1.Session()
    sess.run(v1.global_variables_initializer())
    profile_loop(lambda: sess.run(train_op), markers=False, timed=30, steps=8, median=True)
elif mode in ("session_onehot", "session_embedding", "session_embedding_sparse"):
    v1 = tf.compat.v1
    vocab, width, n_features = 10_000, 16, 8
    ids, y = tf1_id_batches(vocab, n_features)
    columns = []
    for i in range(n_features):
        w = v1.get_variable(f"table{i}", [vocab, width],
                            initializer=v1.random_uniform_initializer(-0.05, 0.05))
        columns.append(tf.one_hot(ids[:, i], vocab) @ w if mode == "session_onehot"
                       else tf.nn.embedding_lookup(w, ids[:, i]))
    loss = tf1_mlp_loss(tf.concat(columns, 1), y)
    if mode == "session_embedding_sparse":
        # TF1's Adam decays every row's moments on a lookup's gradient too: SGD for the tables
        # (a scatter of the rows looked up), Adam for the MLP.
        tables = [v for v in v1.trainable_variables() if v.name.startswith("table")]
        rest = [v for v in v1.trainable_variables() if v not in tables]
        train_op = tf.group(v1.train.GradientDescentOptimizer(0.05).minimize(loss, var_list=tables),
                            v1.train.AdamOptimizer(1e-3).minimize(loss, var_list=rest))
    else:
        train_op = v1.train.AdamOptimizer(1e-3).minimize(loss)
    sess = v1.Session()
    sess.run(v1.global_variables_initializer())
    profile_loop(lambda: sess.run(train_op), markers=False, timed=60, steps=16, median=True)
elif mode in ("numpy_feed", "dataset_feed"):
    # float64 NumPy batches sliced and passed to a tf.function each step (converted on the
    # Python thread, cast inside), or the same data as a float32 tf.data pipeline.
    x = rng.normal(size=(32 * 4096, 256))
    y = (x[:, 0] > 0).astype("float64")
    w1 = tf.Variable(tf.random.normal((256, 64)) * 0.05)
    w2 = tf.Variable(tf.random.normal((64, 1)) * 0.05)

    @tf.function
    def train(a, b):
        a, b = tf.cast(a, tf.float32), tf.cast(b, tf.float32)
        with tf.GradientTape() as tape:
            logits = tf.nn.relu(a @ w1) @ w2
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(b[:, None], logits))
        for v, g in zip((w1, w2), tape.gradient(loss, (w1, w2)), strict=True):
            v.assign_sub(0.01 * g)
    if mode == "numpy_feed":
        batches = iter(range(10**6))

        def step():
            i = next(batches) % 32
            train(x[i * 4096:(i + 1) * 4096], y[i * 4096:(i + 1) * 4096])
    else:
        ds = iter(tf.data.Dataset.from_tensor_slices((x.astype("float32"), y.astype("float32")))
                  .batch(4096).cache().repeat().prefetch(2))

        def step():
            train(*next(ds))
    profile_loop(step, steps=20)
elif mode == "keras_xla_from_start":
    ds, model = dense_mlp(batch=256, hidden=512, jit_compile=True)
    tf.profiler.experimental.start(logdir)
    model.fit(ds, steps_per_epoch=20, epochs=1, verbose=0)
    tf.profiler.experimental.stop()
elif mode in ("xla_varying_shapes", "xla_static_shapes", "xla_retrace"):
    vocab, width, batch = 50_000, 32, 512
    table = tf.Variable(tf.random.uniform((vocab, width), -0.05, 0.05))
    w = tf.Variable(tf.random.normal((width, 1)) * 0.05)
    sgd = tf.keras.optimizers.SGD(0.05)

    def multi_hot(i):
        # Padded to the batch's longest list: a length of its own every other batch.
        length = 64 if mode == "xla_static_shapes" or i % 2 == 0 else 8 + i
        return (tf.constant(rng.integers(0, vocab, size=(batch, length))),
                tf.constant(rng.random((batch, 1)).astype("float32")))

    @tf.function(jit_compile=True, reduce_retracing=mode != "xla_retrace")
    def train(ids, y):
        with tf.GradientTape() as tape:
            logits = tf.reduce_sum(tf.gather(table, ids), 1) @ w
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(y, logits))
        sgd.apply_gradients(zip(tape.gradient(loss, [table, w]), [table, w], strict=True))

    data = [multi_hot(i) for i in range(35)]
    for i in range(3):
        train(*data[i])
    t = time.perf_counter()
    for i in range(3, 23):
        train(*data[i])
    print(f"untraced_step_ms={(time.perf_counter() - t) / 20 * 1e3:.3f}", flush=True)
    tf.profiler.experimental.start(logdir)
    for i in range(23, 35):
        with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
            train(*data[i])
    tf.profiler.experimental.stop()
elif mode in ("keras_xla_padded", "keras_xla_fixed"):
    n = 64 * 40
    lengths = np.minimum(1 + rng.geometric(0.08, size=n), 400)
    ids = tf.RaggedTensor.from_row_lengths(rng.integers(0, 50_000, size=int(lengths.sum())),
                                           lengths)
    ds = (tf.data.Dataset.from_tensor_slices((ids, rng.random(n).astype("float32")))
          .map(lambda x, y: (x.to_tensor() if isinstance(x, tf.RaggedTensor) else x, y))
          .shuffle(4096, seed=1)
          .padded_batch(64, padded_shapes=([400] if mode == "keras_xla_fixed" else [None], []))
          .repeat().prefetch(2))
    inp = tf.keras.Input((None,), dtype="int64")
    pooled = tf.keras.layers.GlobalAveragePooling1D()(tf.keras.layers.Embedding(50_000, 32)(inp))
    model = tf.keras.Model(inp, tf.keras.layers.Dense(1)(pooled))
    model.compile("sgd", "mse", jit_compile=True)
    model.fit(ds, steps_per_epoch=5, epochs=1, verbose=0)
    t = time.perf_counter()
    model.fit(ds, steps_per_epoch=30, epochs=1, verbose=0,
              callbacks=[tf.keras.callbacks.TensorBoard(logdir, profile_batch=(5, 16))])
    print(f"fit_s={time.perf_counter() - t:.3f}", flush=True)
elif mode == "keras_checkpoint":
    ds, model = dense_mlp(batch=64, hidden=2048)
    folder = tempfile.mkdtemp()
    saves = [tf.keras.callbacks.ModelCheckpoint(os.path.join(folder, "m.weights.h5"),
                                                save_weights_only=True, save_freq=5)]
    model.fit(ds, steps_per_epoch=5, epochs=1, verbose=0, callbacks=saves)
    for callbacks, suffix in (([], ""), (saves, "_checkpoint")):
        t = time.perf_counter()
        model.fit(ds, steps_per_epoch=30, epochs=1, verbose=0, callbacks=callbacks)
        print(f"untraced_step_ms{suffix}={(time.perf_counter() - t) / 30 * 1e3:.3f}", flush=True)
    tf.profiler.experimental.start(logdir)
    model.fit(ds, steps_per_epoch=30, epochs=1, verbose=0, callbacks=saves)
    tf.profiler.experimental.stop()
    shutil.rmtree(folder, ignore_errors=True)
elif mode.startswith("periodic_"):
    vocab, width, fields = 250_000, 64, 26
    table = tf.Variable(tf.random.uniform((vocab, width), -0.05, 0.05))
    w = tf.Variable(tf.random.normal((fields * width, 1)) * 0.05)
    ids = rng.integers(0, vocab, size=(16 * 512, fields))
    labels = rng.random((16 * 512, 1)).astype("float32")
    batches = iter(tf.data.Dataset.from_tensor_slices((ids, labels)).batch(512).cache()
                   .repeat().prefetch(2))

    @tf.function
    def train():
        x, y = next(batches)
        with tf.GradientTape() as tape:
            h = tf.reshape(tf.nn.embedding_lookup(table, x), (-1, fields * width)) @ w
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(y, h))
        g_table, g_w = tape.gradient(loss, [table, w])
        table.scatter_sub(tf.IndexedSlices(0.05 * g_table.values, g_table.indices))
        w.assign_sub(0.05 * g_w)
    ckpt = tf.train.Checkpoint(table=table, w=w)
    prefix = os.path.join(tempfile.mkdtemp(), "ckpt")
    heap = [[i, str(i)] for i in range(1_500_000)] if mode.startswith("periodic_gc") else []
    calls = itertools.count()

    def step():
        train()
        if next(calls) % 5 == 4:
            if mode == "periodic_checkpoint":
                ckpt.write(prefix)
            elif mode.startswith("periodic_gc"):
                gc.collect()
            elif mode.startswith("periodic_sleep"):
                time.sleep(0.2)
    if mode.endswith("_unprofiled"):
        for _ in range(80):
            step()
    else:
        profile_loop(step, steps=30)
    shutil.rmtree(os.path.dirname(prefix), ignore_errors=True)
    print(f"heap={len(heap)}")
elif mode.startswith("debug_"):
    # Set before the step is traced: both instrument the graphs built after the call.
    if mode == "debug_check_numerics":
        tf.debugging.enable_check_numerics()
    elif mode == "debug_dump":
        tf.debugging.experimental.enable_dump_debug_info(
            tempfile.mkdtemp(), tensor_debug_mode="FULL_HEALTH", circular_buffer_size=1000)
    vocab, width, fields = 250_000, 64, 26
    table = tf.Variable(tf.random.uniform((vocab, width), -0.05, 0.05), name="table")
    w1 = tf.Variable(tf.random.normal((fields * width, 256)) * 0.05, name="w1")
    w2 = tf.Variable(tf.random.normal((256, 1)) * 0.05, name="w2")
    ids = rng.integers(0, vocab, size=(16 * 512, fields))
    labels = rng.random((16 * 512, 1)).astype("float32")
    batches = iter(tf.data.Dataset.from_tensor_slices((ids, labels)).batch(512).cache()
                   .repeat().prefetch(2))
    writer = tf.summary.create_file_writer(tempfile.mkdtemp())
    step_var = tf.Variable(0, dtype=tf.int64)
    every = {"debug_histograms_rare": 100, "debug_histograms_every10": 10}.get(mode, 1)

    @tf.function
    def train():
        x, y = next(batches)
        with tf.GradientTape() as tape:
            h = tf.reshape(tf.nn.embedding_lookup(table, x), (-1, fields * width))
            logits = tf.nn.relu(h @ w1) @ w2
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(y, logits))
        g_table, g1, g2 = tape.gradient(loss, [table, w1, w2])
        table.scatter_sub(tf.IndexedSlices(0.05 * g_table.values, g_table.indices))
        w1.assign_sub(0.05 * g1)
        w2.assign_sub(0.05 * g2)
        if mode.startswith("debug_histograms") and mode != "debug_histograms_eager":
            # The habit: every variable's histogram and the loss, from inside the step.
            with writer.as_default(step=step_var), \
                    tf.summary.record_if(lambda: step_var % every == 0):
                for v in (table, w1, w2):
                    tf.summary.histogram(v.name.split(":")[0], v)
                tf.summary.scalar("loss", loss)
        step_var.assign_add(1)
    step = train
    if mode == "debug_histograms_eager":
        # The same writes from the Python loop after each call, eagerly.
        def step():
            train()
            with writer.as_default(step=step_var):
                for v in (w1, w2):
                    tf.summary.histogram(v.name.split(":")[0], v)
    heavy = mode == "debug_histograms"  # ~1 s a step on 2 cores
    profile_loop(step, steps=8 if heavy else 20, timed=8 if heavy else 50)
elif mode in ("tfdata_debug", "tfdata_nodebug"):
    if mode == "tfdata_debug":
        tf.data.experimental.enable_debug_mode()
    x = rng.normal(size=(32768, 64)).astype("float32")

    def tf_features(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        for _ in range(20):
            x = tf.tanh(x) + 0.01
        return x, y
    ds = (tf.data.Dataset.from_tensor_slices((x, (x[:, :1] > 0).astype("float32"))).batch(256)
          .map(tf_features, num_parallel_calls=tf.data.AUTOTUNE).repeat()
          .prefetch(tf.data.AUTOTUNE))
    fit_timed(mlp(64, 256), ds, timed=40, then=12)
elif mode == "keras_histograms":
    vocab, fields, per_epoch = 100_000, 26, 8
    ids = rng.integers(0, vocab, size=(16 * 512, fields))
    labels = (rng.random((16 * 512, 1)) > 0.5).astype("float32")
    ds = (tf.data.Dataset.from_tensor_slices((ids, labels)).batch(512).cache().repeat()
          .prefetch(2))
    inputs = tf.keras.Input((fields,), dtype="int64")
    h = tf.keras.layers.Flatten()(tf.keras.layers.Embedding(vocab, 32)(inputs))
    h = tf.keras.layers.Dense(256, activation="relu")(h)
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1)(h))
    model.compile("adagrad", tf.keras.losses.BinaryCrossentropy(from_logits=True))
    board = [tf.keras.callbacks.TensorBoard(tempfile.mkdtemp(), histogram_freq=1)]
    model.fit(ds, steps_per_epoch=5, epochs=1, verbose=0, callbacks=board)
    for suffix, callbacks in (("_none", []), ("", board)):
        t = time.perf_counter()
        model.fit(ds, steps_per_epoch=per_epoch, epochs=3, verbose=0, callbacks=callbacks)
        print(f"untraced_step_ms{suffix}={(time.perf_counter() - t) / per_epoch / 3 * 1e3:.3f}",
              flush=True)
    tf.profiler.experimental.start(logdir)
    model.fit(ds, steps_per_epoch=per_epoch, epochs=2, verbose=0, callbacks=board)
    tf.profiler.experimental.stop()
elif mode in ("hashing_in_model", "hashing_in_pipeline", "lookup_in_model"):
    names, rows, batch = [f"C{i + 1}" for i in range(26)], 10_000, 2048
    words = np.array([f"w{i}" for i in range(1000)])
    if mode == "lookup_in_model":
        cats = {k: words[rng.integers(0, 1000, size=(16 * batch, 1))] for k in names}
        prep = {k: tf.keras.layers.StringLookup(vocabulary=words, name=f"lookup_{k}")
                for k in names}
    else:
        cats = {k: rng.integers(0, 2**31, size=(16 * batch, 1)) for k in names}
        prep = {k: tf.keras.layers.Hashing(rows, name=f"hash_{k}") for k in names}
    dtype = "string" if mode == "lookup_in_model" else "int64"
    inputs = {k: tf.keras.Input((1,), dtype=dtype, name=k) for k in names}
    inputs["I"] = tf.keras.Input((13,), name="I")
    in_model = mode != "hashing_in_pipeline"
    x = tf.keras.layers.Concatenate()([
        *(tf.keras.layers.Flatten()(tf.keras.layers.Embedding(rows + 1, 8)(
            prep[k](inputs[k]) if in_model else inputs[k])) for k in names), inputs["I"]])
    for width in (64, 32):
        x = tf.keras.layers.Dense(width, "relu")(x)
    model = tf.keras.Model(inputs, tf.keras.layers.Dense(1)(x))
    model.compile(tf.keras.optimizers.SGD(0.05),
                  tf.keras.losses.BinaryCrossentropy(from_logits=True))
    labels = rng.integers(0, 2, size=(16 * batch, 1)).astype("float32")
    # 16 whole batches sliced from [16, batch, ...] arrays: no per-example slicing competing
    # with the step for the cores (and no partial .cache() pass thrown away by each fit call).
    columns = {**cats, "I": rng.normal(size=(16 * batch, 13)).astype("float32"), "y": labels}
    ds = tf.data.Dataset.from_tensor_slices(
        {k: v.reshape(16, batch, -1) for k, v in columns.items()}
    ).map(lambda f: ({k: v for k, v in f.items() if k != "y"}, f["y"])).repeat()
    if not in_model:
        ds = ds.map(lambda f, y: ({k: prep[k](v) if k in prep else v for k, v in f.items()}, y),
                    num_parallel_calls=tf.data.AUTOTUNE)
    fit_timed(model, ds.prefetch(2), timed=10, then=15)
elif mode in ("keras_epochs", "keras_epochs_repeat", "keras_validation", "keras_epochs_mirrored",
              "keras_epochs_repeat_mirrored"):
    scope = contextlib.nullcontext()
    if mode.endswith("_mirrored"):
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        scope = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope()

    def batches(n: int) -> tf.data.Dataset:
        x = rng.normal(size=(n * 256, 64)).astype("float32")
        return tf.data.Dataset.from_tensor_slices((x, (x[:, 0] > 0).astype("float32"))).batch(
            256).map(lambda a, b: (a * 1.0, b)).prefetch(2)
    with scope:
        model = mlp(64, 512, 512)
    fit = ({"x": batches(12).repeat(), "steps_per_epoch": 12}
           if mode.startswith("keras_epochs_repeat") else {"x": batches(12)})
    if mode == "keras_validation":
        fit["validation_data"] = batches(24)
    class Clock(tf.keras.callbacks.Callback):
        """Batch starts: fit's own set-up before the first batch (0-250 ms from run to run) is
        left out, the epochs' ends are in."""
        def __init__(self) -> None:
            super().__init__()
            self.starts: list[float] = []

        def on_train_batch_begin(self, batch, logs=None) -> None:
            self.starts.append(time.perf_counter())
    model.fit(epochs=2, verbose=0, **fit)
    clock = Clock()
    model.fit(epochs=4, verbose=0, callbacks=[clock], **fit)
    span = clock.starts[-1] - clock.starts[0]
    print(f"untraced_step_ms={span / (len(clock.starts) - 1) * 1e3:.3f}", flush=True)
    if mode == "keras_validation":
        tf.profiler.experimental.start(logdir)
        model.fit(epochs=3, verbose=0, **fit)
        tf.profiler.experimental.stop()
    else:
        board = tf.keras.callbacks.TensorBoard(logdir, profile_batch=(8, 32))
        model.fit(epochs=3, verbose=0, callbacks=[board], **fit)
elif mode.startswith("pydataset"):
    from pydataset_rows import rows_in_a_loop  # beside this script, on its sys.path

    class Batches(tf.keras.utils.PyDataset):
        """Batches of 256 Criteo-like rows (26 hashed ids, 38 numbers) built one example at a
        time in Python, as record-by-record loaders do (~4 ms a batch)."""
        def __len__(self) -> int:
            return 10_000

        def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
            return rows_in_a_loop(i)
    workers = {"pydataset": {}, "pydataset_threads": {"workers": 4},
               "pydataset_processes": {"workers": 4, "use_multiprocessing": True},
               "pydataset_processes_unprofiled": {"workers": 4, "use_multiprocessing": True},
               "pydataset_processes_steady": {"workers": 4, "use_multiprocessing": True},
               }[mode]
    if mode.endswith("_steady"):
        mlp(64, 256).fit(Batches(**workers), steps_per_epoch=400, epochs=1, verbose=0)
    else:
        fit_timed(mlp(64, 256), Batches(**workers), timed=150, then=20,
                  profile=not mode.endswith("_unprofiled"))
elif mode.startswith("session_"):
    tf.compat.v1.disable_eager_execution()
    v1 = tf.compat.v1
    batch, n = 256, 16_384
    x_all = rng.normal(size=(n, 64)).astype("float32")
    y_all = (x_all[:, 0] > 0).astype("float32")
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "examples.tfrecord")
    # One example per record (the per-example pipelines), or one batch per record.
    per_record = 1 if mode in ("session_per_example", "session_queue",
                               "session_queue_data") else batch
    with tf.io.TFRecordWriter(path) as out:
        for at in range(0, n, per_record):
            xs, ys = x_all[at:at + per_record], y_all[at:at + per_record]
            out.write(tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=xs.ravel())),
                "y": tf.train.Feature(float_list=tf.train.FloatList(value=ys))}))
                .SerializeToString())
    spec = {"x": tf.io.FixedLenFeature([per_record * 64], tf.float32),
            "y": tf.io.FixedLenFeature([per_record], tf.float32)}
    if mode == "session_queue":
        _, record = v1.TFRecordReader().read(v1.train.string_input_producer([path]))
        one = tf.io.parse_single_example(record, spec)
        x, y = v1.train.batch([one["x"], one["y"][0]], batch, num_threads=2,
                              capacity=4 * batch)
    else:
        ds = tf.data.TFRecordDataset(path).repeat()
        if mode == "session_per_example":
            ds = ds.map(lambda r: tf.io.parse_single_example(r, spec)).batch(batch)
            ds = ds.map(lambda f: {"x": f["x"], "y": f["y"][:, 0]})
        elif mode == "session_queue_data":
            ds = ds.batch(batch).map(lambda r: tf.io.parse_example(r, spec),
                                     num_parallel_calls=tf.data.AUTOTUNE).prefetch(
                tf.data.AUTOTUNE)
        else:
            ds = ds.map(lambda r: tf.io.parse_single_example(r, spec)).prefetch(2)
        features = v1.data.make_one_shot_iterator(ds).get_next()
        x, y = tf.reshape(features["x"], (-1, 64)), tf.reshape(features["y"], (-1,))
    h = x
    for i, width in enumerate((256, 256, 1)):
        w = v1.get_variable(f"w{i}", [h.shape[-1], width],
                            initializer=v1.glorot_uniform_initializer())
        h = h @ w + v1.get_variable(f"b{i}", [width], initializer=v1.zeros_initializer())
        h = tf.nn.relu(h) if width > 1 else h
    if mode in ("session_checkpoint", "session_none", "session_summaries"):
        table = v1.get_variable("table", [250_000, 64], trainable=False,
                                initializer=v1.random_uniform_initializer(-0.05, 0.05))
        h += tf.reduce_sum(tf.gather(table, tf.zeros([batch], tf.int32)), 1, keepdims=True)
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=h[:, 0]))
    train_op = v1.train.AdamOptimizer(1e-3).minimize(loss)
    sess = v1.Session()
    sess.run(v1.global_variables_initializer())
    coord = tf.train.Coordinator()
    threads = v1.train.start_queue_runners(sess, coord) if mode == "session_queue" else []
    saver = v1.train.Saver() if mode == "session_checkpoint" else None
    calls = itertools.count()
    fetches: list = [train_op]
    if mode == "session_summaries":
        # The TF1 habit: every variable's histogram and the loss, merged and fetched with
        # every training run, written by a FileWriter.
        for var in v1.global_variables():
            if "Adam" not in var.name and "power" not in var.name:
                v1.summary.histogram(var.name.split(":")[0], var)
        v1.summary.scalar("loss", loss)
        fetches.append(v1.summary.merge_all())
        writer = v1.summary.FileWriter(os.path.join(folder, "events"))

    def step():
        done = sess.run(fetches)
        if mode == "session_summaries":
            writer.add_summary(done[1], next(calls))
        elif saver is not None and next(calls) % 5 == 4:
            saver.save(sess, os.path.join(folder, "ckpt"))
    profile_loop(step, markers=False)
    coord.request_stop()
    coord.join(threads, stop_grace_period_secs=5)
    shutil.rmtree(folder, ignore_errors=True)
else:
    raise SystemExit(f"unknown mode {mode}")
