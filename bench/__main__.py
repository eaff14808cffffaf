"""`python -m bench`: texpr_ad kernels side by side with PyTorch (and JAX when installed).

For every workload (bench/workloads.py), forward and backward, on the same
float32 inputs in the same process: the median time of `--repeat` runs after
warm-up, with two threads for every framework; the ratio texpr_ad / torch; the
max relative error against torch (max |a - b| / max |b|).

"bwd" is the vector-Jacobian product: inputs and a head in, the gradients of
every float input out.  texpr_ad's backward kernel recomputes what it needs of
the forward, so torch is timed on the same function: forward + autograd.grad
(its backward pass alone is shown under each row).

Compile times: "cold" builds every kernel in a fresh subprocess with an empty
`TEXPR_CACHE_DIR`; "warm" does it again in a second process sharing the folder.
Each is (derive + plan + render + compile + first call) minus one steady call.

Timings of texpr_ad and torch are interleaved call by call, so both see the same
machine load; "ratio" uses the medians, "(min)" the fastest runs.

Options: --only NAME[,NAME], --repeat N, --target cpu|cuda, --quick, --no-compile.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Sequence

THREADS = 2
# texpr_ad's contraction -> BLAS stages split each product over THREADS Python threads, each a
# single-threaded OpenBLAS call; OpenBLAS's own worker threads on top of those (and of torch's)
# thrash a small machine (measured 50x slowdowns), so they are off unless the caller sets this.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from texpr_ad.testing import rel_error, sample_times, timed  # noqa: E402


def _set_threads() -> None:
    from texpr_ad.kernels.numba_cpu import start_threads
    start_threads()  # first: Numba's threads with texpr_ad's OpenMP settings (see there)
    import numba
    import torch
    torch.set_num_threads(THREADS)
    numba.set_num_threads(THREADS)


def _paired_times(f: Callable[[], Any], g: Callable[[], Any], repeat: int,
                  warmup: int = 2) -> tuple[float, float, float, float]:
    """(median f, median g, min f, min g), calls interleaved so both see the same machine load."""
    tf, tg = sample_times(f, g, repeat=repeat, warmup=warmup)
    return statistics.median(tf), statistics.median(tg), min(tf), min(tg)


def _rel_err(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> float:
    return max((rel_error(a, b) for a, b in zip(got, want, strict=True)), default=0.0)


def _head(shape: tuple[int, ...], seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _texpr_kernels(w: Any, target: str) -> tuple[Any, Any, Any]:
    """(forward kernel, backward kernel, head placeholder) of workload `w`."""
    import texpr_ad as ta
    from texpr_ad import te
    fwd = ta.build([w.output], list(w.inputs), target=target)
    head = te.placeholder(w.output.shape, w.output.dtype, name="head")
    grads = ta.grad(w.output, [w.inputs[k] for k in w.float_inputs], head=head)
    bwd = ta.build(grads, [*w.inputs, head], target=target)
    return fwd, bwd, head


def _torch_side(w: Any, g: np.ndarray, repeat: int) -> dict[str, Any]:
    import torch
    ts = [torch.from_numpy(a.copy()) for a in w.arrays]
    diff = [ts[k].requires_grad_(True) for k in w.float_inputs]
    gt = torch.from_numpy(g.copy()).reshape(w.torch_fn(*ts).shape)

    def fwd() -> Any:
        with torch.no_grad():
            return w.torch_fn(*ts)

    def vjp() -> Any:
        return torch.autograd.grad(w.torch_fn(*ts), diff, gt)

    y = w.torch_fn(*ts)

    def bwd_only() -> Any:
        return torch.autograd.grad(y, diff, gt, retain_graph=True)

    return {"fwd": fwd, "bwd": vjp, "bwd_only_t": timed(bwd_only, repeat, warmup=2),
            "y": fwd().detach().numpy(), "grads": [x.numpy() for x in vjp()]}


def _jax_available() -> bool:
    try:
        import jax  # noqa: F401
    except ImportError:
        return False
    return True


def run_workload(name: str, quick: bool, repeat: int, target: str) -> dict[str, Any]:
    from bench.workloads import make
    w = make(name, quick)
    row: dict[str, Any] = {"name": name}
    g = _head(tuple(int(s.value) for s in w.output.shape))
    ref = _torch_side(w, g, repeat)
    row.update(torch_bwd_only=ref["bwd_only_t"])
    try:
        fwd, bwd, _ = _texpr_kernels(w, target)
    except Exception as e:  # noqa: BLE001 - a target that cannot build is reported, not fatal
        if target == "cpu":
            raise
        row["error"] = f"not available ({type(e).__name__}: {str(e).splitlines()[0][:80]})"
        return row
    args = w.arrays
    gargs = (*w.arrays, g.reshape(tuple(int(s.value) for s in w.output.shape)))
    for d, k, a in (("fwd", fwd, args), ("bwd", bwd, gargs)):
        row[d], row[f"torch_{d}"], row[f"{d}_min"], row[f"torch_{d}_min"] = _paired_times(
            lambda k=k, a=a: k(*a), ref[d], repeat)
    row["fwd_err"] = _rel_err(fwd(*args), [ref["y"]])
    row["bwd_err"] = _rel_err(bwd(*gargs), ref["grads"])
    return row


def compile_probe(names: Sequence[str], quick: bool, target: str) -> None:
    """Print one JSON line per workload: seconds to the first result, minus one steady call."""
    _set_threads()
    from bench.workloads import make
    import texpr_ad as ta
    from texpr_ad import te
    for name in names:
        w = make(name, quick)
        g = _head(tuple(int(s.value) for s in w.output.shape))
        t0 = time.perf_counter()
        fwd = ta.build([w.output], list(w.inputs), target=target)
        fwd(*w.arrays)
        t1 = time.perf_counter()
        fwd(*w.arrays)
        t2 = time.perf_counter()
        head = te.placeholder(w.output.shape, w.output.dtype, name="head")
        grads = ta.grad(w.output, [w.inputs[k] for k in w.float_inputs], head=head)
        bwd = ta.build(grads, [*w.inputs, head], target=target)
        bwd(*w.arrays, g)
        t3 = time.perf_counter()
        bwd(*w.arrays, g)
        t4 = time.perf_counter()
        print(json.dumps({"name": name, "fwd": (t1 - t0) - (t2 - t1), "bwd": (t3 - t2) - (t4 - t3)}),
              flush=True)


def compile_times(names: Sequence[str], quick: bool, target: str) -> dict[str, dict[str, float]]:
    """{name: {cold_fwd, cold_bwd, warm_fwd, warm_bwd}} from two fresh subprocesses."""
    out: dict[str, dict[str, float]] = {n: {} for n in names}
    with tempfile.TemporaryDirectory(prefix="texpr_bench_cache_") as d:
        env = dict(os.environ, TEXPR_CACHE_DIR=d)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        cmd = [sys.executable, "-m", "bench", "--compile-probe", "--only", ",".join(names),
               "--target", target] + (["--quick"] if quick else [])
        for phase in ("cold", "warm"):
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=root)
            if res.returncode != 0:
                print(f"compile probe ({phase}) failed:\n{res.stderr[-2000:]}", file=sys.stderr)
                continue
            for line in res.stdout.splitlines():
                if line.startswith("{"):
                    r = json.loads(line)
                    out[r["name"]][f"{phase}_fwd"] = r["fwd"]
                    out[r["name"]][f"{phase}_bwd"] = r["bwd"]
    return out


def _ms(t: float | None) -> str:
    return "-" if t is None else f"{t * 1e3:9.2f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a / b:6.2f}"


HEADER = (f"{'workload':<18} {'dir':<4} {'texpr ms':>9} {'torch ms':>9} {'ratio':>6} "
          f"{'(min)':>6} {'max rel err':>11} {'jax ms':>7} {'cold s':>7} {'warm s':>7}")


def _sec(t: float | None) -> str:
    return f"{'-':>7}" if t is None else f"{t:7.2f}"


def print_row(r: dict[str, Any], comp: dict[str, dict[str, float]], jax: bool) -> None:
    if "error" in r:
        print(f"{r['name']:<18} {r['error']}", flush=True)
        return
    c = comp.get(r["name"], {})
    for d in ("fwd", "bwd"):
        print(f"{r['name'] if d == 'fwd' else '':<18} {d:<4} {_ms(r[d])} {_ms(r[f'torch_{d}'])} "
              f"{_ratio(r[d], r[f'torch_{d}'])} {_ratio(r[f'{d}_min'], r[f'torch_{d}_min'])} "
              f"{r[f'{d}_err']:11.1e} "
              f"{'-' if jax else 'n/a':>7} {_sec(c.get(f'cold_{d}'))} {_sec(c.get(f'warm_{d}'))}")
    print(f"{'':<18} {'':<4} (torch backward pass alone: {_ms(r['torch_bwd_only']).strip()} ms)",
          flush=True)


def print_summary(rows: list[dict[str, Any]]) -> None:
    ok = [r for r in rows if "error" not in r]
    if not ok:
        return
    ratios = {d: [r[d] / r[f"torch_{d}"] for r in ok] for d in ("fwd", "bwd")}
    allr = ratios["fwd"] + ratios["bwd"]

    def gm(xs: list[float]) -> float:
        return math.exp(sum(math.log(x) for x in xs) / len(xs))

    worst = max(((r[d] / r[f"torch_{d}"], f"{r['name']} {d}") for r in ok for d in ("fwd", "bwd")))
    print()
    print(f"geometric mean texpr/torch: fwd {gm(ratios['fwd']):.2f}, bwd {gm(ratios['bwd']):.2f}, "
          f"all {gm(allr):.2f}; worst {worst[0]:.2f} ({worst[1]})")


def main(argv: Sequence[str] | None = None) -> int:
    from bench.workloads import WORKLOADS
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated workload names (default: all)")
    ap.add_argument("--repeat", type=int, default=7, help="timed runs per measurement (median)")
    ap.add_argument("--target", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--quick", action="store_true", help="small shapes (smoke test)")
    ap.add_argument("--no-compile", action="store_true", help="skip the cold/warm compile probes")
    ap.add_argument("--compile-probe", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    names = list(WORKLOADS) if not a.only else [n.strip() for n in a.only.split(",") if n.strip()]
    bad = [n for n in names if n not in WORKLOADS]
    if bad:
        ap.error(f"unknown workload(s) {bad}; choose from {', '.join(WORKLOADS)}")
    if a.compile_probe:
        compile_probe(names, a.quick, a.target)
        return 0
    _set_threads()
    jax = _jax_available()
    import torch
    print(f"texpr_ad bench: target={a.target}, threads={THREADS}, repeat={a.repeat}, "
          f"quick={a.quick}, torch {torch.__version__}, "
          f"jax {'available (not timed)' if jax else 'not installed (skipped)'}")
    comp = {} if a.no_compile else compile_times(names, a.quick, a.target)
    print(HEADER)
    print("-" * len(HEADER), flush=True)
    rows = []
    for n in names:
        rows.append(run_workload(n, a.quick, a.repeat, a.target))
        print_row(rows[-1], comp, jax)
    print_summary(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
