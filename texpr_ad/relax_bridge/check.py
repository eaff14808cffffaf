"""Registry operators through TVM Relax: `relax.transform.Gradient` + `tvm.compile` + the VM.

`check_op(entry)` builds, for one registry operator, the Relax function

    main(*inputs, *heads) -> (sum_k sum(heads[k] * out[k]), out)

with the operator emitted by `call_te_with_auto_grad` (float64 sample, integer
and bool inputs as integer/bool Relax params, inputs the registry marks
non-differentiable passed as `no_grad`), differentiates it with
`relax.transform.Gradient(require_grads=<differentiable inputs>, target_index=0)`,
compiles it for llvm and runs `main_adjoint` on the Relax VM.  It compares

* the forward outputs with the entry's NumPy reference,
* the gradients with texpr_ad's own adjoints evaluated by `te.evaluate`,
* the gradients with float64 central differences of the NumPy reference loss
  along random directions (scale-free: |<g, t> - fd| / (|g| |t|)).
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np

from .. import te
from ..ops.registry import OpEntry, Sample
from ..te import dtype as dt
from ..te.dag import replace_inputs
from ..te.expr import Const
from ..te.tensor import Tensor
from ..testing import Result, Status, derive, fd_step, grad_error, rel_error
from .api import call_te_with_auto_grad, prepare_for_build

SEED = 1234


def sample_operator(sample: Sample, name: str) -> Callable[..., Any]:
    """An operator function `fte(*placeholders)` rebuilding the sample's DAG on new inputs."""
    def fte(*phs: Tensor) -> Any:
        outs = replace_inputs(sample.outputs, dict(zip(sample.inputs, phs, strict=True)))
        return outs if len(outs) > 1 else outs[0]

    fte.__name__ = fte.__qualname__ = f"registry_{name}"
    return fte


def _static_shape(t: Tensor, op: str) -> tuple[int, ...]:
    if not all(isinstance(s, Const) for s in t.shape):
        raise ValueError(f"operator {op!r}: sample tensor {t.name!r} has a symbolic shape")
    return tuple(int(s.value) for s in t.shape if isinstance(s, Const))


def relax_module(entry: OpEntry, sample: Sample) -> Any:
    """The Relax module `main(*inputs, *heads) -> (loss, outputs)`, before `Gradient`."""
    from tvm import relax
    rop = relax.op
    outs = list(sample.outputs)
    params = [relax.Var(f"in{k}_{x.name}", relax.TensorType(_static_shape(x, entry.name), x.dtype))
              for k, x in enumerate(sample.inputs)]
    fidx = [k for k, o in enumerate(outs) if dt.is_float(o.dtype)]
    heads = [relax.Var(f"head{k}", relax.TensorType(_static_shape(outs[k], entry.name),
                                                    outs[k].dtype)) for k in fidx]
    bb = relax.BlockBuilder()
    with bb.function("main", params + heads):
        with bb.dataflow():
            fte = sample_operator(sample, entry.name)
            no_grad = [k for k, flag in enumerate(sample.differentiable) if not flag]
            y = bb.emit(call_te_with_auto_grad(bb, fte, *params, no_grad=no_grad))
            loss = None
            for k, h in zip(fidx, heads, strict=True):
                yk = bb.emit(relax.TupleGetItem(y, k)) if len(outs) > 1 else y
                term = bb.emit(rop.sum(rop.multiply(yk, h)))
                if outs[k].dtype != "float64":
                    term = bb.emit(rop.astype(term, "float64"))
                loss = term if loss is None else bb.emit(rop.add(loss, term))
            gl = bb.emit_output(loss)
            gy = bb.emit_output(y)
        bb.emit_func_output(relax.Tuple([gl, gy]))
    return bb.get()


def _fd_error(entry: OpEntry, s: Sample, fidx: Sequence[int], heads: Sequence[np.ndarray],
              wrt: Sequence[int], grads: Sequence[np.ndarray], rng: np.random.Generator,
              eps: float, directions: int) -> float:
    """Worst scale-free error of <grad, t> against central differences of the reference loss."""
    def loss(arrays: list[np.ndarray]) -> float:
        ys = entry.reference(*arrays)  # type: ignore[misc]
        return float(sum(np.vdot(h, np.asarray(ys[k], np.float64))
                         for k, h in zip(fidx, heads, strict=True)))

    return grad_error(loss, s.arrays, dict(zip(wrt, grads, strict=True)), eps, directions, rng)


def check_op(entry: OpEntry, directions: int = 2, seed: int = SEED) -> Result:
    """One registry operator through Relax `Gradient`, `tvm.compile(llvm)` and the Relax VM.

    Status "ok" (figure: max relative error over the forward, the comparison with
    texpr_ad's own adjoints and the central-difference check), "nondiff" without
    a differentiable input, "skip" without a compute form, "fail" with the reason.
    """
    if not entry.has_compute:
        return Result(Status.SKIP, None, f"{entry.name}: no compute form ({entry.no_compute})")
    try:
        d = derive(entry, "float64")
        if d is None:
            return Result(Status.NONDIFF, None, f"{entry.name}: no differentiable input")
        return _check(entry, d, directions, seed)
    except Exception as e:  # noqa: BLE001 - reported per operator
        msg = str(e).strip().splitlines()
        first = next((ln for ln in msg if "Error" in ln or "error" in ln), msg[0] if msg else "")
        return Result(Status.FAIL, None, f"{entry.name}: {type(e).__name__}: {first}"[:400])


def _check(entry: OpEntry, d: Any, directions: int, seed: int) -> Result:
    import tvm
    from tvm import relax
    s: Sample = d.sample
    outs = list(s.outputs)
    fidx = [k for k, o in enumerate(outs) if dt.is_float(o.dtype)]
    wrt = [k for k, flag in enumerate(s.differentiable) if flag]
    rng = np.random.default_rng(seed)
    heads = [np.asarray(rng.standard_normal(_static_shape(outs[k], entry.name)), outs[k].dtype)
             for k in fidx]

    t0 = time.perf_counter()
    mod = relax_module(entry, s)
    params = mod["main"].params
    mod = relax.transform.Gradient("main", require_grads=[params[k] for k in wrt],
                                   target_index=0)(mod)
    ex = tvm.compile(prepare_for_build(mod), target="llvm")
    compile_s = time.perf_counter() - t0
    vm = relax.VirtualMachine(ex, tvm.cpu())
    args = [tvm.runtime.tensor(np.array(a, order="C")) for a in (*s.arrays, *heads)]  # 0-d stays 0-d
    (loss_t, ys_t), grads_t = vm["main_adjoint"](*args)
    ys = [ys_t.numpy()] if len(outs) == 1 else [y.numpy() for y in ys_t]
    grads = [g.numpy() for g in grads_t]
    if len(grads) != len(wrt):
        raise ValueError(f"Relax returned {len(grads)} gradients for {len(wrt)} inputs")

    # forward against the NumPy reference
    want = entry.reference(*s.arrays)  # type: ignore[misc]
    fwd = 0.0
    for k, (y, w) in enumerate(zip(ys, want, strict=True)):
        if y.dtype != np.dtype(outs[k].dtype):
            raise ValueError(f"output {k} has dtype {y.dtype}, expected {outs[k].dtype}")
        fwd = max(fwd, rel_error(y, w, f"output {k}"))
    loss_ref = sum(float(np.vdot(h, np.asarray(want[k], np.float64)))
                   for k, h in zip(fidx, heads, strict=True))
    fwd = max(fwd, abs(float(loss_t.numpy()) - loss_ref) / (abs(loss_ref) + 1e-300))

    # gradients against texpr_ad's own adjoints (te.evaluate)
    own_t = [g for g in d.grads if g is not None]
    own_v = iter(te.evaluate(own_t, {**dict(zip(s.inputs, s.arrays, strict=True)),
                                      **dict(zip(d.heads, heads, strict=True))}) if own_t else [])
    own = [next(own_v) if g is not None else np.zeros_like(s.arrays[k])
           for k, g in zip(wrt, d.grads, strict=True)]
    agree = 0.0
    for k, g, o in zip(wrt, grads, own, strict=True):
        err = rel_error(g, o, f"gradient of input {s.inputs[k].name!r}")
        agree = max(agree, err if np.abs(o).max(initial=0.0) > 0 else float(np.abs(g).max(initial=0)))

    # gradients against central differences of the reference loss
    eps = fd_step(outs[k].dtype for k in fidx)
    fd = _fd_error(entry, s, fidx, heads, wrt, grads, rng, eps, directions)

    extra: dict[str, object] = {"forward": fwd, "vs_texpr_ad": agree, "vs_fd": fd,
                                "compile_s": compile_s, "wrt": [s.inputs[k].name for k in wrt]}
    bad = [f"{what} rel err {v:.2e}" for what, v, tol in (
        ("forward", fwd, entry.tol if all(outs[k].dtype == "float64" for k in fidx) else 1e-4),
        ("gradient vs texpr_ad", agree, max(entry.tol, 1e-6)),
        ("gradient vs central differences", fd, max(entry.tol, 1e-6))) if not v <= tol]
    figure = max(fwd, agree, fd)
    if bad:
        return Result(Status.FAIL, figure, f"{entry.name}: " + "; ".join(bad), extra)
    return Result(Status.OK, figure, "", extra)


__all__ = ["check_op", "relax_module", "sample_operator"]
