"""texpr_ad's float32 GEMM (`kernels/gemm_f32.py`) against NumPy's BLAS and torch.matmul, same
process, same run.

    python -m bench.gemm [--repeat N]

The products are those of the bench's conv2d / conv2d_s2 (forward, input and weight gradients,
as their contraction stages call them), dense and batch_matmul (forward and both gradients, in
the layouts their stages pass: a transposed operand is a strided view).  Calls alternate
(rotating order, `testing.sample_times`); printed: GF/s of each from the fastest run (other
processes share the cores), and texpr_ad's time over BLAS's and torch's.  The header names the
vector path the kernel ran (`gemm_f32.ISA`: avx512 or avx2, from the CPU Numba compiles for)
and NumPy's BLAS kernels.  To see the AVX2 path on an AVX-512 machine, run it in a fresh
process with `NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=` (and `OPENBLAS_CORETYPE=Haswell` for
BLAS on the same ISA).
"""
from __future__ import annotations

import argparse

import numpy as np

# (name, batch, m, k, n, A's layout, B's layout): "c" contiguous, "t" a transposed view,
# "shared" one matrix broadcast over the batch
CASES = [("conv2d fwd", 8, 64, 576, 3136, "shared", "c"),
         ("conv2d dx", 8, 64, 576, 3364, "shared", "c"),
         ("conv2d dw", 1, 576, 25088, 64, "c", "c"),
         ("conv2d_s2 fwd", 8, 128, 576, 784, "shared", "c"),
         ("conv2d_s2 dx", 1, 6272, 128, 576, "c", "c"),
         ("conv2d_s2 dw", 1, 576, 6272, 128, "c", "c"),
         ("dense fwd", 1, 512, 1024, 1024, "c", "t"),
         ("dense dx", 1, 512, 1024, 1024, "c", "c"),
         ("dense dw", 1, 1024, 512, 1024, "t", "c"),
         ("bmm fwd", 32, 256, 128, 256, "c", "c"),
         ("bmm dx", 32, 256, 256, 128, "c", "t"),
         ("bmm dy", 32, 128, 256, 256, "t", "c")]


def operand(rng: np.random.Generator, nb: int, rows: int, cols: int, layout: str) -> np.ndarray:
    """A float32 (nb, rows, cols) stack in `layout` (see CASES)."""
    if layout == "t":
        return rng.standard_normal((nb, cols, rows)).astype(np.float32).transpose(0, 2, 1)
    if layout == "shared":
        return np.broadcast_to(rng.standard_normal((1, rows, cols)).astype(np.float32),
                               (nb, rows, cols))
    return rng.standard_normal((nb, rows, cols)).astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.gemm", description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    from bench.__main__ import set_threads, blas_line
    set_threads()
    import numba
    import torch
    from numba.core.registry import cpu_target
    from texpr_ad.kernels import gemm_f32
    from texpr_ad.kernels.numba_cpu import blas_stack_matmul as blas
    from texpr_ad.testing import sample_times
    cpu = cpu_target.target_context.codegen().magic_tuple()[1]
    print(f"texpr_ad GEMM path: {gemm_f32.ISA or 'none (no AVX2: split vectors)'}, "
          f"{gemm_f32.MR}x{gemm_f32.NR} tile of {gemm_f32.W}-lane vectors (Numba target {cpu}); "
          f"contractions use {gemm_f32.describe()}; {blas_line(torch).split('; ', 1)[1]} "
          f"| {numba.get_num_threads()} threads each")
    rng = np.random.default_rng(0)
    head = ["BLAS GF/s", "torch GF/s", "ours GF/s", "ours/BLAS", "ours/torch"]
    print(f"{'product':14s} {'b x m x k x n':>20s} {'layouts':>9s}"
          + "".join(f"{h:>11s}" for h in head))
    for name, nb, m, k, n, a_lay, b_lay in CASES:
        a, b = operand(rng, nb, m, k, a_lay), operand(rng, nb, k, n, b_lay)
        c1, c2, c3 = (np.empty((nb, m, n), np.float32) for _ in range(3))
        ta, tb, tc = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c2)
        t_blas, t_torch, t_ours = sample_times(
            lambda: blas(a, b, c1), lambda: torch.matmul(ta, tb, out=tc),
            lambda: gemm_f32.matmul(a, b, c3), repeat=args.repeat)
        for got in (c2, c3):
            np.testing.assert_allclose(got, c1, rtol=1e-3, atol=1e-3 * np.sqrt(k))
        flops = 2.0 * nb * m * k * n
        tb_, tt, to = min(t_blas), min(t_torch), min(t_ours)
        print(f"{name:14s} {f'{nb}x{m}x{k}x{n}':>20s} {a_lay + ',' + b_lay:>9s}"
              + "".join(f"{flops / t / 1e9:11.0f}" for t in (tb_, tt, to))
              + f"{to / tb_:11.2f}{to / tt:11.2f}")


if __name__ == "__main__":
    main()
