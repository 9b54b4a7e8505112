"""What a GPU kernel computes and in what precision, read from its name (docs/trace-signals.md,
"Kernel precision").

cuBLAS, cuDNN and CUTLASS name their kernels after the math and the data type: `volta_sgemm_*`
and `volta_scudnn_*` are FP32 on the CUDA cores, `cutlass_80_tensorop_s1688gemm_*` is FP32 data
through TF32 tensor cores, `volta_fp16_s884gemm_fp16_*`, `volta_h884gemm_*`,
`ampere_bf16_s16816gemm_bf16_*` and `cutlass_80_tensorop_h16816gemm_*` are half precision;
templated kernels carry their element type (`cudnn::detail::dgrad_engine<float, ...>`,
`implicit_convolve_sgemm<float, ...>`, `Eigen::half`, `c10::BFloat16`, `cutlass::tfloat32_t`).
Matrix multiplications and convolutions are what tensor cores run faster in half precision;
the rest (elementwise, normalization, reductions) is bound by memory and only moves fewer bytes.

The architecture, where the trace does not record the GPU's compute capability, comes from the
cuBLAS/cuDNN prefixes of the kernel names (`volta_`, `turing_`, `ampere_`, `sm80_`...).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

# HALF: 16 bits or fewer (float16, bfloat16, FP8); SINGLE: FP32 data, on CUDA cores or TF32.
HALF, SINGLE, UNKNOWN = "half", "single", "unknown"

_MATH = re.compile(r"gemm|conv(?!ert)|scudnn|hcudnn|winograd|xmma|wgrad|dgrad|fprop|matmul|"
                   r"cublas|contraction", re.IGNORECASE)
# Checked first: a half-precision kernel often names float too (its accumulator, a scale).
_HALF = re.compile(r"half|bf16|bfloat16|fp16|f16|(?<![a-z0-9])h\d{3,5}gemm|hgemm|hcudnn|fp8|"
                   r"e4m3|e5m2", re.IGNORECASE)
_SINGLE = re.compile(r"float|sgemm|scudnn|(?<![a-z0-9])s\d{3,5}gemm|tf32|f32|fp32",
                     re.IGNORECASE)
# (pattern, compute capability) of the library kernels' architecture prefixes.
_ARCH = ((re.compile(r"(?:^|[^a-z])(?:sm_?90|hopper)_", re.IGNORECASE), (9, 0)),
         (re.compile(r"(?:^|[^a-z])(?:sm_?86)_", re.IGNORECASE), (8, 6)),
         (re.compile(r"(?:^|[^a-z])(?:ampere|sm_?80|cutlass_80)_", re.IGNORECASE), (8, 0)),
         (re.compile(r"(?:^|[^a-z])(?:turing|sm_?75)_", re.IGNORECASE), (7, 5)),
         (re.compile(r"(?:^|[^a-z])(?:volta|sm_?70)_", re.IGNORECASE), (7, 0)),
         (re.compile(r"(?:^|[^a-z])(?:pascal|sm_?6\d)_", re.IGNORECASE), (6, 0)),
         (re.compile(r"(?:^|[^a-z])(?:maxwell|sm_?5\d)_", re.IGNORECASE), (5, 0)))
# Tensor cores that run half precision came with Volta (7.0); TF32 with Ampere (8.0).
TENSOR_CORES = (7, 0)


def precision_of(name: str) -> str:
    if _HALF.search(name):
        return HALF
    if _SINGLE.search(name):
        return SINGLE
    return UNKNOWN


def is_math(name: str) -> bool:
    return bool(_MATH.search(name))


def classify(names: pd.Series) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(is math, precision) per row of a categorical series of kernel names, and the distinct
    names; each distinct name is read once."""
    present, rows = np.unique(names.array.codes, return_inverse=True)
    distinct = [str(n) for n in names.cat.categories[present]]
    math = np.array([is_math(n) for n in distinct], dtype=bool)
    prec = np.array([precision_of(n) for n in distinct], dtype=object)
    return math[rows], prec[rows], distinct


def arch_from_names(names: list[str]) -> tuple[int, int] | None:
    """The lowest compute capability the library kernels' name prefixes point to, or None."""
    found = [cc for name in names for pattern, cc in _ARCH if pattern.search(name)]
    return min(found) if found else None
