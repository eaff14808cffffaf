"""`python -m bench --quick` runs end to end on one workload (no timing assertions).

The children use the session's kernel cache (TEXPR_CACHE_DIR as set, else ./.texpr_cache under
the repo root): what they check is the bench's output, not compiling, and a cache of their own
made each run compile every kernel again (tests/bench builds the same quick-size kernels)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str, **env_extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), **env_extra)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    return subprocess.run([sys.executable, "-m", "bench", "--quick", "--repeat", "1",
                           "--no-compile", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def test_bench_quick_dense_runs():
    res = _bench("--only", "dense")
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.splitlines()
    for name in ("dense", "dense:plain"):
        at = next(i for i, line in enumerate(lines) if line.startswith(name + " "))
        first, step, bwd = (line.split() for line in lines[at:at + 3])
        assert (first[1], step[0], bwd[0]) == ("fwd", "step", "bwd"), lines[at:at + 3]
    assert "geometric mean texpr/torch" in res.stdout
    assert "geometric mean texpr/ind" in res.stdout  # torch.compile timed in the same rounds
    assert "inductor not timed" not in res.stdout
    assert "plain / registry training-step time" in res.stdout
    assert "error" not in res.stdout


def test_bench_no_plain_leaves_out_the_plain_rows():
    res = _bench("--only", "reduce_sum", "--no-plain", "--no-jax", "--no-inductor")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "reduce_sum" in res.stdout and ":plain" not in res.stdout


def test_bench_cuda_target_reports_instead_of_crashing():
    res = _bench("--only", "reduce_sum", "--target", "cuda", "--no-inductor")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "reduce_sum" in res.stdout


def test_bench_gemm_runs_every_product():
    """`python -m bench.gemm` checks its kernel's results against BLAS's and prints each row."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-m", "bench.gemm", "--repeat", "1"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    from bench.gemm import CASES
    for name, *_ in CASES:
        assert any(line.startswith(name + " ") for line in res.stdout.splitlines()), name


def test_compile_probe_times_texpr_and_torch_compile_first_calls():
    """The child `compile_times` runs: one JSON line per formulation, Inductor's on registry rows."""
    import json
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    res = subprocess.run([sys.executable, "-m", "bench", "--compile-probe", "--quick", "--only",
                          "reduce_sum,reduce_sum:plain"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    got = {r["name"]: r for r in map(json.loads, res.stdout.splitlines()) if "name" in r}
    assert set(got["reduce_sum"]) == {"name", "fwd", "step", "ind_fwd", "ind_step"}, got
    assert set(got["reduce_sum:plain"]) == {"name", "fwd", "step"}, got
    assert all(got["reduce_sum"][k] > 0 for k in ("ind_fwd", "ind_step")), got
