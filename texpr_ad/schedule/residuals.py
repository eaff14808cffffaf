"""Residuals: which forward tensors the backward reads from memory instead of recomputing.

An adjoint graph reads forward tensors (the output, a row maximum, a normalizer...).  Built
on its own, the backward kernel recomputes each of them from the inputs; with residuals the
forward kernel also returns them and the backward reads them as inputs.  `choose` walks the
forward tensors the adjoint reads, nearest first, and decides per tensor by one rule table
(`RULES`, first match wins):

| tensor | decision | why |
| --- | --- | --- |
| an output of the forward | save | the forward returns it anyway: no work, no extra memory |
| a reduction (or scatter) | save | the forward materializes it anyway; recomputing repeats its whole reduction |
| a reduction the adjoint computes from forward tensors alone (a max's tie count) | save | computed in the forward, so the backward does only the work that needs the cotangents |
| elementwise `E = exp(...)`, an output `Y = E / S` with `S` a sum of `E` (softmax) | rebuild as `Y * S` | reads the saved `Y`, `S` instead of recomputing `exp` from the inputs; where `S` is not finite and positive the row recomputes `E` |
| elementwise | recompute | a store in the forward and a load in the backward cost about what recomputing a few operations from its operands does; its forward operands become candidates in turn |

`save="none"` recomputes everything (the backward reads only the inputs), `save="all"`
saves every forward tensor the adjoint reads, and a collection of tensor names saves exactly
those (the rest recompute).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Collection, Sequence

from .. import te
from ..errors import TexprError
from ..te.dag import replace_inputs, topo_order
from ..te.expr import Call, Const, Expr, IterVar, Read, Reduce, ReduceKind
from ..te.ops import Op
from ..te.simplify import simplify
from ..te.tensor import ComputeOp, PlaceholderOp, ScatterOp, Tensor
from ..te.visit import transform, walk


class ResidualError(TexprError, ValueError):
    """A `save=` choice that names no forward tensor the backward reads."""


@dataclass(frozen=True)
class Decision:
    """Save `tensor` in the forward (or recompute it in the backward), and why."""

    tensor: Tensor
    save: bool
    reason: str
    rebuild: tuple[Tensor, Tensor] | None = None  # (Y, S): recompute as Y * S (`rebuilt`)

    def __str__(self) -> str:
        shape = "x".join(str(s) for s in self.tensor.shape) or "scalar"
        verb = "save     " if self.save else "rebuild  " if self.rebuild else "recompute"
        return f"{verb} {self.tensor.name} ({shape}): {self.reason}"


def _has_reduction(t: Tensor) -> bool:
    op = t.op
    return isinstance(op, ScatterOp) or (
        isinstance(op, ComputeOp) and any(isinstance(x, Reduce) for b in op.body for x in walk(b)))


@dataclass(frozen=True)
class _Where:
    outputs: set[int]   # ids of the forward's outputs
    adjoint: set[int]   # ids of adjoint stages that read no cotangent


# (test, save?, reason): the first row whose test holds decides; the last always holds.
Rule = tuple[Callable[[Tensor, _Where], bool], bool, str]
RULES: tuple[Rule, ...] = (
    (lambda t, w: id(t) in w.outputs, True, "an output of the forward: kept anyway, no extra work"),
    (lambda t, w: id(t) in w.adjoint and _has_reduction(t), True,
     "a reduction of the adjoint that reads no cotangent: computed in the forward, so the "
     "backward does only the work that needs the cotangents"),
    (lambda t, w: _has_reduction(t), True,
     "a reduction: the forward materializes it anyway, and recomputing repeats the reduction"),
    (lambda t, w: True, False,
     "elementwise: recomputing it from its operands costs about what a store and a load would"),
)


def _quotient_of(e: Tensor, outputs: Sequence[Tensor]) -> tuple[Tensor, Tensor] | None:
    """(Y, S) for an output `Y[i] = E[i] / S[j]` where `E = exp(...)` and `S[j]` sums `E` over
    one whole axis, `E[i]` among its terms (softmax): then `0 <= Y <= 1` and `E = Y * S`
    wherever `S` is finite and positive."""
    if not (isinstance(e.op, ComputeOp) and len(e.op.body) == 1
            and isinstance(e.op.body[0], Call) and e.op.body[0].op is Op.EXP):
        return None
    for y in outputs:
        op = y.op
        if not (isinstance(op, ComputeOp) and len(op.body) == 1):
            continue
        match op.body[0]:
            case Call(op=Op.DIV, args=(Read(tensor=t, indices=ie), Read(tensor=s, indices=js))) if (
                    t is e and all(a.same_as(b) for a, b in zip(ie, op.axis, strict=True))
                    and _sums_over_one_axis(s, e, js, op.axis)):
                return y, s
    return None


def _sums_over_one_axis(s: Tensor, e: Tensor, js: tuple[Expr, ...], at: tuple[IterVar, ...]) -> bool:
    """Whether `S[js] = sum_k E[...]` over one whole axis of E whose other indices are `at`."""
    if not (isinstance(s.op, ComputeOp) and len(s.op.body) == 1):
        return False
    match s.op.body[0]:
        case Reduce(combiner=c, source=(Read(tensor=t, indices=si),), axis=(k,), condition=cond) if (
                c.kind is ReduceKind.SUM and t is e and _is(simplify(cond), True)):
            si = _put(si, dict(zip(s.op.axis, js, strict=True)))
            at_k = [d for d, x in enumerate(si) if x.same_as(k)]
            return (len(at_k) == 1 and _is(simplify(k.lo), 0)
                    and _is(simplify(k.extent - e.shape[at_k[0]]), 0)
                    and all(x.same_as(a) for d, (x, a) in enumerate(zip(si, at)) if d != at_k[0]))
    return False


def _put(exprs: tuple[Expr, ...], axes: dict[IterVar, Expr]) -> tuple[Expr, ...]:
    """`exprs` with the axes in `axes` replaced by their images."""
    return tuple(transform(x, lambda v: axes.get(v) if isinstance(v, IterVar) else None)
                 for x in exprs)


def _is(x: Expr, value: object) -> bool:
    return isinstance(x, Const) and x.value == value and type(x.value) is type(value)


def rebuilt(d: Decision, mapping: dict[Tensor, Tensor]) -> Tensor:
    """The backward's image of a `rebuild` decision, over the saved tensors in `mapping`:
    `Y * S` where `S` is finite and positive (a row-invariant test), else `E` recomputed."""
    assert d.rebuild is not None
    y, s = d.rebuild
    (fallback,) = replace_inputs([d.tensor], mapping)
    ys, ss = mapping[y], mapping[s]
    op = y.op
    assert isinstance(op, ComputeOp)  # (a rebuild decision is made on a quotient, above)
    js = op.body[0].args[1].indices  # type: ignore[attr-defined]

    def body(*i: IterVar) -> Expr:
        sv = ss[_put(js, dict(zip(op.axis, i, strict=True)))]
        return te.if_then_else(te.all(sv > 0.0, sv < float("inf")), ys[i] * sv, fallback[i])
    return te.compute(d.tensor.shape, body, name=f"{d.tensor.name}_rebuilt")


def _forward_reads(t: Tensor, fwd: set[int]) -> list[Tensor]:
    """Computed forward tensors that the stage of `t` reads directly (once each, in order; in
    reduce-axis and scatter-domain bounds too)."""
    return [x for x in t.op.inputs if id(x) in fwd and not isinstance(x.op, PlaceholderOp)]


def _head_free(adjoints: Sequence[Tensor], heads: Sequence[Tensor], fwd: set[int]) -> set[int]:
    """Computed adjoint-graph tensors that read no cotangent (directly or not): the forward
    can compute them."""
    tainted = {id(h) for h in heads}
    free: set[int] = set()
    for t in topo_order(list(adjoints)):
        if id(t) in fwd or id(t) in tainted or isinstance(t.op, PlaceholderOp):
            continue
        if any(id(s) in tainted for s in t.op.inputs):
            tainted.add(id(t))
        else:
            free.add(id(t))
    return free


def choose(outputs: Sequence[Tensor], adjoints: Sequence[Tensor], heads: Sequence[Tensor] = (),
           save: str | Collection[str] = "auto") -> list[Decision]:
    """The save/recompute decision for every forward tensor the `adjoints` read (directly, or
    through forward tensors they recompute), nearest to the adjoint first.  Adjoint stages
    that read none of the cotangents `heads` count as forward tensors: a saved one is computed
    by the forward."""
    order = topo_order(list(outputs))
    fwd = {id(t) for t in order}
    where = _Where({id(t) for t in outputs}, _head_free(adjoints, heads, fwd))
    fwd |= where.adjoint
    names = None
    if save not in ("auto", "all", "none"):
        if isinstance(save, str) or not all(isinstance(n, str) for n in save):
            raise ResidualError(f"save must be 'auto', 'all', 'none' or a collection of tensor "
                                f"names, got {save!r}")
        names = set(save)
    frontier: dict[int, Tensor] = {}
    for t in topo_order(list(adjoints)):  # adjoint stages (not forward ones) read the frontier
        if id(t) not in fwd:
            for r in _forward_reads(t, fwd):
                frontier.setdefault(id(r), r)
    for t in adjoints:  # an adjoint that is itself a forward tensor (d/dx of y = x is the head)
        if id(t) in fwd and not isinstance(t.op, PlaceholderOp):
            frontier.setdefault(id(t), t)
    decisions: list[Decision] = []
    done: set[int] = set()
    queue = list(frontier.values())
    while queue:
        t = queue.pop(0)
        if id(t) in done:
            continue
        done.add(id(t))
        if names is not None:
            d = Decision(t, t.name in names, "named in save=" if t.name in names else
                         "not named in save=")
        elif save in ("all", "none"):
            d = Decision(t, save == "all", f"save={save!r}")
        else:
            d = next(Decision(t, s, why) for test, s, why in RULES if test(t, where))
            q = None if d.save else _quotient_of(t, outputs)
            if q is not None:
                d = Decision(t, False, f"the saved output {q[0].name} is it divided by "
                             f"{q[1].name}, a sum of it: rebuilt as {q[0].name} * {q[1].name} "
                             f"(no exp, no input read; recomputed in a row where {q[1].name} is "
                             f"not finite and positive)", rebuild=q)
                queue.extend(q)  # both must be saved: an output and a reduction
        decisions.append(d)
        if not d.save:
            queue.extend(r for r in _forward_reads(t, fwd) if id(r) not in done)
    if names is not None:
        unknown = names - {d.tensor.name for d in decisions}
        if unknown:
            raise ResidualError(f"save= names {sorted(unknown)}, which the backward does not "
                                f"read; it reads {[d.tensor.name for d in decisions]}")
    return decisions
