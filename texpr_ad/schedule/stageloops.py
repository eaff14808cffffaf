"""A compute stage's own loop nest as a tree: what the CPU renderer prints, one rule per node
kind (`cpu_render.NODE_RULES`), and what `print(plan)` shows, each node with its reason.

loopnest.py holds the loops that several stages share; this is the half inside one stage,
lowered from the refine step's decisions (`CpuStagePlan`: split, ranges, lanes, hoisted):

    prange(i): ...                      Par    the leading axes, one parallel loop
      hoisted: s[i] ...                 Hoist  values the serial loops do not change
      for j                             For    a serial loop (a split axis: two, and a Bind)
        fold sum over k ...             Fold   a reduction into local accumulators
        store Y[i, j]                   Store  one body written at one point
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from ..te.expr import Call, Expr, IterVar, Reduce, ReduceKind
from ..te.ops import Op
from ..te.simplify import simplify
from ..te.printer import expr_str
from ..te.tensor import Tensor
from ..te.visit import walk

if TYPE_CHECKING:  # (plan.py prints these trees)
    from .plan import ComputeStage, Split


@dataclass(frozen=True)
class Par:
    """One parallel loop over the flattened `axes` (a prange)."""

    axes: tuple[IterVar, ...]
    body: tuple[SNode, ...]


@dataclass(frozen=True)
class For:
    """A serial loop over `axis`'s range; `why` says what it is, where it is not plain."""

    axis: IterVar
    body: tuple[SNode, ...]
    why: str = ""


@dataclass(frozen=True)
class Bind:
    """A split axis rebuilt from its two loops: `axis = factor * hi + lo`."""

    split: Split


@dataclass(frozen=True)
class Hoist:
    """Values computed once into locals before the loops below (`reciprocals`: float32
    divisors among them whose quotients become products with the reciprocal)."""

    values: tuple[Expr, ...]
    reciprocals: tuple[Expr, ...]


@dataclass(frozen=True)
class Fold:
    """One reduction (every value of a tuple reducer) folded into local accumulators over its
    own loops; `lanes` > 1: stepped so LLVM vectorizes it; `shared`: values every term
    shares, computed once before its loops."""

    group: tuple[Reduce, ...]
    lanes: int
    shared: tuple[Expr, ...]


@dataclass(frozen=True)
class Store:
    """`tensor[index] = value`."""

    tensor: Tensor
    index: tuple[IterVar, ...]
    value: Expr


SNode = Par | For | Bind | Hoist | Fold | Store


def reduce_groups(bodies: Sequence[Expr]) -> list[list[Reduce]]:
    """Reductions of a stage, grouped by shared loop (a tuple reducer's values share one)."""
    groups: dict[tuple, list[Reduce]] = {}
    for b in bodies:
        for x in walk(b):
            if isinstance(x, Reduce):
                g = groups.setdefault(x.loop_key, [])
                if all(y.value_index != x.value_index for y in g):
                    g.append(x)
    return list(groups.values())


def stage_loops(st: ComputeStage) -> tuple[SNode, ...]:
    """The whole loop nest of `st` (not a contraction, nor an accumulation): its prange over
    the leading fused axes, then `inner_loops`."""
    if st.parallel and st.fused:
        return (Par(st.order[: st.fused], inner_loops(st, st.order[st.fused:])),)
    return inner_loops(st, st.order)


def inner_loops(st: ComputeStage, serial: Sequence[IterVar]) -> tuple[SNode, ...]:
    """The hoisted values, then the serial loops `serial` of `st` (a split axis as its two
    loops; with ranges, the innermost as one loop per range), its folds and its stores."""
    c = st.cpu
    folds: tuple[SNode, ...] = tuple(
        Fold(tuple(g), c.lanes, tuple(e for e in c.fold_hoisted if e in
                                      {x for s in g[0].source for x in walk(s)}))
        for g in reduce_groups(st.bodies))
    if c.ranges is not None:
        rs = c.ranges
        stores: tuple[SNode, ...] = tuple(
            For(ax, _stores(st, bodies, {rs.axis: ax}), f"index split: {rs.describe()}" if k == 0
                else "")
            for k, (ax, bodies) in enumerate(rs.pieces))
        serial = serial[:-1]
    else:
        stores = _stores(st, st.bodies, {})
    body = (*folds, *stores)
    sp = c.split
    for a in reversed(serial):
        if sp is not None and a is sp.axis:
            why = (f"split: {a.name} = {sp.factor} * {sp.hi.name} + {sp.lo.name}, as the body "
                   f"reads it only through // and % by {sp.factor}")
            body = (For(sp.hi, (For(sp.lo, (Bind(sp), *body)),), why),)
        else:
            last = a is serial[-1] and bool(st.axes) and a is st.axes[-1]
            body = (For(a, body, "innermost: the last (contiguous) axis" if last else ""),)
    hoist = (Hoist(c.hoisted, c.reciprocals),) if c.hoisted or c.reciprocals else ()
    return (*hoist, *body)


def _stores(st: ComputeStage, bodies: Sequence[Expr], at: dict[IterVar, IterVar]
            ) -> tuple[SNode, ...]:
    return tuple(Store(t, tuple(at.get(a, a) for a in st.axes), b)
                 for t, b in zip(st.tensors, bodies, strict=True) if t is not None)


LANES = ("stepped with a reassociable add (max/min: llvm.maximum/minimum, exact), which LLVM "
         "vectorizes into SIMD lanes (sums regroup within float rounding)")


def _range(a: IterVar) -> str:
    hi = a.extent.args[0] if isinstance(a.extent, Call) and a.extent.op is Op.SUB and \
        a.extent.args[1].same_as(a.lo) else simplify(a.lo + a.extent)
    return f"[{expr_str(a.lo)}, {expr_str(hi)})"


def lines(nodes: Sequence[SNode], depth: int = 2) -> list[str]:
    """The tree, one node a line (a Hoist: one per kind), indented by depth, with reasons."""
    out, pad = [], "  " * depth
    for n in nodes:
        match n:
            case Par():
                names = " * ".join(a.name for a in n.axes)
                out.append(f"{pad}prange({names if len(n.axes) == 1 else 'fused ' + names}): the "
                           f"leading axes, one parallel loop (distinct points write distinct "
                           f"elements)")
                out += lines(n.body, depth + 1)
            case For():
                out.append(f"{pad}for {n.axis.name} in {_range(n.axis)}" + (f": {n.why}" if n.why
                                                                           else ""))
                out += lines(n.body, depth + 1)
            case Bind():
                out.append(f"{pad}{n.split.axis.name} = {n.split.factor} * {n.split.hi.name} + "
                           f"{n.split.lo.name}")
            case Hoist():
                if n.values:
                    out.append(f"{pad}hoisted: {'; '.join(map(expr_str, n.values))} "
                               f"(loop-invariant: computed once before the serial loops, which "
                               f"LLVM cannot do past stores)")
                if n.reciprocals:
                    out.append(f"{pad}reciprocal: float32 division by "
                               f"{', '.join(map(expr_str, n.reciprocals))} as a product with its "
                               f"reciprocal, computed once (within 1 ulp; scaled by a power of "
                               f"two when 1/d is not normal)")
            case Fold():
                r = n.group[0]
                kind = (str(r.combiner.kind) if r.combiner.kind is not ReduceKind.CUSTOM
                        else f"custom {r.combiner.name!r}")
                out.append(f"{pad}fold {kind} over {', '.join(a.name for a in r.axis)}"
                           + (f": {LANES}" if n.lanes > 1 else ""))
                if n.shared:
                    out.append(f"{pad}  hoisted out of its reduction loops: "
                               f"{'; '.join(map(expr_str, n.shared))} (the same for every term)")
            case Store():
                out.append(f"{pad}store {n.tensor.name}[{', '.join(a.name for a in n.index)}]")
    return out
