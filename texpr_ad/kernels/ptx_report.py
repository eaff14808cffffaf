"""Compile every generated CUDA kernel of every registry operator to PTX and assemble it.

No GPU is needed: `numba.cuda.compile_ptx(kernel.py_func, signature, cc=(9, 0))` (CUDA 13
refuses Numba's default compute capability, so sm_90 is explicit), then
`ptxas -arch=sm_90 -v` for registers and spills.  Must run with the real numba.cuda,
i.e. without NUMBA_ENABLE_CUDASIM.

    python -m texpr_ad.kernels.ptx_report [pattern] [--jobs 2] [--cc 9.0]

prints a table (operator, forward/gradient, kernel, strategy, registers, spill bytes)
and totals.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class KernelStats:
    op: str
    which: str          # forward | gradient
    kernel: str
    strategy: str
    registers: int
    spill_stores: int
    spill_loads: int
    shared_bytes: int
    error: str = ""


def ptxas_path() -> str | None:
    for cand in (shutil.which("ptxas"), "/usr/local/cuda/bin/ptxas"):
        if cand and os.path.exists(cand):
            return cand
    return None


_REG = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
_SMEM = re.compile(r"(\d+) bytes smem")


def assemble(ptx: str, cc: tuple[int, int] = (9, 0)) -> tuple[int, int, int, int]:
    """(registers, spill store bytes, spill load bytes, shared bytes) from `ptxas -v`."""
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        res = subprocess.run([ptxas_path() or "ptxas", f"-arch=sm_{cc[0]}{cc[1]}", "-v", src,
                              "-o", os.path.join(d, "k.cubin")], capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"ptxas failed: {res.stderr[-500:]}")
    log = res.stderr + res.stdout
    regs = max((int(m) for m in _REG.findall(log)), default=0)
    spills = [(int(a), int(b)) for a, b in _SPILL.findall(log)]
    smem = max((int(m) for m in _SMEM.findall(log)), default=0)
    return regs, sum(a for a, _ in spills), sum(b for _, b in spills), smem


def operator_jobs(entry) -> list[tuple[str, list, list]]:
    """(which, outputs, inputs) of the forward and gradient kernels of a registry entry."""
    from ..report.checks import derive
    if entry.sample is None:
        return []
    d = derive(entry)
    s = d.sample if d is not None else entry.sample("float64")
    jobs = [("forward", list(s.outputs), list(s.inputs))]
    if d is not None:
        live = [g for g in d.grads if g is not None]
        if live:
            jobs.append(("gradient", live, [*s.inputs, *d.heads]))
    return jobs


def compile_entry(entry, cc: tuple[int, int] = (9, 0)) -> list[KernelStats]:
    from numba import cuda

    from ..schedule.cuda import strategy
    from . import cache
    from .numba_cuda import CUDARenderer, numba_signature, plan_cuda
    out: list[KernelStats] = []
    for which, outs, ins in operator_jobs(entry):
        plan = plan_cuda(outs, ins)
        mod = cache.load(CUDARenderer().render(plan))
        strategies = [strategy(st) for st in plan.stages]
        for (name, sig), how in zip(mod.SIGNATURES.items(), strategies, strict=True):
            try:
                ptx, _ = cuda.compile_ptx(getattr(mod, name).py_func, numba_signature(sig), cc=cc)
                regs, st, ld, smem = assemble(ptx, cc)
                out.append(KernelStats(entry.name, which, name, how, regs, st, ld, smem))
            except Exception as e:  # noqa: BLE001 - reported per kernel
                out.append(KernelStats(entry.name, which, name, how, -1, 0, 0, 0,
                                       f"{type(e).__name__}: {e}"[:300]))
    return out


def _worker(args: tuple[str, tuple[int, int]]) -> list[KernelStats]:
    from ..ops import get
    return compile_entry(get(args[0]), args[1])


def collect(pattern: str = "*", jobs: int = 2, cc: tuple[int, int] = (9, 0)) -> list[KernelStats]:
    """KernelStats of every kernel of every operator matching `pattern` (in `jobs` processes)."""
    from ..ops import select
    names = [e.name for e in select(pattern) if e.sample is not None]
    if jobs <= 1:
        return [k for n in names for k in _worker((n, cc))]
    import multiprocessing as mp
    with mp.get_context("spawn").Pool(jobs) as pool:
        return [k for ks in pool.map(_worker, [(n, cc) for n in names], chunksize=4) for k in ks]


def table(stats: Sequence[KernelStats]) -> str:
    rows = [f"{'operator':<30} {'kind':<8} {'kernel':<28} {'strategy':<9} {'regs':>4} "
            f"{'spill st/ld':>11} {'smem':>5}"]
    for k in stats:
        rows.append(f"{k.op:<30} {k.which:<8} {k.kernel:<28} {k.strategy:<9} {k.registers:>4} "
                    f"{f'{k.spill_stores}/{k.spill_loads}':>11} {k.shared_bytes:>5}"
                    + (f"  ERROR {k.error}" if k.error else ""))
    ok = [k for k in stats if not k.error]
    spilling = [k for k in ok if k.spill_stores or k.spill_loads]
    if ok:
        top = max(ok, key=lambda k: k.registers)
        rows += ["", f"kernels: {len(stats)} ({len(stats) - len(ok)} failed), operators: "
                     f"{len({k.op for k in stats})}",
                 f"registers: max {top.registers} ({top.op} {top.which} {top.kernel}), "
                 f"mean {sum(k.registers for k in ok) / len(ok):.1f}",
                 f"kernels that spill: {len(spilling)}"
                 + "".join(f"\n  {k.op} {k.which} {k.kernel}: {k.spill_stores} B stores, "
                           f"{k.spill_loads} B loads" for k in spilling)]
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("pattern", nargs="?", default="*")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--cc", default="9.0")
    a = p.parse_args(argv)
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        print("ptx_report needs the real numba.cuda: unset NUMBA_ENABLE_CUDASIM", file=sys.stderr)
        return 2
    if ptxas_path() is None:
        print("ptxas not found (install the CUDA toolkit, or put ptxas on PATH)", file=sys.stderr)
        return 2
    cc = tuple(int(x) for x in a.cc.split("."))
    stats = collect(a.pattern, a.jobs, cc)  # type: ignore[arg-type]
    print(table(stats))
    return 1 if any(k.error for k in stats) else 0


if __name__ == "__main__":
    raise SystemExit(main())
