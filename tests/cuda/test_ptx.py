"""Every generated CUDA kernel of every operator compiles to PTX (sm_90) and assembles.

`numba.cuda.compile_ptx(..., cc=(9, 0))` needs no GPU but the real numba.cuda (no
simulator), so it runs in a child process; `ptxas -arch=sm_90 -v` gives registers
and spills (printed; run `python -m texpr_ad.testing.ptx` for the table).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from texpr_ad.kernels.ptx_report import ptxas_path

ROOT = Path(__file__).resolve().parents[2]


def _nvvm_present() -> bool:
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    return any(Path(cuda, d).exists() for d in ("nvvm", "nvvm/lib64")) or bool(
        os.environ.get("NUMBAPRO_NVVM") or os.environ.get("CUDA_HOME"))


@pytest.mark.skipif(ptxas_path() is None, reason="ptxas (CUDA toolkit) not found on PATH")
@pytest.mark.skipif(not _nvvm_present(), reason="NVVM (CUDA toolkit) not found")
def test_every_kernel_compiles_and_assembles_for_sm90():
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-m", "texpr_ad.testing.ptx", "--jobs", "2"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    lines = p.stdout.splitlines()
    summary = lines[lines.index("") + 1:] if "" in lines else lines[-5:]
    print("\n".join(summary))
    assert p.returncode == 0, (p.stderr[-2000:], [x for x in lines if "ERROR" in x][:10])
    assert not any("ERROR" in x for x in lines)
    assert any(x.startswith("kernels:") and "(0 failed)" in x for x in summary), summary
