"""`cuda_runtime.Launch`: a generated kernel's launch skips Numba's per-call typing once the
overload for its argument kinds is known.  Without a GPU: a stand-in dispatcher records what
ran, over real `DeviceNDArray`s on fake device pointers (never dereferenced).  The launches
themselves run in tests/cuda (simulator) and on a GPU (bench/gpu_session.sh)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from texpr_ad.kernels import cuda_runtime

devicearray = pytest.importorskip("numba.cuda.cudadrv.devicearray")


def _array(shape: tuple[int, ...], dtype: object = np.float32,
           strides: tuple[int, ...] | None = None) -> object:
    from numba.cuda.cudadrv.driver import MemoryPointer
    dtype = np.dtype(dtype)
    mem = MemoryPointer(None, ctypes.c_void_p(4096), int(np.prod(shape)) * dtype.itemsize * 2)
    return devicearray.DeviceNDArray(
        shape, strides or cuda_runtime.c_strides(shape, dtype.itemsize), dtype, gpu_data=mem)


class FakeKernel:
    """What `Launch` uses of a Numba CUDA dispatcher: `kernel[grid, block](*args)` types the
    arguments, compiles an overload on a miss and launches it; `overloads` by argument types;
    `typeof_pyval`.  `log` records each launch and whether Numba's dispatch ran it."""

    def __init__(self) -> None:
        self.overloads: dict[tuple, Overload] = {}
        self.log: list[tuple] = []

    def typeof_pyval(self, a: object) -> tuple:
        return ("int",) if isinstance(a, int) else (str(a.dtype), a.ndim, a.is_c_contiguous())

    def __getitem__(self, config: tuple) -> Config:
        return Config(self, *config)


class Overload:
    def __init__(self, kernel: FakeKernel, sig: tuple) -> None:
        self.kernel, self.sig = kernel, sig

    def launch(self, args: tuple, grid: tuple, block: tuple, stream: object, shared: int) -> None:
        self.kernel.log.append(("direct", self.sig, grid, block))


class Config:
    stream = 0

    def __init__(self, kernel: FakeKernel, grid: tuple, block: tuple) -> None:
        self.kernel, self.grid, self.block = kernel, grid, block

    def __call__(self, *args: object) -> None:
        sig = tuple(self.kernel.typeof_pyval(a) for a in args)
        self.kernel.overloads.setdefault(sig, Overload(self.kernel, sig))
        self.kernel.log.append(("dispatch", sig, self.grid, self.block))


@pytest.fixture
def on_gpu(monkeypatch):
    monkeypatch.setattr(cuda_runtime, "simulating", lambda: False)


def test_the_second_launch_of_the_same_argument_kinds_skips_the_dispatcher(on_gpu):
    k = FakeKernel()
    x, y = _array((4, 8)), _array((32,))
    launcher = cuda_runtime.launch(k, 1000, 0)
    assert isinstance(launcher, cuda_runtime.Launch) and k.log == []
    launcher(x, y, 7)
    launcher(_array((4, 8)), y, 9)  # other arrays and values of the same kinds
    cuda_runtime.launch(k, 1000, 0)(_array((4, 8), np.float64), y, 7)  # another dtype
    assert [entry[0] for entry in k.log] == ["dispatch", "direct", "dispatch"]
    threads = cuda_runtime.CONFIG.threads
    assert k.log[1][2:] == ((-(-1000 // threads), 1, 1), (threads, 1, 1))
    assert k.log[0][1] == k.log[1][1]  # the overload Numba picked for those kinds


def test_a_strided_array_always_goes_through_the_dispatcher(on_gpu):
    k = FakeKernel()
    strided = _array((4, 8), strides=(64, 4))  # every other row of an (8, 8) array
    assert not strided.is_c_contiguous()
    launcher = cuda_runtime.launch(k, 32, 0)
    launcher(strided, 3)
    launcher(strided, 3)
    assert [entry[0] for entry in k.log] == ["dispatch", "dispatch"]


def test_the_simulator_gets_numba_launch_configurations(monkeypatch):
    monkeypatch.setattr(cuda_runtime, "simulating", lambda: True)
    assert isinstance(cuda_runtime.launch(FakeKernel(), 32, 0), Config)
