"""`python -m bench.user_ops`: operators from real models written plainly in `te`, trained the way
a PyTorch user trains them, against PyTorch eager and `torch.compile` (Inductor) of the same
PyTorch function.

The operators (bench/user_defs.py: group-norm + SiLU, smooth-L1 and BCE-with-logits means, rotary
embedding, banded attention softmax, depthwise causal conv1d, dilated conv2d, bilinear grid
sampling, segment sum, SwiGLU, an EMA scan, RMSNorm, bias + GELU, label-smoothed cross-entropy)
use nothing from `texpr_ad.ops`.  Three sides run the same float32 tensors, each timed the same
way (`side`):

  texpr     `texpr_ad.torch.custom_op(te_fn)`: the forward and the derived backward as torch ops
  eager     the PyTorch reference, eager
  inductor  `torch.compile(reference)` (AOTAutograd + Inductor, CPU)

and three comparisons as in `python -m bench`: fwd (under no_grad), step (forward +
`autograd.grad` of the op's differentiated inputs, each gradient made contiguous) and bwd
(`autograd.grad` alone, on a graph whose forward ran before; one graph per call, since
torch.compile's backward frees its saved buffers).  Inputs that a user does not train (rotary tables, targets, labels, offsets) do not
require grad.  The three sides of a comparison are interleaved call by call, in a rotating order
(`paired_times`).  "t/eag", "t/ind": texpr / eager and texpr / inductor of the medians of
`--repeat` runs; "(min)" texpr / inductor of the fastest runs.  "err": max |a - b| / max |b| of
each side against the float64 eager reference (fwd: the output; step and bwd: the gradients), so
a wrong gradient shows, as does a float32 loss less accurate than torch's.  "setup s": seconds
from nothing to the first results of a side (kernel builds or compiles, as the caches are found,
plus a few calls).  A side that fails prints its error and the others go on; a texpr result off
by more than `MISMATCH` (and ten times torch's error) is reported as a mismatch; an Inductor result
that far off is reported too and Inductor is not timed for that operator (torch.compile's CPU code
under `ATEN_CPU_CAPABILITY=avx2` on an AVX-512 host computed wrong values here).

Options: --only NAME[,NAME], --repeat N, --quick, --no-inductor, --inductor-simdlen BITS, --cold,
--device cpu|cuda.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import traceback
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np

from bench.__main__ import (COMPARISONS, THREADS, add_simdlen_option, apply_simdlen, blas_line,
                            geomean, head, ms, paired_times, ratio, set_threads, short)
from bench.user_defs import USER_OPS, UserOp

SIDES = ("texpr", "eager", "inductor")
MISMATCH = 1e-3
WARMUP = 2
_TORCH_OPS: dict[str, Any] = {}  # texpr_ad.torch ops, registered once per process


FORCED_ISA = {"haswell": "AVX2", "znver3": "AVX2", "skylake": "AVX2", "skylake-avx512": "AVX-512",
              "znver4": "AVX-512", "icelake-server": "AVX-512", "sapphirerapids": "AVX-512"}


def vector_isa(flags: set[str]) -> str:
    """The widest SIMD family among a CPU's feature flags (/proc/cpuinfo or LLVM names)."""
    table = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("asimd", "NEON"), ("neon", "NEON"),
             ("avx", "AVX"), ("sse4_2", "SSE4.2"), ("sse4.2", "SSE4.2"))
    return next((isa for f, isa in table if f in flags), "scalar")


def cpu_line(torch: Any) -> str:
    """The CPU, the vector ISA each side compiles for, and the thread counts."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                if key.strip() == "model name" and model in ("", platform.machine()):
                    model = val.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = set(val.split())
    except OSError:
        pass
    import llvmlite.binding as ll
    llvm = {k for k, v in ll.get_host_cpu_features().items() if v}
    forced = os.environ.get("NUMBA_CPU_NAME")
    cpu_name = forced or ll.get_host_cpu_name()
    # a forced target (NUMBA_CPU_NAME) compiles for that CPU's features, not the host's
    texpr_isa = (vector_isa(set(os.environ.get("NUMBA_CPU_FEATURES", "").replace("+", "").split(",")))
                 if forced and os.environ.get("NUMBA_CPU_FEATURES") else
                 FORCED_ISA.get(forced, f"{forced}'s own") if forced else vector_isa(llvm))
    from torch._inductor import cpu_vec_isa
    return (f"CPU: {model}, {os.cpu_count()} cores; vector ISA {vector_isa(flags or llvm)} "
            f"(texpr_ad/Numba LLVM target {cpu_name}: {texpr_isa}; torch ATen "
            f"{torch.backends.cpu.get_cpu_capability()}, Inductor {cpu_vec_isa.pick_vec_isa()}); "
            f"{THREADS} threads per framework")


def texpr_op(u: UserOp) -> Any:
    """The te function as a PyTorch op (texpr_ad.torch.custom_op), one per process."""
    if u.name not in _TORCH_OPS:
        import texpr_ad.torch as tt
        _TORCH_OPS[u.name] = tt.custom_op(u.te_fn, name=f"bench_user_{u.name}")
    return _TORCH_OPS[u.name]


def _case(u: UserOp, arrays: dict[str, np.ndarray], dtype: Any = np.float32) -> Any:
    """What `side` reads: arrays in call order (floats as `dtype`), the differentiated ones."""
    arrs = tuple(a.astype(dtype) if a.dtype.kind == "f" else a for a in
                 (arrays[n] for n in u.args))
    return SimpleNamespace(arrays=arrs, torch_fn=u.torch_fn,
                           float_inputs=tuple(k for k, n in enumerate(u.args) if n in u.diff))


def side(fn: Any, case: Any, g: np.ndarray, calls: int, device: str = "cpu") -> dict[str, Any]:
    """Timed calls {fwd, step, bwd} of torch function `fn` on `case` and their results ("check":
    fwd the output, step and bwd the gradients).  `bwd` runs `autograd.grad` on graphs whose
    forwards ran before: `calls` of them, one per call (torch.compile's backward frees its saved
    buffers, "donated buffers", so it cannot run twice on one graph).  On "cuda" the tensors live
    on the GPU and every timed call ends with a device synchronize."""
    import torch
    ts = [torch.from_numpy(a.copy()).to(device) for a in case.arrays]
    diff = [ts[k].requires_grad_(True) for k in case.float_inputs]
    gt = torch.from_numpy(np.array(g)).to(device)
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)

    def fwd() -> Any:
        with torch.no_grad():
            y = fn(*ts)
        sync()
        return y

    def step() -> list[Any]:
        gs = [x.contiguous() for x in torch.autograd.grad(fn(*ts), diff, gt)]
        sync()
        return gs

    graphs = [fn(*ts) for _ in range(calls + 1)]

    def bwd() -> list[Any]:
        gs = [x.contiguous() for x in torch.autograd.grad(graphs.pop(), diff, gt)]
        sync()
        return gs

    check = {"fwd": [fwd()], "step": step(), "bwd": bwd()}
    return {"fwd": fwd, "step": step, "bwd": bwd,
            "check": {c: [np.asarray(x.detach().cpu()) for x in v] for c, v in check.items()}}


def _err(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    from texpr_ad.testing import rel_error
    return max(rel_error(np.asarray(a, np.float64), b) for a, b in zip(got, want, strict=True))


def _sides(u: UserOp, case: Any, g: np.ndarray, calls: int, inductor: bool, device: str
           ) -> tuple[dict, dict, dict]:
    """{side: `side` dict}, {side: setup seconds}, {side: error} for the three sides."""
    import torch
    fns = {"texpr": lambda: texpr_op(u), "eager": lambda: u.torch_fn,
           "inductor": lambda: torch.compile(u.torch_fn)}
    sides, setup, errors = {}, {}, {}
    for s in SIDES if inductor else SIDES[:2]:
        t0 = time.perf_counter()
        try:
            sides[s] = side(fns[s](), case, g, calls, device)
            setup[s] = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001 - a failing side is a finding, printed in its row
            errors[s] = short(e)
    return sides, setup, errors


def run_op(u: UserOp, quick: bool, repeat: int, inductor: bool = True, device: str = "cpu"
           ) -> dict[str, Any]:
    """One operator's row: per comparison the (median, min) seconds of each side that ran, the
    errors against float64 eager, setup seconds, failures and mismatches."""
    row: dict[str, Any] = {"name": u.name, "errors": {}, "err": {}, "mismatch": []}
    try:
        import torch
        arrays = u.make(quick, np.random.default_rng(0))
        with torch.no_grad():
            shape = tuple(u.torch_fn(*[torch.from_numpy(a) for a in _case(u, arrays).arrays]).shape)
        g = head(shape)
        ref = side(u.torch_fn, _case(u, arrays, np.float64), g.astype(np.float64), 0)["check"]
        sides, row["setup"], row["errors"] = _sides(u, _case(u, arrays), g, repeat + WARMUP,
                                                    inductor, device)
        ran = [s for s in SIDES if s in sides]
        wrong: set[str] = set()  # a side whose results are wrong is not timed as a reference
        for c in COMPARISONS:
            e = row["err"][c] = {s: _err(sides[s]["check"][c], ref[c]) for s in ran}
            for s in ("texpr", "inductor"):
                if s in e and not e[s] <= max(MISMATCH, 10 * e.get("eager", 0.0)):
                    row["mismatch"].append(f"{c}: {s} err {e[s]:.1e} (eager "
                                           f"{e.get('eager', float('nan')):.1e})")
                    wrong |= {s} - {"texpr"}
        timed = [s for s in ran if s not in wrong]
        for c in COMPARISONS:
            row[c] = dict(zip(timed, paired_times(*[sides[s][c] for s in timed], repeat=repeat,
                                                  warmup=WARMUP)))
    except Exception as e:  # noqa: BLE001 - one operator's failure does not stop the others
        row["errors"]["op"] = short(e)
        traceback.print_exc()  # stderr: where it failed
    return row


NAME_W = 20
HEADER = (f"{'user op':<{NAME_W}} {'':<4} {'texpr ms':>9} {'eager ms':>9} {'ind ms':>9} "
          f"{'t/eag':>6} {'t/ind':>6} {'(min)':>6} {'err texpr':>9} {'eager':>7} {'ind':>7} "
          f"{'setup s: texpr':>14} {'ind':>6}")


def _e(x: float | None) -> str:
    return f"{'-':>7}" if x is None else f"{x:7.0e}"


def _sec(x: float | None, w: int) -> str:
    return f"{'-':>{w}}" if x is None else f"{x:{w}.1f}"


def print_row(r: dict[str, Any]) -> None:
    for i, c in enumerate(COMPARISONS):
        label = r["name"] if i == 0 else ""
        t = r.get(c)
        if t is None:
            print(f"{label:<{NAME_W}} {c:<4} error: {r['errors'].get('op', 'not measured')[:100]}")
            continue
        med = {s: t[s][0] if s in t else None for s in SIDES}
        mn = {s: t[s][1] if s in t else None for s in SIDES}
        err = {s: r["err"][c].get(s) for s in SIDES}
        setup = f" {_sec(r['setup'].get('texpr'), 14)} {_sec(r['setup'].get('inductor'), 6)}" \
            if i == 0 else ""
        print(f"{label:<{NAME_W}} {c:<4} {ms(med['texpr'])} {ms(med['eager'])} "
              f"{ms(med['inductor'])} {ratio(med['texpr'], med['eager'])} "
              f"{ratio(med['texpr'], med['inductor'])} {ratio(mn['texpr'], mn['inductor'])} "
              f"{_e(err['texpr']):>9} {_e(err['eager'])} {_e(err['inductor'])}{setup}")
    for s, e in r["errors"].items():
        if s != "op" or any(c in r for c in COMPARISONS):
            print(f"{'':<{NAME_W}} ! {s} failed: {e[:160]}")
    for m in r["mismatch"]:
        print(f"{'':<{NAME_W}} ! mismatch {m}")
    sys.stdout.flush()


def print_summary(rows: list[dict[str, Any]], cold: bool = False) -> None:
    """Geometric means of texpr / eager and texpr / inductor per comparison, the worst rows, and
    every failure or mismatch."""
    print(f"\n{'geometric mean over user ops':<34} " + " ".join(f"{c:>6}" for c in COMPARISONS)
          + "   worst row of each")
    for ref in ("eager", "inductor"):
        cells, worst = [], []
        for c in COMPARISONS:
            rs = [(r[c]["texpr"][0] / r[c][ref][0], r["name"]) for r in rows
                  if c in r and "texpr" in r[c] and ref in r[c]]
            cells.append(f"{geomean([x for x, _ in rs]):6.2f}" if rs else f"{'-':>6}")
            if rs:
                x, n = max(rs)
                worst.append(f"{c} {n} {x:.2f}x")
        n_ok = sum(1 for r in rows if all(c in r and ref in r[c] and "texpr" in r[c]
                                          for c in COMPARISONS))
        print(f"  {'texpr/' + ref + f' ({n_ok}/{len(rows)} ops)':<32} " + " ".join(cells)
              + "   " + "; ".join(worst))
    setups = {s: [r["setup"][s] for r in rows if s in r.get("setup", {})] for s in ("texpr",
                                                                                     "inductor")}
    if all(setups.values()):
        print(f"  setup s ({'cold' if cold else 'caches as found'}): "
              + ", ".join(f"{s} geomean {geomean(v):.1f} max {max(v):.1f}"
                          for s, v in setups.items()))
    bad = [(r["name"], f"{s} failed: {e}") for r in rows for s, e in r["errors"].items()]
    bad += [(r["name"], f"mismatch {m}") for r in rows for m in r["mismatch"]]
    if bad:
        print("\nfailures and mismatches:")
        for n, what in bad:
            print(f"  {n}: {what[:200]}")


def run(names: Sequence[str], quick: bool, repeat: int, inductor: bool = True,
        cold: bool = False, device: str = "cpu") -> list[dict[str, Any]]:
    """Time and print every operator in `names` (the table and its summary); the rows."""
    import torch
    print(f"user ops: {len(names)} operators, repeat={repeat}, quick={quick}, torch "
          f"{torch.__version__}{'' if inductor else ', inductor not timed'}, setup s "
          f"{'cold (empty kernel caches)' if cold else 'with the kernel caches as found'}")
    print(cpu_line(torch))
    if device == "cpu":
        print(blas_line(torch))
    else:
        print(f"device {device}: {torch.cuda.get_device_name()}; texpr_ad's CUDA kernels "
              "(numba.cuda) against torch CUDA eager and Inductor (Triton)")
    print(HEADER)
    print("-" * len(HEADER), flush=True)
    rows = []
    for n in names:
        rows.append(run_op(USER_OPS[n], quick, repeat, inductor, device))
        print_row(rows[-1])
    print_summary(rows, cold)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.user_ops", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help=f"comma-separated operators (default: all of {', '.join(USER_OPS)})")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per measurement (median)")
    ap.add_argument("--quick", action="store_true", help="tiny shapes (smoke test)")
    ap.add_argument("--no-inductor", action="store_true", help="do not time torch.compile")
    ap.add_argument("--cold", action="store_true",
                    help="empty kernel caches for both (TEXPR_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR): "
                         "setup s is a cold compile")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="where the tensors live (cuda: texpr_ad's CUDA kernels against torch CUDA)")
    add_simdlen_option(ap)
    a = ap.parse_args(argv)
    apply_simdlen(a.inductor_simdlen)
    names = list(USER_OPS) if not a.only else [n.strip() for n in a.only.split(",") if n.strip()]
    bad = [n for n in names if n not in USER_OPS]
    if bad:
        ap.error(f"unknown operator(s) {bad}; choose from {', '.join(USER_OPS)}")
    with tempfile.TemporaryDirectory(prefix="texpr_user_ops_") as d:
        if a.cold:  # read when the first kernel is cached, not at import
            os.environ["TEXPR_CACHE_DIR"] = os.path.join(d, "texpr")
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(d, "inductor")
        set_threads()
        run(names, a.quick, a.repeat, not a.no_inductor, a.cold, a.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
