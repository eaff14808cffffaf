"""`python -m bench.cuda` under Numba's CUDA simulator (torch without CUDA: texpr_ad timed alone),
and the vjp keeping device inputs on the device, in subprocesses (NUMBA_ENABLE_CUDASIM=1 must be
set before numba is imported)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run_sim(code: str) -> str:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, text=True,
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


# reduce_sum fails to build (patched): its row shows the error and the other workloads go on
BENCH = """
import bench.plain, bench.cuda
make = bench.plain.make
def failing(name, quick):
    if name == "reduce_sum":
        raise RuntimeError("boom")
    return make(name, quick)
bench.plain.make = failing
bench.cuda.main(["--quick", "--only", "reduce_sum,softmax,log_softmax_nll", "--repeat", "1"])
"""


def test_bench_cuda_times_texpr_alone_without_torch_cuda():
    out = _run_sim(BENCH)
    print(out)
    lines = out.splitlines()
    assert "CUDA simulator" in lines[0] and "has no CUDA: timing texpr_ad only" in lines[1]
    assert any(ln.startswith("reduce_sum") and "error: RuntimeError: boom" in ln for ln in lines)
    for name in ("softmax", "log_softmax_nll"):
        k = next(i for i, ln in enumerate(lines) if ln.split()[:1] == [name])
        for ln, comp in zip(lines[k:k + 3], ("fwd", "step", "bwd"), strict=True):
            cells = ln.removeprefix(name).split()
            assert cells[0] == comp and float(cells[1]) > 0, ln
            assert cells[2:6] == ["-"] * 4 and float(cells[6]) < 1e-5, ln  # no torch timing


VJP = """
import numpy as np
from numba import cuda
import texpr_ad as ta
from texpr_ad import te
x = te.placeholder((5, 4), "float32", name="x")
w = te.placeholder((4,), "float32", name="w")
y = te.compute((5, 4), lambda i, j: te.tanh(x[i, j] * w[j]), name="y")
fwd, bwd = ta.vjp([y], [x, w], target="cuda")
a, b = np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4), np.arange(4, dtype=np.float32)
da, db = cuda.to_device(a), cuda.to_device(b)
(out,), res = fwd(da, db)
kept = [r for r, n in zip(res.arrays, res.names) if n.startswith("input")]
assert kept and all(not isinstance(r, np.ndarray) for r in kept), [type(r) for r in kept]
gx, gw = bwd(res, cuda.to_device(np.ones((5, 4), np.float32)))
d = 1 - np.tanh(a * b) ** 2
np.testing.assert_allclose(gx.copy_to_host(), d * b, rtol=1e-5, atol=1e-6)
np.testing.assert_allclose(gw.copy_to_host(), (d * a).sum(0), rtol=1e-5, atol=1e-6)
print("OK")
"""


def test_vjp_keeps_device_inputs_on_the_device():
    """The residuals hold the device arrays passed to fwd (they were copied to the host, and
    back to the device by the backward: two copies per training step on a GPU)."""
    assert _run_sim(VJP).strip().endswith("OK")
