"""The Numba CPU backend: the renderer's CPU tables and compilation.

`numba` is imported only when the generated module is loaded, so rendering
(and golden tests of the source) work without it.
"""
from __future__ import annotations

from typing import Callable

from . import cache
from .render import KERNEL_NAME, Renderer


class CPURenderer(Renderer):
    """`numba.njit(parallel=True)`: the outer loop is a `prange`, accumulation is plain `+=`.

    Parfor fusion is off (each stage keeps its own loop nest, as planned), and
    `error_model='numpy'` makes float division by zero give inf/nan as NumPy
    does instead of raising, which also lets loops vectorize.
    """

    target = "cpu"
    header = ("import math", "import numpy as np", "from numba import njit, objmode, prange")
    helper_decorator = "@njit(cache=True)"
    kernel_decorator_parallel = ("@njit(parallel={'fusion': False}, error_model='numpy', "
                                 "cache=True)")
    kernel_decorator_serial = "@njit(error_model='numpy', cache=True)"
    parallel_loop = ("for {var} in prange({extent}):",)
    scatter_add = "{target} += {value}"


def compile_source(source: str) -> Callable:
    """The jitted kernel function of `source` (compiled lazily on first call, cached on disk)."""
    return getattr(cache.load(source), KERNEL_NAME)
