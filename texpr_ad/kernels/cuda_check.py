"""CUDA kernels of a registry operator against a reference target (CPU kernels by default).

`check_cuda(entry)` builds the forward and all gradient kernels of the entry with
target="cuda" (a GPU, or Numba's CUDA simulator when NUMBA_ENABLE_CUDASIM=1 was set
before numba was imported) and compares them with the same kernels built for the
CPU.  Result figure: max relative error (max |cuda - ref| / max |ref|) over every
output; detail: "gpu" or "simulator" (plus the reason of a failure or skip).

    python -m texpr_ad.kernels.cuda_check [pattern] [--ref interp] [--shard k/n]

prints one JSON line per operator (the test in tests/cuda/ runs it in subprocesses).
"""
from __future__ import annotations

import json
import sys
import time
from typing import Sequence

import numpy as np

from ..report.checks import Result, Runner, cpu_runner, derive, interp_runner

F64_TOL = 1e-9   # float64: only the summation order differs (block reductions)
F32_TOL = 1e-4


def cuda_runner(outputs: Sequence, inputs: Sequence, arrays: Sequence[np.ndarray],
                strategies: dict[str, int] | None = None) -> list:
    """Build for target="cuda" and run; counts the stage strategies into `strategies`."""
    from ..schedule.cuda import strategy
    from .build import build
    k = build(list(outputs), list(inputs), target="cuda")
    for st in k.plan.stages:
        if strategies is not None:
            strategies[strategy(st)] = strategies.get(strategy(st), 0) + 1
    return list(k(*arrays))


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        raise AssertionError(f"got {a.dtype}{a.shape}, reference {b.dtype}{b.shape}")
    if a.size == 0:
        return 0.0
    if not np.issubdtype(b.dtype, np.floating):
        return 0.0 if np.array_equal(a, b) else float("inf")
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    same = (np.isnan(a64) & np.isnan(b64)) | (a64 == b64)  # nan and inf in the same places
    if not same.all() and not np.isfinite(b64[~same]).all():
        return float("inf")
    d = np.where(same, 0.0, np.abs(a64 - b64))
    scale = max(float(np.abs(np.where(np.isfinite(b64), b64, 0.0)).max()), 1e-300)
    return float(d.max() / scale)


def mode() -> str:
    from .numba_cuda import simulating
    return "simulator" if simulating() else "gpu"


def check_cuda(entry, reference: Runner = cpu_runner, dtype: str = "float64") -> Result:
    """Forward and every gradient kernel of `entry` on CUDA vs `reference` (CPU kernels)."""
    from .numba_cuda import CudaUnavailableError, require_cuda
    try:
        require_cuda()
    except CudaUnavailableError as e:
        return Result("skip", None, str(e))
    where = mode()
    if entry.sample is None:
        return Result("skip", None, f"{where}: no compute form ({entry.no_compute})")
    t0 = time.perf_counter()
    try:
        d = derive(entry, dtype)
        s = d.sample if d is not None else entry.sample(dtype)  # one sample: its placeholders
        jobs = [("forward", list(s.outputs), list(s.inputs), list(s.arrays))]
        if d is not None:
            rng = np.random.default_rng(11)
            heads = [rng.standard_normal(np.shape(a)).astype(o.dtype)
                     for o, a in zip(d.outputs, reference(d.outputs, s.inputs, s.arrays),
                                     strict=True)]
            live = [g for g in d.grads if g is not None]
            if live:
                jobs.append(("gradient", live, [*s.inputs, *d.heads], [*s.arrays, *heads]))
    except Exception as e:  # noqa: BLE001 - not a CUDA problem
        return Result("skip", None, f"{where}: the reference fails: {type(e).__name__}: {e}"[:300])
    worst, kernels, strategies = 0.0, 0, {}
    for what, outs, ins, arrays in jobs:
        try:
            want = reference(outs, ins, arrays)
        except Exception as e:  # noqa: BLE001
            return Result("skip", None, f"{where}: the reference {what} fails: "
                                        f"{type(e).__name__}: {e}"[:300])
        try:
            got = cuda_runner(outs, ins, arrays, strategies)
            for t, g, w in zip(outs, got, want, strict=True):
                err = _rel(g, w)
                tol = F64_TOL if t.dtype == "float64" else F32_TOL
                if not err <= tol:
                    return Result("fail", err, f"{where}: {what} output {t.name!r} max rel err "
                                               f"{err:.2e} > {tol:g}")
                worst = max(worst, err)
            kernels += 1
        except Exception as e:  # noqa: BLE001 - reported per operator
            return Result("fail", None, f"{where}: {what}: {type(e).__name__}: {e}"[:400])
    status = "ok" if d is not None else "nondiff"
    return Result(status, worst, where, {"seconds": time.perf_counter() - t0,
                                         "builds": kernels, "strategies": strategies})


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    from ..ops import select
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("pattern", nargs="?", default="*")
    p.add_argument("--ref", choices=("cpu", "interp"), default="cpu")
    p.add_argument("--shard", default="0/1", help="k/n: every n-th operator starting at k")
    p.add_argument("--dtype", default="float64")
    p.add_argument("--block-min-reduce", type=int, default=None,
                   help="lower schedule.cuda.BLOCK_MIN_REDUCE (to exercise block reductions)")
    a = p.parse_args(argv)
    if a.block_min_reduce is not None:
        from ..schedule import cuda as sc
        sc.BLOCK_MIN_REDUCE = a.block_min_reduce
    sys.setswitchinterval(1e-5)  # the simulator's barriers hand the GIL around a lot
    k, n = (int(x) for x in a.shard.split("/"))
    ref = cpu_runner if a.ref == "cpu" else interp_runner
    for e in select(a.pattern)[k::n]:
        r = check_cuda(e, ref, a.dtype)
        print(json.dumps({"op": e.name, "status": r.status, "figure": r.figure,
                          "detail": r.detail, **r.extra}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
