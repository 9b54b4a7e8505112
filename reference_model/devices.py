"""Pick the N devices a run trains on: real GPUs when present, otherwise N logical CPU devices.

Logical CPU devices let the same hybrid-parallel code (placement, all-to-all, all-reduce) run on a
CPU-only machine; they share the host's cores, so they show the communication structure, not a
speedup.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceSet:
    names: tuple[str, ...]
    kind: str  # "GPU" or "CPU"
    host: str  # where the input pipeline and the host-side Python run

    @property
    def count(self) -> int:
        return len(self.names)

    @property
    def is_gpu(self) -> bool:
        return self.kind == "GPU"


def setup_devices(n: int, intra_op_threads: int = 0, inter_op_threads: int = 0) -> DeviceSet:
    """Must run before TensorFlow initializes its runtime (first op or device listing). The
    thread pools: 0 lets TF size them to the CPUs the process may use."""
    import tensorflow as tf

    # RuntimeError: the runtime is already up (a second run in one process): its pools stay.
    with contextlib.suppress(RuntimeError):
        tf.config.threading.set_intra_op_parallelism_threads(intra_op_threads)
        tf.config.threading.set_inter_op_parallelism_threads(inter_op_threads)

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        if n > len(gpus):
            raise ValueError(f"--devices {n} asked for but only {len(gpus)} GPUs exist")
        for g in gpus:
            tf.config.experimental.set_memory_growth(g, True)
        names = tuple(f"/device:GPU:{i}" for i in range(n))
        return DeviceSet(names=names, kind="GPU", host="/device:CPU:0")
    cpus = tf.config.list_physical_devices("CPU")
    # RuntimeError: the runtime is already up (a second run in one process): reuse what exists.
    with contextlib.suppress(RuntimeError):
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(n)]
        )
    logical = tf.config.list_logical_devices("CPU")
    if len(logical) < n:
        raise ValueError(
            f"--devices {n}: this process already initialized TensorFlow with "
            f"{len(logical)} CPU devices"
        )
    names = tuple(f"/device:CPU:{i}" for i in range(n))
    return DeviceSet(names=names, kind="CPU", host="/device:CPU:0")
