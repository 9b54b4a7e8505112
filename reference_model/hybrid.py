"""Hybrid-parallel DLRM step (seed 001): embeddings model-parallel, MLPs data-parallel.

Per step, on N devices:
1. every device looks up *its* embeddings (table-wise: whole tables; column-wise: a column slice of
   every table) for the whole global batch;
2. an all-to-all turns that model-parallel layout into a data-parallel one: device j receives, for
   its B/N samples, the lookups of every table / every column slice;
3. each device runs the MLPs forward and backward on its samples (one XLA cluster with --xla);
4. dense gradients are all-reduced (NCCL on GPUs, reduction to one device on CPUs, as
   MirroredStrategy does) as one fused buffer, and each replica applies the same Adam update;
5. the embedding gradients travel back through the all-to-all (autodiff of step 2) and are applied
   as sparse SGD updates on the owning device.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from reference_model.config import TrainConfig
from reference_model.devices import DeviceSet
from reference_model.model import DenseReplica, dense_forward, logits, table_init


def place_tables(cardinalities: tuple[int, ...], n: int) -> list[list[int]]:
    """Table-wise placement: largest tables first onto the least-loaded device."""
    if n > len(cardinalities):
        raise ValueError(f"table-wise split needs at most {len(cardinalities)} devices, got {n}")
    load = [(0, 0)] * n
    groups: list[list[int]] = [[] for _ in range(n)]
    for t in sorted(range(len(cardinalities)), key=lambda t: -cardinalities[t]):
        d = min(range(n), key=lambda i: load[i])
        groups[d].append(t)
        load[d] = (load[d][0] + cardinalities[t], load[d][1] + 1)
    return [sorted(g) for g in groups]


class EmbeddingShard(tf.Module):
    """The embedding rows/columns one device owns, fused into one variable or one per table."""

    def __init__(
        self,
        cardinalities: tuple[int, ...],
        tables: list[int],
        col_range: tuple[int, int],
        fused: bool,
        device: str,
        seed: int,
        dim: int,
        hashing: str = "none",
    ) -> None:
        super().__init__(name="embedding_shard")
        self.tables = tables
        self.fused = fused
        self.hashing = hashing
        self.table_rows = [cardinalities[t] for t in tables]
        lo, hi = col_range
        inits = [table_init(cardinalities[t], dim, t, seed)[:, lo:hi] for t in tables]
        with tf.device(device):
            if fused:
                offsets = np.cumsum([0] + [cardinalities[t] for t in tables[:-1]])
                self.offsets = tf.constant(offsets, tf.int32)
                self.vars = [tf.Variable(np.concatenate(inits), name="fused_table")]
            else:
                self.vars = [
                    tf.Variable(a, name=f"table_{t}") for a, t in zip(inits, tables, strict=True)
                ]
        self.table_index = tf.constant(tables, tf.int32)
        self.buckets = tf.constant(self.table_rows, tf.int64)

    def lookup(self, ids: tf.Tensor) -> tf.Tensor:
        """ids: [B, num_cat] int32 for the global batch -> [B, len(tables), width]."""
        if self.fused:
            local = bucket_ids(tf.gather(ids, self.table_index, axis=1), self.buckets,
                               self.hashing)
            return tf.gather(self.vars[0], local + self.offsets)
        # Unfused, one hashing per feature, as one Keras Hashing layer per feature does.
        return tf.stack(
            [tf.gather(v, bucket_ids(ids[:, t], n, self.hashing))
             for v, t, n in zip(self.vars, self.tables, self.table_rows, strict=True)], 1
        )


# Knuth's multiplicative constant; ids below 2**31 times it stay below 2**63, and a 32-bit hash
# times a table's rows (below 2**31) too: no int64 overflow.
_GOLDEN = 2654435761
_LOW32 = 2**32 - 1


def bucket_ids(ids: tf.Tensor, buckets, how: str) -> tf.Tensor:
    """Raw categorical ids -> rows of tables with `buckets` rows (int32, same shape).

    "none": the ids are rows already. "integer": a 32-bit multiplicative hash. "string": each id
    formatted as text and fingerprinted (AsString + StringToHashBucketFast, which Keras' Hashing
    layer and hashed feature columns do to integer ids; grappler fuses the pair into one
    _TensorToHashBucketFast op, which still formats every id). Either hash is then scaled into
    the table by multiply-and-shift, not a modulo: int64 division costs as much as the integer
    hash itself."""
    if how == "none":
        return ids
    with tf.name_scope("hashing"):
        if how == "string":
            h = tf.strings.to_hash_bucket_fast(tf.strings.as_string(ids), 2**32)
        else:
            h = tf.bitwise.bitwise_and(tf.cast(ids, tf.int64) * _GOLDEN, _LOW32)
        return tf.cast(tf.bitwise.right_shift(h * buckets, 32), tf.int32)


@dataclass
class StepInputs:
    dense: list[tf.Tensor]  # per device: [B/N, num_dense] float32
    ids: list[tf.Tensor]  # per device: [B, num_cat] int32 (each device needs every sample's ids)
    labels: list[tf.Tensor]  # per device: [B/N] float32


class HybridDLRM:
    def __init__(
        self, cfg: TrainConfig, devices: DeviceSet, cardinalities: tuple[int, ...], num_dense: int
    ):
        self.cfg = cfg
        self.devices = devices
        self.n = devices.count
        self.num_cat = len(cardinalities)
        self.global_batch = cfg.batch_size
        dim = cfg.embedding_dim
        if cfg.embedding_split == "table":
            groups = place_tables(cardinalities, self.n)
            cols = [(0, dim)] * self.n
            order = [t for g in groups for t in g]
            # Lookups arrive in placement order; this gather restores the model's feature order.
            self.restore_order = tf.constant(np.argsort(order), tf.int32)
        else:
            groups = [list(range(self.num_cat))] * self.n
            w = dim // self.n
            cols = [(i * w, (i + 1) * w) for i in range(self.n)]
            self.restore_order = None
        self.shards = [
            EmbeddingShard(cardinalities, g, c, cfg.fused_tables, d, cfg.seed, dim,
                           cfg.id_hashing)
            for g, c, d in zip(groups, cols, devices.names, strict=True)
        ]
        self.replicas = [DenseReplica(cfg, num_dense, self.num_cat, d) for d in devices.names]
        with tf.device(devices.host):
            self.adam_t = tf.Variable(0.0, trainable=False, name="adam_t")
        self.compute_dtype = (
            (tf.float16 if devices.is_gpu else tf.bfloat16) if cfg.mixed_precision else tf.float32
        )
        self.loss_scale = 1024.0 if self.compute_dtype == tf.float16 else 1.0
        jit = bool(cfg.xla)
        self._replica_fns = [
            tf.function(self._make_replica_step(r), jit_compile=jit) for r in self.replicas
        ]
        self._adam_fns = [tf.function(self._make_adam(r), jit_compile=jit) for r in self.replicas]
        self.step_placed = tf.function(self._step_placed)
        self.step_host = tf.function(self._step_host)
        self.step_next = tf.function(self._step_next)
        self.predict = tf.function(self._predict)

    # ----- pieces -----
    def _make_replica_step(self, replica: DenseReplica):
        def replica_step(dense_x, emb, labels):
            with tf.GradientTape() as tape:
                tape.watch(emb)
                loss = dense_forward(
                    replica, dense_x, emb, labels, self.global_batch, self.compute_dtype
                )
                scaled = loss * self.loss_scale
            grads = tape.gradient(scaled, [*replica.weights, emb])
            grads = [g / self.loss_scale for g in grads] if self.loss_scale != 1.0 else grads
            flat = tf.concat([tf.reshape(g, [-1]) for g in grads[:-1]], axis=0)
            return loss, flat, grads[-1]

        return replica_step

    def _make_adam(self, replica: DenseReplica):
        lr, b1, b2, eps = self.cfg.dense_lr, 0.9, 0.999, 1e-7
        sizes = [int(np.prod(v.shape)) for v in replica.weights]

        def adam(flat_grad, t):
            corr = tf.sqrt(1.0 - b2**t) / (1.0 - b1**t)
            for var, m, v, g in zip(
                replica.weights, replica.m, replica.v, tf.split(flat_grad, sizes), strict=True
            ):
                g = tf.reshape(g, var.shape)
                m.assign(b1 * m + (1.0 - b1) * g)
                v.assign(b2 * v + (1.0 - b2) * g * g)
                var.assign_sub(lr * corr * m / (tf.sqrt(v) + eps))
            return tf.constant(0)

        return adam

    def _exchange(self, emb_outs: list[tf.Tensor], targets: tuple[str, ...]) -> list[tf.Tensor]:
        """All-to-all from the model-parallel layout to `targets` (data-parallel, B/len each)."""
        k = len(targets)
        with tf.name_scope("all_to_all"):
            pieces = []
            for out, dev in zip(emb_outs, self.devices.names, strict=True):
                with tf.device(dev):
                    pieces.append(tf.split(out, k, axis=0) if k > 1 else [out])
            received = []
            for j, dev in enumerate(targets):
                with tf.device(dev):
                    if self.restore_order is not None:
                        x = tf.concat([p[j] for p in pieces], axis=1)
                        x = tf.gather(x, self.restore_order, axis=1)
                    else:
                        x = tf.concat([p[j] for p in pieces], axis=2)
                    received.append(x)
        return received

    def _all_reduce(self, flats: list[tf.Tensor]) -> list[tf.Tensor]:
        if self.n == 1:
            return flats
        with tf.name_scope("all_reduce"):
            if self.devices.is_gpu:
                from tensorflow.python.ops import nccl_ops

                return nccl_ops.all_sum(flats)
            with tf.device(self.devices.names[0]):
                total = tf.add_n(flats)
            out = []
            for dev in self.devices.names:
                with tf.device(dev):
                    out.append(tf.identity(total))
            return out

    # ----- steps -----
    def _step_placed(self, dense: list, ids: list, labels: list) -> tf.Tensor:
        """One training step on inputs already placed on their devices."""
        with tf.GradientTape() as tape:
            emb_outs = []
            for shard, dev, ids_d in zip(self.shards, self.devices.names, ids, strict=True):
                with tf.device(dev), tf.name_scope("embedding_lookup"):
                    emb_outs.append(shard.lookup(ids_d))
            received = self._exchange(emb_outs, self.devices.names)
        losses, flats, d_embs = [], [], []
        for j, dev in enumerate(self.devices.names):
            with tf.device(dev):
                loss, flat, d_emb = self._replica_fns[j](dense[j], received[j], labels[j])
            losses.append(loss)
            flats.append(flat)
            d_embs.append(d_emb)
        reduced = self._all_reduce(flats)
        with tf.device(self.devices.host):
            t = tf.identity(self.adam_t.assign_add(1.0))
        for j, dev in enumerate(self.devices.names):
            with tf.device(dev):
                self._adam_fns[j](reduced[j], t)
        emb_vars = [v for s in self.shards for v in s.vars]
        grads = tape.gradient(received, emb_vars, output_gradients=d_embs)
        lr = self.cfg.embedding_lr
        grads_iter = iter(grads)
        for s, dev in zip(self.shards, self.devices.names, strict=True):
            with tf.device(dev), tf.name_scope("embedding_update"):
                for v in s.vars:
                    g = next(grads_iter)
                    v.scatter_sub(tf.IndexedSlices(lr * g.values, g.indices, g.dense_shape))
        with tf.device(self.devices.host):
            return tf.add_n(losses)

    def split_inputs(self, dense, ids, labels, copy=tf.identity) -> StepInputs:
        """Each device's share: its B/N rows of dense features and labels, and every sample's ids
        (model-parallel tables need the whole batch). `copy` moves one tensor onto the device.

        One batch is split among the devices (broadcast loading); per-device lists of batches
        (per-device loading: each pipeline yields the whole global batch) give each device its
        share of its own pipeline's batch."""
        b = self.global_batch // self.n
        out = StepInputs([], [], [])
        for j, dev in enumerate(self.devices.names):
            d, i, y = (x[j] if isinstance(x, list | tuple) else x for x in (dense, ids, labels))
            with tf.device(dev):
                out.dense.append(copy(d[j * b : (j + 1) * b]))
                out.labels.append(copy(y[j * b : (j + 1) * b]))
                out.ids.append(copy(i))
        return out

    def serial_copies(self, dense, ids, labels) -> StepInputs:
        """Seed 000's MirroredStrategy input path: called eagerly, this Python loop copies each
        device's share one after another. On GPUs tf.identity is a real MemcpyH2D; on logical CPU
        devices it would alias the host buffer, so DeepCopy stands in for the transfer."""
        if self.devices.is_gpu:
            return self.split_inputs(dense, ids, labels)
        return self.split_inputs(dense, ids, labels, lambda x: tf.raw_ops.DeepCopy(x=x))

    def _step_host(self, dense, ids, labels) -> tf.Tensor:
        """Inputs on the host: per-device copies are in the graph, so the executor overlaps them."""
        with tf.name_scope("distribute_inputs"):
            x = self.split_inputs(dense, ids, labels)
        return self._step_placed(x.dense, x.ids, x.labels)

    def _step_next(self, iterator) -> tf.Tensor:
        """The batch fetched inside the step, as Keras' train function does; steps_per_call
        batches in a loop. Untraced one fetch inside costs what an eager fetch does; an eager
        fetch's Python shows in the trace as per-call overhead (docs/trace-signals.md, "A batch
        fetched in Python"). Returns the last batch's loss."""
        if self.cfg.steps_per_call == 1:
            return self._step_host(*next(iterator))
        # A graph loop, as Keras' steps_per_execution runs: one call, one dispatch, k batches.
        loss = tf.zeros([], tf.float32)
        for _ in tf.range(self.cfg.steps_per_call):
            loss = self._step_host(*next(iterator))
        return loss

    def _predict(self, dense, ids) -> tf.Tensor:
        emb_outs = []
        for shard, dev in zip(self.shards, self.devices.names, strict=True):
            with tf.device(dev):
                emb_outs.append(shard.lookup(ids))
        (emb,) = self._exchange(emb_outs, (self.devices.names[0],))
        with tf.device(self.devices.names[0]):
            return logits(self.replicas[0], dense, emb)
