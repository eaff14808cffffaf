"""The CUDA runtime: whether a device (or the simulator) is there, the launch configuration,
device allocation and copies, and host stand-ins of device arrays for the argument checks.

Why the built-in `numba.cuda`: numba 0.68 still ships its CUDA target; the Numba docs
mark it deprecated in favour of NVIDIA's `numba-cuda` package, but importing it gives
no warning, `compile_ptx` works with the CUDA 13 toolkit here, and `numba-cuda`
installs a redirector that takes over `import numba.cuda`.  The generated code uses
only the public API shared by both (`cuda.jit`, `cuda.grid`, `cuda.gridsize`,
`cuda.shared.array`, `cuda.syncthreads`, `cuda.atomic.add`, `math.*`), so installing
the `cuda` extra (`numba-cuda[cu13]`) switches to the maintained target unchanged.
`numba.cuda` is imported lazily (generated module, `load_cuda()`), so `import texpr_ad`
works without it.  Generated modules import `launch`, `zeros` and `device_copy` through
`kernels/numba_cuda.py`.
"""
from __future__ import annotations

import os
import weakref
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import TexprError


class CudaUnavailableError(TexprError, RuntimeError):
    """target='cuda' with neither a GPU nor the simulator."""


# -- availability ---------------------------------------------------------------------------------

def load_cuda() -> Any:
    """`numba.cuda` (under the simulator, with its shared-array race fixed first)."""
    from numba import cuda
    if simulating():
        _lock_simulator_shared_arrays()
    return cuda


def _lock_simulator_shared_arrays() -> None:
    """Work around a race in Numba's CUDA simulator.

    `FakeCUDAShared.array` looks an allocation up and creates it on a miss without a
    lock, so two threads of one block can each create their own "shared" array and a
    block reduction then combines partial sums that never meet (seen as rare wrong
    results).  Serializing the lookup-or-create restores the CUDA semantics.
    """
    import sys
    import threading
    import traceback

    from numba.core import types
    from numba.cuda.simulator import kernelapi
    from numba.np import numpy_support
    shared = kernelapi.FakeCUDAShared
    if getattr(shared, "_texpr_locked", False):
        return
    lock = threading.Lock()
    unlocked = shared.array

    def array(self: Any, shape: Any, dtype: Any) -> Any:
        if shape == 0:  # dynamic shared memory: one buffer, nothing to race on
            return unlocked(self, shape, dtype)
        if isinstance(dtype, types.Type):
            dtype = numpy_support.as_dtype(dtype)
        caller = traceback.extract_stack(sys._getframe(1), limit=1)[0][0:2]  # the kernel line
        with lock:
            res = self._allocations.get(caller)
            if res is None:
                res = self._allocations[caller] = np.empty(shape, dtype)
        return res

    shared.array = array
    shared._texpr_locked = True


def simulating() -> bool:
    from numba.core import config
    return bool(config.ENABLE_CUDASIM)


def require_cuda() -> None:
    """Raise `CudaUnavailableError` unless a GPU or the CUDA simulator can run kernels."""
    try:
        cuda = load_cuda()
    except ImportError as e:  # pragma: no cover - numba without its CUDA target
        raise CudaUnavailableError(
            f"target='cuda' needs numba.cuda, which cannot be imported ({e}); install the "
            f"'cuda' extra (pip install 'texpr_ad[cuda]')") from e
    if simulating() or cuda.is_available():
        return
    raise CudaUnavailableError(
        "target='cuda' needs a CUDA GPU, but numba.cuda.is_available() is False (no GPU or "
        "driver found) and Numba's CUDA simulator is off. To run the CUDA kernels on the CPU "
        "(slowly, for testing), set NUMBA_ENABLE_CUDASIM=1 in the environment before Python "
        "imports numba, e.g. `NUMBA_ENABLE_CUDASIM=1 python script.py`; otherwise use "
        "target='cpu'.")


def gpu_available() -> bool:
    """Whether Numba sees a usable CUDA GPU (False without numba's CUDA target; the simulator
    does not count: it runs kernels on host arrays, not on the tensors of a GPU framework)."""
    try:
        from numba import cuda
        return bool(cuda.is_available())
    except Exception:  # numba without its CUDA target  # noqa: BLE001
        return False


def synchronize() -> None:
    """Wait for the kernels launched on Numba's default stream (`texpr_kernel` launches there),
    so a framework reading the outputs on its own stream sees them finished."""
    from numba import cuda
    cuda.synchronize()


# -- launch configuration -------------------------------------------------------------------------

@dataclass
class LaunchConfig:
    threads: int = 128        # threads per block of thread-per-point kernels
    max_blocks: int = 65535   # grid-stride loops cover the rest
    reduce_threads: int = 256  # threads per block of block reductions (power of two)


# The simulator runs every thread as a Python thread: small blocks and grids keep it
# fast, and make the grid-stride loops take many steps (which the tests want anyway).
CONFIG = LaunchConfig(threads=8, max_blocks=4, reduce_threads=8) if \
    os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0") else LaunchConfig()


def launch(kernel: Any, points: int, per_block: int) -> Any:
    """`kernel[grid, block]`: per_block 0 = thread per point, 1 = one thread, else block per point."""
    if per_block == 0:
        threads = CONFIG.threads
        blocks = max(1, min(-(-points // threads), CONFIG.max_blocks))
    elif per_block == 1:
        threads = blocks = 1
    else:
        threads = 1 << (min(per_block, CONFIG.reduce_threads).bit_length() - 1)
        blocks = max(1, min(points, CONFIG.max_blocks))
    if simulating():
        return kernel[blocks, threads]
    return Launch(kernel, blocks, threads)


class Launch:
    """`kernel[blocks, threads](*args)` without Numba's per-call dispatch.

    Numba's launch types every argument to pick the compiled overload (about 28 us per launch
    on an H200 host, more than a small kernel runs).  Generated kernels take C-contiguous
    device arrays and int64 dims, so the overload is looked up by each array's dtype and rank
    and launched directly (`_Kernel.launch`, the same argument marshalling Numba uses);
    other arguments (a strided array, say), and the first call of each argument kind, go
    through Numba's dispatcher, which compiles where needed.
    """

    __slots__ = ("kernel", "grid", "block")

    def __init__(self, kernel: Any, blocks: int, threads: int) -> None:
        self.kernel, self.grid, self.block = kernel, (blocks, 1, 1), (threads, 1, 1)

    def __call__(self, *args: Any) -> None:
        found: dict[tuple, Any] = self.kernel.__dict__.setdefault("_texpr_overloads", {})
        key = _argument_kinds(args)
        overload = found.get(key) if key is not None else None
        if overload is None:
            config = self.kernel[self.grid, self.block]
            config(*args)
            used = self.kernel.overloads.get(tuple(self.kernel.typeof_pyval(a) for a in args))
            if key is not None and hasattr(used, "launch"):
                found[key] = used
                _STREAM.setdefault("default", config.stream)
            return
        overload.launch(args, self.grid, self.block, _STREAM["default"], 0)


_STREAM: dict[str, Any] = {}  # the default stream as Numba's launch takes it (an int or object)


def _argument_kinds(args: Sequence[Any]) -> tuple | None:
    """(dtype, ndim) per C-contiguous Numba device array, int per int; None for anything else."""
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    kinds: list[Any] = []
    for a in args:
        if type(a) is int:
            kinds.append(int)
        elif isinstance(a, DeviceNDArray) and a.is_c_contiguous():
            kinds.append((a.dtype, a.ndim))
        else:
            return None
    return tuple(kinds)


def numba_signature(args: Sequence[tuple[str, int]]) -> tuple:
    """Numba argument types for one entry of a module's SIGNATURES (C-contiguous arrays)."""
    from numba import types
    from numba.np.numpy_support import from_dtype
    return tuple(types.int64 if n == 0 else types.Array(from_dtype(np.dtype(d if d != "bool" else
                                                                                  "bool")), n, "C")
                 for d, n in args)


# -- device arrays --------------------------------------------------------------------------------

class DevicePool:
    """Device buffers reused across calls, like a framework's caching allocator.

    Every kernel call allocates its outputs and intermediates; `cuMemAlloc`/`cuMemFree` per
    call cost far more than small kernels (and a free synchronizes the device).  `empty` hands
    out a `DeviceNDArray` over a pooled buffer; when the last array or view over it is gone
    (a `weakref.finalize` on its memory handle, which views and `__cuda_array_interface__`
    consumers keep alive) the buffer goes back to the free list of its size.  Reuse is safe
    in stream order: texpr_ad launches everything on Numba's default stream.  At most
    `limit` bytes are kept free; an allocation that fails empties the free lists and retries.
    """

    GRAIN = 512  # bytes: sizes are rounded up to this, so near sizes share buffers

    def __init__(self, limit: int = 2 << 30) -> None:
        self.limit = limit
        self.free: dict[int, list[Any]] = {}
        self.kept = 0  # bytes in the free lists

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        cuda = load_cuda()
        from numba.cuda.cudadrv.devicearray import DeviceNDArray
        from numba.cuda.cudadrv.driver import MemoryPointer
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        key = max(self.GRAIN, -(-nbytes // self.GRAIN) * self.GRAIN)
        bufs = self.free.get(key)
        if bufs:
            base = bufs.pop()
            self.kept -= key
        else:
            try:
                base = cuda.device_array(key, dtype=np.uint8)
            except Exception:  # noqa: BLE001 - out of memory: give the cached buffers back, retry
                self.free.clear()
                self.kept = 0
                base = cuda.device_array(key, dtype=np.uint8)
        handle = MemoryPointer(base.gpu_data.context, base.gpu_data.device_pointer, nbytes)
        weakref.finalize(handle, self._give_back, key, base)
        return DeviceNDArray(shape, c_strides(shape, dtype.itemsize), dtype, gpu_data=handle)

    def _give_back(self, key: int, base: Any) -> None:
        if self.kept + key <= self.limit:
            self.free.setdefault(key, []).append(base)
            self.kept += key


def c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Byte strides of a C-contiguous array."""
    out, step = [], itemsize
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


POOL = DevicePool()


def empty(shape: int | tuple[int, ...], dtype: Any) -> Any:
    """An uninitialized device array (from `POOL` on a GPU; a host copy in the simulator)."""
    shape = (shape,) if isinstance(shape, int) else tuple(int(n) for n in shape)
    if simulating():
        return load_cuda().device_array(shape, dtype=dtype)
    return POOL.empty(shape, dtype)


def zeros(shape: int | tuple[int, ...], dtype: Any) -> Any:
    """A zero-filled device array (a memset on the GPU, a host copy in the simulator)."""
    cuda = load_cuda()
    if simulating():
        return cuda.to_device(np.zeros(shape, dtype))
    out = empty(shape, dtype)
    if out.size:
        out.gpu_data.memset(0)  # cuMemsetD8: in stream order on the default stream
    return out


def device_copy(a: Any) -> Any:
    out = empty(a.shape, a.dtype)
    out.copy_to_device(a)
    return out


def is_device_array(a: Any) -> bool:
    return hasattr(a, "__cuda_array_interface__") or type(a).__name__ == "FakeCUDAArray"


def host_stand_in(a: Any) -> np.ndarray:
    """A zero-memory NumPy array with the shape and dtype of device array `a` (for the checks).
    The dtype is read from `__cuda_array_interface__` where there is one: a torch tensor's
    `.dtype` is a torch dtype NumPy cannot interpret."""
    iface = getattr(a, "__cuda_array_interface__", None)
    dtype = np.dtype(iface["typestr"]) if iface is not None else a.dtype
    shape = tuple(iface["shape"]) if iface is not None else a.shape
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape=shape,
                                           strides=(0,) * len(shape))
