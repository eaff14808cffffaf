"""PTX of the generated CUDA kernels, assembled by ptxas: registers, spills, shared memory.

No GPU is needed: `numba.cuda.compile_ptx(kernel.py_func, signature, cc=(9, 0))` (CUDA 13
refuses Numba's default compute capability, so sm_90 is explicit), then
`ptxas -arch=sm_90 -v` for registers and spills.  Must run with the real numba.cuda,
i.e. without NUMBA_ENABLE_CUDASIM.  The table over every registry operator is
`python -m texpr_ad.testing.ptx` (texpr_ad/testing/ptx.py).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
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


def compile_kernels(op: str, which: str, outputs: Sequence, inputs: Sequence,
                    cc: tuple[int, int] = (9, 0)) -> list[KernelStats]:
    """KernelStats of every CUDA kernel built for (outputs, inputs); a kernel that fails to
    compile or assemble is a row with its error."""
    from numba import cuda

    from ..schedule.cuda import strategy
    from . import cache
    from ..schedule.planner import plan_kernel
    from .cuda_render import CUDARenderer
    from .cuda_runtime import numba_signature
    plan = plan_kernel(list(outputs), list(inputs), "cuda")
    mod = cache.load(CUDARenderer().render(plan))
    strategies = [strategy(st) for st in plan.stages]
    out: list[KernelStats] = []
    for (name, sig), how in zip(mod.SIGNATURES.items(), strategies, strict=True):
        try:
            ptx, _ = cuda.compile_ptx(getattr(mod, name).py_func, numba_signature(sig), cc=cc)
            regs, st, ld, smem = assemble(ptx, cc)
            out.append(KernelStats(op, which, name, how, regs, st, ld, smem))
        except Exception as e:  # noqa: BLE001 - reported per kernel
            out.append(KernelStats(op, which, name, how, -1, 0, 0, 0,
                                   f"{type(e).__name__}: {e}"[:300]))
    return out
