"""Gradients for Relax's own ops, derived from their te legalizations (TVM 0.27).

    from texpr_ad.relax_bridge import register_missing_gradients
    summary = register_missing_gradients()              # every tensor op lacking FPrimalGradient
    summary = register_missing_gradients(override=True)  # ... and replace the hand-written ones
    print(summary)

Each derived `FPrimalGradient` works per call: `fgrad(orig_var, orig_call, output_grad, ctx)`
legalizes `orig_call` itself (its own shapes and attributes), translates the te with
`from_tvm`, derives the adjoints with `texpr_ad.deriv`, and emits them with
`grad.emit_gradient` (one `call_tir` for all arguments; adjoints that read the forward's
output get `orig_var`).  Ops TVM legalizes to te.extern, packed functions or nothing take
texpr_ad's own te instead (`own_te.OWN_TE`), derived and emitted the same way.
Integer/bool-output ops, `relax.grad.no_grad` and the index/count/selection ops of
`own_te.NO_GRAD` get a no-grad gradient (`no_grad` of every argument), so the pass no longer
aborts on them.  TVM's
conventions for float arguments (`relax_samples.NO_GRAD_ARGS`) are kept.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..te import dtype as dt
from . import own_te
from .args import as_list
from .grad import BridgeError, derive, emit_gradient, keep_error_classes
from .relax_capture import NotDerivable, capture
from .relax_samples import INFRASTRUCTURE, INFRASTRUCTURE_PREFIXES, NO_GRAD_ARGS, NO_SAMPLE, \
    PASS_NATIVE, REWRITTEN, SAMPLES, Sample

LEVEL_MISSING = 10   # TVM registers its hand-written gradients at level 10, once per op
LEVEL_OVERRIDE = 20  # a higher level replaces an existing attribute
NO_GRAD_OPS = frozenset({"relax.grad.no_grad"})


_REGISTERED: dict[str, Any] = {}  # op -> the gradient function this module registered


# -- inventory ------------------------------------------------------------------------------

def relax_op_names() -> list[str]:
    """Every registered `relax.*` op (TVM's global `ir.ListOpNames`)."""
    import tvm
    return sorted(str(n) for n in tvm.get_global_func("ir.ListOpNames")()
                  if str(n).startswith("relax."))


def tensor_ops() -> list[str]:
    """The Relax tensor ops: every `relax.*` op but calls, memory, VM, closures, ..."""
    return [n for n in relax_op_names()
            if n not in INFRASTRUCTURE and not n.startswith(INFRASTRUCTURE_PREFIXES)]


def tvm_version() -> str:
    """The installed TVM's version (what the Relax matrix ran against)."""
    import tvm
    return str(tvm.__version__)


def has_gradient(op: str) -> bool:
    """Whether `op` has a gradient TVM wrote (not one `register_missing_gradients` added)."""
    import tvm
    return tvm.ir.Op.get(op).get_attr("FPrimalGradient") is not None and op not in _REGISTERED


def sample_params(sample: Sample) -> list[Any]:
    """Relax parameters for a sample call (float args in the sample's float dtype)."""
    from tvm import relax
    from .relax_samples import F
    return [relax.Var(f"a{k}", relax.TensorType(a.shape, sample.dtype if a.dtype == F else a.dtype))
            for k, a in enumerate(sample.args)]


def sample_call(op: str) -> tuple[list[Any], Any]:
    """(parameters, normalized call) of `op`'s sample."""
    from tvm import relax
    s = SAMPLES[op]
    params = sample_params(s)
    return params, relax.BlockBuilder().normalize(s.build(*params))


@dataclass(frozen=True)
class OpClass:
    """How a Relax tensor op stands: kind is "stock", "derivable", "no-grad", "native" (the
    pass handles it), "rewritten" (`static_strided_slices` replaces it by an op with a
    gradient) or "not-derivable"; `reason` says why."""

    op: str
    kind: str
    stock: bool
    reason: str = ""


def classify(op: str) -> OpClass:
    """Classify `op` by legalizing its sample call (captured as te, outputs' dtypes)."""
    stock = has_gradient(op)
    if op in PASS_NATIVE:
        return OpClass(op, "native", stock, PASS_NATIVE[op])
    if op in own_te.OWN_TE:
        return OpClass(op, "stock" if stock else "derivable", stock, own_te.REASON)
    if op in own_te.NO_GRAD:
        return OpClass(op, "stock" if stock else "no-grad", stock, own_te.NO_GRAD[op])
    if op in REWRITTEN:
        return OpClass(op, "stock" if stock else "rewritten", stock, REWRITTEN[op][1])
    if op in NO_GRAD_OPS:
        return OpClass(op, "stock" if stock else "no-grad", stock, "gradient marker")
    if op not in SAMPLES:
        return OpClass(op, "stock" if stock else "not-derivable", stock,
                       NO_SAMPLE.get(op, "no sample call"))
    try:
        _, call = sample_call(op)
        cap = capture(call)
    except NotDerivable as e:
        return OpClass(op, "stock" if stock else "not-derivable", stock, e.reason)
    if not any(dt.is_float(str(o.dtype)) for o in cap.outputs):
        return OpClass(op, "stock" if stock else "no-grad", stock, "integer/bool output")
    return OpClass(op, "stock" if stock else "derivable", stock, "pure te")


# -- the gradient functions -----------------------------------------------------------------

def no_grad_gradient(orig_var: Any, orig_call: Any, output_grad: Any, ctx: Any) -> list[Any]:
    """FPrimalGradient of an op with no gradient: `no_grad` of every argument."""
    from tvm.relax.op.grad import no_grad
    return [no_grad(a) for a in orig_call.args]


def derived_gradient(orig_var: Any, orig_call: Any, output_grad: Any, ctx: Any) -> list[Any]:
    """FPrimalGradient derived from the te `orig_call` legalizes to (see the module doc); a call
    with no float output or no float argument (an integer-typed call) gets no gradient."""
    from tvm import relax
    from tvm.relax.op.grad import no_grad
    from .from_tvm import from_tvm
    from .to_tvm import TranslationError
    if not (_has_float(orig_var.ty) and any(_has_float(a.ty) for a in orig_call.args)):
        return no_grad_gradient(orig_var, orig_call, output_grad, ctx)
    op = str(orig_call.op.name)
    own = own_te.build(orig_call, orig_var, ctx.emit) if op in own_te.OWN_TE else None
    try:
        cap = capture(orig_call) if own is None else None
    except NotDerivable as e:  # a dtype TVM cannot legalize the op in: a TexprError, not a crash
        raise BridgeError(f"{e}, for the call with arguments "
                          f"{', '.join(str(a.ty) for a in orig_call.args)}") from e
    sources = own.values if own is not None else cap.values
    args = list(orig_call.args)
    values = [ctx.emit(v) if isinstance(v, relax.TupleGetItem) else v for v in sources]
    position = [_arg_position(v, args) for v in sources]
    skip = NO_GRAD_ARGS.get(op, frozenset())
    no_grad_inputs = [k for k, p in enumerate(position) if p is None or p[0] in skip]
    if own is not None:
        phs, outs, var_map, multi = own.inputs, own.outputs, own.var_map, own.multi
    else:
        try:
            res = from_tvm(cap.outputs, placeholders=cap.inputs)
        except TranslationError as e:
            raise BridgeError(f"{op}: translating its te legalization failed: {e}") from e
        phs, outs, multi = list(res.inputs), list(res.outputs), cap.multi
        var_map = _shape_vars(values, res.vars)
    outs, heads, grads = derive(lambda *_: outs if multi else outs[0], op, phs, {},
                                no_grad_inputs)
    gv = emit_gradient(ctx, op, values, phs, var_map, outs, heads, grads, orig_var, output_grad)
    many = isinstance(gv.ty, relax.TupleType)  # emit_te gives a plain tensor for one input

    def adjoint(j: int) -> Any:
        return ctx.emit(relax.TupleGetItem(gv, j)) if many else gv

    partials: list[Any] = []
    for k, a in enumerate(args):
        mine = [j for j, p in enumerate(position) if p is not None and p[0] == k
                and grads[j] is not None]
        if not mine:
            partials.append(no_grad(a))
        elif isinstance(a.ty, relax.TupleType):
            partials.append(_tuple_partial(ctx, adjoint, a, mine, position))
        else:
            terms = [adjoint(j) for j in mine]
            total = terms[0]
            for t in terms[1:]:
                total = ctx.emit(relax.op.add(total, t))
            partials.append(total)
    return partials


def _has_float(ty: Any) -> bool:
    """Whether Relax type `ty` (a tensor, or a tuple of them) holds a float tensor."""
    fields = getattr(ty, "fields", None)
    if fields is not None:
        return any(_has_float(f) for f in fields)
    return dt.is_float(str(getattr(ty, "dtype", "")))


def _arg_position(v: Any, args: Sequence[Any]) -> tuple[int, int | None] | None:
    """(argument index, tuple field or None) of a te input's Relax value, None for a constant."""
    from tvm import relax
    for k, a in enumerate(args):
        if v.same_as(a):
            return (k, None)
        if isinstance(v, relax.TupleGetItem) and v.tuple_value.same_as(a):
            return (k, int(v.index))
        if isinstance(a, relax.Tuple):
            for f, x in enumerate(a.fields):
                if v.same_as(x):
                    return (k, f)
    return None


def _tuple_partial(ctx: Any, adjoint: Callable[[int], Any], a: Any, mine: list[int],
                   position: list[tuple[int, int | None] | None]) -> Any:
    """The partial of a tuple argument: one adjoint per field (zeros where it has none)."""
    from tvm import relax
    fields = []
    for f, fty in enumerate(a.ty.fields):
        js = [j for j in mine if position[j] == (position[j][0], f)]  # type: ignore[index]
        fields.append(adjoint(js[0]) if js else
                      ctx.emit(relax.op.zeros(fty.shape, fty.dtype)))
    return relax.Tuple(fields)


def _shape_vars(values: Sequence[Any], names: dict[str, Any]) -> dict[Any, Any]:
    """texpr_ad symbolic dims -> the caller's tirx.Vars of the same name."""
    import tvm
    found: dict[str, Any] = {}
    for v in values:
        shape = getattr(getattr(v, "ty", None), "shape", None)
        for s in getattr(shape, "values", []) or []:
            if isinstance(s, tvm.tirx.Var):
                found.setdefault(str(s.name), s)
    return {var: found[name] for name, var in names.items() if name in found}


# -- registration ---------------------------------------------------------------------------

@dataclass
class Summary:
    """What `register_missing_gradients` did."""

    registered: list[str] = field(default_factory=list)  # derived FPrimalGradient
    no_grad: list[str] = field(default_factory=list)     # no-grad FPrimalGradient
    skipped: dict[str, str] = field(default_factory=dict)  # op -> why not
    kept: list[str] = field(default_factory=list)        # hand-written gradient left in place
    rewritten: list[str] = field(default_factory=list)   # for static_strided_slices' target op

    def __str__(self) -> str:
        lines = [f"registered {len(self.registered)} derived gradients, {len(self.no_grad)} "
                 f"no-grad; kept {len(self.kept)} hand-written; {len(self.rewritten)} rewritten "
                 f"by static_strided_slices; skipped {len(self.skipped)}:"]
        lines += [f"  {op}: {why}" for op, why in sorted(self.skipped.items())]
        return "\n".join(lines)


def register_missing_gradients(ops: str | Iterable[str] | None = None,
                               override: bool = False) -> Summary:
    """Register an `FPrimalGradient` for every Relax tensor op that has none (or only `ops`:
    op names, or one).

    Ops whose legalization is pure te, or that texpr_ad defines itself (`own_te`), get a derived
    gradient (and the ops TVM 0.27 cannot compile a legalization from the same te);
    integer/bool-output ops, `relax.grad.no_grad` and `own_te.NO_GRAD` get a no-grad one; an op
    `static_strided_slices` rewrites brings in the op it becomes; the
    others are left alone and listed with the reason.  `override=True` also replaces
    the hand-written gradients (at a higher level).  Calling it again is harmless.
    """
    import tvm
    keep_error_classes()  # a BridgeError in a derived gradient reaches the caller as itself
    names = tensor_ops() if ops is None else as_list(
        ops, "register_missing_gradients(ops=)", lambda v: isinstance(v, str),
        "Relax op names like 'relax.nn.gelu'")
    names = list(dict.fromkeys([*names, *(REWRITTEN[n][0] for n in names if n in REWRITTEN)]))
    known = set(relax_op_names())
    summary = Summary()
    for op in names:
        if op not in known:
            raise BridgeError(f"register_missing_gradients: {op!r} is not a registered Relax op; "
                              "names look like 'relax.nn.gelu'")
        c = classify(op)
        kind = c.kind
        if kind == "stock":
            if not override:
                summary.kept.append(op)
                continue
            kind = _kind_without_stock(c)
        fn = {"derivable": derived_gradient, "no-grad": no_grad_gradient}.get(kind)
        if kind == "rewritten":  # the op it becomes is among `names`
            summary.rewritten.append(op)
            continue
        if fn is None:
            summary.skipped[op] = c.reason
            continue
        if c.stock:  # replace TVM's at a higher level
            tvm.ir.register_op_attr(op, "FPrimalGradient", fn, level=LEVEL_OVERRIDE)
        else:  # none, or ours from an earlier call: (re)register
            tvm.ir.Op.get(op).reset_attr("FPrimalGradient")
            tvm.ir.register_op_attr(op, "FPrimalGradient", fn, level=LEVEL_MISSING)
        _REGISTERED[op] = fn
        own_te.register_legalizations([op])  # ops TVM 0.27 cannot even compile
        (summary.registered if fn is derived_gradient else summary.no_grad).append(op)
    return summary


def _shape(e: Any) -> list[str]:
    return [str(d) for d in e.ty.shape]


# Calls whose hand-written TVM 0.27 gradient is wrong or aborts (relax_samples.VARIANTS), by
# (orig_var, orig_call): under `right_stock_gradients` they get the derived gradient.
def _dilated(v: Any, c: Any) -> bool:
    return any(int(d) != 1 for d in c.attrs.dilation)


STOCK_WRONG: dict[str, Callable[[Any, Any], bool]] = {
    "relax.nn.conv2d": _dilated,  # x's gradient ignores the dilation
    "relax.nn.max_pool2d": _dilated, "relax.nn.avg_pool2d": _dilated,  # backward ops reject it
    "relax.where": lambda v, c: any(_shape(a) != _shape(v) for a in c.args[1:]),  # not reduced
    "relax.take": lambda v, c: c.args[1].ty.ndim != 1,  # take_backward asserts 1-d indices
    "relax.cumsum": lambda v, c: bool(c.attrs.exclusive),  # the inclusive one's
}


@contextlib.contextmanager
def right_stock_gradients() -> Iterator[None]:
    """While active, the calls `STOCK_WRONG` describes are differentiated with the derived
    gradient and every other call of those ops with TVM's (hand-written, faster)."""
    import tvm

    def either(wrong: Callable[[Any, Any], bool], stock: Any) -> Any:
        return lambda v, c, g, ctx: (derived_gradient if wrong(v, c) else stock)(v, c, g, ctx)

    saved = {op: tvm.ir.Op.get(op).get_attr("FPrimalGradient") for op in STOCK_WRONG}
    for op, stock in saved.items():
        if stock is not None:
            tvm.ir.register_op_attr(op, "FPrimalGradient", either(STOCK_WRONG[op], stock),
                                    level=LEVEL_OVERRIDE + 1)
    try:
        yield
    finally:
        for op, stock in saved.items():
            tvm.ir.Op.get(op).reset_attr("FPrimalGradient")
            if stock is not None:
                tvm.ir.register_op_attr(op, "FPrimalGradient", stock, level=LEVEL_MISSING)


def _kind_without_stock(c: OpClass) -> str:
    if c.reason in ("pure te", own_te.REASON):
        return "derivable"
    if c.reason in ("integer/bool output", "gradient marker"):
        return "no-grad"
    return "not-derivable"


__all__ = ["OpClass", "STOCK_WRONG", "Summary", "classify", "derived_gradient", "has_gradient",
           "no_grad_gradient", "register_missing_gradients", "relax_op_names",
           "right_stock_gradients", "sample_call", "sample_params", "tensor_ops"]
