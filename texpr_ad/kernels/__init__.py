"""Kernels: render a plan to Numba source, compile it with an on-disk cache, call it."""
from .build import Kernel, KernelArgumentError, build
from .render import EXPR_RULES, Renderer

__all__ = ["EXPR_RULES", "Kernel", "KernelArgumentError", "Renderer", "build"]
