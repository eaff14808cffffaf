"""Whether float32 contractions run on texpr_ad's own GEMM (`gemm_f32.py`): `TEXPR_AD_GEMM`.

Numba-free, so that the planner (which reads the padded input of a convolution in place only
for that kernel, `schedule/cpu_implicit.py`) and the bench header can ask without loading it.
"""
from __future__ import annotations

import functools
import os

_MODES = ("auto", "native", "blas")


def mode() -> str:
    """`TEXPR_AD_GEMM`: auto (the default), native or blas."""
    value = os.environ.get("TEXPR_AD_GEMM", "auto").strip().lower() or "auto"
    if value not in _MODES:
        raise ValueError(f"TEXPR_AD_GEMM={value!r}: expected one of {', '.join(_MODES)}")
    return value


@functools.cache
def enabled() -> bool:
    """Whether float32 products run on `gemm_f32`: `mode()`, where auto means the host CPU has
    AVX-512F."""
    mode_ = mode()
    if mode_ != "auto":
        return mode_ == "native"
    import llvmlite.binding as ll
    return "+avx512f" in ll.get_host_cpu_features().flatten().split(",")
