"""Registers and spills of every generated CUDA kernel of every registry operator.

Compiles each operator's forward and gradient kernels to PTX for sm_90 and assembles them
with ptxas (`kernels/ptx_report.py`; no GPU needed, but the real numba.cuda: without
NUMBA_ENABLE_CUDASIM).

    python -m texpr_ad.testing.ptx [pattern] [--jobs 2] [--cc 9.0]

prints a table (operator, forward/gradient, kernel, strategy, registers, spill bytes)
and totals.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from ..kernels.ptx_report import KernelStats, compile_kernels, ptxas_path
from ..ops import get, select
from .ops import kernel_jobs


def compile_entry(entry, cc: tuple[int, int] = (9, 0)) -> list[KernelStats]:
    """KernelStats of the forward and gradient kernels of a registry entry."""
    if entry.sample is None:
        return []
    return [k for which, outs, ins, _ in kernel_jobs(entry)
            for k in compile_kernels(entry.name, which, outs, ins, cc)]


def _worker(args: tuple[str, tuple[int, int]]) -> list[KernelStats]:
    return compile_entry(get(args[0]), args[1])


def collect(pattern: str = "*", jobs: int = 2, cc: tuple[int, int] = (9, 0)) -> list[KernelStats]:
    """KernelStats of every kernel of every operator matching `pattern` (in `jobs` processes)."""
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
        print("texpr_ad.testing.ptx needs the real numba.cuda: unset NUMBA_ENABLE_CUDASIM", file=sys.stderr)
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
