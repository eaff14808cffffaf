"""`python -m bench --quick` runs end to end on one workload (no timing assertions)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_quick_dense_runs(tmp_path):
    env = dict(os.environ, TEXPR_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    res = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "dense",
                          "--repeat", "1", "--no-compile"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout
    assert "dense" in out and "fwd" in out and "bwd" in out and "geometric mean" in out


def test_bench_cuda_target_reports_instead_of_crashing(tmp_path):
    env = dict(os.environ, TEXPR_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    res = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "reduce_sum",
                          "--repeat", "1", "--no-compile", "--target", "cuda"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "reduce_sum" in res.stdout
