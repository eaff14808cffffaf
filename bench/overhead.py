"""Per-call overhead of a texpr_ad torch op (issue #27 item 5), next to plain torch and an empty
`torch.library.custom_op`, on a small tensor (1000 floats; kernels warm).

    python -m bench.overhead [--repeat N]      # or: python -m bench --overhead

Rows (microseconds per call, the fastest of `repeat` runs of 200 calls, one thread): the
forward under `torch.no_grad()`, and forward + backward (the input requires grad).  `plain torch` is `x * w + 1` (the op's
formula); `empty custom_op` a `torch.library.custom_op` returning `x.clone()` with the same
`register_autograd` shape, so its figure is what PyTorch's dispatch costs alone; `texpr_ad`
minus `empty custom_op` is texpr_ad's own per-call cost (argument checks, kernel lookup, the
kernel call, output wrapping).
"""
from __future__ import annotations

import argparse
import itertools
import time
from typing import Any, Callable, Sequence

N = 1000
_ids = itertools.count()


def _best_us(f: Callable[[], Any], repeat: int, inner: int = 200) -> float:
    for _ in range(20):
        f()
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(inner):
            f()
        runs.append((time.perf_counter() - t) / inner * 1e6)
    return min(runs)  # the least disturbed run: other processes only add time


def _ops() -> dict[str, Callable[..., Any]]:
    import torch
    import texpr_ad.torch as tt
    from texpr_ad import te

    def axpy(x, w):
        return te.compute(x.shape, lambda i: x[i] * w[i] + 1.0, name="y")
    k = next(_ids)

    empty = torch.library.custom_op(f"texpr_ad_bench::empty{k}", lambda x, w: x.clone(),
                                    mutates_args=(), schema="(Tensor x, Tensor w) -> Tensor")
    empty.register_fake(lambda x, w: torch.empty_like(x))
    empty.register_autograd(lambda ctx, g: (g, None),
                            setup_context=lambda ctx, inputs, output: None)
    return {"plain torch": lambda x, w: x * w + 1, "empty custom_op": empty,
            "texpr_ad": tt.custom_op(axpy, name=f"bench_overhead_axpy{k}")}


def measure(repeat: int = 7) -> dict[str, tuple[float, float]]:
    """{row: (forward µs, forward+backward µs)} on float32 tensors of N elements."""
    import torch
    torch.set_num_threads(1)
    x = torch.randn(N, requires_grad=True)
    w = torch.randn(N)
    out = {}
    for name, f in _ops().items():
        def fwd() -> None:
            with torch.no_grad():
                f(x, w)

        def step() -> None:
            f(x, w).sum().backward()
        out[name] = (_best_us(fwd, repeat), _best_us(step, repeat))
    return out


def run(repeat: int = 7) -> dict[str, tuple[float, float]]:
    got = measure(repeat)
    print(f"per-call overhead: {N} float32 elements, 1 thread, best of {repeat} (µs per call)")
    print(f"{'':18s} {'forward':>9s} {'fwd+bwd':>9s}")
    for name, (f, s) in got.items():
        print(f"{name:18s} {f:9.1f} {s:9.1f}")
    (ef, es), (tf, ts) = got["empty custom_op"], got["texpr_ad"]
    print(f"{'texpr_ad - empty':18s} {tf - ef:9.1f} {ts - es:9.1f}")
    return got


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.overhead",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    run(ap.parse_args(argv).repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
