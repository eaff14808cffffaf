"""`python -m bench.cuda`: texpr_ad's CUDA kernels against PyTorch on the same GPU.

The workloads and comparisons of `python -m bench` (fwd, step = forward + backward through the
vjp pair, bwd alone; see bench/__main__.py), with every array on the device on both sides:
texpr_ad gets `numba.cuda` device arrays (copied once; its kernels then return device arrays and
the vjp's residuals stay there), torch gets CUDA tensors, and `torch.compile` of the same
function is timed too where it compiles ("compile" columns; its error is printed otherwise,
and `--no-compile` skips it; buffer donation is off, so its backward can run again on one
graph as bwd does).  Each call is followed by a device synchronize, the calls of one
comparison are interleaved (bench's `paired_times`), and the medians of `--repeat` runs are
printed with their ratios.  texpr_ad's times include what its launcher does on the host (index
checks of gathers copy an error flag back each call).  TF32 is off for torch (cuDNN's default
is on; texpr_ad computes in float32), so "max rel err" (texpr_ad against torch eager on the
GPU: fwd output, vjp forward output, gradients) compares the same arithmetic.

Without a CUDA-capable torch (e.g. under NUMBA_ENABLE_CUDASIM=1) only texpr_ad is timed, the
torch columns show '-', and the errors are against torch on the CPU.

Options: --only NAME[,NAME], --repeat N, --quick, --no-compile.
"""
from __future__ import annotations

import argparse
import dataclasses
import platform
import sys
import warnings
from importlib import metadata
from typing import Any, Callable, Sequence

from bench.__main__ import (COMPARISONS, errors_vs, geomean, head, ms, out_shape, paired_times,
                            ratio, short, texpr_side, torch_side)

REFS = ("torch", "compile")  # the torch sides timed against texpr_ad, in column order
NAME_W = 18
HEADER = (f"{'workload':<{NAME_W}} {'':<4} {'texpr ms':>9} {'torch ms':>9} {'ratio':>6} "
          f"{'compile ms':>10} {'t/comp':>6} {'max rel err':>11}")


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def gpu_name() -> str:
    from numba import cuda
    from texpr_ad.kernels.cuda_runtime import simulating
    if simulating():
        return "Numba CUDA simulator (NUMBA_ENABLE_CUDASIM=1)"
    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else str(name)


def version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def synchronizer(torch_cuda: bool) -> Callable[[], None]:
    """Wait for all work on the GPU: Numba's context (shared with torch) and torch's streams."""
    from numba import cuda
    import torch

    def sync() -> None:
        cuda.synchronize()
        if torch_cuda:
            torch.cuda.synchronize()
    return sync


def texpr_device_side(w: Any, g: Any) -> dict[str, Any]:
    """bench's texpr_side on device copies of the inputs and of the cotangent."""
    from numba import cuda
    on_device = dataclasses.replace(w, arrays=tuple(cuda.to_device(a) for a in w.arrays))
    return texpr_side(on_device, cuda.to_device(g), "cuda")


def torch_sides(w: Any, g: Any, torch_cuda: bool, compile_: bool) -> tuple[dict, dict, dict]:
    """(reference results, timed sides {torch, compile}, errors of the sides that failed)."""
    import torch
    if not torch_cuda:
        return torch_side(w, g), {}, {}
    sides, errors = {"torch": torch_side(w, g, "cuda")}, {}
    if compile_:
        try:
            sides["compile"] = side = torch_side(w, g, "cuda", torch.compile(w.torch_fn))
            for c in COMPARISONS:  # a comparison that fails its first call is left out
                try:
                    side[c]()
                except Exception as e:  # noqa: BLE001 - reported under the row
                    errors[f"compile {c}"] = short(e)
                    del side[c]
        except Exception as e:  # noqa: BLE001 - reported under the row, the rest goes on
            errors["compile"] = short(e)
    return sides["torch"], sides, errors


def run_workload(name: str, quick: bool, repeat: int, torch_cuda: bool, compile_: bool,
                 sync: Callable[[], None]) -> dict[str, Any]:
    from bench import plain
    w = plain.make(name, quick)
    g = head(out_shape(w))
    ref, refs, ref_errors = torch_sides(w, g, torch_cuda, compile_)
    side = texpr_device_side(w, g)
    row = {"name": name, "errors": side["errors"], "ref_errors": ref_errors,
           "err": errors_vs(side, ref)}
    for c in COMPARISONS:
        if c not in side:
            continue
        timed = [k for k in REFS if c in refs.get(k, {})]
        fns = [side[c]] + [refs[k][c] for k in timed]
        times = paired_times(*[synced(f, sync) for f in fns], repeat=repeat)
        got = dict(zip(timed, times[1:], strict=True))
        row[c] = {"t": times[0][0], **{k: got[k][0] if k in got else None for k in REFS}}
    return row


def synced(fn: Callable[[], Any], sync: Callable[[], None]) -> Callable[[], None]:
    def call() -> None:
        fn()
        sync()
    return call


def print_row(r: dict[str, Any]) -> None:
    for i, c in enumerate(COMPARISONS):
        label = r["name"] if i == 0 else ""
        if c not in r:
            print(f"{label:<{NAME_W}} {c:<4} error: {r['errors'].get(c, 'not measured')[:90]}")
            continue
        t, err = r[c], r["err"].get(c)
        print(f"{label:<{NAME_W}} {c:<4} {ms(t['t'])} {ms(t['torch'])} "
              f"{ratio(t['t'], t['torch'])} {ms(t['compile']):>10} "
              f"{ratio(t['t'], t['compile'])} {'-' if err is None else f'{err:.1e}':>11}")
    for k, e in r["ref_errors"].items():
        print(f"{'':<{NAME_W}} ({k} failed: {e[:100]})")
    sys.stdout.flush()


def print_summary(rows: list[dict[str, Any]]) -> None:
    for ref in REFS:
        if not any(r[c][ref] for r in rows for c in COMPARISONS if c in r):
            continue
        cells = []
        for c in COMPARISONS:
            xs = [r[c]["t"] / r[c][ref] for r in rows if c in r and r[c][ref]]
            cells.append(f"{c} {geomean(xs):.2f} ({len(xs)} rows)" if xs else f"{c} -")
        print(f"geometric mean texpr/{ref}: " + ", ".join(cells))


def setup_torch() -> tuple[bool, str]:
    """(torch has CUDA, a line saying so and how float32 is computed)."""
    import torch
    if not torch.cuda.is_available():
        return False, (f"torch {torch.__version__} has no CUDA: timing texpr_ad only, errors "
                       f"against torch on the CPU")
    with warnings.catch_warnings():  # the legacy flag: the new fp32_precision API breaks
        warnings.simplefilter("ignore")  # torch.compile when mixed with inductor's legacy reads
        torch.backends.cudnn.allow_tf32 = False
        tf32 = torch.backends.cuda.matmul.allow_tf32
    try:  # a compiled backward run again on one graph (bwd: retain_graph=True) must not
        import torch._functorch.config as functorch_config  # donate its saved buffers
        functorch_config.donated_buffer = False
    except (ImportError, AttributeError):
        pass
    return True, (f"torch {torch.__version__} on {torch.cuda.get_device_name()}; TF32: cuDNN "
                  f"off, matmul {'on' if tf32 else 'off'}")


def main(argv: Sequence[str] | None = None) -> int:
    from bench.workloads import WORKLOADS
    ap = argparse.ArgumentParser(prog="python -m bench.cuda", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated workload names (default: all)")
    ap.add_argument("--repeat", type=int, default=20, help="timed runs per measurement (median)")
    ap.add_argument("--quick", action="store_true", help="small shapes (smoke test)")
    ap.add_argument("--no-compile", action="store_true", help="do not time torch.compile")
    a = ap.parse_args(argv)
    names = list(WORKLOADS) if not a.only else [n.strip() for n in a.only.split(",") if n.strip()]
    if bad := [n for n in names if n not in WORKLOADS]:
        ap.error(f"unknown workload(s) {bad}; choose from {', '.join(WORKLOADS)}")
    # small grids of --quick shapes; a host array copied into a kernel would still warn
    warnings.filterwarnings("ignore", message=".*Grid size .* under-utilization")
    import numba
    from texpr_ad.kernels.cuda_runtime import require_cuda
    require_cuda()
    torch_cuda, torch_line = setup_torch()
    print(f"texpr_ad CUDA bench: GPU {gpu_name()}; CPU {cpu_name()}; numba {numba.__version__}, "
          f"numba-cuda {version('numba-cuda')}; repeat={a.repeat}, quick={a.quick}")
    print(torch_line)
    print(HEADER)
    print("-" * len(HEADER), flush=True)
    sync, rows = synchronizer(torch_cuda), []
    for n in names:
        try:
            rows.append(run_workload(n, a.quick, a.repeat, torch_cuda, not a.no_compile, sync))
            print_row(rows[-1])
        except Exception as e:  # noqa: BLE001 - one row with the error, the rest go on
            print(f"{n:<{NAME_W}} error: {short(e)[:120]}", flush=True)
    print_summary(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
