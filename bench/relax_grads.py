"""Derived gradients inside TVM against TVM's hand-written ones (issue #29), same lowering.

    python -m bench.relax_grads [--repeat N] [names ...]

For each op call below, the Relax function `grad(x, y, dy) -> dx` is built twice from the op's
`FPrimalGradient`: TVM's hand-written one, and texpr_ad's `derived_gradient` (what
`register_missing_gradients(override=True)` installs).  `y` (the forward output) is a parameter,
so neither side recomputes the forward; both compile with `tvm.compile(target="llvm")`
(untuned, TVM's default lowering) and run in the Relax VM.  Per row: the median of `repeat`
runs of 5 calls (`time_evaluator`), stock and derived interleaved call by call so both see the
same machine load, "ratio" = derived / stock, and the max relative difference of the two
gradients (float32, random inputs without ties).
"""
from __future__ import annotations

import argparse
import time
from typing import Any, Callable

import numpy as np

def _cases() -> dict[str, tuple[Callable[[Any], Any], tuple[int, ...]]]:
    from tvm import relax
    nn = relax.op.nn
    return {
        "max_pool2d k3 s2 p1": (lambda x: nn.max_pool2d(x, 3, 2, 1), (4, 32, 56, 56)),
        "max_pool2d k2 s2": (lambda x: nn.max_pool2d(x, 2, 2), (4, 32, 56, 56)),
        "avg_pool2d k3 s2 p1": (lambda x: nn.avg_pool2d(x, 3, 2, 1), (4, 32, 56, 56)),
        "avg_pool2d k2 s2": (lambda x: nn.avg_pool2d(x, 2, 2), (4, 32, 56, 56)),
        "softmax": (lambda x: nn.softmax(x), (256, 1000)),
    }


def grad_module(build: Callable[[Any], Any], shape: tuple[int, ...], fgrad: Any) -> Any:
    """IRModule with `grad(x, y, dy)`: the partial of `build(x)` w.r.t. x by `fgrad`."""
    from tvm import relax
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    call = relax.BlockBuilder().normalize(build(x))
    y, dy = relax.Var("y", call.ty), relax.Var("dy", call.ty)
    bb = relax.BlockBuilder()
    with bb.function("grad", [x, y, dy]):
        with bb.dataflow():
            out = bb.emit_output(fgrad(y, call, dy, bb)[0])
        bb.emit_func_output(out)
    return bb.get()


def _forward(build: Callable[[Any], Any], x: np.ndarray) -> np.ndarray:
    import tvm
    from tvm import relax
    xv = relax.Var("x", relax.TensorType(x.shape, "float32"))
    bb = relax.BlockBuilder()
    with bb.function("f", [xv]):
        with bb.dataflow():
            out = bb.emit_output(build(xv))
        bb.emit_func_output(out)
    vm = relax.VirtualMachine(tvm.compile(bb.get(), target="llvm"), tvm.cpu())
    return vm["f"](tvm.runtime.tensor(x)).numpy()


def run(names: list[str], repeat: int) -> list[dict[str, Any]]:
    import tvm
    from tvm import relax
    from texpr_ad.relax_bridge.relax_ops import derived_gradient
    rng = np.random.default_rng(0)
    rows = []
    for name, (build, shape) in _cases().items():
        if names and not any(n in name for n in names):
            continue
        op = build(relax.Var("x", relax.TensorType(shape, "float32"))).op
        x = rng.standard_normal(shape).astype("float32")
        y = _forward(build, x)
        args = [tvm.runtime.tensor(a) for a in (x, y, rng.standard_normal(y.shape).astype("float32"))]
        timers, grads = [], []
        for fgrad in (op.get_attr("FPrimalGradient"), derived_gradient):
            vm = relax.VirtualMachine(tvm.compile(grad_module(build, shape, fgrad), target="llvm"),
                                      tvm.cpu())
            grads.append(vm["grad"](*args).numpy())
            timers.append(vm.time_evaluator("grad", tvm.cpu(), number=5, repeat=1))
        ms: list[list[float]] = [[], []]
        for _ in range(repeat):
            for k, t in enumerate(timers):
                ms[k].append(t(*args).mean * 1e3)
        stock, derived = (float(np.median(m)) for m in ms)
        err = float(np.abs(grads[0] - grads[1]).max() / np.abs(grads[0]).max())
        rows.append({"op": name, "shape": shape, "stock_ms": stock, "derived_ms": derived,
                     "ratio": derived / stock, "max_rel_diff": err})
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="substrings of the rows to run (default: all)")
    p.add_argument("--repeat", type=int, default=15)
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    print(f"{'op':22s} {'shape':18s} {'stock ms':>9s} {'derived ms':>10s} {'ratio':>6s} "
          f"{'max rel diff':>12s}")
    for r in run(a.names, a.repeat):
        print(f"{r['op']:22s} {str(r['shape']):18s} {r['stock_ms']:9.3f} {r['derived_ms']:10.3f} "
              f"{r['ratio']:6.2f} {r['max_rel_diff']:12.1e}", flush=True)
    print(f"({time.perf_counter() - t0:.0f} s; tvm.compile target llvm, untuned)")


if __name__ == "__main__":
    main()
