"""Translate `tvm.te` tensor DAGs (TVM 0.27, e.g. TOPI computes) into texpr_ad `te`.

    res = from_tvm([Y_tvm], placeholders=[A_tvm, W_tvm])
    Y, = res                      # or res.outputs
    A, W = res.inputs             # texpr_ad placeholders, in the order given

TVM's semantics are kept exactly where they differ from texpr_ad's:

* Integer `Div`/`Mod` truncate toward zero (texpr_ad's `floordiv`/`floormod` floor).  Where
  interval analysis proves the dividend non-negative and the divisor positive they become
  `floordiv`/`floormod` (the common index case, which the index solver inverts); otherwise a
  sign-aware exact form: `trunc(a/b) = floor(a/b) + (a % b != 0 and sign(a) != sign(b))`.
* `tirx.round` compiles to LLVM's `nearbyint` on the llvm target (half to even, measured in
  0.27: 0.5 -> 0, 2.5 -> 2), as `nearbyint` does: both become texpr_ad's `round` (half to even).
* A max/min reduction whose identity is not texpr_ad's (TVM uses the lowest finite float, not
  -inf) keeps it as `init=` unless every reduce extent is a positive constant (then the
  identity is never observable).
* Index arithmetic keeps TVM's dtypes (int64 from Relax shapes; texpr_ad promotes int32 to
  int64), tuple reducers (argmax, norm statistics) become `te.comm_reducer`s, reduce bounds
  may depend on outer indices, reads may be data-dependent, and shape `tirx.Var`s become
  `te.var`s.

Placeholders may be `te.PlaceholderOp`s or Relax's `TEPlaceholderOp`s.  Anything else (extern,
scan, hybrid ops; vector nodes; dtypes texpr_ad lacks) raises a `TranslationError` naming the
op and the node.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

from .. import te
from ..te import dtype as dt
from ..te.expr import Const, Expr, IterVar, Var
from ..te.visit import fold, substitute
from ..te.intervals import interval
from ..te.reduce import Reducer
from ..te.tensor import Tensor
from .args import as_list, is_tvm_tensor
from .to_tvm import TranslationError

_PLACEHOLDERS = ("PlaceholderOp", "TEPlaceholderOp")

# TVM node class name -> texpr_ad builder of its (a, b) operands
_BINARY: dict[str, Callable[[Expr, Expr], Expr]] = {
    "Add": operator.add, "Sub": operator.sub, "Mul": operator.mul,
    "FloorDiv": te.floordiv, "FloorMod": te.floormod,
    "Min": lambda a, b: te.min(a, b), "Max": lambda a, b: te.max(a, b),
    "LT": operator.lt, "LE": operator.le, "GT": operator.gt, "GE": operator.ge,
    "EQ": lambda a, b: a.eq(b), "NE": lambda a, b: a.ne(b),
    "And": operator.and_, "Or": operator.or_,
    "LShift": te.left_shift, "RShift": te.right_shift,
    "BitwiseAnd": te.bitwise_and, "BitwiseOr": te.bitwise_or, "BitwiseXor": te.bitwise_xor,
}

# TVM intrinsic op name -> texpr_ad function of the translated arguments
_INTRINSICS: dict[str, Callable[..., Expr]] = {
    "tirx.exp": te.exp, "tirx.log": te.log, "tirx.log1p": te.log1p, "tirx.sqrt": te.sqrt,
    "tirx.rsqrt": te.rsqrt, "tirx.tanh": te.tanh, "tirx.sigmoid": te.sigmoid, "tirx.erf": te.erf,
    "tirx.sin": te.sin, "tirx.cos": te.cos, "tirx.atan": te.atan, "tirx.fabs": te.abs,
    "tirx.floor": te.floor, "tirx.ceil": te.ceil, "prim.ceil": te.ceil, "tirx.trunc": te.trunc,
    "tirx.round": te.round, "tirx.nearbyint": te.round, "tirx.pow": te.power,
    "tirx.shift_left": te.left_shift, "tirx.shift_right": te.right_shift,
    "prim.if_then_else": te.if_then_else, "tirx.if_then_else": te.if_then_else,
    "tirx.tan": te.tan, "tirx.sinh": te.sinh, "tirx.cosh": te.cosh, "tirx.asin": te.asin,
    "tirx.acos": te.acos, "tirx.asinh": te.asinh, "tirx.acosh": te.acosh, "tirx.atanh": te.atanh,
    "tirx.atan2": te.atan2, "tirx.isnan": te.isnan,
    "tirx.bitwise_and": te.bitwise_and, "tirx.bitwise_or": te.bitwise_or,
    "tirx.bitwise_xor": te.bitwise_xor, "tirx.bitwise_not": te.bitwise_not,
}


def _handle(x: Any) -> int:
    return int(x.__chandle__())


def _dtype(x: Any) -> str:
    d = str(x.dtype if hasattr(x, "value_index") else x.ty)  # a te.Tensor, else a PrimExpr
    if d not in dt.DTYPES:
        raise TranslationError(f"dtype {d} of `{x}` has no texpr_ad equivalent "
                               f"(supported: {', '.join(dt.DTYPES)})")
    return d


def _nonneg(e: Expr) -> bool:
    lo, _ = interval(e)
    return lo is not None and lo >= 0


def _pos(e: Expr) -> bool:
    lo, _ = interval(e)
    return lo is not None and lo > 0


def truncdiv(a: Expr, b: Expr) -> Expr:
    """TVM's integer `Div` (rounds toward zero), exactly, in texpr_ad's floor arithmetic."""
    if _nonneg(a) and _pos(b):
        return te.floordiv(a, b)
    q = te.floordiv(a, b)
    signs_differ = ((a < 0) & (b > 0)) | ((a > 0) & (b < 0))
    return q + te.if_then_else(te.floormod(a, b).ne(0) & signs_differ, 1, 0).astype(q.dtype)


def truncmod(a: Expr, b: Expr) -> Expr:
    """TVM's integer `Mod` (sign of the dividend): `a - b * truncdiv(a, b)`."""
    if _nonneg(a) and _pos(b):
        return te.floormod(a, b)
    return a - b * truncdiv(a, b)


def _div(a: Expr, b: Expr) -> Expr:
    return truncdiv(a, b) if dt.is_int(a.dtype) else a / b


def _mod(a: Expr, b: Expr) -> Expr:
    return truncmod(a, b) if dt.is_int(a.dtype) else a - te.trunc(a / b) * b  # C fmod


_BINARY |= {"Div": _div, "Mod": _mod}


@dataclass
class FromTVM:
    """The result of `from_tvm`: texpr_ad `outputs` (iterate or index it like a list) and the
    texpr_ad placeholders `inputs`, in the order of the `placeholders` given (else DAG order)."""

    outputs: list[Tensor]
    inputs: list[Tensor]
    tensors: dict[tuple[int, int], Tensor] = field(repr=False)  # (TVM op handle, value_index)
    sources: dict[Tensor, Any] = field(repr=False)  # texpr_ad tensor -> the TVM tensor it came from
    var_map: dict[Var, Any] = field(default_factory=dict)  # texpr_ad symbolic dim -> tirx.Var

    @property
    def vars(self) -> dict[str, Var]:
        """The symbolic dims (from free `tirx.Var`s), by name."""
        return {v.name: v for v in self.var_map}

    def __iter__(self) -> Iterator[Tensor]:
        return iter(self.outputs)

    def __len__(self) -> int:
        return len(self.outputs)

    def __getitem__(self, k: int) -> Tensor:
        return self.outputs[k]

    def tensor(self, t: Any) -> Tensor:
        """The texpr_ad tensor a TVM tensor of the DAG became."""
        return self.tensors[(_handle(t.op), int(t.value_index))]


def from_tvm(tensors: Any, placeholders: Sequence[Any] | None = None) -> FromTVM:
    """texpr_ad tensors computing the `tvm.te` tensors `tensors` (one tensor or a list).

    `placeholders` (TVM tensors of `te.PlaceholderOp` or Relax `TEPlaceholderOp`) fixes the
    order of `result.inputs`; placeholders of the DAG not listed are appended in DAG order.
    """
    outs = as_list(tensors, "from_tvm(tensors=)", is_tvm_tensor, "tvm.te tensors")
    tr = _Translator()
    for t in as_list([] if placeholders is None else placeholders, "from_tvm(placeholders=)",
                     is_tvm_tensor, "tvm.te tensors"):
        if type(t.op).__name__ not in _PLACEHOLDERS:
            raise TranslationError(f"placeholders=: `{t.op.name}` is a {type(t.op).__name__}, "
                                   "not a placeholder; pass the DAG's input tensors")
        tr.tensor(t)
    result = [tr.tensor(t) for t in outs]
    return FromTVM(result, list(tr.inputs), tr.tensors, tr.sources,
                   {v: tr.tvm_vars[h] for h, v in tr.vars.items()})


def prim_expr(e: Any, env: dict[Any, Expr]) -> Expr:
    """texpr_ad expression for one TVM PrimExpr (an IndexMap's index, a predicate) whose
    `tirx.Var`s are bound by `env`, with `from_tvm`'s semantics (no tensor DAG)."""
    return _Translator().expr(e, {_handle(v): x for v, x in env.items()}, "index_map")


class _Translator:
    def __init__(self) -> None:
        self.tensors: dict[tuple[int, int], Tensor] = {}
        self.sources: dict[Tensor, Any] = {}  # also keeps the TVM objects (and handles) alive
        self.inputs: list[Tensor] = []
        self.vars: dict[int, Var] = {}  # free tirx.Vars (symbolic dims)
        self.tvm_vars: dict[int, Any] = {}
        self.reducers: dict[int, Reducer] = {}

    # -- tensors ---------------------------------------------------------------------
    def tensor(self, t: Any) -> Tensor:
        key = (_handle(t.op), int(t.value_index))
        if key not in self.tensors:
            for op in _producers_first(t.op, lambda h: (h, 0) in self.tensors):
                self._op(op.output(0))
        return self.tensors[key]

    def _op(self, t: Any) -> None:
        op, kind = t.op, type(t.op).__name__
        h = _handle(op)
        if kind in _PLACEHOLDERS:
            shape = [self.expr(s, {}, op.name) for s in t.shape]
            p = te.placeholder(shape, _dtype(t), name=op.name)
            self.tensors[(h, 0)] = p
            self.sources[p] = t
            self.inputs.append(p)
            return
        if kind != "ComputeOp":
            raise TranslationError(f"op `{op.name}` is a {kind}; only compute and placeholder ops "
                                   "translate (extern/scan/hybrid ops have no index expression)")
        axes = list(op.axis)
        shape = [self.expr(a.dom.extent, {}, op.name) for a in axes]
        reductions: dict[Any, tuple[Expr, ...]] = {}

        def fcompute(*ivs: IterVar) -> Any:
            env: dict[int, Expr] = {_handle(a.var): v for a, v in zip(axes, ivs, strict=True)}
            bodies = [self._body(b, env, op.name, reductions) for b in op.body]
            return bodies if len(bodies) > 1 else bodies[0]

        fcompute.axis_names = [a.var.name for a in axes]  # type: ignore[attr-defined]
        res = te.compute(shape, fcompute, name=op.name, tag=str(op.tag))
        outs = res if isinstance(res, list) else [res]
        for k, o in enumerate(outs):
            self.tensors[(h, k)] = o
            self.sources[o] = op.output(k)

    # -- expressions --------------------------------------------------------------------
    def _body(self, b: Any, env: dict[int, Expr], where: str, memo: dict[Any, tuple[Expr, ...]]) -> Expr:
        if type(b).__name__ != "Reduce":
            return self.expr(b, env, where)
        key = (_handle(b.combiner), tuple(_handle(a.var) for a in b.axis),
               tuple(_handle(s) for s in b.source))
        if key not in memo:
            memo[key] = self._reduce(b, env, where)
        return memo[key][int(b.value_index)]

    def _reduce(self, r: Any, env: dict[int, Expr], where: str) -> tuple[Expr, ...]:
        axes = []
        for a in r.axis:  # bounds may read data axes and earlier reduce axes
            lo, ext = (self.expr(d, env, where) for d in (a.dom.min, a.dom.extent))
            iv = IterVar(a.var.name, lo, ext, "reduce")
            env = {**env, _handle(a.var): iv}
            axes.append(iv)
        srcs = [self.expr(s, env, where) for s in r.source]
        cond = self.expr(r.condition, env, where)
        inits = [self.expr(i, env, where) for i in r.init] or None
        reducer, identity = self._reducer(r.combiner, where)
        if not axes:  # over no axes (relax axis=[]): the start value and the source combined once
            comb = reducer.make([s.dtype for s in srcs])
            start = inits or ([identity] if identity is not None else list(comb.identity))
            sub = dict([*zip(comb.lhs, start), *zip(comb.rhs, srcs)])
            return tuple(te.if_then_else(cond, substitute(e, sub), s0)
                         for e, s0 in zip(comb.result, start, strict=True))
        if identity is not None and inits is None and not all(_pos(a.extent) for a in axes):
            inits = [identity]  # the identity is observable where a range may be empty
        cond_arg = None if isinstance(cond, Const) and cond.value is True else cond
        res = reducer(srcs if len(srcs) > 1 else srcs[0], axis=axes, where=cond_arg,
                      init=inits if inits is None or len(inits) > 1 else inits[0])
        return tuple(res) if isinstance(res, tuple) else (res,)

    def _reducer(self, comb: Any, where: str) -> tuple[Reducer, Expr | None]:
        """A built-in reducer (with the identity to keep, if not texpr_ad's) or a comm_reducer."""
        lhs, rhs, result, ident = list(comb.lhs), list(comb.rhs), list(comb.result), list(comb.identity_element)
        if len(result) == 1:
            kind = type(result[0]).__name__
            ops = {_handle(result[0].a), _handle(result[0].b)} if hasattr(result[0], "b") else set()
            builtin = {"Add": te.sum, "Mul": te.prod, "Max": te.max, "Min": te.min}.get(kind)
            if builtin is not None and ops == {_handle(lhs[0]), _handle(rhs[0])}:
                idv = self.expr(ident[0], {}, where)
                std = builtin.make([idv.dtype]).identity[0]
                return builtin, None if idv.same_as(std) else idv
        h = _handle(comb)
        if h not in self.reducers:
            def fcombine(x: Any, y: Any) -> Any:
                xs, ys = (x, y) if len(lhs) > 1 else ((x,), (y,))
                env = {_handle(v): e for v, e in [*zip(lhs, xs), *zip(rhs, ys)]}
                res = [self.expr(e, env, where) for e in result]
                return tuple(res) if len(res) > 1 else res[0]

            def fidentity(*_: str) -> Any:
                ids = [self.expr(e, {}, where) for e in ident]
                return tuple(ids) if len(ids) > 1 else ids[0]

            self.reducers[h] = te.comm_reducer(fcombine, fidentity, name=f"{where}_reducer")
        return self.reducers[h], None

    def expr(self, e: Any, env: dict[int, Expr], where: str) -> Expr:
        """The texpr_ad expression for TVM PrimExpr `e` (`env`: bound TVM vars by handle).

        Iterative (an explicit stack), so expression depth is not bounded by Python's recursion
        limit; a subexpression TVM shares is translated once."""
        return fold(e, _operands, lambda x, args: self._node(x, args, env, where), key=_key)

    def _node(self, e: Any, args: list[Expr], env: dict[int, Expr], where: str) -> Expr:
        """`e` in texpr_ad, given its operands (`_operands(e)`) translated."""
        if isinstance(e, (int, float, bool)):
            return te.const(e)
        kind = type(e).__name__
        if kind in ("IntImm", "FloatImm"):
            return te.const(e.value, _dtype(e))
        if kind == "Var":
            return self._var(e, env)
        if kind in _BINARY:
            return _fit(_BINARY[kind](*args), _dtype(e))
        if kind in _UNARY:
            return _UNARY[kind](args[0], _dtype(e))
        if kind == "Select":
            return te.if_then_else(*args)
        if kind == "Call":
            return self._call(e, args, where)
        raise TranslationError(f"op `{where}`: cannot translate the {kind} node `{e}`; texpr_ad "
                               "has no equivalent (supported: arithmetic, comparisons, logic, "
                               "casts, selects, tensor reads, reductions and math intrinsics)")

    def _var(self, v: Any, env: dict[int, Expr]) -> Expr:
        h = _handle(v)
        if h in env:
            return env[h]
        if h not in self.vars:  # a free variable: a symbolic dim
            self.vars[h] = te.var(v.name, _dtype(v))
            self.tvm_vars[h] = v
        return self.vars[h]

    def _call(self, e: Any, args: list[Expr], where: str) -> Expr:
        name = str(e.op.name)
        if name == "te.tensor_load":
            return self.tensor(e.args[0])(*args)
        fn = _INTRINSICS.get(name)
        if fn is None:
            raise TranslationError(f"op `{where}`: the intrinsic {name} in `{e}` has no texpr_ad "
                                   "equivalent; express it with supported intrinsics")
        return _fit(fn(*args), _dtype(e))


def _key(x: Any) -> int:
    """Identity of a TVM node (its handle: a fresh Python wrapper of the same node has the same
    one) or of a Python number."""
    return _handle(x) if hasattr(x, "__chandle__") else id(x)


# TVM node class name -> its operands that translate first (by attribute)
_OPERAND_FIELDS: dict[str, tuple[str, ...]] = {
    **{k: ("a", "b") for k in _BINARY}, "Not": ("a",), "BitwiseNot": ("a",), "Cast": ("value",),
    "Select": ("condition", "true_value", "false_value"),
}

# TVM unary node class name -> texpr_ad builder of (operand, result dtype)
_UNARY: dict[str, Callable[[Expr, str], Expr]] = {
    "Not": lambda a, d: te.logical_not(a), "BitwiseNot": lambda a, d: te.bitwise_not(a),
    "Cast": lambda a, d: a.astype(d),
}


def _operands(e: Any) -> list[Any]:
    """The TVM operands of `e` that `expr` translates before it (a tensor read: its indices)."""
    kind = type(e).__name__
    if kind == "Call":
        args = list(e.args)
        return args[1:] if str(e.op.name) == "te.tensor_load" else args
    return [getattr(e, f) for f in _OPERAND_FIELDS.get(kind, ())]


def _producers_first(op: Any, done: Callable[[int], bool]) -> list[Any]:
    """The TVM ops `op` depends on (and `op`), producers first, skipping those `done(handle)`
    says are translated (an explicit stack: a chain of stages is not bounded by Python's
    recursion limit)."""
    order: list[Any] = []
    seen: set[int] = set()
    stack: list[tuple[Any, bool]] = [(op, False)]
    while stack:
        x, ready = stack.pop()
        h = _handle(x)
        if ready:
            order.append(x)
            continue
        if h in seen or done(h):
            continue
        seen.add(h)
        stack.append((x, True))
        stack += [(t.op, False) for t in reversed(list(getattr(x, "input_tensors", [])))]
    return order


def _fit(x: Expr, dtype: str) -> Expr:
    """Cast back to TVM's result dtype where texpr_ad's promotion differs (int32 vs int64)."""
    return x if x.dtype == dtype else x.astype(dtype)
