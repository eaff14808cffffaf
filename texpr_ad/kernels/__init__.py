"""Kernels: render a plan to Numba source, compile it with an on-disk cache, call it."""
from .build import Kernel, KernelArgumentError, build
from .render import EXPR_RULES, Renderer

__all__ = ["EXPR_RULES", "Kernel", "KernelArgumentError", "Renderer", "build", "check_cuda"]


def check_cuda(entry, *args, **kwargs):  # lazy: numba.cuda and the report are imported on use
    """Forward and gradient kernels of a registry entry on CUDA vs CPU (see cuda_check.py)."""
    from .cuda_check import check_cuda as run
    return run(entry, *args, **kwargs)
