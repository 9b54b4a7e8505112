"""Run in a subprocess (logical devices are fixed once per process): prints the loss trajectory
of the same DLRM on the same batches for several device counts and embedding splits as JSON."""

from __future__ import annotations

import json
import sys

import numpy as np

from reference_model.devices import setup_devices


def main() -> None:
    spec = json.loads(sys.argv[1])
    max_n = max(c["devices"] for c in spec["cases"])
    setup_devices(max_n)
    import tensorflow as tf

    from reference_model.config import TrainConfig
    from reference_model.devices import DeviceSet
    from reference_model.hybrid import HybridDLRM

    cards = tuple(spec["cardinalities"])
    batch, steps = spec["batch"], spec["steps"]
    rng = np.random.default_rng(spec["seed"])
    batches = []
    for _ in range(steps):
        dense = rng.lognormal(0, 1, (batch, 13)).astype(np.float32)
        ids = np.stack([rng.integers(0, c, batch) for c in cards], 1).astype(np.int32)
        labels = (rng.random(batch) < 0.3).astype(np.float32)
        batches.append((tf.constant(np.log1p(dense)), tf.constant(ids), tf.constant(labels)))
    out = []
    for case in spec["cases"]:
        n = case["devices"]
        devs = DeviceSet(tuple(f"/device:CPU:{i}" for i in range(n)), "CPU", "/device:CPU:0")
        cfg = TrainConfig(
            devices=n,
            batch_size=batch,
            embedding_split=case["split"],
            xla=case.get("xla", False),
            fused_tables=case.get("fused", True),
            embedding_dim=8,
            id_hashing=case.get("hashing", "none"),
        )
        model = HybridDLRM(cfg, devs, cards, 13)
        losses = []
        for dense, ids, labels in batches:
            if case.get("per_device"):
                # Per-device loading: each device's pipeline yields the whole batch; here each
                # copy is wrong outside that device's rows of dense features and labels (which
                # it must not use) and whole in ids (which it must), so a device that took
                # another's batch or rows trains on other numbers.
                b = batch // n
                mine = [np.arange(batch) // b == j for j in range(n)]
                dense = [tf.where(m[:, None], dense, dense + 100.0) for m in mine]
                labels = [tf.where(m, labels, 1.0 - labels) for m in mine]
                ids = [tf.identity(ids) for _ in range(n)]
            if case.get("serial"):
                x = model.serial_copies(dense, ids, labels)
                losses.append(float(model.step_placed(x.dense, x.ids, x.labels)))
            else:
                losses.append(float(model.step_host(dense, ids, labels)))
        out.append({**case, "losses": losses})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
