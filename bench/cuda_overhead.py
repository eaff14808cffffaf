"""`python -m bench.cuda_overhead`: the fixed cost of one texpr_ad CUDA call, on a GPU.

Medians of N calls (each followed by a device synchronize) of: an empty Numba kernel launch,
a one-element texpr_ad kernel on Numba device arrays, the same as a `texpr_ad.torch` op on torch
CUDA tensors (forward, and forward + backward), and torch's own add (forward, forward + backward),
so the per-call overhead over the framework's own reads off directly.
"""
from __future__ import annotations

import statistics
import sys
import time
from typing import Callable

import numpy as np


def median_us(fn: Callable[[], object], sync: Callable[[], None], n: int = 300) -> float:
    for _ in range(20):
        fn()
    sync()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main() -> int:
    import torch
    from numba import cuda

    import texpr_ad as ta
    import texpr_ad.torch as tt
    from texpr_ad import te

    def sync() -> None:
        torch.cuda.synchronize()

    @cuda.jit
    def nothing(a):  # type: ignore[no-untyped-def]
        pass

    d = cuda.device_array(1, np.float32)
    x, y = te.placeholder((1,), name="x"), te.placeholder((1,), name="y")
    k = ta.build([te.compute((1,), lambda i: x[i] + y[i], name="z")], [x, y], target="cuda")
    dx, dy = cuda.to_device(np.ones(1, np.float32)), cuda.to_device(np.ones(1, np.float32))

    def add(a: te.Tensor, b: te.Tensor) -> te.Tensor:
        return te.compute(a.shape, lambda i: a[i] + b[i], name="s")

    op = tt.custom_op(add, name="overhead_add")
    tx = torch.ones(1, device="cuda", requires_grad=True)
    ty = torch.ones(1, device="cuda", requires_grad=True)
    rows = {
        "numba: empty kernel launch": lambda: nothing[1, 1](d),
        "texpr kernel, numba device arrays": lambda: k(dx, dy),
        "texpr_ad.torch op fwd (no_grad)": lambda: _nograd(torch, lambda: op(tx, ty)),
        "torch add fwd (no_grad)": lambda: _nograd(torch, lambda: tx + ty),
        "texpr_ad.torch op fwd+bwd": lambda: torch.autograd.grad(op(tx, ty).sum(), [tx, ty]),
        "torch add fwd+bwd": lambda: torch.autograd.grad((tx + ty).sum(), [tx, ty]),
    }
    print(f"per-call cost on {torch.cuda.get_device_name()} (median of 300, synchronized), us")
    for name, fn in rows.items():
        print(f"  {name:<36} {median_us(fn, sync):8.1f}")
    return 0


def _nograd(torch: object, fn: Callable[[], object]) -> object:
    with torch.no_grad():  # type: ignore[attr-defined]
        return fn()


if __name__ == "__main__":
    sys.exit(main())
