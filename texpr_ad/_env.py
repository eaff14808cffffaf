"""Flags read from the environment, with a context manager for tests.

TEXPR_DEBUG levels: 1 prints derived adjoints, 2 adds kernel plans, 3 the generated source.
TEXPR_AD_GEMM: auto (the default), native or blas: whether float32 contractions run on
texpr_ad's own GEMM (`kernels/gemm_f32.py`); the CPU planner asks too, as it reads a
convolution's padded input in place only for that kernel (`schedule/cpu_implicit.py`).
"""
from __future__ import annotations

import contextlib
import functools
import os
from typing import Iterator

_overrides: dict[str, int] = {}


def debug_level() -> int:
    if "debug" in _overrides:
        return _overrides["debug"]
    try:
        return int(os.environ.get("TEXPR_DEBUG", "0") or 0)
    except ValueError:
        return 0


@contextlib.contextmanager
def flags(debug: int | None = None) -> Iterator[None]:
    """Temporarily set debug flags: `with flags(debug=2): ...`."""
    old = dict(_overrides)
    if debug is not None:
        _overrides["debug"] = debug
    try:
        yield
    finally:
        _overrides.clear()
        _overrides.update(old)


_GEMM_MODES = ("auto", "native", "blas")


def gemm_mode() -> str:
    """`TEXPR_AD_GEMM`: auto (the default), native or blas."""
    value = os.environ.get("TEXPR_AD_GEMM", "auto").strip().lower() or "auto"
    if value not in _GEMM_MODES:
        raise ValueError(f"TEXPR_AD_GEMM={value!r}: expected one of {', '.join(_GEMM_MODES)}")
    return value


@functools.cache
def native_gemm() -> bool:
    """Whether float32 products run on `kernels/gemm_f32.py`: `gemm_mode()`, where auto means
    the CPU Numba compiles for has AVX-512F: the host's features, or NUMBA_CPU_FEATURES where
    set (as with `NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=`, which targets AVX2 code)."""
    mode = gemm_mode()
    if mode != "auto":
        return mode == "native"
    features = os.environ.get("NUMBA_CPU_FEATURES")
    if features is None:
        import llvmlite.binding as ll
        features = ll.get_host_cpu_features().flatten()
    return "+avx512f" in features.split(",")
