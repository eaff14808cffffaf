"""`CudaKernel`: the CUDA target's kernel, a module of `@cuda.jit` kernels and their launcher."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..schedule.plan import Plan
from . import cache
from .cuda_render import CUDARenderer
from .cuda_runtime import device_copy, host_stand_in, is_device_array, load_cuda
from .kernel import Kernel, no_keywords
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
        self._device_checked: dict[tuple, list[int]] = {}  # `_device_args`' memo

    def __call__(self, *arrays: Any, **keywords: Any) -> tuple[Any, ...]:
        if keywords:
            no_keywords(keywords, self.plan.inputs)
        cuda = load_cuda()
        on_device = [is_device_array(a) for a in arrays]
        if all(on_device):
            args, params = self._device_args(cuda, arrays)
        else:
            host, params = self._validate([host_stand_in(a) if d else a
                                           for a, d in zip(arrays, on_device, strict=False)])
            args = [_device_view(cuda, a) if d else
                    cuda.to_device(np.ascontiguousarray(h) if h.ndim else h.reshape(1))
                    for a, h, d in zip(arrays, host, on_device, strict=True)]
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

    def _device_args(self, cuda: Any, arrays: Sequence[Any]) -> tuple[list[Any], list[int]]:
        """Device arrays as the kernels take them, and the symbolic dims' values.  The checks
        run on host stand-ins (no copies) once per shapes and dtypes (a memo, as the CPU
        kernel's `_prepare` keeps for NumPy arrays)."""
        key = tuple([(tuple(a.shape), a.dtype) for a in arrays])
        params = self._device_checked.get(key)
        if params is None:
            _, params = self._validate([host_stand_in(a) for a in arrays])
            if len(self._device_checked) < 64:
                self._device_checked[key] = params
        return [_device_view(cuda, a) for a in arrays], params

    def _internal_error(self, e: Exception) -> str:
        return (f"internal error: a generated CUDA kernel failed to compile or launch "
                f"({type(e).__name__}: {str(e)[:300]}); its source is "
                f"{self._fn.__code__.co_filename} (kernel.source); please report it with "
                f"print(kernel.plan)")


def _device_view(cuda: Any, a: Any) -> Any:
    """A Numba device array over device array `a` (a `__cuda_array_interface__` one wrapped
    without a stream sync: kernels run in stream order after the producer's work), 0-d as 1."""
    if isinstance(a, np.ndarray) or not hasattr(a, "copy_to_host"):
        a = cuda.as_cuda_array(a, sync=False)
    return a.reshape(1) if a.ndim == 0 else a
