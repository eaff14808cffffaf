"""`python -m bench.cuda_split [NAME,...]`: per bench workload on a GPU, where texpr_ad's time
goes: wall time per call (median of 10, synchronized) against the GPU kernel time per call
(torch.profiler's CUDA activity, which records Numba's launches too) and the kernels per call,
for texpr_ad's CUDA kernels and torch eager side by side.  Wall far above GPU time is host
overhead (launches, allocation, checks); GPU time far above torch's is kernel quality."""
from __future__ import annotations

import statistics
import sys
import time
import warnings
from typing import Any, Callable


def measure(fn: Callable[[], Any], sync: Callable[[], None], n: int = 10) -> tuple[float, float, float]:
    """(wall ms, GPU kernel ms, kernels) per call of `fn`."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    sync()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        sync()
    gpu, kernels = 0.0, 0
    for e in prof.key_averages():
        d = getattr(e, "self_device_time_total", None)
        d = e.self_cuda_time_total if d is None else d
        if d > 0:
            gpu, kernels = gpu + d, kernels + e.count
    return statistics.median(times) * 1e3, gpu / n / 1e3, kernels / n


def main(argv: list[str]) -> int:
    warnings.filterwarnings("ignore")
    import torch
    from bench import plain
    from bench.__main__ import head, out_shape, torch_side
    from bench.cuda import cpu_name, gpu_name, synchronizer, texpr_device_side
    from bench.workloads import WORKLOADS
    torch.backends.cudnn.allow_tf32 = False
    sync = synchronizer(True)
    names = argv[0].split(",") if argv else list(WORKLOADS)
    print(f"GPU {gpu_name()}; CPU {cpu_name()}; ms per call: wall, GPU kernels, kernels per call")
    print(f"{'workload':<18} {'':4} {'t wall':>8} {'t gpu':>8} {'t nk':>5} | "
          f"{'torch wall':>10} {'torch gpu':>9} {'nk':>4}")
    for name in names:
        try:
            w = plain.make(name, False)
            g = head(out_shape(w))
            ref, side = torch_side(w, g, "cuda"), texpr_device_side(w, g)
            for c in ("fwd", "step", "bwd"):
                if c not in side:
                    print(f"{name:<18} {c:4} texpr error {side['errors'].get(c, '')[:80]}")
                    continue
                a, b = measure(side[c], sync), measure(ref[c], sync)
                print(f"{name:<18} {c:4} {a[0]:8.3f} {a[1]:8.3f} {a[2]:5.1f} | "
                      f"{b[0]:10.3f} {b[1]:9.3f} {b[2]:4.1f}", flush=True)
        except Exception as e:  # noqa: BLE001 - one row with the error, the rest go on
            print(f"{name:<18} error {type(e).__name__}: {str(e)[:150]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
