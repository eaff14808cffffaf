"""The Numba CPU backend: the renderer's CPU tables and compilation.

`numba` is imported only when the generated module is loaded, so rendering
(and golden tests of the source) work without it.
"""
from __future__ import annotations

import functools
import hashlib
import os
import threading
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..schedule.plan import Plan
from ..te import dtype as dt
from ..te.expr import Call, Const
from ..te.ops import Op
from . import blas_threads, cache, threads
from .cpu_render import CPURender
from .render import EXPR_RULES, KERNEL_NAME, Renderer, Rule, one_literal

# the kernel header names vecmath.py's hash, so cached kernels are rebuilt when it changes
_VECMATH = hashlib.sha256((Path(__file__).parent / "vecmath.py").read_bytes()).hexdigest()[:12]


def _only(dtypes: Callable[[str], bool], op: Op, rule: Rule) -> Rule:
    """`rule` where the call's dtype passes `dtypes`, the shared EXPR_RULES entry otherwise."""
    other = EXPR_RULES[op]
    return lambda e, a: (rule if dtypes(e.dtype) else other)(e, a)


def _f32(d: str) -> bool:
    return d == "float32"


def _llvm_pow(e: Call) -> bool:
    """x ** c that LLVM itself turns into exact inline arithmetic (x * x, 1 / x, a sqrt, x, 1),
    or operands that are not both float32."""
    c = e.args[1]
    return (isinstance(c, Const) and c.value in (2.0, -1.0, 0.5, 1.0, 0.0)
            or any(a.dtype != "float32" for a in e.args))


# vecmath.py: float32 exp/log/log1p/erf/tanh/sigmoid/cosh/sinh/pow as vectorizable
# polynomials, float max/min as selects
_VEC_RULES: dict[Op, Rule] = {
    Op.EXP: _only(_f32, Op.EXP, lambda e, a: f"exp_f32({a[0]})"),
    Op.TANH: _only(_f32, Op.TANH, lambda e, a: f"tanh_f32({a[0]})"),
    Op.LOG: _only(_f32, Op.LOG, lambda e, a: f"log_f32({a[0]})"),
    Op.LOG1P: _only(_f32, Op.LOG1P, lambda e, a: f"log1p_f32({a[0]})"),
    Op.ERF: _only(_f32, Op.ERF, lambda e, a: f"erf_f32({a[0]})"),
    Op.SIGMOID: _only(_f32, Op.SIGMOID,
                      lambda e, a: f"({one_literal(e.dtype)} / ({one_literal(e.dtype)} + exp_f32(-{a[0]})))"),
    Op.COSH: _only(_f32, Op.COSH, lambda e, a: f"cosh_f32({a[0]})"),
    Op.SINH: _only(_f32, Op.SINH, lambda e, a: f"sinh_f32({a[0]})"),
    Op.POW: _only(_f32, Op.POW, lambda e, a: EXPR_RULES[Op.POW](e, a) if _llvm_pow(e)
                  else f"pow_f32({a[0]}, {a[1]})"),
    Op.MAX: _only(dt.is_float, Op.MAX, lambda e, a: f"fmax({a[0]}, {a[1]})"),
    Op.MIN: _only(dt.is_float, Op.MIN, lambda e, a: f"fmin({a[0]}, {a[1]})"),
}


class CPURenderer(Renderer):
    """`numba.njit(parallel=True)`: the outer loop is a `prange`, accumulation is plain `+=`.

    Parfor fusion is off (each stage keeps its own loop nest, as planned), and
    `error_model='numpy'` makes float division by zero give inf/nan as NumPy
    does instead of raising, which also lets loops vectorize.
    """

    target = "cpu"
    header = ("import math", "import numpy as np", "from numba import njit, objmode, prange",
              "from texpr_ad.kernels.numba_cpu import stack_matmul, window_matmul, window_matmul_a",
              "from texpr_ad.kernels.vecmath import cosh_f32, erf_f32, exp_f32, fmax, fmaximum, "
              "fmin, fminimum, log1p_f32, log_f32, pow_f32, radd, sinh_f32, tanh_f32  "
              f"# vecmath {_VECMATH}")
    rules = {**EXPR_RULES, **_VEC_RULES}
    helper_decorator = "@njit(cache=True)"
    kernel_decorator_parallel = ("@njit(parallel={'fusion': False}, error_model='numpy', "
                                 "cache=True)")
    kernel_decorator_serial = "@njit(error_model='numpy', cache=True)"
    parallel_loop = ("for {var} in prange({extent}):",)
    scatter_add = "{target} += {value}"

    def render(self, plan: Plan) -> str:
        return CPURender(self, plan).source()


@functools.cache
def start_threads() -> None:
    """Start Numba's threading layer with `OMP_WAIT_POLICY=PASSIVE` unless the user chose one.

    Runs before the first kernel is compiled; a program that calls `numba.set_num_threads`
    before building any kernel should call this first.

    GNU OpenMP workers otherwise keep spinning after a `prange` ends and take the cores from
    the BLAS threads of the next contraction stage (measured: dense 512x1024x1024 at 13.7 ms
    instead of 6.5 ms).  The variable is set only while Numba's runtime loads (it reads it
    then) and removed again, so other OpenMP runtimes loaded later (PyTorch's) keep their
    defaults.

    `texpr_ad.kernels.threads` says how kernels are kept safe from threads and forked
    children on each threading layer.
    """
    ours = "OMP_WAIT_POLICY" not in os.environ
    if ours:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    try:
        import numba
        threads.load_tbb()
        numba.get_num_threads()  # launches the threading layer
    finally:
        if ours:
            del os.environ["OMP_WAIT_POLICY"]
    threads.after_launch()


_POOL: list = []  # one ThreadPoolExecutor, created on first use
os.register_at_fork(after_in_child=_POOL.clear)  # its threads do not exist in a forked child


def stack_matmul(a: Any, b: Any, out: Any) -> None:
    """`out[q] = a[q] @ b[q]` for 3-d stacks: the runtime of "contraction" stages (called in
    object mode).

    float32 products run on texpr_ad's own AVX-512 kernel where `gemm_f32.handles` them (it
    says why), on Numba's threads.  Others go through NumPy's BLAS on
    `numba.get_num_threads()` Python threads: NumPy releases the GIL inside BLAS, so the pieces
    (whole batch entries, or row blocks of a single product) run in parallel, each on a
    single-threaded BLAS (`blas_threads.single_threaded`: measured faster than one call on
    BLAS's own threads, whose workers then spin into the next Numba loop).
    """
    from . import gemm_f32  # imports numba: not at module level (rendering must not)
    if gemm_f32.handles((a, b, out), 2 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]):
        gemm_f32.matmul(a, b, out)
    else:
        blas_stack_matmul(a, b, out)


def window_matmul(a: Any, src: Any, extents: tuple[int, ...], strides: tuple[int, ...],
                  base: int, grid: tuple[int, ...], out: Any) -> None:
    """`out[q] = a[q] @ B[q]` where row k of B[q] is a run of `src[q]` (flattened) from
    `base + sum_i k_i * strides[i]`, k's digits k_i running over `extents` (row-major): the
    runtime of an implicit-im2col contraction (`schedule/cpu_implicit.py`, `plan.Window`),
    whose B is a sliding window over a padded input.  The product is computed on the padded
    `grid` (q, m, *grid) and cropped to `out` (q, m, *out dims).

    On texpr_ad's float32 GEMM the rows are read in place; otherwise B is gathered into an
    im2col buffer (a strided view of `src`, copied) for BLAS."""
    from . import gemm_f32
    nb, m = out.shape[:2]
    flat = np.ascontiguousarray(src).reshape(nb, -1)
    rows = _row_offsets(extents, strides, base)
    pitch = [int(np.prod(grid[d + 1:])) for d in range(len(grid))]
    cols = sum((o - 1) * p for o, p in zip(out.shape[2:], pitch)) + 1
    full = _scratch((nb, m, int(np.prod(grid))), out.dtype)
    if gemm_f32.handles((a, flat, out), 2 * nb * m * len(rows) * cols):
        gemm_f32.matmul_rows(a, flat, rows, cols, full)
    else:
        item = flat.itemsize
        view = np.lib.stride_tricks.as_strided(
            flat[:, base:], (nb, *extents, cols),
            (flat.strides[0], *(s * item for s in strides), item), writeable=False)
        blas_stack_matmul(a, view.reshape(nb, len(rows), cols), full[:, :, :cols])
    crop = (slice(None), slice(None), *(slice(0, o) for o in out.shape[2:]))
    out[...] = full.reshape((nb, m, *grid))[crop]


def window_matmul_a(src: Any, extents: tuple[int, ...], strides: tuple[int, ...], base: int,
                    grid: tuple[int, ...], sliding: tuple[int, ...], b: Any, out: Any) -> None:
    """`out = sum_q A[q] @ B[q]`, the runtime of an implicit-im2col weight gradient
    (`plan.Window` with side "a"): row k of A[q] holds `src[q]` (flattened) at
    `base + sum_i k_i * strides[i]` (k's digits over `extents`) plus `y * pitch + x` for the
    points (y, x) of the `sliding` extents, where `b[q]` holds B[q] on the padded `grid`
    (zero at its padded columns).

    On texpr_ad's float32 GEMM, A's rows are read in place as runs over the padded grid, the
    padded columns included (their zeros in b cancel them).  Where a non-finite input value
    falls in those columns (zero times inf is NaN) the result would show NaN where it is
    finite, so a non-finite result is recomputed from the exact windows (gathered, then BLAS),
    which is also the path off that kernel."""
    from . import gemm_f32
    nb = b.shape[0]
    flat = np.ascontiguousarray(src).reshape(nb, -1)
    rows = _row_offsets(extents, strides, base)
    pitch = [int(np.prod(grid[d + 1:])) for d in range(len(grid))]
    cols = sum((o - 1) * p for o, p in zip(sliding, pitch)) + 1
    if gemm_f32.handles((flat, b, out), 2 * len(rows) * nb * cols * out.shape[1]):
        gemm_f32.matmul_a_rows(flat, rows, b[:, :cols], out)
        if np.isfinite(out).all():
            return
    item, npts = flat.itemsize, int(np.prod(sliding))
    view = np.lib.stride_tricks.as_strided(
        flat[:, base:], (nb, *extents, *sliding),
        (flat.strides[0], *(s * item for s in strides), *(p * item for p in pitch)),
        writeable=False)
    a = view.reshape(nb, len(rows), npts).transpose(1, 0, 2).reshape(1, len(rows), nb * npts)
    box = (slice(None), *(slice(0, o) for o in sliding))
    bb = b.reshape(nb, *grid, -1)[box].reshape(1, nb * npts, -1)
    blas_stack_matmul(a, bb, out[None])


def _row_offsets(extents: tuple[int, ...], strides: tuple[int, ...], base: int) -> Any:
    """`base + sum_i k_i * strides[i]` for every k (digits over `extents`, row-major), int64."""
    rows = np.full((), base, np.int64)
    for e, s in zip(extents, strides):
        rows = np.add.outer(rows, np.arange(e, dtype=np.int64) * s)
    return rows.ravel()


_SCRATCH = threading.local()
SCRATCH_KEEP = 4  # scratch arrays kept per thread (the window stages of a kernel, typically)


def _scratch(shape: tuple[int, ...], dtype: Any) -> Any:
    """An uninitialized array reused by the calls of one thread with the same shape and dtype
    (a large `np.empty` would fault its pages in again on every call); the SCRATCH_KEEP most
    recently used are kept."""
    key = (shape, np.dtype(dtype))
    kept: dict = getattr(_SCRATCH, "arrays", None) or {}
    buf = kept.pop(key, None)
    if buf is None:
        buf = np.empty(shape, dtype)
    kept[key] = buf  # most recent last
    _SCRATCH.arrays = dict(list(kept.items())[-SCRATCH_KEEP:])
    return buf


def blas_stack_matmul(a: Any, b: Any, out: Any) -> None:
    """`stack_matmul` through NumPy's BLAS: split over Numba's thread count, each piece on a
    single-threaded BLAS."""
    with blas_threads.single_threaded():
        _split_matmul(a, b, out)


def _split_matmul(a: Any, b: Any, out: Any) -> None:
    import numba
    nt = max(1, numba.get_num_threads())
    nb, m = a.shape[0], a.shape[1]
    if nt == 1 or a.shape[1] * a.shape[2] * b.shape[2] * nb < 1 << 18:
        for q in range(nb):
            np.matmul(a[q], b[q], out=out[q])
        return
    if nb >= nt:
        jobs = [(q, slice(0, m)) for q in range(nb)]
    else:
        step = -(-m // nt)
        jobs = [(q, slice(r, min(r + step, m))) for q in range(nb) for r in range(0, m, step)]
    if not _POOL or _POOL[0][1] != nt:
        from concurrent.futures import ThreadPoolExecutor
        _POOL[:] = [(ThreadPoolExecutor(nt, thread_name_prefix="texpr_blas"), nt)]

    def run(job: tuple[int, slice]) -> None:
        q, rows = job
        np.matmul(a[q, rows], b[q], out=out[q, rows])

    list(_POOL[0][0].map(run, jobs))


def compile_source(source: str) -> Callable:
    """The jitted kernel function of `source` (compiled lazily on first call, cached on disk),
    wrapped where the threading layer needs it (see `texpr_ad.kernels.threads`)."""
    start_threads()
    fn = getattr(cache.load(source), KERNEL_NAME)
    st = threads.STATE
    if st.layer == "workqueue":
        return _Locked(fn)
    return _ForkSafe(fn, source) if st.gnu_omp else fn


class _Locked:
    """A kernel dispatcher whose calls hold one process-wide lock (workqueue is not
    thread-safe).  Attributes (`stats`, `py_func`) are the dispatcher's."""

    def __init__(self, fn: Callable) -> None:
        self._fn = fn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fn, name)

    def __call__(self, *args: Any) -> Any:
        with threads.STATE.call_lock:
            return self._fn(*args)


class _ForkSafe(_Locked):
    """A kernel dispatcher that, in a process forked after GNU OpenMP started, calls a serial
    build of the same source (compiled there on first use) instead of the parallel one."""

    def __init__(self, fn: Callable, source: str) -> None:
        self._fn, self._source = fn, source
        self._serial: Callable | None = None

    def __call__(self, *args: Any) -> Any:
        if not threads.STATE.forked:
            return self._fn(*args)
        if self._serial is None:
            threads.warn_serial()
            r = CPURenderer
            src = self._source.replace(r.kernel_decorator_parallel, r.kernel_decorator_serial)
            self._serial = getattr(cache.load(src), KERNEL_NAME)
        return self._serial(*args)
