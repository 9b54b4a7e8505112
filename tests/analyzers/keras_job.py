"""A small Keras job that is not ours, profiled with plain TensorFlow APIs.

`python keras_job.py LOGDIR slow|fast`: `slow` parses every example with a heavy per-example map
and no parallelism or prefetch (input-bound); `fast` feeds cached, prefetched batches.
"""

import sys

import numpy as np
import tensorflow as tf

logdir, mode = sys.argv[1], sys.argv[2]
x = np.random.default_rng(0).normal(size=(16384, 64)).astype("float32")
y = (x[:, 0] > 0).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y))
if mode == "slow":
    def heavy(a, b):
        for _ in range(30):
            a = tf.math.log1p(tf.abs(a)) + tf.sin(a)
        return a, b
    ds = ds.map(heavy).batch(256).repeat()
else:
    ds = ds.batch(256).cache().repeat().prefetch(2)
model = tf.keras.Sequential([tf.keras.Input((64,)), tf.keras.layers.Dense(512, "relu"),
                             tf.keras.layers.Dense(512, "relu"), tf.keras.layers.Dense(1)])
model.compile("adam", tf.keras.losses.BinaryCrossentropy(from_logits=True))
model.fit(ds, steps_per_epoch=10, epochs=1, verbose=0)
tf.profiler.experimental.start(logdir)
model.fit(ds, steps_per_epoch=12, epochs=1, verbose=0)
tf.profiler.experimental.stop()
