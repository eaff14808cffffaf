"""The CUDA device pool and the split block reductions' plan, without a GPU.

The pool's bookkeeping is checked with a stand-in allocator (a real `DeviceNDArray` over fake
device pointers, never dereferenced); the kernels themselves run in tests/cuda (simulator or GPU).
"""
from __future__ import annotations

import ctypes
import gc
import types

import numpy as np
import pytest

from texpr_ad import te
from texpr_ad.kernels import cuda_runtime
from texpr_ad.ops import reduction
from texpr_ad.schedule import cuda as cuda_schedule
from texpr_ad.schedule.planner import plan_stages

pytest.importorskip("numba.cuda.cudadrv.devicearray")


@pytest.fixture
def fake_device(monkeypatch):
    allocs: list[int] = []

    class FakeCuda:
        def device_array(self, n: int, dtype: object) -> object:
            allocs.append(n)
            ptr = types.SimpleNamespace(context=None, device_pointer=ctypes.c_void_p(4096 * len(allocs)))
            return types.SimpleNamespace(gpu_data=ptr)

    monkeypatch.setattr(cuda_runtime, "load_cuda", lambda: FakeCuda())
    return allocs


def _address(a: object) -> int:
    return a.__cuda_array_interface__["data"][0]  # type: ignore[attr-defined]


def test_pool_reuses_a_buffer_only_after_every_view_is_gone(fake_device):
    pool = cuda_runtime.DevicePool(limit=1 << 20)
    a = pool.empty((4, 8), np.float32)
    assert a.shape == (4, 8) and a.strides == (32, 4) and a.dtype == np.float32
    view = a.reshape(32)
    first = _address(a)
    del a
    gc.collect()
    b = pool.empty((4, 8), np.float32)  # the view still holds the first buffer
    assert _address(b) != first and len(fake_device) == 2
    del view, b
    gc.collect()
    c = pool.empty((2, 16), np.float32)  # same byte size: a freed buffer comes back
    assert len(fake_device) == 2 and _address(c) in (first, 4096 * 2)


def test_pool_keeps_at_most_its_limit(fake_device):
    pool = cuda_runtime.DevicePool(limit=1024)
    arrays = [pool.empty((256,), np.float32) for _ in range(3)]  # 1024 bytes each
    del arrays
    gc.collect()
    assert pool.kept == 1024 and sum(len(v) for v in pool.free.values()) == 1


def _block_stage(outs, ins):
    plan = cuda_schedule.refine(plan_stages(outs, ins))
    return [s for s in plan.stages if s.cuda.strategy == "block"]


def test_few_points_over_long_reductions_split_over_blocks():
    x = te.placeholder((4, 65536), name="x")
    (st,) = _block_stage([reduction.sum(x)], [x])
    assert st.cuda.split == min(cuda_schedule.SPLIT_BLOCKS,
                                4 * 65536 // (cuda_schedule.REDUCE_THREADS
                                              * cuda_schedule.SPLIT_MIN_PER_THREAD))
    (rows,) = _block_stage([reduction.sum(x, axis=1)], [x])
    assert 2 <= rows.cuda.split <= cuda_schedule.SPLIT_BLOCKS // 4
    y = te.placeholder((2048, 4096), name="y")  # enough points to fill the GPU: no split
    (many,) = _block_stage([reduction.sum(y, axis=1)], [y])
    assert many.cuda.split == 1
    z = te.placeholder((8, 300), name="z")  # short reductions: no split
    (short,) = _block_stage([reduction.sum(z, axis=1)], [z])
    assert short.cuda.split == 1
