"""DLRM: bottom MLP on the numerical features, embeddings for the categorical ones, dot
interaction, top MLP, binary cross-entropy (seed 001, figure 4).

Parameters are created from NumPy with fixed seeds, so every replica, every device count and every
embedding split starts from the same numbers; that is what lets the N-device run be compared with
the 1-device run step for step.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from reference_model.config import TrainConfig


def mlp_init(in_dim: int, sizes: tuple[int, ...], seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    layers = []
    for out_dim in sizes:
        limit = np.sqrt(6.0 / (in_dim + out_dim))
        w = rng.uniform(-limit, limit, size=(in_dim, out_dim)).astype(np.float32)
        layers.append((w, np.zeros(out_dim, np.float32)))
        in_dim = out_dim
    return layers


def table_init(rows: int, dim: int, table_index: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, 7919, table_index])
    return rng.uniform(-0.05, 0.05, size=(rows, dim)).astype(np.float32)


def interaction_size(num_cat: int, dim: int) -> int:
    n = num_cat + 1
    return n * (n - 1) // 2 + dim


def dense_layer_sizes(
    cfg: TrainConfig, num_cat: int
) -> tuple[tuple[int, ...], int, tuple[int, ...]]:
    """(bottom sizes incl. the projection to the embedding width, top input width, top sizes)."""
    bottom = (*cfg.bottom_mlp, cfg.embedding_dim)
    top = (*cfg.top_mlp, 1)
    return bottom, interaction_size(num_cat, cfg.embedding_dim), top


class DenseReplica(tf.Module):
    """One data-parallel copy of the MLP weights (and their Adam slots) on one device."""

    def __init__(self, cfg: TrainConfig, num_dense: int, num_cat: int, device: str) -> None:
        super().__init__(name="dense_replica")
        bottom, top_in, top = dense_layer_sizes(cfg, num_cat)
        init = mlp_init(num_dense, bottom, cfg.seed) + mlp_init(top_in, top, cfg.seed + 1)
        self.num_bottom = len(bottom)
        with tf.device(device):
            self.weights: list[tf.Variable] = []
            for i, (w, b) in enumerate(init):
                self.weights += [tf.Variable(w, name=f"w{i}"), tf.Variable(b, name=f"b{i}")]
            self.m = [tf.Variable(tf.zeros_like(v), trainable=False) for v in self.weights]
            self.v = [tf.Variable(tf.zeros_like(v), trainable=False) for v in self.weights]

    def layers(
        self,
    ) -> tuple[list[tuple[tf.Variable, tf.Variable]], list[tuple[tf.Variable, tf.Variable]]]:
        pairs = list(zip(self.weights[0::2], self.weights[1::2], strict=True))
        return pairs[: self.num_bottom], pairs[self.num_bottom :]


def _mlp(x: tf.Tensor, layers: list, dtype: tf.DType, last_linear: bool) -> tf.Tensor:
    for i, (w, b) in enumerate(layers):
        x = tf.matmul(x, tf.cast(w, dtype)) + tf.cast(b, dtype)
        if not (last_linear and i == len(layers) - 1):
            x = tf.nn.relu(x)
    return x


def logits(
    replica: DenseReplica, dense_x: tf.Tensor, emb: tf.Tensor, dtype: tf.DType = tf.float32
) -> tf.Tensor:
    bottom, top = replica.layers()
    x = _mlp(tf.cast(dense_x, dtype), bottom, dtype, last_linear=False)
    feats = tf.concat([x[:, None, :], tf.cast(emb, dtype)], axis=1)  # [b, 1 + num_cat, D]
    z = tf.matmul(feats, feats, transpose_b=True)
    n = feats.shape[1]
    rows, cols = np.tril_indices(n, k=-1)
    pairs = tf.gather(tf.reshape(z, [-1, n * n]), rows * n + cols, axis=1)
    out = _mlp(tf.concat([x, pairs], axis=1), top, dtype, last_linear=True)
    return tf.cast(tf.squeeze(out, axis=1), tf.float32)


def dense_forward(
    replica: DenseReplica,
    dense_x: tf.Tensor,
    emb: tf.Tensor,
    labels: tf.Tensor,
    global_batch: int,
    compute_dtype: tf.DType,
) -> tf.Tensor:
    """This replica's share of the global mean loss: sum of its BCE terms / global batch."""
    z = logits(replica, dense_x, emb, compute_dtype)
    bce = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=z)
    return tf.reduce_sum(bce) / global_batch
