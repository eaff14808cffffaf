"""Flags read from the environment, with a context manager for tests.

TEXPR_DEBUG levels: 1 prints derived adjoints, 2 adds kernel plans, 3 the generated source.
TEXPR_AD_GEMM: auto (the default), native or blas: whether float32 contractions run on
texpr_ad's own GEMM (`kernels/gemm_f32.py`; auto: where the CPU has AVX-512, or AVX2 with
FMA); the CPU planner asks too, as it reads a convolution's padded input in place only for that
kernel (`schedule/cpu_implicit.py`).
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
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


# The float32 GEMM's vector paths, widest first: (name, float32 lanes, the register LLVM's fused
# multiply-add must use).  None fits on ARM or x86 before AVX2/FMA: BLAS under TEXPR_AD_GEMM=auto.
GEMM_ISAS = (("avx512", 16, "zmm"), ("avx2", 8, "ymm"))
_FMA_IR = """declare {v} @llvm.fma.v{w}f32({v}, {v}, {v})
define void @f(ptr %p) {{ %x = load {v}, ptr %p
  %y = call {v} @llvm.fma.v{w}f32({v} %x, {v} %x, {v} %x)
  store {v} %y, ptr %p  ret void }}"""


def numba_target() -> tuple[str, str]:
    """(CPU name, features) Numba compiles for: NUMBA_CPU_NAME / NUMBA_CPU_FEATURES where set, as
    its config reads them, else the host's; features "" mean the named CPU's own (AVX2 for
    `NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=`)."""
    import llvmlite.binding as ll
    cpu = os.environ.get("NUMBA_CPU_NAME") or None
    features = os.environ.get("NUMBA_CPU_FEATURES")
    if features is None:
        features = "" if str(cpu).lower() == "generic" else ll.get_host_cpu_features().flatten()
    return cpu or ll.get_host_cpu_name(), features


@functools.cache
def vector_isa(cpu: str, features: str) -> str | None:
    """The GEMM_ISAS path of this CPU target (None: none), asked of LLVM: which registers its
    code for one `llvm.fma` of each width uses, for the process's triple."""
    import llvmlite.binding as ll
    ll.initialize_native_target()
    ll.initialize_native_asmprinter()
    tm = ll.Target.from_triple(ll.get_process_triple()).create_target_machine(cpu, features)
    for name, lanes, reg in GEMM_ISAS:
        asm = tm.emit_assembly(ll.parse_assembly(_FMA_IR.format(w=lanes, v=f"<{lanes} x float>")))
        if re.search(rf"vfmadd\w*\s+%{reg}", asm):
            return name
    return None


@functools.cache
def native_gemm() -> bool:
    """Whether float32 products run on `kernels/gemm_f32.py`: `gemm_mode()`, where auto means
    the CPU Numba compiles for (`numba_target`) has one of its vector paths (`vector_isa`):
    AVX-512 or AVX2 with FMA; elsewhere (ARM, older x86) BLAS."""
    mode = gemm_mode()
    if mode != "auto":
        return mode == "native"
    return vector_isa(*numba_target()) is not None
