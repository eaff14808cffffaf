"""Expressions of texpr_ad's `te` as TVM 0.27 `tirx` expressions, for `to_tvm`'s stages.

* `floordiv`/`floormod` map to TVM's floor operators on integers and to
  `floor(a / b)` / `a - floor(a / b) * b` on floats (the IR's semantics).
* `select` maps to `tirx.if_then_else` (lazy, so padding guards stay guards).
* `==`/`!=` on bools become And/Or/Not (LLVM cannot compile them on i1); `&`/`|` whose right
  side reads a tensor become `if_then_else` (lazy, as in the IR, so a guard keeps a read out).
* Reads te.bounds cannot prove in bounds (indices computed from data) are checked when the code
  runs (`checked_index`: a KernelIndexError, as texpr_ad's kernels raise), except under a
  device target (`checks_on`).
* Read indices are simplified first (`tvm_index`: affine terms cancel, div/mod pairs
  recombine): TVM's region-bound analysis aborts ("Divide by zero") on an uncancelled
  `2*(h // 2) + (h - 2*(h // 2))`.
* Translation is iterative (an explicit stack over expression nodes), so deeply nested bodies
  do not meet Python's recursion limit.
* Symbolic dims (`te.var`) become `tirx.Var`s (int64, as Relax shapes are); index arithmetic
  mixes int32/int64 through TVM's own promotion and values are cast back to the IR dtype where
  the dtype is observable.
"""
from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ..errors import TexprError
from ..kernels.kernel import index_error
from ..kernels.render import read_site
from ..te.bounds import unproven_dims
from ..te.expr import Call, CommReducer, Const, Expr, IterVar, Read, Reduce, Var
from ..te.ops import Op
from ..te.simplify import INDEX_RULES, simplify
from ..te.visit import fold, walk

INDEX64 = "int64"
class TranslationError(TexprError, ValueError):
    """A construct the TVM translation cannot express (names the stage and the fix)."""


def load_tvm() -> Any:
    import tvm  # lazy: TVM is an optional extra
    return tvm


def tvm_import_error() -> str | None:
    """None when `import tvm` works; else one line saying why and what to do (not installed, or
    an install whose import fails)."""
    import importlib.util
    if importlib.util.find_spec("tvm") is None:
        return "needs apache-tvm (pip install 'texpr_ad[tvm]')"
    try:
        load_tvm()
    except Exception as e:  # noqa: BLE001 - a broken install fails in many ways
        first = (str(e).strip().splitlines() or [""])[0][:200]
        return (f"importing tvm failed ({type(e).__name__}: {first}); the apache-tvm install is "
                "broken: reinstall it (pip install --force-reinstall 'texpr_ad[tvm]')")
    return None


# -- scalar op tables -------------------------------------------------------------

def dtype_of(x: Any) -> str:
    """The dtype of a TVM PrimExpr as a string (0.27 spells it `.ty`)."""
    return str(x.ty)


def _is_int(x: Any) -> bool:
    return dtype_of(x).startswith(("int", "uint"))


def _div(a: Any, b: Any) -> Any:  # `/`: floor division on ints, true division on floats
    return _floordiv(a, b) if _is_int(a) else a / b


def _floordiv(a: Any, b: Any) -> Any:
    tirx = load_tvm().tirx
    return tirx.floordiv(a, b) if _is_int(a) else tirx.floor(a / b)


def _floormod(a: Any, b: Any) -> Any:
    tirx = load_tvm().tirx
    return tirx.floormod(a, b) if _is_int(a) else a - tirx.floor(a / b) * b


def _pow(a: Any, b: Any) -> Any:
    tirx = load_tvm().tirx
    if _is_int(a):  # exact for the integer range float64 represents
        d = dtype_of(a)
        return tirx.round(tirx.power(a.astype("float64"), b.astype("float64"))).astype(d)
    return tirx.power(a, b)


def _sign(x: Any) -> Any:
    tirx = load_tvm().tirx
    d = dtype_of(x)
    one, zero = tirx.const(1, d), tirx.const(0, d)
    return tirx.Select(x > zero, one, tirx.Select(x < zero, -one, zero))


def _eq(a: Any, b: Any) -> Any:
    """`a == b`; on bools as (a and b) or (not a and not b): LLVM cannot compile `icmp` on i1."""
    tirx = load_tvm().tirx
    if dtype_of(a) == "bool":
        return tirx.Or(tirx.And(a, b), tirx.And(tirx.Not(a), tirx.Not(b)))
    return a.equal(b)


def _ne(a: Any, b: Any) -> Any:
    """`a != b`; on bools as (a and not b) or (not a and b) (see `_eq`)."""
    tirx = load_tvm().tirx
    if dtype_of(a) == "bool":
        return tirx.Or(tirx.And(a, tirx.Not(b)), tirx.And(tirx.Not(a), b))
    return (a != b).asobject()


def _binary_table() -> dict[Op, Callable[[Any, Any], Any]]:
    tirx = load_tvm().tirx
    return {
        Op.ADD: operator.add, Op.SUB: operator.sub, Op.MUL: operator.mul, Op.DIV: _div,
        Op.FLOORDIV: _floordiv, Op.FLOORMOD: _floormod, Op.MIN: tirx.min, Op.MAX: tirx.max,
        Op.POW: _pow, Op.LT: operator.lt, Op.LE: operator.le, Op.GT: operator.gt,
        Op.GE: operator.ge, Op.EQ: _eq, Op.NE: _ne, Op.AND: tirx.And, Op.OR: tirx.Or,
        Op.SHL: tirx.shift_left, Op.SHR: tirx.shift_right, Op.ATAN2: tirx.atan2,
        Op.BITWISE_AND: tirx.bitwise_and, Op.BITWISE_OR: tirx.bitwise_or,
        Op.BITWISE_XOR: tirx.bitwise_xor,
    }


def _unary_table() -> dict[Op, Callable[[Any], Any]]:
    tirx = load_tvm().tirx
    return {
        Op.NEG: operator.neg, Op.NOT: tirx.Not, Op.EXP: tirx.exp, Op.LOG: tirx.log,
        Op.LOG1P: tirx.log1p, Op.SQRT: tirx.sqrt, Op.RSQRT: tirx.rsqrt, Op.TANH: tirx.tanh,
        Op.SIGMOID: tirx.sigmoid, Op.ERF: tirx.erf, Op.SIN: tirx.sin, Op.COS: tirx.cos,
        Op.ATAN: tirx.atan, Op.ABS: tirx.abs, Op.FLOOR: tirx.floor, Op.CEIL: tirx.ceil,
        Op.TRUNC: tirx.trunc, Op.ROUND: tirx.nearbyint, Op.SIGN: _sign,  # nearbyint: half to even
        Op.STOP_GRADIENT: lambda x: x, Op.TAN: tirx.tan, Op.SINH: tirx.sinh, Op.COSH: tirx.cosh,
        Op.ASIN: tirx.asin, Op.ACOS: tirx.acos, Op.ASINH: tirx.asinh, Op.ACOSH: tirx.acosh,
        Op.ATANH: tirx.atanh, Op.ISNAN: tirx.isnan, Op.BITWISE_NOT: tirx.bitwise_not,
    }


def fit(x: Any, dtype: str) -> Any:
    """Cast `x` to `dtype` where TVM's int promotion changed it."""
    return x if dtype_of(x) == dtype else x.astype(dtype)


# -- expression translation ------------------------------------------------------------

def _operands(e: Expr) -> tuple[Expr, ...]:
    """The operands `ExprTranslator` translates before `e` (a reduction is refused whole; a
    read translates its simplified indices itself, see `tvm_index`)."""
    match e:
        case Call(args=args):
            return args
    return ()


@functools.lru_cache(maxsize=4096)
def tvm_index(e: Expr) -> Expr:
    """Index `e` as TVM gets it: simplified with `te.simplify.INDEX_RULES`, so affine terms
    cancel and div/mod pairs recombine (`2*(h // 2) + (h - 2*(h // 2))` -> `h`).  TVM's
    iter-map (region-bound) analysis aborts with "Divide by zero" on such uncancelled sums,
    and simpler indices give simpler loops.  An index that reads a tensor stays as it is (its
    reads keep their identity, which their run-time checks are keyed by)."""
    if any(isinstance(x, Read) for x in walk(e)):
        return e
    return simplify(e, INDEX_RULES)


INDEX_CHECK = "texpr_ad.index_out_of_bounds"  # the global function a failed check calls


def checked_index(index: Any, extent: Any, site: str) -> Any:
    """TVM `index` where `0 <= index < extent`, else a call that raises KernelIndexError naming
    `site` (lazy: `if_then_else` evaluates the call only when the index is out of range).

    Reads the bounds prover cannot prove (indices computed from tensor values, symbolic dims)
    get this check, as texpr_ad's own kernels do (see `checks_on` for when).  The error
    function is a Python global: a module exported and run without texpr_ad reports a missing
    `texpr_ad.index_out_of_bounds` function instead (still an error, never a wild read).
    """
    tirx = load_tvm().tirx
    _register_index_check()
    d = dtype_of(index)
    ok = tirx.all(index >= tirx.const(0, d), index < extent)
    fail = tirx.call_packed(INDEX_CHECK, site, index, extent).astype(d)
    return tirx.if_then_else(ok, index, fail)


@functools.cache
def _register_index_check() -> None:
    import tvm_ffi
    from .grad import keep_error_classes
    tvm_ffi.register_global_func(INDEX_CHECK, _index_out_of_bounds, override=True)
    keep_error_classes()  # a KernelIndexError reaches the caller as itself


HOST_TARGETS = ("llvm", "c")  # where compiled code can call back into Python


def checks_on(check_bounds: bool | None, target: Any = None) -> bool:
    """Whether to emit run-time index checks: `check_bounds` if given, else (None, the default)
    unless the target, `target` or else the current `tvm.target.Target` context, is a device
    (CUDA, ...): device kernels cannot call back into Python, so they stay unchecked there."""
    if check_bounds is not None:
        return bool(check_bounds)
    tvm = load_tvm()
    t = tvm.target.Target(target) if target is not None else tvm.target.Target.current(True)
    return t is None or t.kind.name in HOST_TARGETS


def _index_out_of_bounds(site: str, index: int, extent: int) -> int:
    raise index_error(IndexError(str(site), int(index), int(extent)))


@dataclass
class ExprTranslator:
    """Translates expressions given variable bindings and how to read a tensor.

    `checks` maps reads to the dims to check when the code runs (`te.bounds.unproven_dims`):
    such an index becomes `checked_index(...)`, which raises a KernelIndexError naming the
    read instead of reading outside the tensor.
    """

    env: dict[Expr, Any]
    read: Callable[[Read, list[Any]], Any]
    stage: str
    reducers: dict[CommReducer, Any] = field(default_factory=dict)
    checks: Mapping[Read, set[int]] = field(default_factory=dict)

    def __call__(self, e: Expr) -> Any:
        """The TVM PrimExpr of `e`.  Iterative (an explicit stack), so expression depth is not
        bounded by Python's recursion limit; a shared subexpression is translated once."""
        def node(x: Expr, done: list[tuple[Any, bool]]) -> tuple[Any, bool]:
            """(TVM expr, whether it reads a tensor)"""
            reads = isinstance(x, Read) or any(r for _, r in done)
            return self._node(x, [v for v, _ in done], [r for _, r in done]), reads
        return fold(e, _operands, node)[0]

    def _node(self, e: Expr, args: list[Any], reads: list[bool]) -> Any:
        """`e` in TVM, given its operands translated (`reads`: which of them read a tensor)."""
        tirx = load_tvm().tirx
        match e:
            case Const(value=v, dtype=d):
                return tirx.const(v, d)
            case Var() | IterVar():
                if e not in self.env:
                    raise TranslationError(f"stage {self.stage!r}: variable `{e}` is not bound here; "
                                           "symbolic dims must appear in an input's shape")
                return self.env[e]
            case Call(op=Op.SELECT, dtype=d):
                return tirx.if_then_else(args[0], fit(args[1], d), fit(args[2], d))
            case Call(op=Op.AND | Op.OR as op) if reads[1]:  # lazy right side, as in the IR
                other = tirx.const(op is Op.OR, "bool")
                return (tirx.if_then_else(args[0], args[1], other) if op is Op.AND else
                        tirx.if_then_else(args[0], other, args[1]))
            case Call(op=Op.CAST, dtype=d):
                return args[0].astype(d)
            case Call(op=op, dtype=d) if len(args) == 1:
                return fit(_unary_table()[op](args[0]), d)
            case Call(op=op, dtype=d) if len(args) == 2:
                return fit(_binary_table()[op](*args), d)
            case Read():
                dims = self.checks.get(e, set())
                idx = [self(tvm_index(i)) for i in e.indices]
                return self.read(e, [self.checked(a, e.tensor.shape[d], read_site(e, d, self.stage))
                                     if d in dims else a for d, a in enumerate(idx)])
            case Reduce():
                raise TranslationError(f"stage {self.stage!r}: reduction `{e}` nested inside an "
                                       "expression; te.compute splits these, build it with te.compute")
        raise TranslationError(f"stage {self.stage!r}: cannot translate `{e}`")

    def checked(self, index: Any, extent: Expr, site: str) -> Any:
        """`index`, checked against `[0, extent)` when the code runs (see `checked_index`)."""
        return checked_index(index, fit(self(extent), dtype_of(index)), site)

    def shape(self, dims: Sequence[Expr]) -> list[Any]:
        return [fit(self(s), INDEX64) for s in dims]

    def reducer(self, comb: CommReducer) -> Any:
        """The `tvm.te.comm_reducer` equivalent to `comb` (combine and identity translated)."""
        if comb not in self.reducers:
            te = load_tvm().te
            dtypes = [v.dtype for v in comb.lhs]
            multi = len(dtypes) > 1

            def fcombine(x: Any, y: Any) -> Any:
                xs, ys = (x, y) if multi else ((x,), (y,))
                sub = ExprTranslator({**self.env, **dict(zip(comb.lhs, xs, strict=True)),
                                      **dict(zip(comb.rhs, ys, strict=True))}, self.read, self.stage)
                res = [fit(sub(r), d) for r, d in zip(comb.result, dtypes, strict=True)]
                return tuple(res) if multi else res[0]

            def fidentity(*_: Any) -> Any:
                ids = [fit(self(i), d) for i, d in zip(comb.identity, dtypes, strict=True)]
                return tuple(ids) if multi else ids[0]

            self.reducers[comb] = te.comm_reducer(fcombine, fidentity, name=comb.name or comb.kind)
        return self.reducers[comb]
