"""A stage's own loop nest as a tree: what the renderers print, one rule per node kind
(`kernels/render.RenderPass.NODE_RULES` and each target's additions), and what `print(plan)`
shows, each node with its reason (`LINES`).

loopnest.py holds the loops that several stages share and lower.py the CPU tree they make; this
is the half inside one stage, lowered from the refine step's decisions (`CpuStagePlan`: split,
ranges, lanes, hoisted, fold_hoisted; for a scatter: zero, block, block_indices, shared):

    prange(i): ...                      Par    the leading axes, one parallel loop
      hoisted: s[i] ...                 Hoist  values the serial loops do not change
      for j                             For    a serial loop (a split axis: two, and a Bind)
        fold sum over k ...             Fold   a reduction into local accumulators
        store Y[i, j]                   Store  one body written at one point

A scatter's: Zero (its target), Par or Blocks (its parallel axis, or blocks of it), For, Let
(what its updates share) or Indices (its blocked index dims), Adds (the updates).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..te.expr import Call, Expr, IterVar, Reduce, ReduceKind
from ..te.ops import Op
from ..te.printer import expr_str
from ..te.simplify import simplify
from ..te.tensor import Tensor
from ..te.visit import walk
from .loopnest import Kind

if TYPE_CHECKING:  # (plan.py prints these trees)
    from .plan import ComputeStage, ScatterStage, Split


class Zeroing(Kind):
    """How a CPU scatter's target is zeroed before its updates (schedule/cpu_scatter.zeroing)."""

    SERIAL = "serial"  # np.zeros (a workspace: fill(0)) before the loops; the others: ZEROING
    OWN_SLICES = "own slices"
    CHUNKS = "chunks"
    FRESH = "fresh"


ZEROING = {Zeroing.OWN_SLICES: "the target in parallel, each prange iteration its own slice "
                               "(whole sub-arrays; pages first touched by the thread that writes "
                               "them)",
           Zeroing.CHUNKS: "the target in parallel, in chunks of the flat array (the slices are "
                           "not whole sub-arrays)",
           Zeroing.FRESH: "np.zeros by the caller (32 MiB or more: fresh pages, which the OS "
                          "zeroes when first touched; only those the updates touch are written)"}


@dataclass(frozen=True)
class Par:
    """One parallel loop over the flattened `axes` (a prange); `chunks` > 0: over that many
    chunks of the one axis (a split sum's)."""

    axes: tuple[IterVar, ...]
    body: tuple[Any, ...]  # (SNode, and lower.py's nodes)
    chunks: int = 0


@dataclass(frozen=True)
class For:
    """A serial loop over `axis`'s range; `why` says what it is, where it is not plain."""

    axis: IterVar
    body: tuple[Any, ...]  # (SNode, and lower.py's nodes)
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
class Let:
    """Values computed once into locals (`{stage}_{tag}`), each free to use the ones before:
    `tag` "h", what every term of the next fold shares; "s", what every update of a scatter
    computes from the same loads at a point."""

    values: tuple[Expr, ...]
    tag: str


@dataclass(frozen=True)
class Fold:
    """One reduction (every value of a tuple reducer) folded into local accumulators over its
    own loops; `lanes` > 1: stepped so LLVM vectorizes it."""

    group: tuple[Reduce, ...]
    lanes: int


@dataclass(frozen=True)
class Store:
    """`tensor[index] = value`."""

    tensor: Tensor
    index: tuple[IterVar, ...]
    value: Expr


@dataclass(frozen=True)
class Zero:
    """A scatter's target zeroed before its updates, as `how` (plan.Zeroing) says; OWN_SLICES
    also by a `ZeroSlice` at the start of each prange iteration."""

    how: Zeroing


@dataclass(frozen=True)
class ZeroSlice:
    """The slice of a scatter's target that this prange iteration owns, zeroed."""


@dataclass(frozen=True)
class Blocks:
    """A prange over blocks of `size` values of `axis` (a scatter's parallel axis, its target's
    last dim); a `Block` inside runs one block."""

    axis: IterVar
    size: int
    body: tuple[SNode, ...]


@dataclass(frozen=True)
class Block:
    """The loop over the values of `axis` in the enclosing `Blocks`' block."""

    axis: IterVar
    body: tuple[SNode, ...]


@dataclass(frozen=True)
class Indices:
    """The target index dims of the unconditional updates that the block loop below does not
    change (`dims`), computed and checked once before it."""

    dims: tuple[Expr, ...]


@dataclass(frozen=True)
class Adds:
    """Each update of the scatter, in order: its condition, then `target[index] += value`
    (`atomic`: an atomic add, where points may collide: a CUDA ATOMIC scatter)."""

    atomic: bool = False


SNode = Par | For | Bind | Hoist | Let | Fold | Store | Zero | ZeroSlice | Blocks | Block | \
    Indices | Adds


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
    folds: tuple[SNode, ...] = ()
    for g in reduce_groups(st.bodies):
        shared = fold_shared(st, g[0])
        folds += (*((Let(shared, "h"),) if shared else ()), Fold(tuple(g), c.lanes))
    if c.ranges is not None:
        rs = c.ranges
        stored: tuple[SNode, ...] = tuple(
            For(ax, stores(st, bodies, {rs.axis: ax}), f"index split: {rs.describe()}" if k == 0
                else "")
            for k, (ax, bodies) in enumerate(rs.pieces))
        serial = serial[:-1]
    else:
        stored = stores(st)
    body = (*folds, *stored)
    sp = c.split
    for a in reversed(serial):
        if sp is not None and a is sp.axis:
            why = (f"split: {a.name} = {sp.factor} * {sp.hi.name} + {sp.lo.name}, as the body "
                   f"reads it only through // and % by {sp.factor}")
            body = (For(sp.hi, (For(sp.lo, (Bind(sp), *body)),), why),)
        else:
            last = a is serial[-1] and bool(st.axes) and a is st.axes[-1]
            body = (For(a, body, "innermost: the last (contiguous) axis" if last else ""),)
    return (hoist(st), *body) if c.hoisted or c.reciprocals else body


def hoist(st: ComputeStage) -> Hoist:
    """The values `st`'s serial loops do not change, and its float32 reciprocals."""
    return Hoist(st.cpu.hoisted, st.cpu.reciprocals)


def fold_shared(st: ComputeStage, r: Reduce) -> tuple[Expr, ...]:
    """The values every term of `r` shares (of the stage's `fold_hoisted`), in order."""
    mine = {x for s in r.source for x in walk(s)}
    return tuple(e for e in st.cpu.fold_hoisted if e in mine)


def scatter_loops(st: ScatterStage) -> tuple[SNode, ...]:
    """The loop nest of a scatter: its target zeroed, then its loops (a prange over its
    parallel axis, or over blocks of it; serial otherwise) and its updates."""
    c, p = st.cpu, st.parallel_axis
    shared: tuple[SNode, ...] = (Let(c.shared, "s"),) if c.shared else ()
    adds: tuple[SNode, ...] = (Adds(),)
    if p is not None and c.block:
        return (Zero(c.zero), Blocks(p, c.block, loops_over(st.order[1:], (
            Indices(c.block_indices), Block(p, adds)))))
    if p is not None:
        own = (ZeroSlice(),) if c.zero is Zeroing.OWN_SLICES else ()
        return (Zero(c.zero), Par(st.order[:1], (*own, *loops_over(st.order[1:], (*shared, *adds)))))
    return (Zero(c.zero), *loops_over(st.order, (*shared, *adds)))


def loops_over(axes: Sequence[IterVar], body: tuple[Any, ...]) -> tuple[Any, ...]:
    """`body` in serial loops over `axes`, the first outermost."""
    for a in reversed(axes):
        body = (For(a, body),)
    return body


def stores(st: ComputeStage, bodies: Sequence[Expr] | None = None,
           at: dict[IterVar, IterVar] | None = None) -> tuple[Store, ...]:
    """A Store per body of `st` (`bodies`, or its own), at its axes (`at` renames some)."""
    at = at or {}
    return tuple(Store(t, tuple(at.get(a, a) for a in st.axes), b)
                 for t, b in zip(st.tensors, bodies or st.bodies, strict=True) if t is not None)


def _range(a: IterVar) -> str:
    hi = a.extent.args[0] if isinstance(a.extent, Call) and a.extent.op is Op.SUB and \
        a.extent.args[1].same_as(a.lo) else simplify(a.lo + a.extent)
    return f"[{expr_str(a.lo)}, {expr_str(hi)})"


def _exprs(es: Sequence[Expr], sep: str = "; ") -> str:
    return sep.join(map(expr_str, es))


def _invariant(es: Sequence[Expr], loops: str) -> list[str]:
    return [f"hoisted: {_exprs(es)} (loop-invariant: computed once before the {loops} loops, "
            f"which LLVM cannot do past stores)"] if es else []


def _fold(n: Fold) -> str:
    r = n.group[0]
    kind = str(r.combiner.kind) if r.combiner.kind is not ReduceKind.CUSTOM else \
        f"custom {r.combiner.name!r}"
    return f"fold {kind} over {', '.join(a.name for a in r.axis)}" + (
        ": stepped with a reassociable add (max/min: llvm.maximum/minimum, exact), which LLVM "
        "vectorizes into SIMD lanes (sums regroup within float rounding)" if n.lanes > 1 else "")


LETS = {"h": "hoisted out of its reduction loops: {} (the same for every term)",
        "s": "hoisted: {} (shared by the updates: computed once per point before their stores, "
             "past which LLVM would load and compute them again)"}
# each node's own line(s), with its reason; `lines` prints a node's body beneath it
LINES: dict[type, Callable[[Any], list[str]]] = {
    Par: lambda n: [f"prange({n.chunks} chunks of {n.axes[0].name}): each chunk's partial "
                    f"results of its own" if n.chunks else
                    f"prange({'' if len(n.axes) == 1 else 'fused '}"
                    f"{' * '.join(a.name for a in n.axes)}): the leading axes, one parallel loop "
                    f"(distinct points write distinct elements)"],
    For: lambda n: [f"for {n.axis.name} in {_range(n.axis)}" + (f": {n.why}" if n.why else "")],
    Bind: lambda n: [f"{n.split.axis.name} = {n.split.factor} * {n.split.hi.name} + "
                     f"{n.split.lo.name}"],
    Hoist: lambda n: _invariant(n.values, "serial") + [
        f"reciprocal: float32 division by {_exprs(n.reciprocals, ', ')} as a product with its "
        f"reciprocal, computed once (within 1 ulp; scaled by a power of two when 1/d is not "
        f"normal)"] * bool(n.reciprocals),
    Let: lambda n: [LETS[n.tag].format(_exprs(n.values))],
    Fold: lambda n: [_fold(n)],
    Store: lambda n: [f"store {n.tensor.name}[{', '.join(a.name for a in n.index)}]"],
    Zero: lambda n: [f"zeroed: {ZEROING.get(n.how, 'np.zeros before the loops')}"],
    ZeroSlice: lambda n: ["zero the target's slice that this iteration owns"],
    Blocks: lambda n: [f"prange(blocks of {n.size} {n.axis.name}): blocks write disjoint "
                       f"elements; the other loops inside, the block innermost (contiguous)"],
    Block: lambda n: [f"for {n.axis.name} in its block"],
    Indices: lambda n: _invariant(n.dims, "block"),
    Adds: lambda n: ["target[index] += value for each update, under its condition"],
}


def lines(nodes: Sequence[Any], depth: int = 2,
          table: dict[type, Callable[[Any], list[str]]] = LINES) -> list[str]:
    """The tree, a node's lines (`table`) indented by depth, its body beneath them (at the
    same depth, of a node without lines of its own)."""
    out = []
    for n in nodes:
        own = table[type(n)](n)
        out += ["  " * depth + x for x in own]
        out += lines(getattr(n, "body", ()), depth + bool(own), table)
    return out
