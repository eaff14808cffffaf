"""CUDA kernels of a registry operator against a reference target (CPU kernels by default).

`check_cuda(entry)` builds the forward and all gradient kernels of the entry with
target="cuda" (a GPU, or Numba's CUDA simulator when NUMBA_ENABLE_CUDASIM=1 was set
before numba was imported) and compares them with the same kernels built for the
CPU.  Result figure: max relative error (max |cuda - ref| / max |ref|) over every
output; detail: "gpu" or "simulator" (plus the reason of a failure or skip).

    python -m texpr_ad.testing.cuda [pattern] [--ref interp] [--shard k/n]

prints one JSON line per operator (the test in tests/cuda/ runs it in subprocesses).
"""
from __future__ import annotations

import json
import sys
import time
from typing import Sequence

import numpy as np

from ..kernels import build
from ..kernels.cuda_runtime import CudaUnavailableError, require_cuda, simulating
from ..schedule.cuda import strategy
from ..schedule.plan import CudaStrategy
from .numeric import Result, Status, rel_error
from .ops import Runner, cpu_runner, interp_runner, kernel_jobs

F64_TOL = 1e-9   # float64: only the summation order differs (block reductions)
F32_TOL = 1e-4


def cuda_runner(outputs: Sequence, inputs: Sequence, arrays: Sequence[np.ndarray],
                strategies: dict[str, int] | None = None) -> list:
    """Build for target="cuda" and run; counts the stage strategies into `strategies`."""
    k = build(list(outputs), list(inputs), target="cuda")
    for st in k.plan.stages:
        if strategies is not None:
            strategies[strategy(st)] = strategies.get(strategy(st), 0) + 1
    return list(k(*arrays))


def mode() -> str:
    return "simulator" if simulating() else "gpu"


def check_cuda(entry, reference: Runner = cpu_runner, dtype: str = "float64") -> Result:
    """Forward and every gradient kernel of `entry` on CUDA vs `reference` (CPU kernels)."""
    try:
        require_cuda()
    except CudaUnavailableError as e:
        return Result(Status.SKIP, None, str(e))
    where = mode()
    if entry.sample is None:
        return Result(Status.SKIP, None, f"{where}: no compute form ({entry.no_compute})")
    t0 = time.perf_counter()
    try:
        (_, outs, ins, d), *rest = kernel_jobs(entry, dtype)
        s = d.sample if d is not None else entry.sample(dtype)  # one sample: its placeholders
        jobs = [("forward", outs, ins, list(s.arrays))]
        if rest:
            assert d is not None
            rng = np.random.default_rng(11)
            heads = [rng.standard_normal(np.shape(a)).astype(o.dtype)
                     for o, a in zip(d.outputs, reference(d.outputs, s.inputs, s.arrays),
                                     strict=True)]
            jobs += [(what, o, i, [*s.arrays, *heads]) for what, o, i, _ in rest]
    except Exception as e:  # noqa: BLE001 - not a CUDA problem
        return Result(Status.SKIP, None,
                      f"{where}: the reference fails: {type(e).__name__}: {e}"[:300])
    worst, kernels = 0.0, 0
    strategies: dict[str, int] = {}
    for what, outs, ins, arrays in jobs:
        try:
            want = reference(outs, ins, arrays)
        except Exception as e:  # noqa: BLE001
            return Result(Status.SKIP, None, f"{where}: the reference {what} fails: "
                                             f"{type(e).__name__}: {e}"[:300])
        try:
            got = cuda_runner(outs, ins, arrays, strategies)
            for t, g, w in zip(outs, got, want, strict=True):
                if np.asarray(g).dtype != np.asarray(w).dtype:
                    raise AssertionError(f"got {np.asarray(g).dtype}, reference "
                                         f"{np.asarray(w).dtype}")
                err = rel_error(g, w)
                tol = F64_TOL if t.dtype == "float64" else F32_TOL
                if not err <= tol:
                    return Result(Status.FAIL, err, f"{where}: {what} output {t.name!r} max "
                                                    f"rel err {err:.2e} > {tol:g}")
                worst = max(worst, err)
            kernels += 1
        except Exception as e:  # noqa: BLE001 - reported per operator
            return Result(Status.FAIL, None, f"{where}: {what}: {type(e).__name__}: {e}"[:400])
    status = Status.OK if d is not None else Status.NONDIFF
    return Result(status, worst, where, {"seconds": time.perf_counter() - t0,
                                         "builds": kernels, "strategies": strategies})


def tiled(entry, dtype: str = "float64") -> bool:
    """Whether a forward or gradient kernel of `entry` plans a tiled contraction on CUDA."""
    from ..schedule.cuda import refine
    from ..schedule.planner import plan_stages
    if entry.sample is None:
        return False
    try:
        jobs = kernel_jobs(entry, dtype)
    except Exception:  # noqa: BLE001 - check_cuda reports it
        return False
    return any(strategy(st) is CudaStrategy.TILE for _, outs, ins, _ in jobs
               for st in refine(plan_stages(list(outs), list(ins))).stages)


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
    p.add_argument("--tile-min", type=int, default=None,
                   help="lower schedule.cuda.TILE_MIN, any tile count (to exercise tiled contractions)")
    p.add_argument("--tiled-only", action="store_true",
                   help="only the operators with a kernel that plans a tiled contraction")
    a = p.parse_args(argv)
    from ..schedule import cuda as sc
    if a.block_min_reduce is not None:
        sc.BLOCK_MIN_REDUCE = a.block_min_reduce
    if a.tile_min is not None:
        sc.TILE_MIN, sc.TILE_MIN_BLOCKS = a.tile_min, 1
    sys.setswitchinterval(1e-5)  # the simulator's barriers hand the GIL around a lot
    k, n = (int(x) for x in a.shard.split("/"))
    ref = cpu_runner if a.ref == "cpu" else interp_runner
    for e in select(a.pattern)[k::n]:
        if a.tiled_only and not tiled(e, a.dtype):
            continue
        r = check_cuda(e, ref, a.dtype)
        print(json.dumps({"op": e.name, "status": r.status, "figure": r.figure,
                          "detail": r.detail, **r.extra}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
