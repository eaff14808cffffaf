"""`python -m bench`: texpr_ad kernels side by side with PyTorch (and JAX when installed).

Every workload (bench/workloads.py, built from the operator library) and, unless `--no-plain`,
its plain formulation (bench/plain.py, the same operation written with `te` directly, rows
"<name>:plain") is timed three ways, each against PyTorch on the same float32 inputs in the
same process:

  fwd   texpr_ad's forward kernel (`ta.build`)        vs torch forward under no_grad
  step  `outs, res = fwd(*a); bwd(res, g)` (the vjp   vs `y = f(*ts); torch.autograd.grad(y,
        pair: forward saving residuals + backward)       diff, g)`, each gradient .contiguous()
  bwd   `bwd(res, g)`, residuals computed once        vs `torch.autograd.grad(y, diff, g,
                                                         retain_graph=True)` on a graph built
                                                         once, each gradient made .contiguous()

The `.contiguous()`: torch returns views for some gradients (stride-0 expands for sums, permuted
strides for transposes) while texpr_ad writes dense arrays; the backward-alone column compares
the same work.  The training step makes them contiguous too: that is what a training step pays,
since `loss.backward()` accumulates a view gradient into a dense `.grad` of the parameter's
layout (torch's gradient layout contract).  The vjp pair is
`texpr_ad.vjp` when the library has it, else bench/vjp.py's stand-in (forward kernel + a
backward kernel recomputing from the inputs); the header says which.

Each comparison is also timed against `torch.compile` of the same PyTorch function (Inductor,
CPU; "ind ms", "t/ind" = texpr_ad / Inductor), interleaved in the same rounds; its backward alone
runs on graphs whose forwards ran before, one per call (its backward frees its saved buffers).
An Inductor result off from eager's by more than 1e-3 is reported under the row and not timed.
`--no-inductor` leaves it out.

Per row: the median of `--repeat` runs after warm-up, with two threads for every framework;
"ratio" texpr_ad / torch of the medians, "(min)" of the fastest runs; "max rel err" (max |a - b|
/ max |b|) of the forward output (fwd), of the vjp pair's forward output (step) and of its
gradients (bwd) against torch.  JAX (jitted forward, jitted step `jax.vjp` + apply, jitted
apply of a precomputed vjp function; bench/jax_side.py) is timed where installed: "jax ms" and
"t/jax" = texpr_ad / JAX; XLA is held to two threads by XLA_FLAGS (set before jax is imported,
unless the caller set XLA_FLAGS).  The registry row, its plain row and torch are interleaved
call by call for each comparison, in an order that rotates every round, so all see the same
machine load; JAX is timed in its own loop right after (its threads spin on after each call and
slowed whichever call came next).

Compile times: "cold" builds in a fresh subprocess with an empty `TEXPR_CACHE_DIR`; "warm" does
it again in a second process sharing the folder; "ind cold", "ind warm" the same for
`torch.compile` (an empty `TORCHINDUCTOR_CACHE_DIR`; its inference graph, then its training
graph), on the registry rows.  The fwd row is the forward kernel, the step
row the vjp pair (build + first forward + first backward); each minus one steady call.

The summary gives the geometric mean texpr_ad / torch of each comparison over the registry rows
and over the plain rows, the worst row of each, and plain / registry training-step time per
operator (from the same interleaved runs).

`--user` adds bench/user_ops.py's section after these rows: operators from real models written
plainly in te and trained through `texpr_ad.torch`, against PyTorch eager and `torch.compile`
(`python -m bench.user_ops` runs that section alone).  `--overhead` adds the per-call overhead
of a texpr_ad torch op on 1000 floats next to plain torch and an empty `torch.library.custom_op`
(bench/overhead.py; `python -m bench.overhead` alone), `--symbolic` the workloads' kernels built
for a batch known only at the call against static ones (bench/symbolic.py).  With `--user` a
last summary takes the
registry, plain and user-op rows together: geomean texpr/eager and texpr/Inductor per comparison
and every row above 1.5x Inductor.

Options: --only NAME[,NAME], --repeat N, --target cpu|cuda, --quick, --no-compile, --no-plain,
--no-inductor, --inductor-simdlen BITS, --user, --overhead, --symbolic.
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
# No OPENBLAS_NUM_THREADS here: texpr_ad's BLAS stages hold every BLAS library to one thread
# during their split calls themselves (kernels/blas_threads.py), so the default environment is
# what a user gets.

from bench.jax_side import THREAD_FLAGS  # noqa: E402

os.environ.setdefault("XLA_FLAGS", THREAD_FLAGS)  # before anything imports jax

import numpy as np  # noqa: E402

from texpr_ad.testing import rel_error, sample_times  # noqa: E402

COMPARISONS = ("fwd", "step", "bwd")
Call = Callable[[], Any]


def set_threads() -> None:
    from texpr_ad.kernels.numba_cpu import start_threads
    start_threads()  # first: Numba's threads with texpr_ad's OpenMP settings (see there)
    import numba
    import torch
    torch.set_num_threads(THREADS)
    numba.set_num_threads(THREADS)
    if os.environ.get(SIMDLEN):  # Inductor's vector width (`--inductor-simdlen`)
        import torch._inductor.config as inductor_config
        inductor_config.cpp.simdlen = int(os.environ[SIMDLEN])


SIMDLEN = "TEXPR_BENCH_INDUCTOR_SIMDLEN"
FORCED_AVX2 = ("NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES= OPENBLAS_CORETYPE=Haswell "
               "ATEN_CPU_CAPABILITY=avx2 ... --inductor-simdlen 256")


def add_simdlen_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--inductor-simdlen", type=int, metavar="BITS",
                    help="torch.compile's CPU vector width (256: AVX2 code on an AVX-512 host; "
                         f"every side on AVX2: {FORCED_AVX2})")


def apply_simdlen(bits: int | None) -> None:
    if bits:
        os.environ[SIMDLEN] = str(bits)  # read by set_threads, here and in the probes


def paired_times(*fns: Call, repeat: int, warmup: int = 2) -> list[tuple[float, float]]:
    """(median, min) seconds of each of `fns`, calls interleaved so all see the same load."""
    return [(statistics.median(t), min(t)) for t in sample_times(*fns, repeat=repeat,
                                                                 warmup=warmup)]


def _rel_err(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> float:
    return max((rel_error(a, b) for a, b in zip(got, want, strict=True)), default=0.0)


def out_shape(w: Any) -> tuple[int, ...]:
    return tuple(int(s.value) for s in w.output.shape)


def head(shape: tuple[int, ...], seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def short(e: Exception) -> str:
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"


def texpr_side(w: Any, g: np.ndarray, target: str) -> dict[str, Any]:
    """Timed calls {fwd, step, bwd} of workload `w` and its results; a comparison whose kernels
    fail to build is left out and its error kept under "errors"."""
    import texpr_ad as ta
    from bench.vjp import vjp
    side: dict[str, Any] = {"errors": {}}
    try:
        k = ta.build([w.output], list(w.inputs), target=target)
        side["y"] = k(*w.arrays)
        side["fwd"] = lambda: k(*w.arrays)
    except Exception as e:  # noqa: BLE001 - reported in the row, not fatal
        side["errors"]["fwd"] = short(e)
    try:
        fwd, bwd = vjp([w.output], list(w.inputs), target)
        outs, res = fwd(*w.arrays)
        side["grads"] = [x for x in bwd(res, g) if x is not None]
        side["vjp_y"] = outs
        side["step"] = lambda: bwd(fwd(*w.arrays)[1], g)
        side["bwd"] = lambda: bwd(res, g)
    except Exception as e:  # noqa: BLE001
        side["errors"]["step"] = side["errors"]["bwd"] = short(e)
    return side


def torch_side(w: Any, g: np.ndarray, device: str = "cpu",
               fn: Callable[..., Any] | None = None) -> dict[str, Any]:
    """Timed torch calls {fwd, step, bwd} of `fn` (default `w.torch_fn`) on `device`, and their
    results as NumPy arrays ("y", "grads")."""
    import torch
    f = fn or w.torch_fn
    ts = [torch.from_numpy(a.copy()).to(device) for a in w.arrays]
    diff = [ts[k].requires_grad_(True) for k in w.float_inputs]
    gt = torch.from_numpy(g.copy()).to(device)

    def fwd() -> Any:
        with torch.no_grad():
            return f(*ts)

    def step() -> Any:
        return [x.contiguous() for x in torch.autograd.grad(f(*ts), diff, gt)]

    y = f(*ts)

    def bwd() -> Any:
        return [x.contiguous() for x in torch.autograd.grad(y, diff, gt, retain_graph=True)]

    return {"fwd": fwd, "step": step, "bwd": bwd, "y": fwd().cpu().numpy(),
            "grads": [x.cpu().numpy() for x in step()]}


def _jax(w: Any, g: np.ndarray, use: bool) -> dict[str, Call] | None:
    if not use:
        return None
    from bench.jax_side import jax_side
    try:
        return jax_side(w.name, w.arrays, w.float_inputs, g)
    except Exception as e:  # noqa: BLE001 - JAX is optional; its row shows '-'
        print(f"  (jax: {w.name}: {short(e)})", file=sys.stderr)
        return None


def errors_vs(side: dict[str, Any], ref: dict[str, Any]) -> dict[str, float]:
    checks = {"fwd": ("y", "y"), "step": ("vjp_y", "y"), "bwd": ("grads", "grads")}
    out = {}
    for c, (mine, theirs) in checks.items():
        if mine in side:
            got = side[mine]
            want = ref[theirs] if theirs == "grads" else [ref[theirs]]
            out[c] = _rel_err([np.asarray(x).reshape(np.shape(y)) for x, y in
                               zip(got, want, strict=True)], want)
    return out


def inductor_side(w: Any, g: np.ndarray, ref: dict[str, Any], calls: int
                  ) -> tuple[dict[str, Call] | None, str | None]:
    """Timed `torch.compile(w.torch_fn)` calls {fwd, step, bwd} (bench/user_ops.py's `side`:
    `calls` graphs for the backward alone), or None and why: a compile failure, or results off
    from eager's by more than user_ops.MISMATCH (Inductor's CPU code has computed wrong values
    under a forced ISA; such a side is reported, not timed)."""
    import torch
    from bench.user_ops import MISMATCH, side
    try:
        s = side(torch.compile(w.torch_fn), w, g, calls)
    except Exception as e:  # noqa: BLE001 - reported under the table
        return None, short(e)
    got = s["check"]["fwd"] + s["check"]["step"]
    err = _rel_err([np.asarray(x).reshape(np.shape(y)) for x, y in zip(got, [ref["y"]] + ref[
        "grads"], strict=True)], [ref["y"]] + ref["grads"])
    return (None, f"mismatch: Inductor differs from eager by {err:.1e}") if err > MISMATCH else (
        s, None)


def run_workload(name: str, quick: bool, repeat: int, target: str, with_plain: bool,
                 jax: bool, inductor: bool = False) -> list[dict[str, Any]]:
    """The registry row of `name` and (with_plain) its plain row, timed interleaved with torch
    eager and (inductor) torch.compile of the same PyTorch function."""
    from bench import plain
    w = plain.make(name, quick)
    g = head(out_shape(w))
    ref = torch_side(w, g)
    ind, why = inductor_side(w, g, ref, repeat + 2) if inductor else (None, None)
    forms = [w] + ([plain.plain(w)] if with_plain else [])
    sides = [texpr_side(f, g, target) for f in forms]
    jx = _jax(w, g, jax)
    rows = [{"name": f.name, "errors": s["errors"], "err": errors_vs(s, ref)}
            for f, s in zip(forms, sides, strict=True)]
    if why:
        rows[0]["errors"]["inductor"] = why
    for c in COMPARISONS:
        mine = [(r, s[c]) for r, s in zip(rows, sides, strict=True) if c in s]
        if not mine:
            continue
        times = paired_times(*[fn for _, fn in mine], ref[c], *([ind[c]] if ind else []),
                             repeat=repeat)
        t_torch = times[len(mine)]
        t_ind = times[len(mine) + 1] if ind else (None, None)
        # JAX apart: XLA's threads keep spinning after a call and slowed whatever ran next
        # (layer_norm step measured 5.5 ms right after a JAX call, 3.2 ms otherwise)
        t_jax = paired_times(jx[c], repeat=repeat)[0] if jx else None
        for (r, _), t in zip(mine, times, strict=False):
            r[c] = {"t": t[0], "min": t[1], "torch": t_torch[0], "torch_min": t_torch[1],
                    "ind": t_ind[0], "jax": t_jax[0] if t_jax else None}
    if len(rows) == 2 and "step" in rows[0] and "step" in rows[1]:
        rows[1]["plain_over_registry"] = rows[1]["step"]["t"] / rows[0]["step"]["t"]
    return rows


def _first(make: Callable[[], Call]) -> float:
    """Seconds from nothing to the first result of the call `make` returns, minus a steady call."""
    t0 = time.perf_counter()
    call = make()
    call()
    t1 = time.perf_counter()
    call()
    return (t1 - t0) - (time.perf_counter() - t1)


def _inductor_probes(w: Any, g: np.ndarray) -> dict[str, Callable[[], Call]]:
    """torch.compile of the workload's PyTorch function: its first inference call, then its
    first training step (a second graph)."""
    import torch
    ts = [torch.from_numpy(a.copy()) for a in w.arrays]
    xs = [t.detach().requires_grad_(True) if k in w.float_inputs else t for k, t in enumerate(ts)]
    diff, gt, f = [xs[k] for k in w.float_inputs], torch.from_numpy(g), torch.compile(w.torch_fn)

    def fwd() -> Any:
        with torch.no_grad():
            return f(*ts)
    return {"ind_fwd": lambda: fwd, "ind_step": lambda: lambda: torch.autograd.grad(
        f(*xs), diff, gt)}


def compile_probe(names: Sequence[str], quick: bool, target: str, inductor: bool) -> None:
    """Print one JSON line per formulation: seconds to the first result, minus one steady call
    (texpr_ad's forward kernel and vjp pair; with `inductor`, torch.compile's too, once per
    workload)."""
    set_threads()
    from bench import plain
    from bench.vjp import vjp
    import texpr_ad as ta
    for name in names:
        w = plain.make(name, quick)
        g = head(out_shape(w))

        def texpr_fwd() -> Call:
            k = ta.build([w.output], list(w.inputs), target=target)
            return lambda: k(*w.arrays)

        def texpr_step() -> Call:
            fwd, bwd = vjp([w.output], list(w.inputs), target)
            return lambda: bwd(fwd(*w.arrays)[1], g)
        probes = {"fwd": texpr_fwd, "step": texpr_step}
        if inductor and not name.endswith(":plain"):
            probes.update(_inductor_probes(w, g))
        out: dict[str, Any] = {"name": name}
        for key, make in probes.items():
            try:
                out[key] = _first(make)
            except Exception as e:  # noqa: BLE001 - the timing table reports the error
                out.setdefault("error", short(e))
        print(json.dumps(out), flush=True)


PROBED = ("fwd", "step", "ind_fwd", "ind_step")


def compile_times(names: Sequence[str], quick: bool, target: str, inductor: bool = False
                  ) -> dict[str, dict[str, float]]:
    """{name: {cold_fwd, cold_step, warm_fwd, warm_step, and cold_ind_fwd ... with `inductor`}}
    from two fresh subprocesses sharing empty texpr_ad and Inductor caches."""
    out: dict[str, dict[str, float]] = {n: {} for n in names}
    with tempfile.TemporaryDirectory(prefix="texpr_bench_cache_") as d:
        env = dict(os.environ, TEXPR_CACHE_DIR=d,
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(d, "inductor"))
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        cmd = [sys.executable, "-m", "bench", "--compile-probe", "--only", ",".join(names),
               "--target", target] + (["--quick"] if quick else []) + (
                   [] if inductor else ["--no-inductor"])
        for phase in ("cold", "warm"):
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=root)
            if res.returncode != 0:
                print(f"compile probe ({phase}) failed:\n{res.stderr[-2000:]}", file=sys.stderr)
                continue
            for line in res.stdout.splitlines():
                if line.startswith("{"):
                    r = json.loads(line)
                    out[r["name"]].update({f"{phase}_{c}": r[c] for c in PROBED if c in r})
    return out


def ms(t: float | None) -> str:
    return f"{'-':>9}" if t is None else f"{t * 1e3:9.2f}"


def ratio(a: float | None, b: float | None) -> str:
    return f"{'-':>6}" if a is None or b is None else f"{a / b:6.2f}"


def _sec(t: float | None) -> str:
    return f"{'-':>7}" if t is None else f"{t:7.2f}"


NAME_W = 24
HEADER = (f"{'workload':<{NAME_W}} {'':<4} {'texpr ms':>9} {'torch ms':>9} {'ratio':>6} "
          f"{'(min)':>6} {'ind ms':>9} {'t/ind':>6} {'max rel err':>11} {'jax ms':>9} "
          f"{'t/jax':>6} {'cold s':>7} {'warm s':>7} {'ind cold':>8} {'ind warm':>8}")


def print_row(r: dict[str, Any], comp: dict[str, dict[str, float]]) -> None:
    c_ = comp.get(r["name"], {})
    for i, c in enumerate(COMPARISONS):
        label = r["name"] if i == 0 else ""
        if c not in r:
            print(f"{label:<{NAME_W}} {c:<4} error: {r['errors'].get(c, 'not measured')[:80]}")
            continue
        t = r[c]
        err = r["err"].get(c)
        print(f"{label:<{NAME_W}} {c:<4} {ms(t['t'])} {ms(t['torch'])} "
              f"{ratio(t['t'], t['torch'])} {ratio(t['min'], t['torch_min'])} "
              f"{ms(t['ind'])} {ratio(t['t'], t['ind'])} "
              f"{'-' if err is None else f'{err:.1e}':>11} {ms(t['jax'])} "
              f"{ratio(t['t'], t['jax'])} {_sec(c_.get(f'cold_{c}'))} "
              f"{_sec(c_.get(f'warm_{c}'))} {_sec(c_.get(f'cold_ind_{c}')):>8} "
              f"{_sec(c_.get(f'warm_ind_{c}')):>8}")
    if "inductor" in r["errors"]:
        print(f"{'':<{NAME_W}} ! inductor not timed: {r['errors']['inductor'][:120]}")
    sys.stdout.flush()


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def _geomean_table(groups: dict[str, list[dict[str, Any]]], ref: str) -> None:
    """One line per group: geomean texpr/`ref` per comparison, and the worst row of each."""
    print(f"\n{'geometric mean texpr/' + ref:<38} " + " ".join(f"{c:>6}" for c in COMPARISONS)
          + "   worst row of each")
    for g, rs in groups.items():
        cells, worst = [], []
        for c in COMPARISONS:
            ratios = [(r[c]["t"] / r[c][ref], r["name"]) for r in rs if c in r and r[c].get(ref)]
            cells.append(f"{geomean([x for x, _ in ratios]):6.2f}" if ratios else f"{'-':>6}")
            if ratios:
                x, n = max(ratios)
                worst.append(f"{c} {n} {x:.2f}x")
        done = sum(1 for r in rs if all(c in r and r[c].get(ref) for c in COMPARISONS))
        label = f"{g} ({done}/{len(rs)} complete)"
        print(f"  {label:<36} " + " ".join(cells) + "   " + "; ".join(worst))


def print_summary(rows: list[dict[str, Any]]) -> None:
    parts = {"registry": [r for r in rows if not r["name"].endswith(":plain")],
             "plain": [r for r in rows if r["name"].endswith(":plain")]}
    groups = {g: rs for g, rs in parts.items() if rs}
    _geomean_table(groups, "torch")
    if any(r[c].get("ind") for r in rows for c in COMPARISONS if c in r):
        _geomean_table(groups, "ind")
    if any(r[c]["jax"] for r in rows for c in COMPARISONS if c in r):
        _geomean_table(groups, "jax")
    ok = [r for r in rows if r.get("plain_over_registry")]
    if ok:
        print("\nplain / registry training-step time, per operator (same interleaved runs):")
        cells = [f"{r['name'].removesuffix(':plain')} {r['plain_over_registry']:.2f}" for r in ok]
        for i in range(0, len(cells), 5):
            print("  " + ", ".join(cells[i:i + 5]))
        print(f"  geometric mean {geomean([r['plain_over_registry'] for r in ok]):.2f} over "
              f"{len(ok)} operators")
    failed = [(r["name"], c, r["errors"].get(c, "?")) for r in rows for c in COMPARISONS
              if c not in r]
    if failed:
        print("\nnot measured (texpr_ad failed to build or run):")
        for n, c, e in failed:
            print(f"  {n} {c}: {e[:160]}")


def print_overall(rows: list[dict[str, Any]], user_rows: list[dict[str, Any]]) -> None:
    """Geomean texpr/eager and texpr/Inductor per comparison over the registry, plain and user-op
    rows together, and every ratio above 1.5x Inductor (the user-op issue's yardstick)."""
    got: dict[tuple[str, str], list[tuple[float, str]]] = {}
    for r in rows:
        for c in (c for c in COMPARISONS if c in r):
            for ref, key in (("eager", "torch"), ("inductor", "ind")):
                if r[c].get(key):
                    got.setdefault((ref, c), []).append((r[c]["t"] / r[c][key], r["name"]))
    for r in user_rows:
        for c in (c for c in COMPARISONS if "texpr" in r.get(c, {})):
            for ref in (ref for ref in ("eager", "inductor") if ref in r[c]):
                got.setdefault((ref, c), []).append((r[c]["texpr"][0] / r[c][ref][0],
                                                     "user:" + r["name"]))
    print(f"\n{'all rows (registry + plain + user ops)':<38} "
          + " ".join(f"{c:>6}" for c in COMPARISONS) + "   rows")
    for ref in ("eager", "inductor"):
        cells = [f"{geomean([x for x, _ in got[ref, c]]):6.2f}" if got.get((ref, c)) else
                 f"{'-':>6}" for c in COMPARISONS]
        print(f"  {'texpr/' + ref:<36} " + " ".join(cells) + "   "
              + "/".join(str(len(got.get((ref, c), []))) for c in COMPARISONS))
    for c in COMPARISONS:
        over = sorted(((x, n) for x, n in got.get(("inductor", c), []) if x > 1.5),
                      key=lambda t: (-t[0], t[1]))
        print(f"  {c} above 1.5x Inductor: "
              + (", ".join(f"{n} {x:.2f}x" for x, n in over) if over else "none"))


def print_compile_summary(comp: dict[str, dict[str, float]]) -> None:
    """Geomean seconds to the first result, cold and warm, of texpr_ad and torch.compile over the
    registry rows that have both."""
    rows = [c for n, c in comp.items() if not n.endswith(":plain") and "cold_ind_step" in c]
    if not rows:
        return
    print(f"\nfirst call, geomean s over {len(rows)} workloads (fwd / step):")
    for side, pre in (("texpr_ad", ""), ("torch.compile", "ind_")):
        cells = [f"{ph} " + " / ".join(
            f"{geomean([max(r[f'{ph}_{pre}{c}'], 1e-3) for r in rows]):.2f}" for c in
            ("fwd", "step")) for ph in ("cold", "warm") if all(
                f"{ph}_{pre}{c}" in r for r in rows for c in ("fwd", "step"))]
        print(f"  {side:<14} " + "; ".join(cells))


def blas_line(torch: Any) -> str:
    """Which matrix-product kernels each side runs (an environment's OPENBLAS_CORETYPE changes
    NumPy's BLAS; float32 contractions run on texpr_ad's own kernel where it is enabled)."""
    from texpr_ad.kernels import gemm_f32
    try:
        from threadpoolctl import threadpool_info
        libs = [f"{i['internal_api']} {i.get('version')} ({i.get('architecture')} kernels)"
                for i in threadpool_info() if i.get("user_api") == "blas"]
    except ImportError:
        libs = ["unknown (no threadpoolctl)"]
    pinned = os.environ.get("OPENBLAS_CORETYPE")
    ours = f"texpr_ad GEMM {gemm_f32.describe()}" if gemm_f32.enabled() else "numpy BLAS"
    return (f"texpr_ad float32 contractions: {ours} (TEXPR_AD_GEMM={gemm_f32.mode()}); "
            f"numpy BLAS: {', '.join(libs) or 'none found'}"
            + (f", pinned by OPENBLAS_CORETYPE={pinned}" if pinned else "")
            + f"; torch oneDNN: {'on' if torch.backends.mkldnn.is_available() else 'off'}")


def main(argv: Sequence[str] | None = None) -> int:
    from bench.jax_side import available
    from bench.vjp import library_has_vjp
    from bench.workloads import WORKLOADS
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated workload names (default: all)")
    ap.add_argument("--repeat", type=int, default=7, help="timed runs per measurement (median)")
    ap.add_argument("--target", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--quick", action="store_true", help="small shapes (smoke test)")
    ap.add_argument("--no-compile", action="store_true", help="skip the cold/warm compile probes")
    ap.add_argument("--plain", action=argparse.BooleanOptionalAction, default=True,
                    help="include the plain-te formulations (rows NAME:plain; default: yes)")
    ap.add_argument("--no-jax", action="store_true", help="do not time JAX even if installed")
    ap.add_argument("--no-inductor", action="store_true",
                    help="do not time torch.compile (Inductor) of the PyTorch functions")
    ap.add_argument("--user", action="store_true",
                    help="then the user-op section (bench/user_ops.py: te vs eager vs torch.compile)")
    ap.add_argument("--overhead", action="store_true",
                    help="then the per-call overhead of a torch op on 1000 floats (bench/overhead.py)")
    ap.add_argument("--symbolic", action="store_true",
                    help="then symbolic-batch kernels against static ones (bench/symbolic.py)")
    add_simdlen_option(ap)
    ap.add_argument("--compile-probe", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    apply_simdlen(a.inductor_simdlen)
    names = list(WORKLOADS) if not a.only else [n.strip() for n in a.only.split(",") if n.strip()]
    bad = [n for n in names if n.removesuffix(":plain") not in WORKLOADS]
    if bad:
        ap.error(f"unknown workload(s) {bad}; choose from {', '.join(WORKLOADS)}")
    if a.compile_probe:
        compile_probe(names, a.quick, a.target, not a.no_inductor)
        return 0
    names = list(dict.fromkeys(n.removesuffix(":plain") for n in names))
    set_threads()
    jax = available() and not a.no_jax
    import torch
    print(f"texpr_ad bench: target={a.target}, threads={THREADS}, repeat={a.repeat}, "
          f"quick={a.quick}, torch {torch.__version__}, jax "
          f"{'timed (XLA_FLAGS=' + os.environ['XLA_FLAGS'] + ')' if jax else 'not timed'}, "
          f"vjp pair: {'texpr_ad.vjp' if library_has_vjp() else 'bench stand-in (recompute)'}")
    from bench.user_ops import cpu_line
    print(cpu_line(torch))
    print(blas_line(torch))
    probe = names + ([n + ":plain" for n in names] if a.plain else [])
    comp = {} if a.no_compile else compile_times(probe, a.quick, a.target, not a.no_inductor)
    print(HEADER)
    print("-" * len(HEADER), flush=True)
    rows: list[dict[str, Any]] = []
    for n in names:
        got = run_workload(n, a.quick, a.repeat, a.target, a.plain, jax, not a.no_inductor)
        for r in got:
            print_row(r, comp)
        rows.extend(got)
    print_summary(rows)
    print_compile_summary(comp)
    if a.user:
        from bench import user_ops
        print()
        user_rows = user_ops.run(list(user_ops.USER_OPS), a.quick, a.repeat, not a.no_inductor)
        print_overall(rows, user_rows)
    if a.overhead:
        from bench import overhead
        print()
        overhead.run(a.repeat)
    if a.symbolic:
        from bench import symbolic
        print()
        symbolic.run(names, a.quick, a.repeat)
    print_cache_line()
    return 0


def print_cache_line() -> None:
    """Which machine code the texpr rows timed.  Numba optimizes a parallel kernel's loop body
    again when it caches the kernel (numba#10617), so one loaded from the disk cache (a later
    run's, what users run) can be faster or slower than the same source compiled in this run."""
    from texpr_ad.kernels.cache import compile_counts
    compiled, loaded = compile_counts()
    print(f"\ntexpr kernels timed: {compiled} compiled in this run, {loaded} loaded from the disk "
          f"cache (a cached parallel kernel runs re-optimized code, numba#10617: a second run "
          f"times what later runs use)")


if __name__ == "__main__":
    sys.exit(main())
