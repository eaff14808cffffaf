"""Tensors and the operations that produce them: placeholders, computes, scatter-adds.

A `Tensor` is one output of an operation.  Tensors compare by identity (two
placeholders with equal shapes are different inputs); expressions compare by
structure.
"""
from __future__ import annotations

import functools
import inspect
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..errors import TexprError
from . import dtype as dt
from .expr import (Call, Const, Expr, IterVar, Read, Reduce, Var, always, as_expr, const,
                   is_zero, next_uid)
from .bounds import GUARD_VISITS, Verdict, bound, facts, guarded_reads, read_verdicts
from .ops import Op
from .visit import children, fold, free_vars, reads_in, rebuild, substitute, walk


class TensorError(TexprError, ValueError):
    """A mistake in a tensor definition or read (names the tensor and the fix)."""


@dataclass(eq=False)
class PlaceholderOp:
    name: str
    shape: tuple[Expr, ...]
    dtype: str

    @property
    def inputs(self) -> list[Tensor]:
        return []


@dataclass(eq=False)
class ComputeOp:
    """`out[axis] = body[value_index]` for every point of the data-parallel `axis`."""

    name: str
    axis: tuple[IterVar, ...]
    body: tuple[Expr, ...]
    tag: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def reduce_axis(self) -> tuple[IterVar, ...]:
        b = self.body[0]
        return b.axis if isinstance(b, Reduce) else ()

    @property
    def all_reduce_axes(self) -> tuple[IterVar, ...]:
        """Every reduce axis bound anywhere in the bodies, in first-use order."""
        axes: dict[IterVar, None] = {}
        for b in self.body:
            for x in walk(b):
                if isinstance(x, Reduce):
                    axes.update(dict.fromkeys(x.axis))
        return tuple(axes)

    @property
    def inputs(self) -> list[Tensor]:
        """The tensors the stage reads (in reduce-axis bounds too), once each, in first-read order."""
        return list({id(x.tensor): x.tensor for x in reads_in(self.body)}.values())


@dataclass(frozen=True)
class ScatterUpdate:
    """One `out[index] += value where condition` of a scatter, at every point of its domain."""

    index: tuple[Expr, ...]
    value: Expr
    condition: Expr

    @property
    def exprs(self) -> tuple[Expr, ...]:
        return (*self.index, self.value, self.condition)


@dataclass(eq=False)
class ScatterOp:
    """A scatter-add stage: `out = zeros(shape); out[index] += value` over `axis` where `condition`.

    The differentiator emits it for reads it cannot invert (data-dependent or
    non-affine indices such as take/embedding, bilinear sampling); schedulers
    must make it race-free.  `also` holds further updates over the same domain
    (the four corners of a bilinear sample): one loop nest does them all.
    """

    name: str
    shape: tuple[Expr, ...]
    dtype: str
    axis: tuple[IterVar, ...]
    index: tuple[Expr, ...]
    value: Expr
    condition: Expr
    also: tuple[ScatterUpdate, ...] = ()

    @property
    def updates(self) -> tuple[ScatterUpdate, ...]:
        return (ScatterUpdate(self.index, self.value, self.condition), *self.also)

    @property
    def exprs(self) -> tuple[Expr, ...]:
        """Every expression of every update (what the stage reads)."""
        return tuple(e for u in self.updates for e in u.exprs)

    @property
    def inputs(self) -> list[Tensor]:
        """The tensors the stage reads (in its domain's bounds too), once each, in first-read order."""
        return list({id(x.tensor): x.tensor for x in reads_in(self.exprs, self.axis)}.values())

    @classmethod
    def of(cls, name: str, shape: tuple[Expr, ...], dtype: str, axis: tuple[IterVar, ...],
           updates: Sequence[ScatterUpdate]) -> ScatterOp:
        first, *rest = updates
        return cls(name, shape, dtype, axis, first.index, first.value, first.condition, tuple(rest))

    def map(self, fn: Callable[[Expr], Expr]) -> ScatterOp:
        """The same scatter with `fn` applied to every index, value and condition."""
        ups = [ScatterUpdate(tuple(fn(i) for i in u.index), fn(u.value), fn(u.condition))
               for u in self.updates]
        return ScatterOp.of(self.name, self.shape, self.dtype, self.axis, ups)


Operation = PlaceholderOp | ComputeOp | ScatterOp


class Tensor:
    """Output `value_index` of `op`; index it with `T[i, j]` or `T(i, j)` to read."""

    __slots__ = ("op", "value_index", "shape", "dtype", "uid")

    def __init__(self, op: Operation, value_index: int, shape: tuple[Expr, ...], dtype: str):
        self.op, self.value_index, self.shape, self.dtype = op, value_index, shape, dtype
        self.uid = next_uid()

    @property
    def name(self) -> str:
        return self.op.name if self.value_index == 0 else f"{self.op.name}_v{self.value_index}"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, idx: Any) -> Read:
        return self(*(idx if isinstance(idx, tuple) else (idx,)))

    def __iter__(self) -> Any:
        # without it `list(X)` of a 1-d tensor would read X[0], X[1], ... forever (a hang where
        # a list of tensors was expected: ta.build(Y, X))
        raise dt.ExprTypeError(f"te tensor {self.name!r} is not iterable: where a list of tensors "
                               f"is expected pass [{self.name}]; inside te.compute read elements "
                               f"with {self.name}[i]")

    def __call__(self, *idx: Any) -> Read:
        if len(idx) == 1 and isinstance(idx[0], (list, tuple)):
            idx = tuple(idx[0])
        if len(idx) != self.ndim:
            raise TensorError(f"tensor {self.name!r} has {self.ndim} dims {shape_str(self.shape)} "
                              f"but was read with {len(idx)} indices; pass one index per dim")
        ix = tuple(as_expr(i) for i in idx)
        for d, i in enumerate(ix):
            if not dt.is_int(i.dtype):
                raise TensorError(f"index {d} of tensor {self.name!r} is `{i}` of dtype {i.dtype}; "
                                  f"indices must be integers (use .astype('int32'))")
        return Read(self, ix, self.dtype)

    def asexpr(self) -> Read:
        """A 0-dim tensor as a value: `x[i] * s` reads `s[()]` (a scalar argument of an op)."""
        if self.ndim:
            raise dt.ExprTypeError(f"cannot use tensor {self.name!r} of shape "
                                   f"{shape_str(self.shape)} as a value in a te expression; only "
                                   f"0-dim tensors are values: read an element with {self.ndim} "
                                   f"indices inside te.compute ({self.name}[i, ...])")
        return self()

    def __repr__(self) -> str:
        return f"Tensor({self.name}, shape={shape_str(self.shape)}, dtype={self.dtype})"

    def __str__(self) -> str:
        from .printer import tensor_str
        return tensor_str(self)

    # Tensors are values in the DAG: identity semantics
    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:
        return self is other

    def __bool__(self) -> bool:
        return True


# a 0-dim tensor in arithmetic is its value (`s * x[i]`, `2 * s`): delegate to `asexpr()`
for _m in ("add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "pow", "rpow",
           "neg"):
    setattr(Tensor, f"__{_m}__", lambda self, *o, _m=_m: getattr(self.asexpr(), f"__{_m}__")(*o))


def shape_str(shape: Sequence[Expr]) -> str:
    from .printer import expr_str
    inner = ", ".join(expr_str(s) for s in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


_INDEX_MAX = 2**31 - 1  # loop variables are int32 (te/expr.py)


def _shape(shape: Any, what: str) -> tuple[Expr, ...]:
    if isinstance(shape, (int, Expr)):
        shape = (shape,)
    if not isinstance(shape, (list, tuple)):
        raise TensorError(f"{what}: shape must be a tuple of dimensions (ints or te.var), got {shape!r}")
    out = []
    for s in shape:
        if isinstance(s, (list, tuple)):
            raise TensorError(f"{what}: dimension {s!r} is a sequence; pass a flat tuple of ints")
        e = as_expr(s)
        if not dt.is_int(e.dtype):
            raise TensorError(f"{what}: dimension `{e}` must be an integer")
        if isinstance(e, Const) and not 0 <= e.value <= _INDEX_MAX:
            raise TensorError(f"{what}: dimension {e.value} is "
                              f"{'negative' if e.value < 0 else 'too large for int32 indexing'}")
        out.append(e)
    return tuple(out)


def _named(name: Any, what: str) -> str:
    """`name`, refused unless a string (a None name broke repr() and every message naming it)."""
    if not isinstance(name, str):
        raise dt.ExprTypeError(f"{what}: name= must be a string, got {name!r}; pass e.g. "
                               f"name=\"x\" or leave it out")
    return name


def placeholder(shape: Any, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor (`tvm.te.placeholder`)."""
    _named(name, "te.placeholder")
    op = PlaceholderOp(name, _shape(shape, f"placeholder {name!r}"), dt.check(dtype))
    return Tensor(op, 0, op.shape, op.dtype)


def var(name: str = "n", dtype: str = "int32") -> Var:
    """A symbolic scalar (e.g. a dimension), bound from the input shapes at call time."""
    return Var(_named(name, "te.var"), dt.check(dtype))


def reduce_axis(dom: tuple[Any, Any], name: str = "rv") -> IterVar:
    """A reduction axis over [lo, hi) (`tvm.te.reduce_axis`)."""
    _named(name, "te.reduce_axis")
    if not isinstance(dom, (list, tuple)) or len(dom) != 2:
        raise TensorError(f"te.reduce_axis {name!r}: dom must be a pair (lo, hi), got {dom!r}")
    lo, hi = (as_expr(x) for x in dom)
    for b in (lo, hi):
        if not dt.is_int(b.dtype):
            raise TensorError(f"te.reduce_axis {name!r}: bound `{b}` has dtype {b.dtype}; "
                              f"the range (lo, hi) must be integers")
        if isinstance(b, Const) and not -_INDEX_MAX - 1 <= b.value <= _INDEX_MAX:
            raise TensorError(f"te.reduce_axis {name!r}: bound {b.value} does not fit int32 "
                              f"(loop variables are int32)")
    if isinstance(lo, Const) and isinstance(hi, Const) and hi.value < lo.value:
        raise TensorError(f"te.reduce_axis {name!r}: range ({lo.value}, {hi.value}) ends before it "
                          f"starts; write (lo, hi) with lo <= hi")
    ext: Expr
    if isinstance(lo, Const) and isinstance(hi, Const):
        ext = const(int(hi.value) - int(lo.value))
    else:  # symbolic or read from data (`L[i]`, `L[0]`)
        ext = hi if isinstance(lo, Const) and lo.value == 0 else hi - lo
    return IterVar(name, lo, ext, "reduce")


def _param_names(fcompute: Callable[..., Any], n: int, name: str) -> list[str]:
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return [f"i{k}" for k in range(n)]
    if len(params) != n and sum(p.default is p.empty for p in params) == n:  # `lambda i, j, t=t:`
        params = params[:n]  # the defaults capture loop values, as they do in Python
    if len(params) != n:
        raise TensorError(f"compute {name!r}: shape has {n} dims but the lambda takes "
                          f"{len(params)} arguments; take one index per output dim")
    return [p.name for p in params]


def compute(shape: Any, fcompute: Callable[..., Any], name: str = "compute", tag: str = "",
            attrs: dict[str, Any] | None = None) -> Any:
    """Define `out[i...] = fcompute(i...)` (`tvm.te.compute`).

    A list/tuple body gives a multi-output compute (returns a list of tensors).
    Axis names come from the lambda's parameters (or `fcompute.axis_names`).
    A reduction nested inside a larger body is split into its own stage.
    """
    shp = _shape(shape, f"compute {_named(name, 'te.compute')!r}")
    names = getattr(fcompute, "axis_names", None) or _param_names(fcompute, len(shp), name)
    axes = tuple(IterVar(n, const(0), s, "data") for n, s in zip(names, shp, strict=True))
    res = fcompute(*axes)
    multi = isinstance(res, (list, tuple))
    bodies = tuple(as_expr(b) for b in (res if multi else (res,)))
    if not bodies:
        raise TensorError(f"compute {name!r}: the lambda returned no expression")
    _check_definition(bodies, name)
    derived = tag in ("adjoint", "tangent")  # deriv/'s: right by construction, but its guards
    if not derived:                          # (a max's ties, equalities) are beyond te.bounds
        _check_reads(bodies, name)  # before splitting: a lifted reduction's reads are in no later body
    bodies = tuple(_split_nested(b, name, k, axes) for k, b in enumerate(bodies))
    if derived:
        _check_reads(bodies, name)  # as the stages it reads run: nested reductions are lifted
    op = ComputeOp(name, axes, bodies, tag, dict(attrs or {}))
    outs = [Tensor(op, k, shp, b.dtype) for k, b in enumerate(bodies)]
    return outs if multi else outs[0]


_Guards = tuple[tuple[Expr, bool], ...]  # the guards (condition, holds) on a path, outermost first


def _split_nested(body: Expr, name: str, k: int, axes: tuple[IterVar, ...]) -> Expr:
    """Move every reduction that is not the whole body into a stage of its own, over the data
    axes it uses in the order of the compute's `axes` (its layout then follows the reader's:
    `x[n, f, s + k]` summed over k is a stage over (n, f, s), not over whatever order the
    body first names them in), then any other axes it uses.

    The stage runs on the whole of its axes, so the guards above the reduction (`_guard_paths`)
    on the stage's own axes join its `where=`: `if_then_else(i >= 1, sum(x[i - 1, r]), 0)` lifts
    to `y_red1[i] = sum(x[i - 1, r], where=i >= 1)`, the identity where the guard fails (which
    the select ignores).  A read still in bounds only under a guard the stage cannot carry is
    refused here, not at run time."""
    rank = {a: d for d, a in enumerate(axes)}
    counter = [0]
    lifted: dict[Expr, Expr] = {}  # structurally equal reductions share one stage
    paths, above = _guard_paths(body)

    def lift(e: Reduce, guards: set[_Guards]) -> Expr:
        if len(e.source) > 1:
            raise TensorError(f"compute {name!r}: a tuple reduction must be the whole body")
        outer = sorted((v for v in free_vars(e) if isinstance(v, IterVar)),
                       key=lambda v: rank.get(v, len(rank)))  # stable: others as found
        common = itertools.takewhile(lambda gs: len(set(gs)) == 1, zip(*guards))  # on every path
        carry = [c if holds else Call(Op.NOT, (c,), "bool") for (c, holds), *_ in common
                 if c.dtype == "bool" and id(c) not in above and
                 {v for v in free_vars(c) if isinstance(v, IterVar)} <= set(outer)]
        if carry:  # guards first: `&` is lazy, so each holds where the next one is evaluated
            conds = carry + ([] if always(e.condition) else [e.condition])
            e = Reduce(e.combiner, e.source, e.axis, functools.reduce(
                lambda a, b: Call(Op.AND, (a, b), "bool"), conds), e.value_index, e.dtype, e.init)
        if e in lifted:
            return lifted[e]
        counter[0] += 1
        stage_name = f"{name}_red{counter[0]}" if k == 0 else f"{name}_{k}_red{counter[0]}"
        _check_lifted_reads(e, guards, name, stage_name, outer)
        new_axes = tuple(IterVar(v.name, const(0), v.extent, "data") for v in outer)
        shift = {v: a + v.lo if not is_zero(v.lo) else a for v, a in zip(outer, new_axes, strict=True)}
        op = ComputeOp(stage_name, new_axes, (substitute(e, shift),))
        t = Tensor(op, 0, tuple(a.extent for a in new_axes), e.dtype)
        lifted[e] = Read(t, tuple(v - v.lo if not is_zero(v.lo) else v for v in outer), e.dtype)
        return lifted[e]

    def image(x: Expr, kids: list[Expr]) -> Expr:
        y = rebuild(x, tuple(kids))
        return lift(y, paths[id(x)]) if isinstance(y, Reduce) and x is not body else y
    return fold(body, children, image)


def _guard_paths(body: Expr) -> tuple[dict[int, set[_Guards]], set[int]]:
    """For each reduction in `body` (by identity), the guards on each path down to it, outermost
    first: `(cond, holds)` for a select's branch, the right side of a lazy `&`/`|` and a
    reduction's source under its `where=`; and the ids of the nodes above some reduction (only
    those are walked).  Past GUARD_VISITS visits a path counts as unguarded."""
    above: set[int] = set()
    for x in walk(body):
        if isinstance(x, Reduce) or any(id(c) in above for c in children(x)):
            above.add(id(x))
    paths: dict[int, set[_Guards]] = {}
    stack: list[tuple[Expr, _Guards]] = [(body, ())]
    seen: set[tuple[int, _Guards]] = set()
    while stack:
        x, g = stack.pop()
        g = () if len(seen) >= GUARD_VISITS else g
        if id(x) not in above or (id(x), g) in seen:
            continue
        seen.add((id(x), g))
        match x:
            case Reduce():
                paths.setdefault(id(x), set()).add(g)
                inner = g if always(x.condition) else g + ((x.condition, True),)
                stack += [(s, inner) for s in x.source] + [(c, g) for c in (x.condition, *x.init)]
            case Call(op=Op.SELECT, args=(c, a, b)):
                stack += [(c, g), (a, g + ((c, True),)), (b, g + ((c, False),))]
            case Call(op=Op.AND | Op.OR, args=(a, b)):
                stack += [(a, g), (b, g + ((a, x.op is Op.AND),))]
            case _:
                stack += [(c, g) for c in children(x)]
    return paths, above


def _check_lifted_reads(e: Reduce, guards: set[_Guards], name: str, stage: str,
                        outer: list[IterVar]) -> None:
    """Refuse a read of the lifted reduction `e` that some path's guards keep in bounds but the
    stage, which runs on the whole of its axes with only the guards it carries, does not."""
    for g in guards:
        full = tuple(f for c, holds in g for f in facts(c, holds))
        for r, fs in guarded_reads(e):
            extra = tuple(f for f in full if f not in fs)
            if not extra:
                continue
            for d, (v, w) in enumerate(zip(read_verdicts(r, fs), read_verdicts(r, fs + extra),
                                           strict=True)):
                if list(Verdict).index(v) > list(Verdict).index(w):  # PROVEN < RUNTIME < UNSAFE
                    raise TensorError(
                        f"compute {name!r}: read {r} of tensor {r.tensor.name!r} (shape "
                        f"{shape_str(r.tensor.shape)}) is in bounds in dim {d} (index "
                        f"`{r.indices[d]}`) only under the guard(s) around the nested reduction "
                        f"`{e}`; that reduction runs as stage {stage!r} over "
                        f"({', '.join(v.name for v in outer)}), which can carry only guards on "
                        "its own axes; put the guard inside the reduction (where= or "
                        "te.if_then_else around the read), or reduce in a te.compute of its own")


_DIVISIONS = (Op.FLOORDIV, Op.FLOORMOD, Op.DIV)


def _check_definition(bodies: tuple[Expr, ...], name: str) -> None:
    """Malformed bodies: a reduce axis outside a reduction over it (or reduced twice, nested),
    an integer division or modulo by a constant zero, an integer literal its dtype cannot hold
    (`i32 + 2**31`; Const checks only the narrow dtypes: folds of int32 bounds may pass it)."""
    stack: list[tuple[Expr, frozenset[IterVar]]] = [(b, frozenset()) for b in bodies]
    seen: set[tuple[int, frozenset[IterVar]]] = set()  # a shared subexpression is checked once
    while stack:
        x, bound_axes = stack.pop()
        if (id(x), bound_axes) in seen:
            continue
        seen.add((id(x), bound_axes))
        match x:
            case IterVar(kind="reduce") if x not in bound_axes:
                raise TensorError(
                    f"compute {name!r}: reduce axis {x.name!r} is used outside a reduction over "
                    f"it; list it in axis= of the te.sum/max/min/prod that should reduce over it")
            case Reduce():
                twice = [a.name for a in x.axis if a in bound_axes]
                if twice or len(set(x.axis)) < len(x.axis):
                    which = twice or [a.name for a in x.axis if x.axis.count(a) > 1]
                    raise TensorError(
                        f"compute {name!r}: reduce axis {which[0]!r} is reduced twice (nested or "
                        f"listed twice in axis=); make a separate te.reduce_axis for each reduction")
                inner = bound_axes | set(x.axis)
                stack += [(c, inner) for c in x.source + (x.condition,)]
                stack += [(c, bound_axes) for c in x.init]
                stack += [(b, inner) for a in x.axis for b in (a.lo, a.extent)]  # may use earlier axes
            case Const(value=int(v), dtype=d) if dt.is_int(d) and not \
                    dt.RANGES[d][0] <= v <= dt.RANGES[d][1]:  # kernels would wrap it silently
                try:
                    dt.check_literal(v, d, dt.RANGES)
                except dt.ExprTypeError as e:
                    raise dt.ExprTypeError(f"compute {name!r}: {e}") from None
            case Call(op=op, args=(_, Const(value=0))) if op in _DIVISIONS and dt.is_int(x.dtype):
                raise TensorError(
                    f"compute {name!r}: `{x}` divides by the constant 0 (integer "
                    f"{op.name.lower()}); fix the divisor")
            case _:
                stack += [(c, bound_axes) for c in children(x)]


def _check_reads(bodies: tuple[Expr, ...], name: str) -> None:
    """Reject reads that can be out of bounds at some point of the domain (te.bounds); reads
    that depend on symbolic dims or tensor values are checked when the kernel runs."""
    for b in bodies:
        for r, known in guarded_reads(b):
            for d, v in enumerate(read_verdicts(r, known)):
                if v is Verdict.UNSAFE:
                    ix, ext = r.indices[d], r.tensor.shape[d]
                    lo, hi = bound(ix, upper=False), bound(ix, upper=True)
                    rng = f"[{lo[1] if lo and not lo[0] else '?'}, {hi[1] if hi and not hi[0] else '?'}]"
                    raise TensorError(
                        f"compute {name!r}: read {r} is out of bounds in dim {d} of tensor "
                        f"{r.tensor.name!r} (shape {shape_str(r.tensor.shape)}): index `{ix}` "
                        f"takes values in {rng}, not all inside [0, {ext}); guard it with "
                        "te.if_then_else / where= or fix the index")
