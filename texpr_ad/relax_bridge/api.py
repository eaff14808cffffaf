"""Emitting texpr_ad operators into Relax graphs, and preparing modules for `tvm.compile`."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from .args import as_list, is_index
from .grad import CHECK_BOUNDS, NO_GRAD, BridgeError, as_outputs, placeholders, register
from .to_tvm import TranslationError, translate


def call_te_with_auto_grad(bb: Any, fte: Callable[..., Any], *args: Any,
                           primfunc_name_hint: str | None = None, te_grad_name: str | None = None,
                           no_grad: int | Sequence[int] = (), check_bounds: bool | None = None,
                           **attrs: Any) -> Any:
    """`bb.call_te_with_grad` for a texpr_ad operator, with a derived gradient.

    `fte(*placeholders, **attrs)` receives one texpr_ad placeholder per Relax
    argument (shape, dtype and symbolic dims from the argument's type) and
    returns a texpr_ad tensor or a list of them (several outputs give a Relax
    tuple).  The gradient is derived by `texpr_ad.deriv` when
    `relax.transform.Gradient` needs it; `attrs` travel as `te_grad_kwargs`,
    so they must be values TVM can hold (numbers, bools, strings, tuples).
    `te_grad_name` overrides the registered name (default: from `fte.__qualname__`).
    `no_grad` lists argument positions declared non-differentiable: they get a
    zero adjoint and are never differentiated (for float inputs such as masks or
    anchors that pass through argmax-like reductions; integer inputs always get zeros).
    Reads (and scatters) at indices computed from tensor values are checked when the compiled
    forward and gradient run (a KernelIndexError naming the read, as texpr_ad's own kernels
    raise); `check_bounds=False` leaves them unchecked.  The default (None) checks them unless
    the current `tvm.target.Target` is a device such as CUDA (device kernels cannot raise):
    emit inside `with tvm.target.Target("cuda"):`, or pass False, for a GPU build.
    Returns the `call_tir_with_grad` Call; emit it with `bb.emit`.

    Example::

        def dense(x, w):
            k = te.reduce_axis((0, x.shape[1]), "k")
            return te.compute((x.shape[0], w.shape[1]),
                              lambda i, j: te.sum(x[i, k] * w[k, j], axis=k), name="dense")

        y = bb.emit(call_te_with_auto_grad(bb, dense, x, w))
    """
    name = register(fte, te_grad_name)
    no_grad = as_list(no_grad, f"operator {name!r}: no_grad=", is_index,
                      "argument positions (ints)")
    for key, value in attrs.items():
        if not _attr_ok(value):
            raise BridgeError(f"operator {name!r}: attribute {key}={value!r} cannot travel as a Relax "
                              "te_grad_kwargs value; use numbers, bools, strings or tuples of them")
    bad = [k for k in no_grad if not 0 <= k < len(args)]
    if bad:
        raise BridgeError(f"operator {name!r}: no_grad={tuple(no_grad)} names argument positions "
                          f"{bad} outside 0..{len(args) - 1}")
    reserved = [k for k in (NO_GRAD, CHECK_BOUNDS) if k in attrs]
    if reserved:
        raise BridgeError(f"operator {name!r}: attribute name {reserved[0]!r} is reserved")
    phs, var_map = placeholders(args, name)
    outs, multi = as_outputs(fte(*phs, **attrs), name)

    def forward(*ts: Any) -> Any:
        try:
            res = translate(outs, bind=dict(zip(phs, ts, strict=True)), var_map=var_map,
                            check_bounds=check_bounds)
        except TranslationError as e:
            raise BridgeError(f"operator {name!r}: {e}") from e
        return res if multi else res[0]

    forward.__name__ = name
    kwargs = dict(attrs)
    if no_grad:
        kwargs[NO_GRAD] = tuple(sorted({int(k) for k in no_grad}))
    if check_bounds is not None:
        kwargs[CHECK_BOUNDS] = bool(check_bounds)
    return bb.call_te_with_grad(forward, *args, te_grad_name=name, te_grad_kwargs=kwargs,
                                primfunc_name_hint=primfunc_name_hint or name)


def _attr_ok(v: Any) -> bool:
    import tvm
    if isinstance(v, (bool, int, float, str, tvm.runtime.Object)):
        return True
    return isinstance(v, (tuple, list)) and all(_attr_ok(x) for x in v)


def prepare_for_build(mod: Any) -> Any:
    """`mod` with every `call_tir_with_grad` rewritten to `call_tir` in every Relax function.

    `tvm.compile` cannot lower `call_tir_with_grad`; after `relax.transform.Gradient`
    the original function still holds it.  Checkpoint markers legalize by themselves.
    """
    import tvm
    from tvm import relax
    with_grad = tvm.ir.Op.get("relax.call_tir_with_grad")

    def lower(call: Any, lookup: Callable[[Any], Any]) -> Any:
        if not call.op.same_as(with_grad):
            return call
        ty = call.ty_args[0]
        return relax.call_tir(call.args[0], call.args[1],
                              list(ty.fields) if isinstance(ty, relax.TupleType) else ty)

    return _rewrite_calls(mod, "prepare_for_build takes the IRModule relax.transform.Gradient "
                          "returned", lower)


def static_strided_slices(mod: Any) -> Any:
    """`mod` with every `dynamic_strided_slice` whose begin/end/strides are constants replaced by
    the equivalent `strided_slice`; call it before `relax.transform.Gradient`.

    TVM 0.27 types `dynamic_strided_slice` as `R.Tensor(ndim=n)` without a shape even for
    constant arguments (as importers emit it), and `Gradient` then aborts in the gradient of the
    op after it.  `strided_slice` gets the static shape, wraps negative indices and clamps as
    the dynamic op does (tested against it, negative strides included), and its gradient is
    derived (`register_missing_gradients`).  An axis the slice leaves empty becomes 0:0 (TVM
    0.27 mis-sizes such a dynamic slice when begin is past end, and its strided_slice refuses
    it).  Slices with begin/end/strides computed at run time stay (their output shape depends
    on data; the pass cannot differentiate past them), as do a zero stride and an input without
    a shape.  Constants bound to variables are followed.
    """
    import tvm
    from tvm import relax
    dyn = tvm.ir.Op.get("relax.dynamic_strided_slice")

    def static(call: Any, lookup: Callable[[Any], Any]) -> Any:
        if not call.op.same_as(dyn):
            return call
        dims = getattr(call.args[0].ty.shape, "values", None)  # None: no shape, or a shape var
        bound = [lookup(a) if isinstance(a, relax.Var) else None for a in call.args[1:]]
        args = [a if b is None else b for a, b in zip(call.args[1:], bound, strict=True)]
        if dims is None or not all(isinstance(a, tvm.ir.GenericConst) for a in args):
            return call
        begin, end, strides = ([int(v) for v in a.value.numpy().reshape(-1)] for a in args)
        if 0 in strides:
            return call
        for k, n in enumerate(dims):
            if isinstance(n, tvm.tirx.IntImm) and not range(n.value)[begin[k]:end[k]:strides[k]]:
                begin[k], end[k], strides[k] = 0, 0, 1
        return relax.op.strided_slice(call.args[0], list(range(len(begin))), begin, end, strides)

    return _rewrite_calls(mod, "static_strided_slices takes an IRModule", static)


def _rewrite_calls(mod: Any, what: str, rewrite: Callable[[Any, Callable[[Any], Any]], Any]) -> Any:
    """`mod` with `rewrite(call, lookup_binding)` applied bottom-up to every Relax call of every
    Relax function (`rewrite` returns `call` to keep it)."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator
    from .args import BridgeArgumentError
    if not isinstance(mod, tvm.IRModule):
        raise BridgeArgumentError(f"{what}, got {type(mod).__name__}")

    @mutator
    class _Rewrite(PyExprMutator):
        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            return rewrite(call, self.lookup_binding) if isinstance(call, relax.Call) else call

    out = mod.clone()
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            out.update_func(gv, _Rewrite(mod).visit_expr(func))
    return out
