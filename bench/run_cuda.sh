#!/usr/bin/env bash
# Run the CUDA target on a real GPU: the CUDA tests without the simulator, the PTX/ptxas
# report, then the bench workloads against torch CUDA (python -m bench.cuda; args pass through).
#   bench/run_cuda.sh            # from the repository root, on a machine with a GPU
# Environment: PYTHON (default .venv/bin/python), PYTEST (default .venv/bin/pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
PYTEST=${PYTEST:-.venv/bin/pytest}
unset NUMBA_ENABLE_CUDASIM

"$PYTHON" - <<'PY'
from numba import cuda
if not cuda.is_available():
    raise SystemExit("run_cuda.sh: no CUDA GPU (numba.cuda.is_available() is False); "
                     "for the simulator run: .venv/bin/pytest tests/cuda")
cuda.detect()
PY

echo "== CUDA tests on the GPU (TEXPR_CUDA_REAL=1: no simulator)"
TEXPR_CUDA_REAL=1 "$PYTEST" tests/cuda -x -q -s

echo "== per-operator check on the GPU (forward + gradients vs CPU kernels)"
"$PYTHON" -m texpr_ad.testing.cuda --ref cpu | "$PYTHON" -c '
import collections, json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
print(dict(collections.Counter(r["status"] for r in rows)))
for r in rows:
    if r["status"] == "fail":
        print("FAIL", r["op"], r["detail"])'

echo "== registers and spills (ptxas -v, sm_90)"
"$PYTHON" -m texpr_ad.testing.ptx | tail -n 8

# The bench workloads on the GPU against torch CUDA (eager and torch.compile), inputs on the
# device on both sides (`python -m bench --target cuda` copies NumPy arrays in and out per call)
echo "== python -m bench.cuda"
"$PYTHON" -m bench.cuda "$@"
