"""The sum left after `cpu_contract.factor_contraction`, run as a scatter (Caffe's col2im).

A strided convolution's input gradient factors into a contraction
`P[n, c, ry, rx, y, x] = sum_f w[f, c, ry, rx] * dy[n, f, y, x]` and a gather that sums, at each
output point, the few P elements whose window covers it:

    dx_pad[n, c, a, b] = sum_{y, x in windows of (a, b)} P[n, c, a - 2y, b - 2x, y, x]

Each P element lands on exactly one output point, so the same sum is the scatter

    dx_pad = zeros; dx_pad[n, c, ry + 2y, rx + 2x] += P[n, c, ry, rx, y, x]

which reads P once, in order, with no per-point window bounds: at 8x64x56x56, stride 2,
it takes a fifth of the gather's time (5.8 -> 1.1 ms).  `col2im_scatter` builds it when the
index solver inverts the gather's read of P exactly (one output point and one reduction point per P element)
and every P element lies in the gather's domain (a condition keeps the others out otherwise).
"""
from __future__ import annotations

from ..deriv.solver import invert
from ..te.bounds import enumerate_holds
from ..te.expr import Call, Expr, IterVar, Read, const
from ..te.intrin import all as te_all
from ..te.ops import Op
from ..te.simplify import simplify
from ..te.tensor import ScatterUpdate, Tensor
from ..te.visit import substitute
from .contraction import single_sum
from .nest import const_int
from .plan import ComputeStage, CpuStagePlan, ScatterStage

_UNBOUNDED = 1 << 40


def col2im_scatter(st: ComputeStage, p: Tensor) -> ScatterStage | None:
    """`st` (a single sum of one read of `p`) as a scatter over p's points, or None."""
    body = single_sum(st)
    read = None if body is None or body.init else body.source[0]
    if body is None or st.tensors[0] is None or not (isinstance(read, Read) and read.tensor is p):
        return None
    points = tuple(IterVar(f"p{k}", const(0), d) for k, d in enumerate(p.shape))
    # solve over unbounded stand-ins (the windows' bounds depend on the output point, which
    # the solver's boxes do not take); the gather's domain is checked below instead
    free = {k: IterVar(k.name, const(0), const(_UNBOUNDED)) for k in (*st.axes, *body.axis)}
    inv = invert([substitute(i, free) for i in read.indices], list(free.values()), points,
                 [substitute(body.condition, free)])
    if inv is None or inv.new_axes:
        return None  # not one (output point, reduction point) per element of P
    sub = {k: inv.subst[v] for k, v in free.items()}
    conds: list[Expr] = [*inv.conditions, substitute(body.condition, sub)]
    for k in (*st.axes, *body.axis):  # the solved point lies in the gather's domain
        lo = substitute(k.lo, sub)
        conds += [sub[k] >= lo, sub[k] < lo + substitute(k.extent, sub)]
    cond = te_all(*[c for c in map(simplify, conds) if not _holds(c)])
    index = tuple(simplify(sub[a]) for a in st.axes)
    cands = [(ix, d) for d, ix in enumerate(index) if isinstance(ix, IterVar) and ix in points]
    if not cands:
        return None  # no race-free parallel axis
    par, dim = max(cands, key=lambda c: const_int(c[0].extent) or 0)
    order = (par, *[q for q in points if q is not par])
    update = ScatterUpdate(index, p[points], cond)
    note = (f"col2im: the sum over {', '.join(k.name for k in body.axis)} runs as a scatter over "
            f"{p.name}'s points (each lands on one output point), no per-point window bounds")
    return ScatterStage(st.name, st.tensors[0], tuple(a.extent for a in st.axes), order,
                        (update,), par, dim, st.is_output, st.inlined,
                        (*st.notes, note), cpu=CpuStagePlan())




def _holds(c: Expr) -> bool:
    """True if condition `c` holds on the box of its axes, one conjunct at a time (each over
    only the axes it uses): the window bounds of a strided gather, `y >= max((ry + 2 * y - 1)
    // 2, 0)`, hold by construction but are beyond `simplify`, so they are enumerated."""
    if isinstance(c, Call) and c.op is Op.AND:
        return all(_holds(a) for a in c.args)
    return enumerate_holds(c) is True
