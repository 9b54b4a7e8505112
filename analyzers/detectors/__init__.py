"""One module per finding id (shared/ARCHITECTURE.md). Each exposes `ID` and
`detect(ctx) -> Finding | Skipped | None` (None: the pattern is absent)."""

from __future__ import annotations

from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from analyzers.context import Context
    from analyzers.findings import Finding, Skipped

DETECTOR_IDS = (
    "io_stall",
    "input_preprocessing",
    "duplicated_input",
    "queue_input",
    "convert_to_tensor_gaps",
    "serialized_h2d",
    "exposed_input_copy",
    "collective_overhead",
    "straggler_worker",
    "parameter_server_wait",
    "dstate_threads",
    "idle_cores",
    "cpu_throttling",
    "cpu_contention",
    "kernel_launch_overhead",
    "no_mixed_precision",
    "eager_execution",
    "function_retracing",
    "xla_recompilation",
    "per_step_overhead",
    "step_stalls",
    "host_device_pingpong",
    "embeddings_on_host",
    "dense_embedding_update",
    "one_hot_matmul",
    "preprocessing_in_step",
    "debug_ops_in_step",
)


def detectors() -> list[ModuleType]:
    return [import_module(f"analyzers.detectors.{i}") for i in DETECTOR_IDS]


def run_detector(module: ModuleType, ctx: Context) -> Finding | Skipped | None:
    """`module.detect(ctx)`, once per run: the report asks every detector, and a detector that
    leaves time another one estimates (step_stalls) asks that one too."""
    return ctx.memo(f"detector:{module.ID}", lambda: module.detect(ctx))


def claims(module: ModuleType, ctx: Context) -> bool:
    """Whether `module` reports a medium or high finding: one that an overlapping detector
    leaves the time to."""
    found = run_detector(module, ctx)
    return getattr(found, "severity", None) in ("medium", "high")
