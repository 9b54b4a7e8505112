"""What the trials will run on, found without importing TensorFlow (the tuner's parent process
stays light; TF loads only inside each trial's subprocess)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class Hardware:
    accelerator: str  # "GPU" or "CPU"
    count: int  # GPUs; on CPU hosts the number of cores
    cpus: int

    def describe(self) -> str:
        if self.accelerator == "GPU":
            return f"{self.count} GPU(s), {self.cpus} CPUs"
        return f"CPU only ({self.cpus} cores; devices are logical CPU devices)"


def _visible_gpus() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return 0
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    n = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    if visible is not None:
        n = min(n, len([v for v in visible.split(",") if v.strip()]))
    return n


def detect() -> Hardware:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpus = _visible_gpus()
    if gpus:
        return Hardware("GPU", gpus, cpus or 1)
    return Hardware("CPU", cpus or 1, cpus or 1)
