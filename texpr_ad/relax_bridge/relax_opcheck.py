"""Relax ops through the real gradient pass: `Gradient` + `tvm.compile(llvm)` + VM vs central differences.

For a tensor op with a sample (`relax_samples.SAMPLES`), `check(op)` builds

    main(*params, *heads, z) -> sum_k sum(astype(op(*params)[k], float64) * heads[k]) + sum(z)

(`z` is a scalar so that every function has something to differentiate; integer and bool
outputs enter through `astype`, so the pass must get through their gradient), runs
`relax.transform.Gradient(require_grads=<float params TVM does not declare
non-differentiable> + [z])` after `static_strided_slices` (as users call it) with whatever
`FPrimalGradient`s are registered, compiles, and
compares `<grad, t>` with central differences of `main` itself along a random direction `t`
per parameter (scale-free: |<g, t> - fd| / (|g| |t|)).  The forward is TVM's own
legalization, so no NumPy reference is needed.  float64 unless the sample says float32.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import numpy as np

from ..testing import Status, fd_step, grad_error, rel_error
from .own_te import NO_GRAD
from .relax_ops import derived_gradient, no_grad_gradient, sample_params
from .relax_samples import F, NO_GRAD_ARGS, ZERO_GRADIENT, Sample, op_of, sample

SEED = 1234


@dataclass
class OpCheck:
    """One op through the pass: status OK or FAIL (with `detail`); `error` is the worst
    scale-free central-difference error; `grads` the gradients (kept for comparisons)."""

    op: str
    status: Status
    error: float | None = None
    detail: str = ""
    seconds: float = 0.0
    wrt: list[str] = field(default_factory=list)
    grads: list[np.ndarray] = field(default_factory=list, repr=False)


def sample_arrays(sample: Sample, rng: np.random.Generator) -> list[np.ndarray]:
    """Random inputs in each argument's range (integers in [lo, hi), fixed values where given)."""
    out = []
    for a in sample.args:
        dtype = sample.dtype if a.dtype == F else a.dtype
        if a.values is not None:
            out.append(np.asarray(a.values, dtype).reshape(a.shape))
        elif dtype == "bool":
            out.append(rng.random(a.shape) < 0.5)
        elif dtype.startswith(("int", "uint")):
            out.append(rng.integers(int(a.lo), int(a.hi), a.shape).astype(dtype))
        else:
            out.append(rng.uniform(a.lo, a.hi, a.shape).astype(dtype))
    return out


def loss_module(key: str) -> tuple[Any, list[int]]:
    """(module with `main`, indices of the parameters to differentiate) for a sample key."""
    from tvm import relax
    s = sample(key)
    params = sample_params(s)
    bb = relax.BlockBuilder()
    z = relax.Var("z", relax.TensorType((), "float64"))
    call = bb.normalize(s.build(*params))
    ty = _output_type(s, params)
    out_tys = list(ty.fields) if isinstance(ty, relax.TupleType) else [ty]
    heads = [relax.Var(f"head{k}", relax.TensorType(t.shape, "float64"))
             for k, t in enumerate(out_tys)]
    with bb.function("main", [*params, *heads, z]):
        with bb.dataflow():
            y = bb.emit(s.build(*params))
            loss = bb.emit(relax.op.sum(z))
            for k, h in enumerate(heads):
                yk = bb.emit(relax.TupleGetItem(y, k)) if len(out_tys) > 1 else y
                yk = bb.emit(relax.op.astype(yk, "float64"))
                loss = bb.emit(relax.op.add(loss, relax.op.sum(relax.op.multiply(yk, h))))
            out = bb.emit_output(loss)
        bb.emit_func_output(out)
    skip = [call.args[k] for k in NO_GRAD_ARGS.get(op_of(key), ()) if k < len(call.args)]
    wrt = [k for k, p in enumerate(params)
           if str(p.ty.dtype).startswith("float") and not any(p.same_as(a) for a in skip)]
    return bb.get(), wrt


def _output_type(s: Sample, params: list[Any]) -> Any:
    """The sample call's type after `static_strided_slices` (constant slices get a shape)."""
    from tvm import relax
    from .api import static_strided_slices
    bb = relax.BlockBuilder()
    with bb.function("f", params):
        bb.emit_func_output(s.build(*params))
    return static_strided_slices(bb.get())["f"].body.body.ty


def check(op: str, seed: int = SEED, directions: int = 2) -> OpCheck:
    """The sample `op` (an op name or "op[variant]") through the pass with the registered
    gradients (see the module doc)."""
    t0 = time.perf_counter()
    try:
        return _check(op, seed, directions, t0)
    except Exception as e:  # noqa: BLE001 - reported per op
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
        first = next((ln for ln in lines if "Error" in ln or "error" in ln or "failed" in ln),
                     lines[-1] if lines else "")
        return OpCheck(op, Status.FAIL, None, f"{type(e).__name__}: {first.strip()}"[:300],
                       time.perf_counter() - t0)


def _check(op: str, seed: int, directions: int, t0: float) -> OpCheck:
    import tvm
    from tvm import relax
    from .api import prepare_for_build, static_strided_slices
    s = sample(op)
    rng = np.random.default_rng(seed)
    mod, wrt = loss_module(op)
    out_ty = mod["main"].body.blocks[0].bindings[0].var.ty
    out_tys = list(out_ty.fields) if hasattr(out_ty, "fields") else [out_ty]
    # stop-gradient and integer/bool outputs: the gradient must be exactly zero (steps in
    # the forward would make central differences meaningless)
    zero = op_of(op) in ZERO_GRADIENT or op_of(op) in NO_GRAD or \
        not any(str(t.dtype).startswith("float") for t in out_tys)
    params = list(mod["main"].params)
    n_heads = len(params) - len(s.args) - 1
    arrays = sample_arrays(s, rng)
    heads = [rng.standard_normal([int(d) for d in p.ty.shape.values])
             for p in params[len(s.args):len(s.args) + n_heads]]
    args = [*arrays, *heads, np.asarray(0.5)]
    wrt_all = [*wrt, len(params) - 1]
    mod = relax.transform.Gradient("main", require_grads=[params[k] for k in wrt_all])(
        static_strided_slices(mod))  # as users do: constant dynamic slices get a shape
    ex = tvm.compile(prepare_for_build(mod), target="llvm")
    vm = relax.VirtualMachine(ex, tvm.cpu())

    def loss(xs: Sequence[np.ndarray]) -> float:
        return float(vm["main"](*[tvm.runtime.tensor(np.asarray(x)) for x in xs]).numpy())

    _, grads_t = vm["main_adjoint"](*[tvm.runtime.tensor(np.asarray(x)) for x in args])
    grads = [g.numpy() for g in grads_t][:len(wrt)]
    for k, g in zip(wrt, grads, strict=True):
        if g.shape != args[k].shape:
            raise ValueError(f"gradient of argument {k} has shape {g.shape}, "
                             f"the argument {args[k].shape}")
    if zero:
        worst = max((float(np.abs(g).max(initial=0.0)) for g in grads), default=0.0)
    else:
        worst = grad_error(loss, args, dict(zip(wrt, grads, strict=True)), fd_step([s.dtype]),
                           directions, rng)
    seconds = time.perf_counter() - t0
    names = [str(params[k].name) for k in wrt]
    if not worst <= s.tol:
        what = "expected a zero gradient, max |g|" if zero else "central differences: rel err"
        return OpCheck(op, Status.FAIL, worst, f"{what} {worst:.2e} > {s.tol:g}", seconds, names,
                       grads)
    return OpCheck(op, Status.OK, worst, "", seconds, names, grads)


@contextlib.contextmanager
def gradient_installed(op: str, fn: Any) -> Iterator[None]:
    """Temporarily make `fn` the `FPrimalGradient` of `op` (None: no gradient at all, as in
    stock TVM); restores what was there."""
    import tvm
    o = tvm.ir.Op.get(op)
    saved = o.get_attr("FPrimalGradient")
    o.reset_attr("FPrimalGradient")
    if fn is not None:
        tvm.ir.register_op_attr(op, "FPrimalGradient", fn, level=10)
    try:
        yield
    finally:
        o.reset_attr("FPrimalGradient")
        if saved is not None:
            tvm.ir.register_op_attr(op, "FPrimalGradient", saved, level=10)


def compare_with_stock(op: str, seed: int = SEED) -> tuple[OpCheck, OpCheck, float]:
    """(stock check, derived check, max relative difference of their gradients) for an op
    with a hand-written gradient; the derived one is installed only for the comparison."""
    stock = check(op, seed)
    fn = no_grad_gradient if _integer_output(op_of(op)) else derived_gradient
    with gradient_installed(op_of(op), fn):
        mine = check(op, seed)
    diff = float("nan")
    if stock.grads and mine.grads and len(stock.grads) == len(mine.grads):
        diff = max(rel_error(b, a) for a, b in zip(stock.grads, mine.grads, strict=True))
    return stock, mine, diff


def _integer_output(op: str) -> bool:
    from .relax_ops import classify
    return classify(op).reason == "integer/bool output"


__all__ = ["OpCheck", "SEED", "check", "compare_with_stock", "gradient_installed",
           "loss_module", "sample_arrays"]
