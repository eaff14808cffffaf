#!/usr/bin/env bash
# One GPU lease, one script: the checks and timings a session with a GPU machine runs, in the
# order that fits a short lease.  Logs go to $OUT (or ./gpu_logs).  Uses the machine's python3
# (numba, numba-cuda, torch, sympy preinstalled there) with this checkout on PYTHONPATH.
#   bash bench/gpu_session.sh [SHARDS]
# Wheels in .whl/ (carried, git-ignored) are installed first: the 'cuda' image pairs numba-cuda
# 0.30.4 with NumPy 2.5, which removed np.row_stack that numba-cuda overloads, so the run carries
# the NumPy this project is tested with (numpy==2.4.6).
# A/B against another tree on the same machine: put its copy first on PYTHONPATH and run the
# modules from a folder outside the repository (`python -m` puts the working directory ahead of
# PYTHONPATH, so `python -m bench.x` in the repository imports this tree's texpr_ad whatever
# PYTHONPATH says); scripts run by path are not affected.
set -uo pipefail
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS=0
OUT=${OUT:-gpu_logs}; mkdir -p "$OUT"
PY=${PYTHON:-python3}; SHARDS=${1:-12}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
unset NUMBA_ENABLE_CUDASIM
nvidia-smi -L; lscpu | grep "Model name"
$PY -c "import numpy, numba, torch; print('numpy', numpy.__version__); from numba import cuda; print('numba', numba.__version__, 'torch', torch.__version__); cuda.detect()" 2>&1 | tail -4

echo "== registry sweep on the GPU vs te.evaluate ($SHARDS shards) + sim_features on the GPU"
for k in $(seq 0 $((SHARDS - 1))); do
  timeout ${SWEEP_S:-80} $PY -m texpr_ad.testing.cuda --ref interp --shard "$k/$SHARDS" \
    >"$OUT/sweep_$k.jsonl" 2>"$OUT/sweep_$k.err" &
done
timeout ${SWEEP_S:-80} $PY tests/cuda/sim_features.py >"$OUT/features.log" 2>&1 &
wait
tail -3 "$OUT/features.log"
cat "$OUT"/sweep_*.jsonl >"$OUT/sweep.jsonl"; rm -f "$OUT"/sweep_*.jsonl
$PY - "$OUT/sweep.jsonl" <<'PY'
import collections, json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(len(rows), "rows", dict(collections.Counter(r["status"] for r in rows)))
for r in rows:
    if r["status"] in ("fail", "skip"):
        print(r["status"].upper(), r["op"], str(r.get("detail"))[:300])
PY
for f in "$OUT"/sweep_*.err; do [ -s "$f" ] && { echo "-- $f"; tail -5 "$f"; }; done
cat "$OUT"/sweep_*.err > "$OUT/sweep.err" 2>/dev/null; rm -f "$OUT"/sweep_*.err

echo "== texpr_ad.torch ops on CUDA tensors (tests/frontends/test_torch_cuda.py)"
timeout 120 $PY -m pytest -p no:cacheprovider -q -rs tests/frontends/test_torch_cuda.py 2>&1 | tail -5
echo "== wall vs GPU kernel time per bench workload (python -m bench.cuda_split, 3 shards)"
W=(ew_chain,softmax,log_softmax_nll,dense,layer_norm batch_norm,reduce_sum,conv2d,max_pool2d,avg_pool2d
   transpose_reshape,conv2d_s2,take_embedding,strided_slice,batch_matmul)
for i in 0 1 2; do timeout 150 $PY -m bench.cuda_split "${W[$i]}" >"$OUT/split_$i.txt" 2>&1 & done
wait
head -2 "$OUT/split_0.txt"; cat "$OUT"/split_*.txt | grep -v "^GPU\|^workload"
echo "== per-call overhead (python -m bench.cuda_overhead)"
timeout 40 $PY -m bench.cuda_overhead 2>&1 | grep -v Warn
echo "== where a torch op's per-call time goes on CUDA (python -m bench.cuda_profile)"
timeout 60 $PY -m bench.cuda_profile >"$OUT/cuda_profile.txt" 2>&1; head -2 "$OUT/cuda_profile.txt"
echo "== python -m bench.cuda --no-compile"
timeout 80 $PY -m bench.cuda --repeat 5 --no-compile 2>"$OUT/bench_cuda.err" | tee "$OUT/bench_cuda.log"
echo "== python -m bench.user_ops --device cuda (segment_sum last, alone: a device-side assert ends the process's CUDA context)"
OPS=$($PY -c "from bench.user_defs import USER_OPS; print(','.join(n for n in USER_OPS if n != 'segment_sum'))")
timeout 110 $PY -m bench.user_ops --device cuda --repeat 5 --only "$OPS" 2>"$OUT/user_ops.err" | tee "$OUT/user_ops.log"
tail -3 "$OUT/user_ops.err"
CUDA_LAUNCH_BLOCKING=1 timeout 30 $PY -m bench.user_ops --device cuda --repeat 2 --only segment_sum \
  --no-inductor >"$OUT/segment_sum.log" 2>&1
grep -v "^ *warn\|Warning" "$OUT/segment_sum.log" | tail -25
