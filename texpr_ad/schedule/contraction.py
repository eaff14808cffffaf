"""The contraction normal form of a stage, derived once and read by every GEMM strategy.

A stage whose body is one float sum of a product of two (guarded) reads is a contraction
`O[data] = sum_red a * b`.  `normal_form` gives its `SumOfProduct`: the sum (its init and
condition as written), the two operands, how each indexes each dim of its tensor, and the
role of every axis, by which operands read it:

    role   axis       read by    in  Y[b, i, j] = sum_k A[b, i, k] * B[b, k, j]
    BATCH  data       a and b    b
    M      data       a only     i
    N      data       b only     j
    K      reduction  a and b    k
    OTHER  an output axis neither operand reads, a reduction axis one of them does not

An operand is a guarded read `if_then_else(cond, X[idx], 0)` (`normalize.Guarded`, cond None
for a bare read).  Each of its indices is PLAIN (a stage axis over the whole dim from 0: a
matmul's), AFFINE (integer-linear in the stage's axes: a convolution's window `y + ry - 1`)
or OTHER (`i // 4`, a tensor value): see `Index`.  Extents are static ints, None when symbolic.

`cpu_contract.im2col`, `cpu_contract.factor_contraction`, `cpu_contract.contraction_of` (BLAS) and `cpu_implicit` read this
form; `gathered` is the same form with the operand an im2col gathers normalized further.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Sequence

from ..te.affine import Affine, to_affine
from ..te.expr import Call, Const, Expr, IterVar, Read, Reduce, ReduceKind, const
from ..te.ops import Op
from ..te.visit import walk
from . import normalize
from .nest import const_int, iteration_count
from .plan import ComputeStage, Kind


class Role(Kind):
    """What an axis is to the product (see the module docstring)."""

    BATCH = "batch"
    M = "m"
    N = "n"
    K = "k"
    OTHER = "other"


@dataclass(frozen=True)
class Index:
    """One index of an operand's read: PLAIN when `plain` is set (the stage axis it is, running
    over the whole dim from 0), else AFFINE when `affine` is (its ({axis: coeff}, const) form,
    integer-linear in the stage's axes), else OTHER; `axes`: the stage axes it uses."""

    expr: Expr
    plain: IterVar | None
    affine: Affine | None
    axes: tuple[IterVar, ...]


@dataclass(frozen=True)
class Operand:
    """A factor of the product: the guarded read `g`, how it indexes each dim of its tensor,
    the stage axes its indices use, and whether its indices and guard use nothing else
    (`closed`: no tensor value)."""

    g: normalize.Guarded
    index: tuple[Index, ...]
    axes: frozenset[IterVar]
    closed: bool

    @property
    def read(self) -> Read:
        return self.g.read

    @property
    def plain(self) -> bool:
        """A bare read at distinct plain axes (each operand of a matmul)."""
        ps = [ix.plain for ix in self.index]
        return self.g.cond is None and all(p is not None for p in ps) and len(set(ps)) == len(ps)


@dataclass(frozen=True)
class SumOfProduct:
    """`O[data] = sum_{body.axis} a * b` where `body.condition` holds (module docstring)."""

    body: Reduce
    data: tuple[IterVar, ...]
    a: Operand
    b: Operand

    @property
    def red(self) -> tuple[IterVar, ...]:
        return self.body.axis

    @property
    def simple(self) -> bool:
        """No init and no condition (`where=`): exactly `O = sum a * b`."""
        c = self.body.condition
        return not self.body.init and isinstance(c, Const) and c.value is True

    def role(self, x: IterVar) -> Role:
        ina, inb = x in self.a.axes, x in self.b.axes
        if any(x is k for k in self.red):
            return Role.K if ina and inb else Role.OTHER
        return Role.BATCH if ina and inb else Role.M if ina else Role.N if inb else Role.OTHER

    def axes(self, *roles: Role) -> list[IterVar]:
        """The axes of these roles: the data axes, then the reduction's, each in stage order."""
        return [x for x in (*self.data, *self.red) if self.role(x) in roles]

    def leading(self, role: Role) -> list[IterVar]:
        """The output's leading axes of `role` (a convolution's images: N, read by its input)."""
        return list(itertools.takewhile(lambda x: self.role(x) is role, self.data))

    @staticmethod
    def extent(x: IterVar) -> int | None:
        """The static extent of `x`, None when symbolic."""
        return const_int(x.extent)

    @property
    def work(self) -> float:
        """Multiply-adds of the whole sum (inf when an extent is symbolic)."""
        return self.per_entry(())

    def per_entry(self, lead: Sequence[IterVar]) -> float:
        """Multiply-adds per entry of the output axes `lead` (a batch of products)."""
        return iteration_count([x for x in (*self.data, *self.red) if x not in lead], ())

    def swapped(self) -> SumOfProduct:
        return replace(self, a=self.b, b=self.a)

    def gathered(self, cond: Expr | None = None) -> SumOfProduct:
        """`b` as an im2col gathers it: the padding-like stages it reads folded in, read only
        where `cond` holds too (a boxed window; `normalize.folded`)."""
        return replace(self, b=_operand(normalize.folded(self.b.g, cond), {*self.data, *self.red}))


def single_sum(st: ComputeStage) -> Reduce | None:
    """The stage's body when it is one float sum of one term (any init, any condition)."""
    b = st.bodies[0] if len(st.bodies) == 1 and st.tensors[0] is not None else None
    if (isinstance(b, Reduce) and b.combiner.kind is ReduceKind.SUM and len(b.source) == 1
            and b.dtype in ("float32", "float64")):
        return b
    return None


def normal_form(st: ComputeStage) -> SumOfProduct | None:
    """The stage as a contraction `sum a * b` of two guarded reads, or None; gated reduction
    axes in the body become a `where=` (`normalize.ungated`)."""
    body = single_sum(st)
    body = None if body is None else normalize.ungated(body)
    src = None if body is None else body.source[0]
    if body is not None and isinstance(src, Call) and src.op is Op.MUL and len(src.args) == 2:
        (x, y), axes = src.args, {*st.axes, *body.axis}
        ga, gb = normalize.guard(x), normalize.guard(y)
        if ga is not None and gb is not None and x.dtype == y.dtype == body.dtype:
            return SumOfProduct(body, tuple(st.axes), _operand(ga, axes), _operand(gb, axes))
    return None


def _operand(g: normalize.Guarded, axes: set[IterVar]) -> Operand:
    idx = tuple(_index(e, d, axes) for e, d in zip(g.read.indices, g.read.tensor.shape,
                                                    strict=True))
    closed = not any(isinstance(v, (Read, Reduce)) or (isinstance(v, IterVar) and v not in axes)
                     for x in (*g.read.indices, *(() if g.cond is None else (g.cond,)))
                     for v in walk(x))
    return Operand(g, idx, frozenset(x for ix in idx for x in ix.axes), closed)


def _extent(e: Expr) -> Expr:
    """An axis extent with the differentiator's clamp `max(n, 0)` of a size dropped (sizes are
    not negative), so a reduction over a symbolic dim `n` covers the dim."""
    match e:
        case Call(op=Op.MAX, args=(n, Const(value=0))) if not isinstance(n, Const):
            return n
    return e


def _index(e: Expr, dim: Expr, axes: set[IterVar]) -> Index:
    plain = (e if isinstance(e, IterVar) and e in axes and isinstance(e.lo, Const)
             and e.lo.value == 0 and _extent(e.extent).same_as(_extent(dim)) else None)
    aff = to_affine(e)
    if aff is not None and not all(isinstance(k, IterVar) and k in axes for k in aff[0]):
        aff = None
    return Index(e, plain, aff, tuple(v for v in walk(e) if isinstance(v, IterVar) and v in axes))


def product(axes: Sequence[IterVar]) -> Expr:
    """The product of the extents of `axes` (int64, folded where static)."""
    out: Expr = const(1, "int64")
    for e in (x.extent for x in axes):
        if isinstance(out, Const) and isinstance(e, Const):
            out = const(int(out.value) * int(e.value), "int64")
        else:
            out = e if isinstance(out, Const) and out.value == 1 else out * e
    return out
