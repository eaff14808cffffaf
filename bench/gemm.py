"""texpr_ad's float32 GEMM (`kernels/gemm_f32.py`) against NumPy's BLAS, same process, same run.

    python -m bench.gemm [--repeat N]

The products are those of the bench's conv2d / conv2d_s2 (forward, input and weight
gradients, as their contraction stages call them) and a dense layer.  Calls alternate (rotating
order, `testing.sample_times`); printed: GF/s of each from the median, and the ratio.
Run it with and without `OPENBLAS_CORETYPE` to see what the environment does to NumPy's side.
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np

# (name, batch, m, k, n, A shared by the batch)
CASES = [("conv2d fwd", 8, 64, 576, 3136, True), ("conv2d dx", 8, 64, 576, 3364, True),
         ("conv2d dw", 1, 576, 25088, 64, False), ("conv2d_s2 fwd", 8, 128, 576, 784, True),
         ("conv2d_s2 dx", 1, 6272, 128, 576, False), ("conv2d_s2 dw", 1, 576, 6272, 128, False),
         ("dense", 1, 512, 1024, 1024, False)]


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.gemm", description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    from bench.__main__ import set_threads, blas_line
    set_threads()
    import torch
    from texpr_ad.kernels import gemm_f32
    from texpr_ad.kernels.numba_cpu import blas_stack_matmul as blas
    from texpr_ad.testing import sample_times
    import numba
    print(blas_line(torch), f"| {numba.get_num_threads()} threads each")
    rng = np.random.default_rng(0)

    print(f"{'product':14s} {'b x m x k x n':>22s} {'BLAS GF/s':>10s} {'ours GF/s':>10s} {'ours/BLAS time':>15s}")
    for name, nb, m, k, n, shared in CASES:
        a = rng.standard_normal((1 if shared else nb, m, k)).astype(np.float32)
        a = np.broadcast_to(a, (nb, m, k))
        b = rng.standard_normal((nb, k, n)).astype(np.float32)
        c1, c2 = np.empty((nb, m, n), np.float32), np.empty((nb, m, n), np.float32)
        t_blas, t_ours = sample_times(lambda: blas(a, b, c1), lambda: gemm_f32.matmul(a, b, c2),
                                      repeat=args.repeat)
        np.testing.assert_allclose(c2, c1, rtol=1e-3, atol=1e-3 * np.sqrt(k))
        flops = 2.0 * nb * m * k * n
        tb, to = statistics.median(t_blas), statistics.median(t_ours)
        print(f"{name:14s} {f'{nb}x{m}x{k}x{n}':>22s} {flops / tb / 1e9:10.0f} {flops / to / 1e9:10.0f}"
              f" {to / tb:15.2f}")


if __name__ == "__main__":
    main()
