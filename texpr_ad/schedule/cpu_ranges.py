"""Index-set splitting: an elementwise stage whose selects test its innermost axis `j` against
bounds that do not depend on `j` runs one `j` loop per range on which every such test is constant,
each with its selects resolved to the branch taken there (Halide's `specialize` on a loop's
range; LLVM's loop unswitching cannot, the tests vary with `j`).  Example, a GEGLU backward:

    dx[i, j] = select(j <= 1023, dA, 0) + select(j >= 1024, dG, 0)      j in [0, 2048)
    ->  j in [0, 1024): dA + 0        j in [1024, 2048): 0 + dG

A test is an integer comparison `+-j + rest (<, <=, >, >=) bound`, `rest` and `bound` free of `j`
and of tensor values: true exactly on one side of a breakpoint `b` (`j >= b` or `j < b`).  The
breakpoints (constants: one of outer axes measured slower, see MATH) are clamped to the loop's
range; an empty range is dropped.  Exact: each element
gets the branch its test selects, and a branch is rendered only in the range where it is taken
(its reads are proven in bounds by that range, as its guard proved them before).
"""
from __future__ import annotations


from ..te import dtype as dt
from ..te.affine import from_affine, to_affine
from ..te.expr import Call, Const, Expr, IterVar, Read, Reduce
from ..te.ops import PIECEWISE_CONST, UNARY_MATH, Op
from ..te.visit import substitute, transform, walk
from .loopnest import Loop, LoopKind, Node, StageRef
from .nest import const_int
from .plan import ComputeStage, IndexSplit, Stage
from .plan import with_cpu as _cpu

MIN_EXTENT = 128  # innermost loops shorter than this keep their selects
MAX_RANGES = 4  # ranges a loop is split into at most
# A split pays when a branch holds a math call (GEGLU's backward: 44 -> 30 ms); a select of a
# read and a constant is a vector blend or masked load, and the split measured slower (a pad,
# 1.55 -> 1.74 ms).  Breakpoints are constants: one of outer axes (a causal mask's `j <= i`,
# loops range(0, i + 1) and range(i + 1, n) in a prange) measured slower, 1.7 -> 3.7 ms
# (exp under the mask: 2.2 -> 3.4 ms): LLVM vectorizes range(i + 1, n) poorly there.
MATH = (UNARY_MATH - PIECEWISE_CONST - {Op.ABS}) | {Op.POW, Op.ATAN2}
_FLIP = {Op.LT: Op.GT, Op.LE: Op.GE, Op.GT: Op.LT, Op.GE: Op.LE}


def split_ranges(stages: list[Stage], tree: tuple[Node, ...]) -> list[Stage]:
    """Each stage that runs its own serial loops (alone or in a prange of a row-wise chain)."""
    own = {n.name for n in tree if isinstance(n, StageRef)} | {
        m.name for n in tree if isinstance(n, Loop) and n.kind is LoopKind.PRANGE
        for m in n.body if isinstance(m, StageRef)}
    return [index_split(st) if isinstance(st, ComputeStage) and st.name in own else st
            for st in stages]


def _breakpoint(c: Expr, j: IterVar) -> tuple[Expr, bool] | None:
    """`c` as (b, True) when it means `j >= b`, (b, False) for `j < b`; None if it is no test."""
    if not (isinstance(c, Call) and c.op in _FLIP and dt.is_int(c.args[0].dtype)
            and dt.is_int(c.args[1].dtype)):
        return None
    f = to_affine(Call(Op.SUB, c.args, dt.INDEX))  # lhs - rhs (op) 0
    if f is None or f[0].get(j) not in (1, -1) or any(
            x is j or isinstance(x, (Read, Reduce)) for t in f[0] if t is not j for x in walk(t)):
        return None
    k, op = f[0][j], c.op if f[0][j] == 1 else _FLIP[c.op]  # k*j + r (op) 0: j (op') -k*r
    rest = from_affine({t: -k * v for t, v in f[0].items() if t is not j}, -k * f[1], dt.INDEX)
    b = {Op.GE: rest, Op.GT: rest + 1, Op.LT: rest, Op.LE: rest + 1}[op]  # j >= b / j < b
    return b, op in (Op.GE, Op.GT)


def _tests(e: Expr, j: IterVar) -> dict[Expr, tuple[Expr, bool]] | None:
    """The tests on `j` in the conditions of `e`'s selects; None when some other condition
    depends on `j` (an equality, a tensor value): the selects would stay."""
    out: dict[Expr, tuple[Expr, bool]] = {}
    sel = [x for x in walk(e) if isinstance(x, Call) and x.op is Op.SELECT]
    if not any(isinstance(y, Call) and y.op in MATH for x in sel if any(z is j for z in walk(
            x.args[0])) for b in x.args[1:] for y in walk(b)):
        return {}  # cheap branches: LLVM vectorizes the select as a blend (see MATH)
    conds = [x.args[0] for x in sel]
    while conds:
        c = conds.pop()
        if isinstance(c, Call) and c.op in (Op.AND, Op.OR, Op.NOT):
            conds += c.args
        elif (bp := _breakpoint(c, j)) is not None:
            out[c] = bp
        elif any(x is j for x in walk(c)):
            return None
    return out


def _resolve(e: Expr, truth: dict[Expr, bool]) -> Expr:
    """`e` with the tests in `truth` replaced by their value and the selects, and/or/not, they
    decide folded (nothing else is rewritten: the values are the ones written)."""
    def fn(x: Expr) -> Expr | None:
        if x in truth:
            return Const(truth[x], "bool")
        if not (isinstance(x, Call) and x.op in (Op.SELECT, Op.AND, Op.OR, Op.NOT)):
            return None
        cs = [a.value for a in x.args if isinstance(a, Const) and a.dtype == "bool"]
        match x.op, x.args:
            case Op.SELECT, (Const(value=v), a, b):
                return a if v else b
            case Op.NOT, (Const(value=v),):
                return Const(not v, "bool")
            case (Op.AND | Op.OR), (a, b) if cs:
                short = x.op is Op.OR
                return Const(short, "bool") if short in cs else (b if isinstance(a, Const) else a)
        return None
    return transform(e, fn)


def index_split(st: ComputeStage) -> ComputeStage:
    """The stage with its innermost loop split at its selects' breakpoints (see the module
    docstring), or unchanged."""
    c = st.cpu
    if (not st.order or c.contraction or c.accumulate or c.split or c.lanes > 1
            or (st.parallel and st.fused >= len(st.order))
            or any(isinstance(x, Reduce) for b in st.bodies for x in walk(b))):
        return st
    j = st.order[-1]
    if (const_int(j.extent) or 0) < MIN_EXTENT:
        return st
    tests: dict[Expr, tuple[Expr, bool]] = {}
    for b in st.bodies:
        if (t := _tests(b, j)) is None:
            return st
        tests.update(t)
    lo = const_int(j.lo)
    if lo is None or not tests or not all(isinstance(b, Const) for b, _ in tests.values()):
        return st  # a breakpoint of outer axes (`j <= i`) measured slower: see MATH
    hi = lo + const_int(j.extent)  # type: ignore[operator]
    ends = [lo, *sorted({min(max(b.value, lo), hi) for b, _ in tests.values()}), hi]  # type: ignore[attr-defined]
    pieces = []
    for a, b in zip(ends, ends[1:]):
        if b > a:  # (a breakpoint outside the loop leaves an empty range)
            ax = IterVar(j.name, Const(a, dt.INDEX), Const(b - a, dt.INDEX) if a == 0 else Call(
                Op.SUB, (Const(b, dt.INDEX), Const(a, dt.INDEX)), dt.INDEX))  # range(a, b)
            truth = {t: (a >= bp.value) == ge for t, (bp, ge) in tests.items()}  # type: ignore[attr-defined]
            pieces.append((ax, tuple(substitute(_resolve(e, truth), {j: ax}) for e in st.bodies)))
    if not 2 <= len(pieces) <= MAX_RANGES:
        return st
    return _cpu(st, ranges=IndexSplit(j, tuple(pieces), tuple(tests)))
