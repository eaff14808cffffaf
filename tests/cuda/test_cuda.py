"""The CUDA target under Numba's CUDA simulator (or on a GPU), in subprocesses.

NUMBA_ENABLE_CUDASIM=1 must be set before numba is imported, so every check runs
in a child process and the CPU tests of the same session keep the real numba.
References are independent of the CUDA code: `te.evaluate` (the NumPy reference
interpreter) for the registry sweep, NumPy written in sim_features.py otherwise.
Set TEXPR_CUDA_REAL=1 to run the same checks on a real GPU without the simulator.
"""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from texpr_ad.ops import select

ROOT = Path(__file__).resolve().parents[2]
REAL = os.environ.get("TEXPR_CUDA_REAL", "0") not in ("", "0")


def _env(sim: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    if sim:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _spawn(args: list[str], sim: bool = not REAL) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, env=_env(sim), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_kernel_features():
    p = _spawn([str(ROOT / "tests" / "cuda" / "sim_features.py")])
    out, err = p.communicate(timeout=300)
    print(out)
    assert p.returncode == 0 and "ALL PASS" in out, err[-3000:]


def _sweep(extra: list[str]) -> list[dict]:
    procs = [_spawn(["-m", "texpr_ad.testing.cuda", "--ref", "interp", "--shard", f"{k}/2",
                     *extra]) for k in range(2)]
    rows = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        rows += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return rows


@pytest.mark.parametrize("mode", ["default", "block-reductions"])
def test_registry_forward_and_gradients_match(mode):
    """Every registry operator: forward and all gradient kernels on CUDA vs te.evaluate.

    "block-reductions" lowers the block-reduction threshold to 4 so that nearly every
    reduction runs as a shared-memory tree reduction (the samples are small)."""
    rows = _sweep([] if mode == "default" else ["--block-min-reduce", "4"])
    by = {r["op"]: r for r in rows}
    entries = select("*")
    assert sorted(by) == sorted(e.name for e in entries)
    status = collections.Counter(r["status"] for r in rows)
    kinds = collections.Counter()
    for r in rows:
        kinds.update(r.get("strategies", {}))
    print(f"{mode}: {dict(status)}; stage strategies {dict(kinds)}")
    failed = {r["op"]: r["detail"] for r in rows if r["status"] == "fail"}
    assert not failed, failed
    for e in entries:
        want = ("skip",) if e.sample is None else ("ok", "nondiff")
        assert by[e.name]["status"] in want, (e.name, by[e.name])
    if mode == "block-reductions":
        assert kinds["block"] > 50 and kinds["atomic"] >= 1


def test_tiled_contractions_match():
    """Every registry operator with a contraction the CUDA planner tiles (TILE_MIN lowered so
    that the small samples tile too: matmuls, einsums, convolutions and their gradients, and
    attention): forward and gradient kernels vs te.evaluate, in float64."""
    rows = _sweep(["--tile-min", "2", "--tiled-only"])
    print({r["op"]: r["strategies"] for r in rows})
    failed = {r["op"]: r["detail"] for r in rows if r["status"] != "ok"}
    assert not failed, failed
    assert {"dense", "batch_matmul", "conv2d", "conv2d_strided", "conv3d"} <= {r["op"] for r in rows}
    assert all(r["strategies"].get("tile", 0) >= 1 for r in rows)


def test_clear_error_without_gpu_or_simulator():
    code = ("from numba import cuda\n"
            "import sys\n"
            "if cuda.is_available(): sys.exit(3)\n"
            "from texpr_ad import te\n"
            "from texpr_ad.kernels import build\n"
            "A = te.placeholder((3,), 'float32', name='A')\n"
            "B = te.compute((3,), lambda i: A[i] + 1.0, name='B')\n"
            "try:\n"
            "    build([B], [A], target='cuda')\n"
            "except RuntimeError as e:\n"
            "    print(type(e).__name__, e)\n")
    p = _spawn(["-c", code], sim=False)
    out, err = p.communicate(timeout=120)
    if p.returncode == 3:
        pytest.skip("a CUDA GPU is available here, so there is no error to check")
    assert p.returncode == 0, err
    assert out.startswith("CudaUnavailableError"), out
    assert "NUMBA_ENABLE_CUDASIM=1" in out and "is_available() is False" in out
