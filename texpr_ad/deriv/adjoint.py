"""Reverse mode over the stages of a tensor DAG: `grad(output, inputs, head)`.

For a stage `Y[i] = body(i, r)` reading `X[g(i, r)]` the contribution is

    dX[j] += sum_{(i, r) : g(i, r) = j, guards} dY[i] * d body / d X[g(i, r)]

Each read becomes a `Term`; the index solver turns a term into a gather (new
reduction axes with bounds derived from the domain) and only reads it cannot
invert (data-dependent indices) become scatter-add stages.  Stages are visited
in reverse topological order, so a tensor read by several stages accumulates
all its terms before its own adjoint is built.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from .. import te
from .._env import debug_level
from ..te import dtype as dt
from ..te.expr import Call, Const, Expr, IterVar, Reduce, const
from ..te.tensor import ComputeOp, PlaceholderOp, ScatterOp, ScatterUpdate, Tensor
from ..te.ops import Op
from ..te.visit import reads, substitute, transform, walk
from .centered import is_centered_zero
from .collect import Contribution, collect
from .invariance import shift_invariant
from .errors import GradientError
from .reducers import ArgExtreme, arg_extreme, linearize
from ..te.simplify import simplify
from .solver import invert


@dataclass(frozen=True)
class Term:
    """`dX[index(a)] += value(a)` for every point `a` of `unknowns` where all `guards` hold."""

    index: tuple[Expr, ...]
    unknowns: tuple[IterVar, ...]
    value: Expr
    guards: tuple[Expr, ...]
    scatter: bool = False  # transpose as a scatter even where the index can be inverted


def _all(conds: Sequence[Expr]) -> Expr:
    """The conjunction of `conds` (True when there are none); a constant False stays False."""
    out: Expr | None = None
    for c in conds:
        out = c if out is None else out & c
    return const(True) if out is None else out


# -- per-stage rules ----------------------------------------------------------------------

def _reduction_terms(body: Reduce, Y: Tensor, data: tuple[IterVar, ...], head: Expr,
                     wanted: Callable[[Tensor], bool], where: str) -> list[tuple[Tensor, Term]]:
    """The transpose of the reduction's linearization (`reducers.LINEARIZE`):

        dsrc(i, r) += src_scale(dY[i])  where src_guards      dinit(i) += init_scale(dY[i])  where init_guards

    A max/min whose gather would sum over overlapping windows (pooling) goes through its
    arg-extreme instead (`_arg_extreme_terms`).
    """
    body, lin = linearize(body, Y, data, where)
    reads = collect(body.source[0], wanted, where)
    ax = arg_extreme(body, Y, data) if any(_windowed(c, data + body.axis) for c in reads) else None
    if ax is not None:
        return _arg_extreme_terms(ax, body, lin.src_guards, reads, data, head)
    out = [(c.read.tensor, Term(c.read.indices, data + body.axis, lin.src_scale(head) * c.coeff,
                                c.guards + lin.src_guards))
           for c in reads]
    if body.init:
        out += [(c.read.tensor, Term(c.read.indices, data, lin.init_scale(head) * c.coeff,
                                     c.guards + lin.init_guards))
                for c in collect(body.init[0], wanted, where)]
    return out


def _windowed(c: Contribution, unknowns: tuple[IterVar, ...]) -> bool:
    """Whether the gather of read `c` over `unknowns` sums over several of them per point."""
    probe = tuple(IterVar(f"j{d}", const(0), s) for d, s in enumerate(c.read.tensor.shape))
    inv = invert(c.read.indices, unknowns, probe, c.guards)
    return inv is not None and bool(inv.new_axes)


def _arg_extreme_terms(ax: ArgExtreme, body: Reduce, attained: tuple[Expr, ...],
                       reads: list[Contribution], data: tuple[IterVar, ...], head: Expr
                       ) -> list[tuple[Tensor, Term]]:
    """dY[i] scattered to the unique arg-extreme, and for the rare tied outputs split over the
    window (`reducers.ArgExtreme`): both in one scatter stage over (i, r), the first update at
    the window's first point only, so the stage fills one buffer and needs no summing pass.
    The pinned update keeps the reduction's condition (always true at a real arg-extreme), so
    its index is proven in bounds whatever the code holds, and needs no run-time check.
    `attained` is the tie split's guard from the linearization (condition, src attains Y)."""
    pin = lambda e: substitute(e, ax.pin)  # noqa: E731
    first = tuple(a.eq(a.lo) for a in body.axis)
    tied = (ax.tied, *attained)
    out = []
    for c in reads:
        out.append((c.read.tensor, Term(tuple(map(pin, c.read.indices)), data + body.axis,
                                        head * pin(c.coeff),
                                        (*first, ax.unique, pin(body.condition), *map(pin, c.guards)),
                                        scatter=True)))
        out.append((c.read.tensor, Term(c.read.indices, data + body.axis, ax.share(head) * c.coeff,
                                        tied + c.guards, scatter=True)))
    return out


def _stage_terms(op: ComputeOp | ScatterOp, outs: dict[int, Tensor], heads: dict[int, Tensor],
                 prefix: tuple[IterVar, ...], wanted: Callable[[Tensor], bool]
                 ) -> list[tuple[Tensor, Term]]:
    where = f"stage {op.name!r}"
    if isinstance(op, ScatterOp):
        return [(c.read.tensor, Term(c.read.indices, op.axis, heads[0][prefix + u.index] * c.coeff,
                                     c.guards + (u.condition,)))
                for u in op.updates for c in collect(u.value, wanted, where)]
    terms: list[tuple[Tensor, Term]] = []
    data = op.axis
    for k, body in enumerate(op.body):
        if k not in heads:
            continue
        head = heads[k][prefix + data]
        if not isinstance(body, Reduce):
            y = outs[k][data]  # partials that mention the whole body read the forward output instead
            reuse = lambda x, b=body, y=y: y if x.same_as(b) else None  # noqa: E731
            terms += [(c.read.tensor, Term(c.read.indices, data, head * transform(c.coeff, reuse), c.guards))
                      for c in collect(body, wanted, where)]
            continue
        terms += _reduction_terms(body, outs[k], data, head, wanted, where)
    return terms


# -- building adjoint tensors from terms --------------------------------------------------

class _Builder:
    def __init__(self, prefix_vars: tuple[IterVar, ...], prefix_shape: tuple[Expr, ...]):
        self.prefix_vars, self.prefix_shape = prefix_vars, prefix_shape

    def build(self, X: Tensor, terms: list[Term], name: str, extra: Tensor | None = None) -> Tensor:
        """The adjoint of X: the sum of its gather terms, scatter stages and `extra` (a head)."""
        npre = len(self.prefix_vars)
        probe = tuple(IterVar(f"j{d}", const(0), s) for d, s in enumerate(X.shape))
        same = dict(zip(self.prefix_vars, self.prefix_vars, strict=True))
        gathers = [t for t in terms if not t.scatter and self._gather(t, same, probe, X.dtype) is not None]
        groups: dict[tuple, list[Term]] = {}  # scatter terms over one domain share a loop nest
        for t in terms:
            if not any(t is g for g in gathers):
                groups.setdefault(_scatter_key(t), []).append(t)
        if not gathers and len(groups) == 1 and extra is None:  # a lone scatter needs no wrapper
            return self._scatter(X, next(iter(groups.values())), name)
        scatters = [self._scatter(X, g, f"{name}_scatter{k}") for k, g in enumerate(groups.values())]

        def body(*idx: IterVar) -> Expr:
            psub = dict(zip(self.prefix_vars, idx[:npre], strict=True))
            parts = [self._gather(t, psub, idx[npre:], X.dtype) for t in gathers]
            parts += [s[idx] for s in scatters] + ([extra[idx]] if extra is not None else [])
            parts = [p for p in parts if not _is_zero_const(p)] or parts[:1]  # terms proven zero
            out = parts[0]
            for e in parts[1:]:
                out = out + e  # type: ignore[operator]
            return out.astype(X.dtype)  # type: ignore[union-attr]

        body.axis_names = self._axis_names(X, terms)  # type: ignore[attr-defined]
        return te.compute(self.prefix_shape + X.shape, body, name=name, tag="adjoint")

    def _axis_names(self, X: Tensor, terms: list[Term]) -> list[str]:
        """Name the adjoint's axes as the forward read named them (`dA[i, k]`), else ax0..."""
        names = [v.name for v in self.prefix_vars]
        for d in range(X.ndim):
            cands = [t.index[d].name for t in terms if isinstance(t.index[d], IterVar)]
            n = cands[0] if cands else f"ax{d}"
            names.append(n if n not in names else f"{n}{d}")
        return names

    def _gather(self, t: Term, psub: dict[IterVar, IterVar], j: Sequence[IterVar], dtype: str) -> Expr | None:
        index = tuple(simplify(substitute(i, psub)) for i in t.index)
        guards = tuple(simplify(substitute(g, psub)) for g in t.guards if not _is_true(g))
        inv = invert(index, t.unknowns, tuple(j), guards, gate=True)
        if inv is None:
            return None
        value = simplify(substitute(substitute(t.value, psub), inv.subst)).astype(dtype)
        conds = [simplify(substitute(c, inv.subst)) for c in inv.conditions]
        if any(isinstance(c, Const) and c.value is False for c in conds) or any(
                isinstance(a.extent, Const) and a.extent.value <= 0 for a in inv.new_axes):
            return const(0.0, dtype)  # no point of the domain reads X here
        # index-range conditions first: `&` short-circuits, so they guard data-dependent reads
        conds = sorted((c for c in conds if not _is_true(c)), key=lambda c: bool(reads(c)))
        aside, axes = None, inv.new_axes
        if axes:
            axes, aside = _gate_aside(axes, value, conds)
            ren = dict(zip(inv.new_axes, axes, strict=True))
            value, conds = substitute(value, ren), [substitute(c, ren) for c in conds]
            # factors free of the summed axes move out, where the sum is over a fixed non-empty
            # box (so they were evaluated before too: no guard protected them)
            fixed_box = not conds and all(isinstance(a.lo, Const) and isinstance(a.extent, Const)
                                          and a.extent.value > 0 for a in axes)
            outer, inner = _factor_out(value, set(axes)) if fixed_box else (None, value)
            if fixed_box and is_centered_zero(inner, tuple(axes)):
                return const(0.0, dtype)  # sum_k c (x - mean_k x) = 0: a variance's mean term
            red = te.sum(inner, axis=list(axes), where=_all(conds) if conds else None)
            red = red if outer is None else outer * red
            return red if aside is None else te.if_then_else(aside, red, const(0.0, dtype))
        return te.if_then_else(_all(conds), value, const(0.0, dtype)) if conds else value

    def _scatter(self, X: Tensor, terms: list[Term], name: str) -> Tensor:
        """One scatter-add stage over the terms' common domain, an update per term."""
        copies: dict[Expr, Expr] = {}
        axes: list[IterVar] = []
        for v in self.prefix_vars + terms[0].unknowns:
            a = IterVar(v.name, substitute(v.lo, copies), substitute(v.extent, copies), "data")
            copies[v] = a
            axes.append(a)
        updates = [ScatterUpdate(tuple(simplify(substitute(i, copies)) for i in self.prefix_vars + t.index),
                                 simplify(substitute(t.value, copies)).astype(X.dtype),
                                 simplify(substitute(_all(t.guards), copies)))
                   for t in terms]
        op = ScatterOp.of(name, self.prefix_shape + X.shape, X.dtype, tuple(axes), updates)
        return Tensor(op, 0, op.shape, op.dtype)


def _gate_aside(axes: tuple[IterVar, ...], value: Expr, conds: Sequence[Expr]
                ) -> tuple[tuple[IterVar, ...], Expr | None]:
    """The new axes of an inversion, with the conjuncts of its gate (the first axis' extent
    `select(gate, E, 0)`, solver `gate=True`) on target axes that nothing else in the sum
    uses taken out, and those conjuncts (None if none): `sum_{f < select(ax3 == 0, E, 0)} t(f)`
    becomes `if_then_else(ax3 == 0, sum_{f < E} t(f), 0)`.  The reduction, lifted to a stage
    over the axes it uses (`te.tensor._split_nested`), then has no ax3: no loop over ax3 whose
    other values run an empty sum after computing its hoisted values, and two such sums of one
    adjoint (grid_sample's dgrid[.., 0] and [.., 1]) are reductions over the same points.  The
    term is the same wherever the gate taken out fails (it does not read those axes)."""
    a0, e = axes[0], axes[0].extent
    if not (isinstance(e, Call) and e.op is Op.SELECT and _is_zero_const(e.args[2])):
        return axes, None
    parts = _conjuncts(e.args[0])
    rest = [value, *conds, e.args[1], a0.lo, *(b for a in axes[1:] for b in (a.lo, a.extent))]
    aside: list[Expr] = []
    keep: list[Expr] = []
    for k, c in enumerate(parts):
        used = {v for x in [*rest, *parts[:k], *parts[k + 1:]] for v in walk(x)
                if isinstance(v, IterVar)}
        mine = {v for v in walk(c) if isinstance(v, IterVar)}
        (aside if mine and not mine & used else keep).append(c)
    if not aside:
        return axes, None
    ext = e.args[1] if not keep else Call(Op.SELECT, (_all(keep), e.args[1], const(0)), e.dtype)
    new = IterVar(a0.name, a0.lo, ext, "reduce")
    ren = {a0: new}
    return (new, *(IterVar(a.name, substitute(a.lo, ren), substitute(a.extent, ren), "reduce")
                   for a in axes[1:])), _all(aside)


def _conjuncts(c: Expr) -> list[Expr]:
    """`c`'s operands of `&`, flattened."""
    if isinstance(c, Call) and c.op is Op.AND:
        return _conjuncts(c.args[0]) + _conjuncts(c.args[1])
    return [c]


def _scatter_key(t: Term) -> tuple:
    """Scatter terms with one key share a stage: the same domain, and the same index dims that are
    plain loop axes (so an axis the scheduler may parallelize over stays injective for all)."""
    plain = tuple((d, i) for d, i in enumerate(t.index) if isinstance(i, IterVar) and i in t.unknowns)
    return (tuple(id(u) for u in t.unknowns), plain)


def _factor_out(value: Expr, axes: set[IterVar]) -> tuple[Expr | None, Expr]:
    """Split a product into (factors free of `axes`, the rest): `sum_k a * f(k) = a * sum_k f(k)`,
    so the reduction holds only what varies, and equal reductions can be shared (`te.dag.cse`)."""
    factors: list[Expr] = []

    def flat(e: Expr) -> None:
        if isinstance(e, Call) and e.op is Op.MUL:
            flat(e.args[0])
            flat(e.args[1])
        elif isinstance(e, Call) and e.op is Op.NEG:
            factors.append(Const(-1.0, e.dtype))
            flat(e.args[0])
        else:
            factors.append(e)

    flat(value)
    varies = [f for f in factors if any(v in axes for v in walk(f) if isinstance(v, IterVar))]
    fixed = [f for f in factors if not any(f is g for g in varies)]
    if not fixed or not varies:
        return None, value
    return simplify(_product(fixed)), _product(varies)


def _product(fs: list[Expr]) -> Expr:
    out = fs[0]
    for f in fs[1:]:
        out = out * f
    return out


def _is_zero_const(e: Expr) -> bool:
    return isinstance(e, Const) and not isinstance(e.value, bool) and e.value == 0


def _is_true(e: Expr) -> bool:
    return isinstance(e, Const) and e.value is True


def zeros_like(X: Tensor, prefix_shape: tuple[Expr, ...] = (), name: str = "") -> Tensor:
    """An exact-zero adjoint (marked `attrs["zero"]` so reports can say so)."""
    return te.compute(prefix_shape + X.shape, lambda *i: const(0.0, X.dtype),
                      name=name or f"d{X.name}", tag="adjoint", attrs={"zero": True})


# -- the public entry -----------------------------------------------------------------------

def check_tensors(xs: Sequence[object], what: str) -> None:
    """A GradientError naming the first entry of `xs` that is not a te tensor."""
    for k, x in enumerate(xs):
        if not isinstance(x, Tensor):
            raise GradientError(f"{what}[{k}] is a {type(x).__name__}, not a te tensor; pass the "
                                "placeholders (or intermediate tensors) made with te")


def _check_head(out: Tensor, head: Tensor) -> tuple[Expr, ...]:
    n, m = out.ndim, head.ndim
    if m < n or any(not a.same_as(b) for a, b in zip(head.shape[m - n:], out.shape, strict=True)):
        raise GradientError(f"head {head.name!r} has shape {te.tensor.shape_str(head.shape)}; it must be "
                            f"the output {out.name!r}'s shape {te.tensor.shape_str(out.shape)} "
                            "(optionally with leading extra dims)")
    if head.dtype != out.dtype:
        raise GradientError(f"head {head.name!r} is {head.dtype} but output {out.name!r} is {out.dtype}")
    return head.shape[: m - n]


def _eye(out: Tensor) -> Tensor:
    n = out.ndim
    one, zero = const(1.0, out.dtype), const(0.0, out.dtype)
    return te.compute(out.shape + out.shape,
                      lambda *ix: te.if_then_else(te.all(*(ix[k].eq(ix[n + k]) for k in range(n))), one, zero)
                      if n else one, name=f"{out.name}_eye")


def _heads_by_output(outs: Sequence[Tensor], heads: Sequence[Tensor]) -> dict[Tensor, Tensor]:
    """Each output's head; an output listed several times (`[y, y]`) gets the sum of its heads,
    as a tensor read twice gets the sum of its readers' adjoints."""
    given: dict[Tensor, Tensor] = {}
    for o, h in zip(outs, heads, strict=True):
        g = given.get(o)
        given[o] = h if g is None else te.compute(
            h.shape, lambda *i, a=g, b=h: a[i] + b[i], name=f"d{o.name}_sum", tag="adjoint")
    return given


def grad(output: Tensor | Sequence[Tensor], inputs: Sequence[Tensor],
         head: Tensor | Sequence[Tensor] | None = None) -> list[Tensor | None]:
    """Adjoints of `output` with respect to each of `inputs`, as te tensors.

    `head` has the output's shape, optionally with leading extra dims P; each
    adjoint then has shape P + input.shape.  `head=None` gives the full Jacobian
    (P = output.shape; TVM's old `te.gradient`).  Integer inputs get None; a
    float input the output does not depend on gets an exact-zero tensor.
    Several outputs take a list of heads; an output listed twice (or also an input) gets the
    sum of its heads.
    """
    outs = list(output) if isinstance(output, (list, tuple)) else [output]
    check_tensors(outs, "output")
    if isinstance(inputs, Tensor):
        raise GradientError("inputs must be a list of te tensors; wrap a single one as [x]")
    if head is None:
        if len(outs) != 1:
            raise GradientError("head=None (Jacobian) needs a single output; pass one head per output")
        heads = [_eye(outs[0])]
    else:
        heads = list(head) if isinstance(head, (list, tuple)) else [head]
    if len(heads) != len(outs):
        raise GradientError(f"got {len(heads)} heads for {len(outs)} outputs; pass one head per output")
    check_tensors(heads, "head")
    for o in outs:
        if not dt.is_float(o.dtype):
            raise GradientError(f"output {o.name!r} has dtype {o.dtype}; only float outputs can be "
                                "differentiated (integer outputs have no gradient)")
    prefixes = [_check_head(o, h) for o, h in zip(outs, heads, strict=True)]
    prefix_shape = prefixes[0]
    if any(len(p) != len(prefix_shape) or any(not a.same_as(b) for a, b in zip(p, prefix_shape, strict=True))
           for p in prefixes):
        raise GradientError("all heads must have the same leading extra dims")
    prefix = tuple(IterVar(f"p{k}", const(0), s) for k, s in enumerate(prefix_shape))
    inputs = list(inputs)
    check_tensors(inputs, "inputs")
    order = te.topo_order(outs)
    wrt = {x for x in inputs}
    inert = shift_invariant(outs, inputs)  # row maxima whose shift cancels: no gradient
    depends: dict[Tensor, bool] = {}
    for t in order:
        depends[t] = t in wrt or (t not in inert and any(depends.get(x, False) for x in t.op.inputs))

    def wanted(t: Tensor) -> bool:
        return depends.get(t, False) and dt.is_float(t.dtype)

    builder = _Builder(prefix, prefix_shape)
    given = _heads_by_output(outs, heads)
    adj: dict[Tensor, Tensor] = {}
    pending: dict[Tensor, list[Term]] = {}
    ops: dict[int, list[Tensor]] = {}
    for t in order:
        ops.setdefault(id(t.op), []).append(t)
    for group in reversed(list(ops.values())):
        op = group[0].op
        if isinstance(op, PlaceholderOp) or not any(depends[t] for t in group):
            continue
        for t in group:
            if t in pending:
                adj[t] = builder.build(t, pending.pop(t), f"d{t.name}", extra=given.get(t))
            elif t in given:
                adj[t] = given[t]
        heads_here = {t.value_index: adj[t] for t in group if t in adj}
        if not heads_here:
            continue
        for X, term in _stage_terms(op, {t.value_index: t for t in group}, heads_here, prefix, wanted):
            pending.setdefault(X, []).append(term)
    result: list[Tensor | None] = []
    for x in inputs:
        if not dt.is_float(x.dtype):
            result.append(None)
        elif x in pending:
            result.append(builder.build(x, pending[x], f"d{x.name}", extra=given.get(x)))
        elif x in adj:
            result.append(adj[x])
        elif x in given:
            result.append(given[x])
        else:
            result.append(zeros_like(x, prefix_shape))
    merged = iter(te.dag.cse([g for g in result if g is not None]))
    result = [None if g is None else next(merged) for g in result]
    if debug_level() >= 1:
        for t, why in inert.items():
            print(f"# {t.name}: {why}")
        for x, g in zip(inputs, result, strict=True):
            print(f"# adjoint of {x.name}:\n{g}" if g is not None else f"# {x.name}: no gradient")
    return result
