"""`CudaKernel`: the CUDA target's kernel, a module of `@cuda.jit` kernels and their launcher."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..schedule.plan import Plan
from . import cache
from .cuda_render import CUDARenderer
from .cuda_runtime import device_copy, host_stand_in, is_device_array, load_cuda
from .kernel import Kernel
from .render import KERNEL_NAME, Renderer


class CudaKernel(Kernel):
    """A built CUDA kernel.  NumPy arrays in: copied to the device and the outputs copied back.
    Any device array in (numba.cuda or `__cuda_array_interface__`): no copies of those, and
    the outputs stay on the device (for chaining kernels).  Argument checks are the base's,
    on host stand-ins of the device arrays.  Kernels launch on Numba's default (legacy) stream
    and read device inputs in its order: work on another stream must be finished first
    (`texpr_ad.torch` synchronizes a non-default torch stream)."""

    def __init__(self, plan: Plan, renderer: Renderer | None = None) -> None:
        super().__init__(plan, renderer or CUDARenderer())
        self.module = cache.load(self.source)
        self._fn = getattr(self.module, KERNEL_NAME)

    def __call__(self, *arrays: Any) -> tuple[Any, ...]:
        cuda = load_cuda()
        on_device = [is_device_array(a) for a in arrays]
        host_args, params = self._prepare([host_stand_in(a) if d else a
                                           for a, d in zip(arrays, on_device, strict=False)])
        args = []
        for a, h, d in zip(arrays, host_args, on_device, strict=True):
            if d:
                # no stream sync per argument (Numba's default would synchronize the producer's
                # stream for each): kernels run in stream order after the producer's work
                a = a if not isinstance(a, np.ndarray) and hasattr(a, "copy_to_host") \
                    else cuda.as_cuda_array(a, sync=False)
                args.append(a.reshape(1) if a.ndim == 0 else a)
            else:
                args.append(cuda.to_device(h))
        res = self._run(*args, *params)
        out: list[Any] = []
        for r, t in zip(res, self.plan.outputs, strict=True):
            if any(r is x for x in out):  # an output listed twice
                r = device_copy(r)
            out.append(r)
        if any(on_device):
            return tuple(r.reshape(()) if t.ndim == 0 else r
                         for r, t in zip(out, self.plan.outputs, strict=True))
        return tuple(r.copy_to_host().reshape(()) if t.ndim == 0 else r.copy_to_host()
                     for r, t in zip(out, self.plan.outputs, strict=True))

    def _internal_error(self, e: Exception) -> str:
        return (f"internal error: a generated CUDA kernel failed to compile or launch "
                f"({type(e).__name__}: {str(e)[:300]}); its source is "
                f"{self._fn.__code__.co_filename} (kernel.source); please report it with "
                f"print(kernel.plan)")
