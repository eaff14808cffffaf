"""Translate texpr_ad `te` tensor DAGs into `tvm.te` computations (TVM 0.27).

Every stage of the DAG becomes one TVM stage:

* `PlaceholderOp` -> `tvm.te.placeholder` (or the tensor given in `bind=`).
* `ComputeOp` -> `tvm.te.compute`; bodies that form one (tuple) reduction share
  one TVM compute, other bodies of a multi-output op get a compute each.
* `ScatterOp` -> `tvm.te.extern` whose body is a TIR statement: a loop nest that
  zero-fills the output, then a serial loop nest over the scatter axes that does
  `if condition: out[index] += value` for each of its updates (the guard also keeps index/value reads
  lazy).  Serial accumulation is race-free by construction.

Semantic points the translation takes care of (expressions: `tvm_expr`):

* `te.create_prim_func` in TVM 0.27 silently drops a reduction's `where=`
  condition and its `init=`.  So every condition moves into the body:
  source_k -> if_then_else(cond, source_k, identity_k), which is exact for any
  commutative reducer; and `init` becomes a second stage
  `out = combine(init, reduce(...))`.
* TVM 0.27 gets a reduce axis whose start depends on outer indices silently wrong, and never
  initializes a reduction over an empty range.  So a reduce axis whose bounds use data axes only
  runs exactly over its window as `lo + r`, r in `[0, extent)` (empty where a gated extent
  `select(c, E, 0)` fails), and a second stage selects the identity where a window is empty
  (`_reduction`); one whose bounds use earlier reduce axes runs from its own start over a static
  width with the end as a guard (`static_reduce_range`).  Scatter loop nests are plain TIR
  `For`s, which take dependent bounds correctly.
* Reads and scatter targets te.bounds cannot prove in bounds (indices computed from data) are
  checked when the code runs (`checked_index`: a KernelIndexError, as texpr_ad's kernels raise),
  except under a device target (`checks_on`).
* Read and scatter indices are simplified first (`tvm_index`: affine terms cancel, div/mod
  pairs recombine): TVM's region-bound analysis aborts ("Divide by zero") on an uncancelled
  `2*(h // 2) + (h - 2*(h // 2))`.
* Translation is iterative (an explicit stack over stages and over expression nodes), so deep
  graphs and deeply nested bodies do not meet Python's recursion limit.
* TVM's passes walk a PrimExpr as a tree, so in a stage larger than SHARE_MIN tree nodes each
  repeated subexpression gets a stage of its own (`hoist_shared`; a `tirx.Let` does not help:
  TVM's analyzer substitutes its value back).
"""
from __future__ import annotations

import functools
import operator
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..kernels.kernel import KernelArgumentError
from ..te.bounds import ENUMERATE_MAX, Verdict, dead, dim_verdict, facts, int_eval, \
    read_verdicts, unproven_dims
from ..te.dag import topo_order
from ..te.expr import Call, CommReducer, Const, Expr, IterVar, Read, Reduce, Var, is_zero
from ..te.intervals import interval
from ..te.printer import expr_str
from ..te.simplify import simplify
from ..te.ops import Op
from ..te.tensor import ComputeOp, PlaceholderOp, ScatterOp, ScatterUpdate, Tensor
from ..te.visit import children, fold, free_vars, rebuild, substitute, walk
from .args import as_list, is_te_tensor
from .tvm_expr import INDEX64, ExprTranslator, TranslationError, checked_index, checks_on, \
    fit, load_tvm, tvm_index


# -- stage translation ------------------------------------------------------------------

@dataclass
class _Dag:
    bound: dict[Tensor, Any]
    vars: dict[Var, Any]
    check_bounds: bool = True
    stages: dict[int, list[Any]] = field(default_factory=dict)  # id(op) -> TVM outputs
    reducers: dict[CommReducer, Any] = field(default_factory=dict)
    checks: dict[Read, set[int]] = field(default_factory=dict)  # the current stage's

    def tensor(self, t: Tensor) -> Any:
        return self.bound[t] if t in self.bound else self.stages[id(t.op)][t.value_index]

    def has(self, t: Tensor) -> bool:
        return t in self.bound or id(t.op) in self.stages

    def read_compute(self, r: Read, idx: list[Any]) -> Any:
        return self.tensor(r.tensor)(*idx)

    def translator(self, env: dict[Expr, Any], stage: str) -> ExprTranslator:
        return ExprTranslator({**self.vars, **env}, self.read_compute, stage, self.reducers,
                              self.checks)

    def check(self, parts: Sequence[tuple[Expr, Sequence[Expr]]]) -> None:
        """Set the reads of the next stage to check: those of `(expr, facts)` in `parts` that
        te.bounds cannot prove in bounds (none with check_bounds=False)."""
        self.checks = {}
        for e, known in parts if self.check_bounds else ():
            for r, dims in unproven_dims([e], known).items():
                self.checks.setdefault(r, set()).update(dims)


def _compute(op: ComputeOp, dag: _Dag) -> list[Any]:
    """TVM tensors for each output of `op` (one TVM compute per reduction group)."""
    dag.check([(b, ()) for b in op.body])
    groups: dict[Any, list[int]] = {}
    for k, b in enumerate(op.body):
        key = b.loop_key if isinstance(b, Reduce) else ("plain",)
        groups.setdefault(key, []).append(k)
    outs: list[Any] = [None] * len(op.body)
    for key, ks in groups.items():
        name = op.name if len(groups) == 1 else f"{op.name}_{ks[0]}"
        if key == ("plain",):
            ts = _plain(op, ks, dag, name)
        else:
            ts = _reduction(op, op.body[ks[0]], dag, name)  # type: ignore[arg-type]
            ts = [ts[op.body[k].value_index] for k in ks]  # type: ignore[attr-defined]
        for k, t in zip(ks, ts, strict=True):
            outs[k] = t
    return outs


def _plain(op: ComputeOp, ks: list[int], dag: _Dag, name: str) -> list[Any]:
    te = load_tvm().te
    shape = dag.translator({}, op.name).shape([a.extent for a in op.axis])

    def fcompute(*ivs: Any) -> Any:
        tr = dag.translator(dict(zip(op.axis, ivs, strict=True)), op.name)
        res = [fit(tr(op.body[k]), op.body[k].dtype) for k in ks]
        return res if len(res) > 1 else res[0]

    out = te.compute(shape, fcompute, name=name)
    return list(out) if isinstance(out, (list, tuple)) else [out]


def static_reduce_range(a: IterVar, stage: str) -> tuple[Expr, Expr | None]:
    """`(width, guard)`: reduce axis `a` as `a = a.lo + r` with `r` over the static `[0, width)`,
    and the condition `a < a.lo + a.extent` that restores `a`'s own range (None when `a`'s
    range is already static).  The width is the largest extent (`widest`, exact by enumeration
    over the outer indices, else their interval bound), so the work is that of the widest
    window, not of the hull of all windows.  `_reduction` uses it for bounds that use earlier
    reduce axes (TVM's block domain subtracts a dependent minimum twice)."""
    outer = [v for x in (a.lo, a.extent) for v in walk(x) if isinstance(v, IterVar)]
    if not outer:
        return a.extent, None
    width = widest(a.extent)
    if width is None:
        _, width = interval(simplify(a.extent))
    if width is None:
        raise TranslationError(
            f"stage {stage!r}: reduce axis `{a.name}` over [{a.lo}, {a.lo} + {a.extent}) depends on "
            f"the index `{outer[0]}` and its extent has no static bound, which TVM needs (it gets "
            "such ranges wrong); bound the extent by a constant")
    return Const(max(width, 0), a.extent.dtype), a < a.lo + a.extent


def widest(extent: Expr) -> int | None:
    """The largest value of integer `extent` over the static axes it uses, by enumeration;
    None when it uses anything else (a dependent axis, a symbolic dim, a tensor value) or more
    than `te.bounds.ENUMERATE_MAX` points.  Exact where interval bounds are loose: a stride-2
    window's tap count `min(h // 2, 27) + 1 - max((h - 1) // 2, 0)` is at most 2, not 28."""
    used = [v for v in walk(extent) if isinstance(v, (IterVar, Var, Read))]
    axes = list(dict.fromkeys(v for v in used if isinstance(v, IterVar)))
    ranges = [(int(v.lo.value), max(int(v.extent.value), 0)) for v in axes
              if isinstance(v.lo, Const) and isinstance(v.extent, Const)]
    if len(ranges) < len(set(used)):
        return None
    sizes = [n for _, n in ranges]
    npts = int(np.prod(sizes))
    if not 0 < npts <= ENUMERATE_MAX:
        return None
    points = np.indices(sizes).reshape(len(sizes), npts)
    env: dict[Expr, Any] = {v: lo + p for v, (lo, _), p in zip(axes, ranges, points, strict=True)}
    return int(np.max(int_eval(extent, env, npts)))


def _conj(conds: Sequence[Expr]) -> Expr:
    out = [c for c in conds if not (isinstance(c, Const) and c.value is True)]
    return functools.reduce(operator.and_, out) if out else Const(True, "bool")


def on_data(a: IterVar, data: Sequence[IterVar]) -> bool:
    """Whether reduce axis `a`'s bounds use some of the data axes `data` and no other axis."""
    used = [v for x in (a.lo, a.extent) for v in walk(x) if isinstance(v, IterVar)]
    return bool(used) and all(v in data for v in used)


def _reduction(op: ComputeOp, red: Reduce, dag: _Dag, name: str) -> list[Any]:
    """One TVM compute for the (tuple) reduction `red`; a second stage applies `init` and, where
    a reduce axis on data axes (`on_data`, run exactly) has an empty window, the identity: TVM
    runs a block's `init` at its first iteration, so an empty one leaves its output unwritten."""
    tvm = load_tvm()
    te, tirx = tvm.te, tvm.tirx
    shape = dag.translator({}, op.name).shape([a.extent for a in op.axis])
    n = len(red.source)
    dtypes = [s.dtype for s in red.source]
    exact = [a for a in red.axis if on_data(a, op.axis)]

    def fcompute(*ivs: Any) -> Any:
        env: dict[Expr, Any] = dict(zip(op.axis, ivs, strict=True))
        tr = dag.translator(env, op.name)
        raxes = []
        guards: list[Expr] = []
        for a in red.axis:  # from a's own start: TVM gets dependent minimums wrong
            width, guard = (a.extent, None) if a in exact else static_reduce_range(a, op.name)
            rv = te.reduce_axis((0, fit(tr(width), INDEX64)), name=a.name)
            env[a] = fit(tr(a.lo), INDEX64) + rv.var
            raxes.append(rv)
            guards += [guard] if guard is not None else []
            tr = dag.translator(env, op.name)
        srcs = [fit(tr(s), d) for s, d in zip(red.source, dtypes, strict=True)]
        cond = _conj([*guards, red.condition])  # create_prim_func drops where=: select the identity
        if not (isinstance(cond, Const) and cond.value is True):
            srcs = [tirx.if_then_else(tr(cond), s, fit(tr(i), d))
                    for s, i, d in zip(srcs, red.combiner.identity, dtypes, strict=True)]
        res = tr.reducer(red.combiner)(tuple(srcs) if n > 1 else srcs[0], axis=raxes)
        return list(res) if n > 1 else res

    staged = bool(red.init or exact)
    out = te.compute(shape, fcompute, name=f"{name}_part" if staged else name)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    if not staged:
        return outs

    def fcombine(*ivs: Any) -> Any:  # out = combine(init, reduced, or the identity if empty)
        env: dict[Expr, Any] = dict(zip(op.axis, ivs, strict=True))
        tr = dag.translator(env, op.name)
        part = [o(*ivs) for o in outs]
        if exact:
            live = tr(_conj([a.extent > 0 for a in exact]))
            part = [tirx.if_then_else(live, p, fit(tr(i), d))
                    for p, i, d in zip(part, red.combiner.identity, dtypes, strict=True)]
        if red.init:
            init = [fit(tr(i), d) for i, d in zip(red.init, dtypes, strict=True)]
            tr = dag.translator({**env, **dict(zip(red.combiner.lhs, init, strict=True)),
                                 **dict(zip(red.combiner.rhs, part, strict=True))}, op.name)
            part = [fit(tr(r), d) for r, d in zip(red.combiner.result, dtypes, strict=True)]
        return part if n > 1 else part[0]

    out2 = te.compute(shape, fcombine, name=name)
    return list(out2) if isinstance(out2, (list, tuple)) else [out2]


def _scatter(op: ScatterOp, dag: _Dag) -> Any:
    """`te.extern`: zero-fill, then a serial loop nest `if cond: out[index] += value`."""
    tvm = load_tvm()
    te, tirx = tvm.te, tvm.tirx
    for e in op.exprs:
        if any(isinstance(x, Reduce) for x in walk(e)):
            raise TranslationError(f"scatter stage {op.name!r}: reductions inside a scatter are not "
                                   "supported; compute them in a stage of their own first")
    shape = dag.translator({}, op.name).shape(op.shape)
    parts = [(b, ()) for a in op.axis for b in (a.lo, a.extent)]
    for u in op.updates:  # index and value are evaluated only where the condition holds
        parts += [(u.condition, ()), *((e, facts(u.condition)) for e in (*u.index, u.value))]
    dag.check(parts)
    checks = dag.checks

    def fcompute(ins: Any, outs: Any) -> Any:
        bufs = dict(zip(op.inputs, ins, strict=True))
        out = outs[0]

        def load(r: Read, idx: list[Any]) -> Any:
            return tirx.BufferLoad(bufs[r.tensor], idx)

        zvars = [tirx.Var(f"z{k}", INDEX64) for k in range(len(shape))]
        zero: Any = tirx.BufferStore(out, tirx.const(0, op.dtype), zvars)
        for v, s in reversed(list(zip(zvars, shape, strict=True))):
            zero = tirx.For(v, tirx.const(0, INDEX64), s, tirx.ForKind.SERIAL, zero)
        env: dict[Expr, Any] = {}
        bounds = []
        for a in op.axis:
            tr = ExprTranslator({**dag.vars, **env}, load, op.name, checks=checks)
            v = tirx.Var(a.name, INDEX64)
            bounds.append((v, fit(tr(a.lo), INDEX64), fit(tr(a.extent), INDEX64)))
            env[a] = v
        tr = ExprTranslator({**dag.vars, **env}, load, op.name, checks=checks)
        adds = []
        for u in op.updates:
            idx = [tr(tvm_index(i)) for i in u.index]
            idx = [tr.checked(x, op.shape[d], _scatter_site(op, d, i))
                   if dag.check_bounds and _target_unproven(op, u, d) else x
                   for d, (i, x) in enumerate(zip(u.index, idx, strict=True))]
            add: Any = tirx.BufferStore(
                out, tirx.BufferLoad(out, idx) + fit(tr(u.value), op.dtype), idx)
            if not (isinstance(u.condition, Const) and u.condition.value is True):
                add = tirx.IfThenElse(tr(u.condition), add, None)
            adds.append(add)
        body: Any = adds[0] if len(adds) == 1 else tirx.SeqStmt(adds)
        for v, lo, ext in reversed(bounds):
            body = tirx.For(v, lo, ext, tirx.ForKind.SERIAL, body)
        return tirx.SeqStmt([zero, body])

    return te.extern(shape, [dag.tensor(t) for t in op.inputs], fcompute, name=op.name,
                     dtype=op.dtype)


def _target_unproven(op: ScatterOp, u: Any, d: int) -> bool:
    """Dim `d` of update `u`'s target index is not proven inside the scatter's output."""
    known = facts(u.condition)
    return not dead(u.index, known) and \
        dim_verdict(u.index[d], op.shape[d], known) is not Verdict.PROVEN


def _scatter_site(op: ScatterOp, d: int, index: Expr) -> str:
    return (f"stage {op.name}: a scatter index is out of bounds: {op.name}[...] dim {d}, "
            f"index `{expr_str(index)}`")


# -- shared subexpressions as stages ------------------------------------------------------

SHARE_MIN = 2000  # tree nodes of a stage's expressions; smaller stages are translated as they are


def hoist_shared(op: ComputeOp | ScatterOp) -> tuple[ComputeOp | ScatterOp, list[Tensor]]:
    """`(op', stages)`: `op` reading, in place of each non-leaf subexpression it uses twice or
    more, a stage computing it over the axes it uses (0-based, as `te.compute` lifts a nested
    reduction), when `op`'s expressions written out as trees exceed SHARE_MIN nodes; `stages`
    come producers first.  Only what `eager_ok` allows over axes with static bounds moves: a
    stage computes its whole box, guards and reduction conditions included."""
    exprs = op.body if isinstance(op, ComputeOp) else op.exprs
    top = object()  # above every expression, so that one walk spans them all

    def kids(x: Any) -> tuple[Expr, ...]:
        return exprs if x is top else children(x)
    order: list[Any] = []  # producers first, `top` last

    def size(x: Any, ns: list[int]) -> int:
        order.append(x)
        return 1 + sum(ns)
    if fold(top, kids, size, key=_same) <= SHARE_MIN + 1:
        return op, []
    uses = Counter(k for x in order for k in kids(x))  # structurally equal nodes are one
    ok: dict[Any, bool] = {}
    for x in order[:-1]:
        ok[x] = eager_ok(x, [ok[k] for k in kids(x)])
    rank = {a: d for d, a in enumerate(op.axis)}
    stages: list[Tensor] = []

    def image(x: Any, new: list[Any]) -> Any:
        if x is top:
            return new
        y = rebuild(x, tuple(new))
        if not (uses[x] > 1 and isinstance(x, Call) and ok[x]):
            return y
        axes = sorted((v for v in free_vars(y) if isinstance(v, IterVar)),
                      key=lambda v: rank.get(v, len(rank)))
        if any(isinstance(w, IterVar) for v in axes for w in (*walk(v.lo), *walk(v.extent))):
            return y  # a dependent range: no box to compute over
        new_axes = tuple(IterVar(v.name, Const(0, v.dtype), v.extent, "data") for v in axes)
        body = substitute(y, {v: a if is_zero(v.lo) else a + v.lo
                              for v, a in zip(axes, new_axes, strict=True)})
        stage = ComputeOp(f"{op.name}_cse{len(stages)}", new_axes, (body,))
        stages.append(Tensor(stage, 0, tuple(a.extent for a in new_axes), y.dtype))
        return Read(stages[-1], tuple(v if is_zero(v.lo) else v - v.lo for v in axes), y.dtype)
    out = fold(top, kids, image, key=_same)
    if isinstance(op, ComputeOp):
        return ComputeOp(op.name, op.axis, tuple(out), op.tag, op.attrs), stages
    it = iter(out)
    ups = [ScatterUpdate(tuple(next(it) for _ in u.index), next(it), next(it)) for u in op.updates]
    return ScatterOp.of(op.name, op.shape, op.dtype, op.axis, ups), stages


def _same(x: Any) -> Any:
    return x  # a node is its own key: Exprs compare structurally (hash cached)


def eager_ok(e: Expr, safe: list[bool]) -> bool:
    """Whether `e` may be evaluated where its guards fail (`safe`: whether its operands may):
    no reduction, no read te.bounds cannot prove in bounds without facts, and no integer
    division by anything but a nonzero constant (LLVM traps on 0)."""
    match e:
        case Reduce():
            return False
        case Read():
            ok = all(v is Verdict.PROVEN for v in read_verdicts(e))
        case Call(op=Op.DIV | Op.FLOORDIV | Op.FLOORMOD, args=(_, d)) if d.dtype.startswith(
                ("int", "uint")):
            ok = isinstance(d, Const) and d.value != 0
        case _:
            ok = True
    return ok and all(safe)


# -- public entry points --------------------------------------------------------------

def symbolic_vars(tensors: Sequence[Tensor]) -> list[Var]:
    """The symbolic dims (`te.var`) used anywhere in the DAG of `tensors`, in first-use order."""
    out: dict[Var, None] = {}
    for t in topo_order(tensors):
        exprs: list[Expr] = list(t.shape)
        match t.op:
            case ComputeOp(body=body):
                exprs += list(body)
            case ScatterOp():
                exprs += [*t.op.exprs, *(x for a in t.op.axis for x in (a.lo, a.extent))]
        for e in exprs:
            for x in walk(e):  # reducer lhs/rhs vars are not children, so never seen here
                if isinstance(x, Var):
                    out[x] = None
                if isinstance(x, Reduce):
                    for a in x.axis:
                        out.update((v, None) for v in (*walk(a.lo), *walk(a.extent))
                                   if isinstance(v, Var))
    return list(out)


def translate(outputs: Sequence[Tensor], bind: Mapping[Tensor, Any] | None = None,
              var_map: Mapping[Var, Any] | None = None,
              check_bounds: bool | None = None) -> list[Any]:
    """`tvm.te` tensors computing `outputs`.

    `bind` maps texpr_ad tensors (placeholders, or any stage to take as given,
    e.g. a forward output) to existing TVM tensors; other placeholders get a
    fresh `tvm.te.placeholder`.  `var_map` maps symbolic dims to TVM PrimExprs;
    unmapped ones get a fresh int64 `tirx.Var`.  Reads and scatters the bounds prover
    cannot prove in bounds (data-dependent indices) are checked when the code runs
    (`checked_index`); `check_bounds=False` leaves them unchecked (a bad index then reads or
    writes outside the buffer); None checks them unless the current target is a device
    (`checks_on`).
    """
    tvm = load_tvm()
    outputs = as_list(outputs, "translate(outputs=)", is_te_tensor, "texpr_ad te tensors")
    vars_ = dict(var_map or {})
    for v in symbolic_vars(outputs):
        vars_.setdefault(v, tvm.tirx.Var(v.name, INDEX64))
    dag = _Dag(dict(bind or {}), vars_, checks_on(check_bounds))
    for t in _order(outputs, dag.bound):
        if dag.has(t):
            continue
        match t.op:
            case PlaceholderOp(name=name):
                dag.stages[id(t.op)] = [tvm.te.placeholder(
                    dag.translator({}, name).shape(t.shape), t.dtype, name=name)]
            case ComputeOp() | ScatterOp():
                op, shared = hoist_shared(t.op)
                for s in shared:
                    dag.stages[id(s.op)] = _compute(s.op, dag)  # type: ignore[arg-type]
                dag.stages[id(t.op)] = _compute(op, dag) if isinstance(op, ComputeOp) else \
                    [_scatter(op, dag)]
    return [dag.tensor(t) for t in outputs]


def _order(outputs: Sequence[Tensor], stop: Mapping[Tensor, Any]) -> list[Tensor]:
    """Producers before consumers, not looking behind tensors in `stop` (an explicit stack:
    a chain of stages is not bounded by Python's recursion limit)."""
    order: list[Tensor] = []
    seen: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(t, False) for t in reversed(outputs)]
    while stack:
        t, done = stack.pop()
        if done:
            order.append(t)
            continue
        if id(t) in seen:
            continue
        seen.add(id(t))
        stack.append((t, True))
        if t not in stop:
            stack += [(s, False) for s in reversed(t.op.inputs) if id(s) not in seen]
    return order


@dataclass
class Built:
    """A compiled TVM function for `outputs` of a texpr_ad DAG; call it with NumPy arrays."""

    inputs: list[Tensor]
    outputs: list[Tensor]
    func: Any
    prim_func: Any
    sym: list[Var]

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        from ..te.interp import bind_shapes
        tvm = load_tvm()
        if len(arrays) != len(self.inputs):
            raise KernelArgumentError(
                f"expected {len(self.inputs)} arrays ({', '.join(t.name for t in self.inputs)}), "
                f"got {len(arrays)}; pass one array per input, in the order of inputs=")
        arrs = [np.ascontiguousarray(a) for a in arrays]
        for t, a in zip(self.inputs, arrs, strict=True):
            if str(a.dtype) != t.dtype:
                raise KernelArgumentError(f"input {t.name!r} is {t.dtype} but got an array of "
                                          f"dtype {a.dtype}; convert it (a.astype({t.dtype!r}))")
        env = bind_shapes(self.inputs, arrs)
        outs = [np.zeros(tuple(_eval_int(s, env) for s in t.shape), t.dtype) for t in self.outputs]
        args = [tvm.runtime.tensor(a) for a in (*arrs, *outs)]
        extra = [int(env[v]) for v in self.sym if v not in _shape_vars(self.inputs)]
        self.func(*args, *extra)
        return [a.numpy() for a in args[len(arrs):]]


def _shape_vars(inputs: Sequence[Tensor]) -> set[Var]:
    return {x for t in inputs for s in t.shape for x in walk(s) if isinstance(x, Var)}


def _eval_int(e: Expr, env: Mapping[Expr, int]) -> int:
    from ..te.interp import NUMPY_IMPL
    match e:
        case Const(value=v):
            return int(v)
        case Var():
            if e not in env:
                raise KernelArgumentError(
                    f"symbolic dim `{e}` is not determined by the input shapes: an output's shape "
                    "uses it but no input's does; make it a dim of an input")
            return int(env[e])
        case Call(op=op, args=args):
            return int(NUMPY_IMPL[op](*(np.int64(_eval_int(a, env)) for a in args)))
    raise KernelArgumentError(f"cannot evaluate the output dim `{e}` from the input shapes")


def prim_func(outputs: Sequence[Tensor], inputs: Sequence[Tensor],
              check_bounds: bool | None = None) -> Any:
    """A `tirx.PrimFunc` with parameters (*inputs, *outputs, *symbolic dims not in input shapes);
    `check_bounds` as in `translate`."""
    tvm = load_tvm()
    outputs = as_list(outputs, "outputs", is_te_tensor, "texpr_ad te tensors")
    inputs = as_list(inputs, "inputs", is_te_tensor, "texpr_ad te tensors")
    missing = [t.name for t in topo_order(outputs)
               if isinstance(t.op, PlaceholderOp) and t not in inputs]
    if missing:
        raise TranslationError(f"the outputs read placeholder(s) {missing} that are not in inputs=")
    vars_ = {v: tvm.tirx.Var(v.name, INDEX64) for v in symbolic_vars([*outputs, *inputs])}
    ins = translate(inputs, var_map=vars_)
    outs = translate(outputs, bind=dict(zip(inputs, ins, strict=True)), var_map=vars_,
                     check_bounds=check_bounds)
    free = [vars_[v] for v in vars_ if v not in _shape_vars(inputs)]
    return tvm.te.create_prim_func([*ins, *outs, *free])


def build(outputs: Sequence[Tensor], inputs: Sequence[Tensor], target: str = "llvm",
          check_bounds: bool | None = None) -> Built:
    """Translate, `tvm.compile` and wrap `outputs` as a NumPy-in/NumPy-out callable
    (`check_bounds` as in `translate`; None: checked unless `target` is a device)."""
    outputs = as_list(outputs, "outputs", is_te_tensor, "texpr_ad te tensors")
    inputs = as_list(inputs, "inputs", is_te_tensor, "texpr_ad te tensors")
    pf = prim_func(outputs, inputs, checks_on(check_bounds, target))
    sym = symbolic_vars([*outputs, *inputs])
    return Built(inputs, outputs, load_tvm().compile(pf, target=target), pf, sym)
