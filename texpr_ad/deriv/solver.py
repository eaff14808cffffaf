"""Integer index solver: invert an index map `g(u) = j` into a gather over new axes.

For a stage that reads `X[g(u)]` (u: its data and reduce axes) the adjoint is
`dX[j] = sum over {u in domain : g(u) = j} ...`.  `invert` parametrizes that
solution set exactly:

    invert([2*h + kh - 1], [h, kh], [j])       # h in [0, 8), kh in [0, 3): a stride-2 conv
    ->  new_axes   (h: lo = max(j // 2, 0), extent = max(min((j + 1) // 2, 7) + 1 - lo, 0),)
        subst      {h: h, kh: j + 1 - 2 * h}    # at most ceil(3 / 2) = 2 taps per j
        conditions ()
    invert([(i*6 + w) // 4, (i*6 + w) % 4], [i, w], [j0, j1])    # a reshape: no loop at all
    ->  subst {i: (4 * j0 + j1) // 6, w: (4 * j0 + j1) % 6}   # conditions: range checks of
                                   # the targets, dropped when j0, j1 are IterVars over X's shape

Steps, each exact over the integers:
1. `floordiv(e, c)` / `floormod(e, c)` by constants c > 0 become fresh
   unknowns q, r with `e = c*q + r`, `0 <= r < c`; every index becomes affine.
2. Equalities are eliminated one at a time (fewest unknowns first): divide by the
   gcd of the coefficients (a divisibility condition on the targets), peel a
   bounded unknown by division when its range fits the stride (`w = E % W`,
   `i = E // W`: reshape, pixel shuffle, pooling with K <= s), solve for a unit-
   coefficient unknown, or else change variables by a Euclid step (unimodular),
   so the parametrization is a bijection onto the integer solutions (Hermite).
3. The unknowns left free become reduce axes; their ranges come from the
   original boxes and affine constraints by Fourier-Motzkin elimination,
   innermost first, so each axis' bounds use only targets and outer axes.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

from ..te import dtype as dt
from ..te.expr import Call, Const, Expr, IterVar, as_expr, binary, const
from ..te.intervals import interval
from ..te.ops import Op
from ..te.visit import substitute, walk
from .intlinalg import Aff, gcd, normalize_ineq
from ..te.simplify import simplify

INF = float("inf")
_MAX_DERIVED = 64


@dataclass(frozen=True)
class Inversion:
    """The solutions of `indices(unknowns) == targets`.

    For every value of the targets, the solutions are exactly `subst` evaluated
    at the points of `new_axes` (each over `[lo, lo + extent)`, outer first)
    where all `conditions` hold; each solution appears once.
    """

    subst: dict[IterVar, Expr]
    new_axes: tuple[IterVar, ...]
    conditions: tuple[Expr, ...]


class _NonAffine(Exception):
    pass


@dataclass(frozen=True)
class _Box:
    lo: Aff  # parameters only
    hi: Aff  # inclusive, parameters only
    ext: int | None  # constant extent, when known


def _floordiv(a: Expr, c: int) -> Expr:
    return simplify(binary(Op.FLOORDIV, a, const(c)))


def _floormod(a: Expr, c: int) -> Expr:
    return simplify(binary(Op.FLOORMOD, a, const(c)))


def _relation(a: Aff, op: Op) -> Expr:
    """`a >= 0` / `a == 0` (parameters only) written readably: `j0 <= 3`, `2 * j0 == j1 + 3`."""
    pos = Aff({k: c for k, c in a.vars.items() if c > 0}, {p: c for p, c in a.params.items() if c > 0})
    neg = -(a - pos - a.const)
    rhs: Expr
    if not pos.vars and not pos.params:
        lhs, rhs = neg.to_expr({}), const(a.const)
        op = {Op.GE: Op.LE, Op.EQ: Op.EQ}[op]
    else:
        lhs, rhs = pos.to_expr({}), (neg - a.const).to_expr({})
    return binary(op, lhs, rhs)


class _System:
    """Mutable working state of one `invert` call (never escapes it)."""

    def __init__(self, unknowns: Sequence[IterVar]) -> None:
        self.ids: dict[IterVar, int] = {}
        self.names: list[str] = []
        self.rank: list[int] = []
        self.eqs: list[Aff] = []
        self.ineqs: list[Aff] = []
        self.boxes: dict[int, _Box] = {}
        self.defs: dict[int, Aff] = {}
        self.conds: list[Expr] = []
        self.aux: dict[int, dict[Expr, tuple[int, int]]] = {}
        self.extra: list[Expr] = []  # non-affine constraints, returned as conditions
        self.chains: dict[Expr, _Chain] = {}  # mixed-radix digits of a base (see prescan)
        for u in unknowns:
            self.ids[u] = self.fresh(u.name, len(self.ids))
        for u in unknowns:
            self.add_box(self.ids[u], self.lin(u.lo), self.lin(u.lo + u.extent - 1), u.extent)

    # -- variables and constraints ----------------------------------------------------------
    def fresh(self, name: str, rank: int) -> int:
        self.names.append(name)
        self.rank.append(rank)
        return len(self.names) - 1

    def add_box(self, v: int, lo: Aff, hi: Aff, ext: Expr) -> None:
        if lo.vars or hi.vars:  # a range depending on other unknowns: plain inequalities
            self.ineqs += [Aff.var(v) - lo, hi - Aff.var(v)]
        else:
            self.boxes[v] = _Box(lo, hi, int(ext.value) if isinstance(ext, Const) else None)

    def mentions(self, e: Expr) -> bool:
        return any(isinstance(x, IterVar) and x in self.ids for x in walk(e))

    def param_aff(self, e: Expr) -> Aff:
        return self.lin(simplify(e))

    def lin(self, e: Expr) -> Aff:
        """`e` as an affine form; div/mod of unknowns become quotient/remainder variables."""
        if not dt.is_int(e.dtype):
            raise _NonAffine
        match e:
            case Const(value=v):
                return Aff.constant(int(v))
            case IterVar() if e in self.ids:
                return Aff.var(self.ids[e])
            case Call(op=Op.ADD, args=(a, b)):
                return self.lin(a) + self.lin(b)
            case Call(op=Op.SUB, args=(a, b)):
                return self.lin(a) - self.lin(b)
            case Call(op=Op.NEG, args=(a,)):
                return -self.lin(a)
            case Call(op=Op.CAST, args=(a,)):
                return self.lin(a)
            case Call(op=Op.MUL, args=(a, b)):
                fa, fb = self.lin(a), self.lin(b)
                if fb.is_const():
                    return fa * fb.const
                if fa.is_const():
                    return fb * fa.const
                if not fa.vars and not fb.vars:
                    return Aff.param(e)
                raise _NonAffine  # unknown times a symbolic or variable factor
            case Call(op=Op.FLOORDIV | Op.FLOORMOD, args=(a, Const(value=c))) if self.mentions(a):
                if c <= 0:
                    raise _NonAffine
                dg = _digit(e)
                f = self.chains[dg[0]].digits(dg[1], dg[2]) if dg is not None and dg[0] in self.chains else None
                if f is not None:
                    return f
                q, r = self.divmod_vars(a, int(c))
                return Aff.var(q if e.op is Op.FLOORDIV else r)
        if self.mentions(e):
            raise _NonAffine  # reads, min/max, select, ... of the unknowns
        return Aff.param(e)

    def prescan(self, exprs: Sequence[Expr]) -> None:
        """One mixed-radix chain per base `f` whose divisions are `f // d % m` with the cut points
        d, d*m all dividing one another (reshape index maps: `f // 24`, `f % 24 // 6`, `f % 6`):
        `f = r1 + c1*r2 + c2*r3 + ... + cn*qn` with `0 <= r_k < c_k / c_(k-1)`, so every digit is
        affine in the same remainders (independent q, r per divisor left `f = 6*q + r` unbounded)."""
        cuts: dict[Expr, set[int]] = {}
        for x in (y for e in exprs for y in walk(e)):
            if (isinstance(x, Call) and x.op in (Op.FLOORDIV, Op.FLOORMOD) and isinstance(x.args[1], Const)
                    and dt.is_int(x.dtype) and self.mentions(x.args[0])):
                dg = _digit(x)
                if dg is None:
                    continue
                base, d, m = dg
                cuts.setdefault(base, set()).update(c for c in (d, d * m if m else 1) if c > 1)
        for base, cs in cuts.items():
            chain = sorted(cs)
            if any(b % a for a, b in zip(chain, chain[1:])) or not self.mentions(base):
                continue
            try:
                self.chains[base] = _Chain(self, base, chain)
            except _NonAffine:
                continue

    def divmod_vars(self, a: Expr, c: int) -> tuple[int, int]:
        """Quotient and remainder variables of `a` by `c` (shared between `a // c` and `a % c`)."""
        memo = self.aux.setdefault(c, {})
        if a not in memo:
            fa = self.lin(a)
            base = next((self.names[v] for v in fa.vars), "t")
            rank = len(self.names) + 1000
            q, r = self.fresh(f"{base}_o", rank), self.fresh(f"{base}_i", rank + 1)
            self.boxes[r] = _Box(Aff(), Aff.constant(c - 1), c)
            self.eqs.append(fa - Aff.var(q) * c - Aff.var(r))
            memo[a] = (q, r)
        return memo[a]

    def add_constraint(self, e: Expr) -> None:
        """Affine comparisons become (in)equalities; anything else stays a condition later."""
        match e:
            case Call(op=Op.AND, args=(a, b)):
                self.add_constraint(a)
                self.add_constraint(b)
                return
            case Call(op=Op.NOT, args=(Call(op=Op.LT | Op.LE | Op.GT | Op.GE) as c,)) if dt.is_int(
                    c.args[0].dtype):  # not(a > b) is a <= b only without NaN
                flip = {Op.LT: Op.GE, Op.LE: Op.GT, Op.GT: Op.LE, Op.GE: Op.LT}[c.op]
                self.add_constraint(Call(flip, c.args, "bool"))
                return
            case Call(op=Op.LT | Op.LE | Op.GT | Op.GE | Op.EQ, args=(a, b)) if dt.is_int(a.dtype):
                try:
                    d = self.lin(a) - self.lin(b)
                except _NonAffine:
                    pass
                else:
                    match e.op:
                        case Op.EQ:
                            self.eqs.append(d)
                        case Op.GE:
                            self.ineqs.append(d)
                        case Op.GT:
                            self.ineqs.append(d - 1)
                        case Op.LE:
                            self.ineqs.append(-d)
                        case Op.LT:
                            self.ineqs.append(-d - 1)
                    return
            case Const(value=True):
                return
        self.extra.append(e)

    # -- equality elimination ---------------------------------------------------------------
    def replace(self, v: int, value: Aff) -> None:
        """Record `v = value` and substitute it into every live constraint."""
        self.defs[v] = value
        self.eqs = [a.subst(v, value) for a in self.eqs]
        self.ineqs = [a.subst(v, value) for a in self.ineqs]

    def eliminate(self, v: int, value: Aff) -> None:
        box = self.boxes.pop(v, None)
        if box is not None:
            self.ineqs += [Aff.var(v) - box.lo, box.hi - Aff.var(v)]
        self.replace(v, value)

    def size(self, v: int) -> float:
        box = self.boxes.get(v)
        return INF if box is None or box.ext is None else box.ext

    def solve_equalities(self) -> None:
        while self.eqs:
            k = min(range(len(self.eqs)), key=lambda i: (self.cost(self.eqs[i]), i))
            e = self.eqs.pop(k)
            if not e.vars:
                self.require_zero(e)
                continue
            g = gcd(e.vars.values())
            if g > 1:
                e = self.divide(e, g)
            if self.peel(e):
                continue
            units = [v for v, c in e.vars.items() if abs(c) == 1]
            if units:  # keep small ranges (kernel taps) as loops: solve for the largest range
                v = min(units, key=lambda u: (-self.size(u), self.rank[u], u))
                self.eliminate(v, e.drop(v) * -e.coef(v))
            else:
                self.eqs.append(e)
                self.euclid_step(e)

    def cost(self, e: Aff) -> tuple[int, int]:
        """Order of elimination: equations solvable without turning a box into inequalities first."""
        easy = (len(e.vars) <= 1 or self.peel_var(e) is not None
                or any(abs(c) == 1 and self.size(v) == INF for v, c in e.vars.items()))
        return (0 if easy else 1, len(e.vars))

    def divmod_aff(self, f: Aff, g: int) -> tuple[Aff, Aff]:
        """`(f // g, f % g)` as parameter forms; terms that are multiples of g stay outside."""
        whole = Aff({}, {p: c for p, c in f.params.items() if c % g == 0},
                    f.const if f.const % g == 0 else 0)
        part = (f - whole).to_expr({})
        return (Aff({}, {p: c // g for p, c in whole.params.items()}, whole.const // g)
                + self.param_aff(_floordiv(part, g)), self.param_aff(_floormod(part, g)))

    def require_zero(self, e: Aff) -> None:
        if e.params:
            self.conds.append(_relation(e, Op.EQ))
        elif e.const != 0:
            self.conds.append(const(False))

    def divide(self, e: Aff, g: int) -> Aff:
        """`g*s = B` -> `s = B // g` with the condition `B % g == 0`."""
        vs = Aff({v: c // g for v, c in e.vars.items()})
        div, mod = self.divmod_aff(-e.rest, g)
        if not mod.is_const() or mod.const != 0:
            self.conds.append(_relation(mod, Op.EQ))
        return vs - div

    def peel(self, e: Aff) -> bool:
        """`v + g*s = B` with v in [lo, lo + ext), ext <= g: `v = lo + (B - lo) % g`, `s = (B - lo) // g`."""
        v = self.peel_var(e)
        if v is None:
            return False
        box = self.boxes.pop(v)
        others = (e * e.coef(v)).drop(v)  # v + others == 0
        g = gcd(others.vars.values())
        div, mod = self.divmod_aff(-others.rest - box.lo, g)
        if box.ext < g:
            self.conds.append(_relation(mod * -1 + (box.ext - 1), Op.GE))  # mod < ext
        self.replace(v, box.lo + mod)
        self.eqs.append(Aff({u: a // g for u, a in others.vars.items()}) - div)
        return True

    def peel_var(self, e: Aff) -> int | None:
        """A unit-coefficient unknown whose range fits in the gcd of the other coefficients."""
        if len(e.vars) < 2:
            return None
        for v, c in e.vars.items():
            box = self.boxes.get(v)
            if abs(c) == 1 and box is not None and box.ext is not None and box.ext >= 1:
                if box.ext <= gcd(a for u, a in e.vars.items() if u != v):
                    return v
        return None

    def euclid_step(self, e: Aff) -> None:
        """Unimodular change of variables `m = m' - sum_k (a_k // a_m) * u_k` shrinking coefficients."""
        m = min(e.vars, key=lambda u: (abs(e.coef(u)), self.rank[u], u))
        am = e.coef(m)
        name = self.names[m]
        m2 = self.fresh(name if name.endswith("_t") else f"{name}_t", self.rank[m])
        value = Aff.var(m2)
        for u, a in e.vars.items():
            if u != m:
                value = value - Aff.var(u) * (a // am)
        self.eliminate(m, value)

    # -- results ------------------------------------------------------------------------------
    def resolve(self, a: Aff) -> Aff:
        while any(v in self.defs for v in a.vars):
            for v in list(a.vars):
                if v in self.defs:
                    a = a.subst(v, self.defs[v])
        return a


def _digit(e: Expr) -> tuple[Expr, int, int | None] | None:
    """`e` as `base // d % m` (m None: no modulo) for a chain of floordiv/floormod by positive
    constants, or None when a step does not compose (`x % 6 // 4`)."""
    match e:
        case Call(op=Op.FLOORDIV | Op.FLOORMOD, args=(a, Const(value=c))) if c > 0:
            inner = _digit(a)
            if inner is None:
                return None
            base, d, m = inner
            c = int(c)
            if e.op is Op.FLOORDIV:
                if m is None:
                    return base, d * c, None
                return (base, d * c, m // c) if m % c == 0 else None
            if m is None or m % c == 0:
                return base, d, c
            return (base, d, m) if c % m == 0 else None
    return e, 1, None


class _Chain:
    """`base = r1 + c1*r2 + ... + c(n-1)*rn + cn*q` over the sorted cut points c1 | c2 | ... | cn."""

    def __init__(self, s: _System, base: Expr, cuts: list[int]) -> None:
        fb = s.lin(base)
        name = next((s.names[v] for v in fb.vars), "t")
        self.cuts = [1, *cuts]
        rank = len(s.names) + 1000
        self.rems = []
        for k in range(1, len(self.cuts)):
            w = self.cuts[k] // self.cuts[k - 1]
            r = s.fresh(f"{name}_d{k}", rank + k)
            s.boxes[r] = _Box(Aff(), Aff.constant(w - 1), w)
            self.rems.append(r)
        self.q = s.fresh(f"{name}_o", rank)
        total = Aff.var(self.q) * self.cuts[-1]
        for c, r in zip(self.cuts, self.rems):
            total = total + Aff.var(r) * c
        s.eqs.append(fb - total)

    def digits(self, d: int, m: int | None) -> Aff | None:
        """`base // d % m` as an affine form of the chain's variables (None: d or d*m is not a
        cut point of the chain)."""
        out, hi = Aff(), None if m is None else d * m
        if d not in self.cuts or (hi is not None and hi not in self.cuts):
            return None
        for c, r in zip(self.cuts, self.rems):
            if c >= d and (hi is None or c < hi):
                out = out + Aff.var(r) * (c // d)
        if hi is None:
            out = out + Aff.var(self.q) * (self.cuts[-1] // d)
        return out


def invert(indices: Sequence[Expr], unknowns: Sequence[IterVar], targets: Sequence[Expr],
           constraints: Sequence[Expr] = (), gate: bool = False) -> Inversion | None:
    """Solve `indices[d](unknowns) == targets[d]` for all d over the unknowns' domains.

    `constraints` are extra bool conditions on the unknowns (select guards,
    `where=`): affine ones are folded into the bounds, others are returned in
    `conditions`.  Returns None when an index is not affine in the unknowns
    after div/mod elimination (data-dependent reads, products of unknowns, ...),
    so the caller emits a scatter.

    `gate=True` makes the new axes' domain exact: the conditions on the targets alone (the
    divisibility `(j + p) % g == 0` of a window with g = gcd(stride, dilation) > 1, a 1x1
    window's `j % s == 0`) become the first new axis' extent `select(cond, ext, 0)`, so a
    target no point reaches iterates nothing, instead of every tap under a `where=`.
    """
    if len(indices) != len(targets):
        raise ValueError(f"invert: {len(indices)} indices but {len(targets)} targets; "
                         "pass one target per index")
    try:
        s = _System(unknowns)
        s.prescan([*indices, *(as_expr(c) for c in constraints)])
        for idx, tgt in zip(indices, targets, strict=True):
            s.eqs.append(s.lin(idx) - s.lin(tgt))
    except _NonAffine:
        return None
    for c in constraints:
        s.add_constraint(as_expr(c))  # also accepts the EqualOp of `a == b`
    s.solve_equalities()
    return _build(s, unknowns, gate)


def _build(s: _System, unknowns: Sequence[IterVar], gate: bool = False) -> Inversion:
    free = sorted((v for v in range(len(s.names)) if v not in s.defs), key=lambda v: (s.rank[v], v))
    ineqs: list[tuple[Aff, bool]] = [(a, True) for a in s.ineqs]
    for v in free:
        box = s.boxes.get(v)
        if box is not None:
            ineqs += [(Aff.var(v) - box.lo, True), (box.hi - Aff.var(v), True)]
    # Fourier-Motzkin, innermost axis first
    bounds: dict[int, tuple[list[tuple[int, Aff]], list[tuple[int, Aff]]]] = {}
    cur = _dedupe(ineqs)
    for t in reversed(free):
        lows, ups, rest = [], [], []
        for a, orig in cur:
            c = a.coef(t)
            if c > 0:
                lows.append((c, a.drop(t)))  # c*t + R >= 0  ->  t >= ceil(-R / c)
            elif c < 0:
                ups.append((-c, a.drop(t)))  # -c*t + R >= 0 ->  t <= floor(R / -c)
            else:
                rest.append((a, orig))
        if not lows or not ups:
            raise AssertionError(f"index solver: axis {s.names[t]} is unbounded")  # boxes bound all
        derived = [(normalize_ineq(rl * b + ru * a), False) for a, rl in lows for b, ru in ups]
        if len(derived) > _MAX_DERIVED:  # implied constraints only tighten outer loops: optional
            derived = []
        cur = _dedupe(rest + [d for d in derived if d[0].vars])
        bounds[t] = (lows, ups)
    conds = list(s.conds) + [_relation(a, Op.GE) for a, orig in cur if orig]

    resolved = {u: s.resolve(Aff.var(s.ids[u])) for u in unknowns}
    natural = {t: u.name for u, a in resolved.items() for t in a.vars  # axis t stands for u
               if a.key() == Aff.var(t).key()}
    varmap: dict[int, Expr] = {}
    axes: list[IterVar] = []
    for t in free:
        lows, ups = bounds[t]
        los = _unique([_ceil_div(-r, c, varmap) for c, r in lows])
        his = _unique([_floor_div(r, c, varmap) for c, r in ups])
        single = next((x for x in los if any(x.same_as(y) for y in his)), None)
        if single is not None:  # ceil((E - c + 1) / c) == floor(E / c): one point, no loop
            varmap[t] = single
            conds += [binary(Op.LE, x, single) for x in los if not x.same_as(single)]
            conds += [binary(Op.LE, single, y) for y in his if not y.same_as(single)]
            continue
        lo, hi = _combine(los, Op.MAX), _combine(his, Op.MIN)
        ext = simplify(hi - lo + 1)
        if not _nonneg(ext):
            ext = simplify(Call(Op.MAX, (ext, const(0)), dt.INDEX))
        held = _prune_conditions(conds) if gate and not axes else ()  # all on the targets so far
        if held:  # targets no point reaches get an empty loop, not a where= tested at every tap
            gate_cond = functools.reduce(lambda a, b: binary(Op.AND, a, b), held)
            ext, conds = Call(Op.SELECT, (gate_cond, ext, const(0)), dt.INDEX), []
        ax = IterVar(natural.get(t, s.names[t]), lo, ext, "reduce")
        varmap[t] = ax
        axes.append(ax)

    subst = {u: simplify(a.to_expr(varmap)) for u, a in resolved.items()}
    conds += [simplify(substitute(c, subst)) for c in s.extra]
    return Inversion(subst, tuple(axes), _prune_conditions(conds))


def _dedupe(xs: list[tuple[Aff, bool]]) -> list[tuple[Aff, bool]]:
    out: dict[tuple, tuple[Aff, bool]] = {}
    for a, orig in xs:
        if a.is_const() and a.const >= 0:
            continue  # trivially true
        k = a.key()
        out[k] = (a, orig or (k in out and out[k][1]))
    return list(out.values())


def _ceil_div(a: Aff, c: int, varmap: dict[int, Expr]) -> Expr:
    x = a.to_expr(varmap)
    return simplify(x if c == 1 else binary(Op.FLOORDIV, x + (c - 1), const(c)))


def _floor_div(a: Aff, c: int, varmap: dict[int, Expr]) -> Expr:
    x = a.to_expr(varmap)
    return simplify(x if c == 1 else binary(Op.FLOORDIV, x, const(c)))


def _upper(e: Expr) -> int | float:
    hi = interval(e)[1]
    return INF if hi is None else hi


def _unique(terms: list[Expr]) -> list[Expr]:
    out: list[Expr] = []
    for t in terms:
        if not any(t.same_as(o) for o in out):
            out.append(t)
    return out


def _combine(terms: list[Expr], op: Op) -> Expr:
    """max (op=MAX) or min of `terms`, dropping terms provably dominated."""
    out = list(terms)
    sign = 1 if op is Op.MAX else -1
    k = 0
    while k < len(out) and len(out) > 1:
        # t is dominated when t <= o (max) or t >= o (min) everywhere
        if any(_upper(simplify((out[k] - o) * sign)) <= 0 for j, o in enumerate(out) if j != k):
            out.pop(k)
        else:
            k += 1
    acc = out[0]
    for t in out[1:]:
        acc = Call(op, (acc, t), dt.INDEX)
    return acc


def _nonneg(e: Expr) -> bool:
    lo = interval(e)[0]
    return lo is not None and lo >= 0


def _always(c: Expr) -> bool:
    """True when interval analysis proves condition `c` (over the targets' domains)."""
    match c:
        case Const(value=v):
            return bool(v)
        case Call(op=Op.GE, args=(a, b)) | Call(op=Op.LE, args=(b, a)):
            return _nonneg(simplify(a - b))
        case Call(op=Op.GT, args=(a, b)) | Call(op=Op.LT, args=(b, a)):
            return _nonneg(simplify(a - b - 1))
        case Call(op=Op.EQ, args=(a, b)):
            lo, hi = interval(simplify(a - b))
            return lo == 0 and hi == 0
    return False


def _prune_conditions(conds: list[Expr]) -> tuple[Expr, ...]:
    out: list[Expr] = []
    for c in conds:
        c = simplify(c)
        if not _always(c) and not any(c.same_as(o) for o in out):
            out.append(c)
    return tuple(out)
