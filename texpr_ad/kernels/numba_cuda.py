"""The runtime names that generated CUDA modules import (`CUDARenderer.header`).

Every generated CUDA source, and so every kernel already in a disk cache, starts with
`from texpr_ad.kernels.numba_cuda import device_copy, empty, launch, zeros` (caches written
before the device pool: without `empty`): this module keeps that line working.  They live in
`cuda_runtime.py`; the renderer is `cuda_render.py` and the kernel class `cuda_kernel.py`.
"""
from .cuda_runtime import device_copy, empty, launch, zeros

__all__ = ["device_copy", "empty", "launch", "zeros"]
