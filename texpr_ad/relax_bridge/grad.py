"""Automatic gradient registration for Relax `call_tir_with_grad` (TVM 0.27).

`register(fte)` puts a raw handler under the global name
`tvm.relax.te_grad._register.<name>`.  `relax.transform.Gradient` calls it as
`handler(orig_var, call, output_grad, block_builder)` when it meets a
`call_tir_with_grad` whose `te_grad_name` is `<name>`.  The handler

1. rebuilds texpr_ad placeholders from the call's Relax arguments (shapes,
   dtypes, symbolic dims) and calls `fte(*placeholders, **te_grad_kwargs)`,
2. derives the adjoints with `texpr_ad.deriv.grad` (one head per float output),
3. checks every adjoint's shape and dtype against its input (the pass does not),
4. emits one PrimFunc computing one gradient per call argument (zeros for
   integer inputs) via `block_builder.emit_te` and returns the emitted Var.

The adjoint may read forward outputs (exp, sigmoid, softmax): those are fed
from `orig_var` (the forward result) instead of being recomputed.  Several
outputs work because the handler unpacks the tuple adjoint and tuple forward
value itself, which `register_te_gradient` cannot.
"""
from __future__ import annotations

import functools
import re
from typing import Any, Callable, Sequence

from ..errors import TexprError
from .. import te
from ..te import dtype as dt
from ..te.dag import topo_order
from ..te.expr import Call, Const, Expr, Var
from ..te.ops import Op
from ..te.tensor import Tensor
from .to_tvm import TranslationError, translate

PREFIX = "tvm.relax.te_grad._register."
NO_GRAD = "texpr_ad_no_grad"  # reserved te_grad_kwargs key: argument positions with zero adjoints
CHECK_BOUNDS = "texpr_ad_check_bounds"  # reserved te_grad_kwargs key: call_te_with_auto_grad's

_OPERATORS: dict[str, Callable[..., Any]] = {}  # te_grad_name -> operator function


class BridgeError(TexprError, ValueError):
    """A mistake caught by the Relax bridge; the message names the operator."""


# -- Relax types <-> texpr_ad placeholders ------------------------------------------

def _from_prim(e: Any, vars_: dict[Any, Var], op: str) -> Expr:
    """A Relax shape value (IntImm, tirx.Var, + - * // %) as a texpr_ad index expression."""
    import tvm
    tirx = tvm.tirx
    binops = {tirx.Add: Op.ADD, tirx.Sub: Op.SUB, tirx.Mul: Op.MUL, tirx.FloorDiv: Op.FLOORDIV,
              tirx.FloorMod: Op.FLOORMOD}
    if isinstance(e, tirx.IntImm):
        return Const(int(e.value), dt.INDEX)
    if isinstance(e, tirx.Var):
        for k in vars_:
            if k.same_as(e):
                return vars_[k]
        vars_[e] = Var(str(e.name), dt.INDEX)
        return vars_[e]
    for cls, o in binops.items():
        if isinstance(e, cls):
            return Call(o, (_from_prim(e.a, vars_, op), _from_prim(e.b, vars_, op)), dt.INDEX)
    raise BridgeError(f"operator {op!r}: cannot express the shape value `{e}` of a Relax argument; "
                      "use constants, symbolic vars and + - * // % in shapes")


def placeholders(args: Sequence[Any], op: str) -> tuple[list[Tensor], dict[Var, Any]]:
    """One texpr_ad placeholder per Relax tensor argument, and symbolic dim -> tirx.Var."""
    from tvm import relax
    vars_: dict[Any, Var] = {}
    phs = []
    for k, a in enumerate(args):
        ty = getattr(a, "ty", None)
        if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
            raise BridgeError(f"operator {op!r}: argument {k} has Relax type {ty}; it must be a "
                              "tensor with a known shape, e.g. R.Tensor((n, 4), 'float32')")
        dtype = str(ty.dtype)
        if dtype not in dt.DTYPES:
            raise BridgeError(f"operator {op!r}: argument {k} has dtype {dtype}; texpr_ad supports "
                              f"{', '.join(dt.DTYPES)}")
        shape = tuple(_from_prim(s, vars_, op) for s in ty.shape.values)
        name = getattr(a, "name", None) or getattr(a, "name_hint", None) or f"arg{k}"
        phs.append(te.placeholder(shape, dtype, name=str(name)))
    return phs, {v: k for k, v in vars_.items()}


def as_outputs(res: Any, op: str) -> tuple[list[Tensor], bool]:
    """The operator's result as a list of tensors, and whether it was a list."""
    multi = isinstance(res, (list, tuple))
    outs = list(res) if multi else [res]
    if not outs or not all(isinstance(t, Tensor) for t in outs):
        raise BridgeError(f"operator {op!r} must return a texpr_ad te Tensor or a list of them, "
                          f"got {res!r}")
    return outs, multi


def to_python(v: Any) -> Any:
    """A te_grad_kwargs value as the Python value the operator was called with."""
    import tvm
    if isinstance(v, tvm.tirx.IntImm):
        return bool(v.value) if str(v.ty) == "bool" else int(v.value)
    if isinstance(v, tvm.tirx.FloatImm):
        return float(v.value)
    if isinstance(v, (str, bytes, int, float, bool)) or v is None:
        return v
    if hasattr(v, "items"):
        return {str(k): to_python(x) for k, x in v.items()}
    if hasattr(v, "__len__") and hasattr(v, "__getitem__"):
        return tuple(to_python(x) for x in v)
    return str(v) if type(v).__name__ == "String" else v


# -- registration ---------------------------------------------------------------------

@functools.cache
def keep_error_classes() -> None:
    """Register the bridge's error classes with tvm_ffi, so one raised inside a TVM callback
    (a gradient handler run by relax.transform.Gradient, a failed index check in compiled code)
    reaches the caller as itself, a TexprError, not as a plain RuntimeError."""
    import tvm_ffi
    from ..kernels.kernel import KernelIndexError
    from .args import BridgeArgumentError
    for cls in (BridgeError, BridgeArgumentError, TranslationError, KernelIndexError):
        tvm_ffi.register_error(cls.__name__, cls)


def _base_name(fte: Callable[..., Any]) -> str:
    raw = getattr(fte, "__qualname__", None) or getattr(fte, "__name__", None) or "op"
    name = re.sub(r"[^0-9A-Za-z_]+", "_", raw).strip("_") or "op"
    return f"texpr_ad_{name}"


def register(fte: Callable[..., Any], name: str | None = None) -> str:
    """Register the derived gradient of `fte`; returns its `te_grad_name`.

    The same function object always gets the same name; a different function
    with the same name gets a numbered one, so handlers never clash.
    """
    import tvm_ffi
    from .args import BridgeArgumentError
    keep_error_classes()
    if not callable(fte):
        raise BridgeArgumentError(f"the operator must be a function returning te tensors, got "
                                  f"{type(fte).__name__} {fte!r:.60}")
    if name is not None and not isinstance(name, str):
        raise BridgeArgumentError(f"te_grad_name must be a str, got {type(name).__name__} {name!r}")
    for k, f in _OPERATORS.items():
        if f is fte and (name is None or k == name):
            return k
    base = name or _base_name(fte)
    cand, n = base, 1
    while cand in _OPERATORS and _OPERATORS[cand] is not fte:
        n += 1
        cand = f"{base}_{n}"
    tvm_ffi.register_global_func(PREFIX + cand, _make_handler(cand), override=True)
    _OPERATORS[cand] = fte  # only once TVM took the handler
    return cand


def derive(fte: Callable[..., Any], op: str, phs: list[Tensor], kwargs: dict[str, Any],
           no_grad: Sequence[int] = ()) -> tuple[list[Tensor], list[Tensor], list[Tensor | None]]:
    """(outputs, heads, adjoints) of `fte` on `phs`; None for integer and `no_grad` inputs, and
    for every input when no output is float (an integer-typed call gets no gradient)."""
    try:
        from ..deriv import grad
    except ImportError as e:  # the differentiator is part of texpr_ad; say what is missing
        raise BridgeError(f"operator {op!r}: texpr_ad.deriv.grad is not available ({e})") from e
    outs, _ = as_outputs(fte(*phs, **kwargs), op)
    diff = [o for o in outs if dt.is_float(o.dtype)]
    if not diff:
        return outs, [], [None] * len(phs)
    heads = [te.placeholder(o.shape, o.dtype, name=f"d_{o.name}") for o in diff]
    wrt = [x for k, x in enumerate(phs) if k not in no_grad]
    try:
        got = grad(diff if len(diff) > 1 else diff[0], wrt, head=heads if len(diff) > 1 else heads[0]
                   ) if wrt else []
    except Exception as e:
        raise BridgeError(f"operator {op!r}: deriving the gradient failed: {e}") from e
    by_input = dict(zip(map(id, wrt), got, strict=True))
    grads = [by_input.get(id(x)) for x in phs]
    out: list[Tensor | None] = []
    for x, g in zip(phs, grads, strict=True):
        if g is None or not dt.is_float(x.dtype):
            out.append(None)
            continue
        same = len(g.shape) == len(x.shape) and all(
            a.same_as(b) for a, b in zip(g.shape, x.shape, strict=True))
        if not same or g.dtype != x.dtype:
            raise BridgeError(f"operator {op!r}: the adjoint of input {x.name!r} has shape "
                              f"{tuple(map(str, g.shape))} {g.dtype}, but the input is "
                              f"{tuple(map(str, x.shape))} {x.dtype}")
        out.append(g)
    return outs, heads, out


def _make_handler(op: str) -> Callable[..., Any]:
    def handler(orig_var: Any, call: Any, output_grad: Any, ctx: Any) -> Any:
        from tvm import relax, te as tvm_te, tirx
        fte = _OPERATORS[op]
        args = list(call.args[1].fields)
        kwargs = {str(k): to_python(v) for k, v in call.attrs.te_grad_kwargs.items()}
        no_grad = tuple(kwargs.pop(NO_GRAD, ()))
        check_bounds = kwargs.pop(CHECK_BOUNDS, None)
        phs, var_map = placeholders(args, op)
        outs, heads, grads = derive(fte, op, phs, kwargs, no_grad)
        return emit_gradient(ctx, op, args, phs, var_map, outs, heads, grads, orig_var,
                             output_grad, check_bounds)

    handler.__name__ = f"texpr_ad_grad_handler_{op}"
    return handler


def emit_gradient(ctx: Any, op: str, args: Sequence[Any], phs: list[Tensor],
                  var_map: dict[Var, Any], outs: list[Tensor], heads: list[Tensor],
                  grads: list[Tensor | None], orig_var: Any, output_grad: Any,
                  check_bounds: bool | None = None) -> Any:
    """Emit one PrimFunc computing one gradient per Relax argument in `args` (zeros where
    `grads` has None); returns the emitted Var (a tuple).  Forward outputs the adjoints
    read come from `orig_var`, not recomputed; `check_bounds` as in `to_tvm.translate`."""
    from tvm import relax, te as tvm_te, tirx
    multi = isinstance(orig_var.ty, relax.TupleType)
    diff_idx = [k for k, o in enumerate(outs) if dt.is_float(o.dtype)]

    def item(v: Any, k: int) -> Any:
        return ctx.emit(relax.TupleGetItem(v, k)) if multi else v

    head_rx = [item(output_grad, k) for k in diff_idx]
    live = [g for g in grads if g is not None]
    reach = set(map(id, topo_order(live))) if live else set()
    fwd = [(k, o) for k, o in enumerate(outs) if id(o) in reach]
    fwd_rx = [item(orig_var, k) for k, _ in fwd]

    def grad_te(*ts: Any) -> list[Any]:
        n, h = len(phs), len(heads)
        bind = dict(zip(phs, ts[:n], strict=True))
        bind.update(zip(heads, ts[n:n + h], strict=True))
        bind.update(zip([o for _, o in fwd], ts[n + h:], strict=True))
        try:
            tv = iter(translate(live, bind=bind, var_map=var_map, check_bounds=check_bounds))
        except TranslationError as e:
            raise BridgeError(f"operator {op!r}: {e}") from e
        res = []
        for x, g, t in zip(phs, grads, ts[:n], strict=True):
            if g is not None:
                res.append(next(tv))
            else:
                res.append(_zeros(tvm_te, tirx, t.shape, x.dtype, f"zeros_{x.name}"))
        return res

    return ctx.emit_te(grad_te, *args, *head_rx, *fwd_rx, primfunc_name_hint=f"{op}_grad")


def _zeros(tvm_te: Any, tirx: Any, shape: Any, dtype: str, name: str) -> Any:
    zero = tirx.const(0, dtype)
    return tvm_te.compute(shape, lambda *_: zero, name=name)


def registered(name: str) -> Callable[..., Any] | None:
    """The operator function registered under `te_grad_name` `name`, if any."""
    return _OPERATORS.get(name)


__all__ = ["BridgeError", "CHECK_BOUNDS", "NO_GRAD", "PREFIX", "as_outputs", "derive",
           "emit_gradient", "keep_error_classes",
           "placeholders", "register", "registered", "to_python"]
