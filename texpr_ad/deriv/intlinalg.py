"""Exact integer affine forms for the index solver.

An `Aff` is `sum_v c_v * v + sum_p d_p * p + k` with Python-int coefficients,
where `v` are solver variables (small ints) and `p` are parameter atoms:
expressions free of the unknowns (targets, symbolic dims, `floordiv(j, 2)`).

    Aff.var(0) * 2 + Aff.param(j) - 1      # 2*v0 + j - 1
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from ..te import dtype as dt
from ..te.expr import Const, Expr
from ..te.simplify import from_affine


def _clean(d: Mapping) -> dict:
    return {k: v for k, v in d.items() if v}


@dataclass(frozen=True)
class Aff:
    """An integer affine form over solver variables and parameter atoms (immutable)."""

    vars: Mapping[int, int] = field(default_factory=dict)
    params: Mapping[Expr, int] = field(default_factory=dict)
    const: int = 0

    @staticmethod
    def var(v: int) -> Aff:
        return Aff({v: 1})

    @staticmethod
    def param(p: Expr) -> Aff:
        if isinstance(p, Const):
            return Aff(const=int(p.value))
        return Aff(params={p: 1})

    @staticmethod
    def constant(c: int) -> Aff:
        return Aff(const=c)

    def __add__(self, o: Aff | int) -> Aff:
        if isinstance(o, int):
            return Aff(self.vars, self.params, self.const + o)
        vs, ps = dict(self.vars), dict(self.params)
        for k, c in o.vars.items():
            vs[k] = vs.get(k, 0) + c
        for p, c in o.params.items():
            ps[p] = ps.get(p, 0) + c
        return Aff(_clean(vs), _clean(ps), self.const + o.const)

    def __mul__(self, c: int) -> Aff:
        if c == 0:
            return Aff()
        return Aff({k: v * c for k, v in self.vars.items()},
                   {p: v * c for p, v in self.params.items()}, self.const * c)

    __rmul__ = __mul__

    def __neg__(self) -> Aff:
        return self * -1

    def __sub__(self, o: Aff | int) -> Aff:
        return self + (-o if isinstance(o, Aff) else -o)

    def coef(self, v: int) -> int:
        return self.vars.get(v, 0)

    def drop(self, v: int) -> Aff:
        """This form without the term of variable `v`."""
        return Aff({k: c for k, c in self.vars.items() if k != v}, self.params, self.const)

    def subst(self, v: int, value: Aff) -> Aff:
        """Replace variable `v` by `value`."""
        c = self.coef(v)
        return self if c == 0 else self.drop(v) + value * c

    @property
    def rest(self) -> Aff:
        """The parameter part (params and constant)."""
        return Aff({}, self.params, self.const)

    def is_const(self) -> bool:
        return not self.vars and not self.params

    def key(self) -> tuple:
        """Hashable identity for deduplication (insertion order independent)."""
        return (tuple(sorted(self.vars.items())),
                frozenset(self.params.items()), self.const)

    def to_expr(self, varmap: Mapping[int, Expr]) -> Expr:
        """As an expression, parameters first: `j + 1 - kh`."""
        terms: dict[Expr, int] = dict(self.params)
        for v, c in self.vars.items():
            terms[varmap[v]] = terms.get(varmap[v], 0) + c
        return from_affine(_clean(terms), self.const, dt.INDEX)


def gcd(xs: Iterable[int]) -> int:
    return math.gcd(*xs)


def normalize_ineq(a: Aff) -> Aff:
    """Tighten `a >= 0` over the integers: divide by the gcd of the non-constant coefficients."""
    if not a.vars and not a.params:
        return a
    g = gcd(list(a.vars.values()) + list(a.params.values()))
    if g <= 1:
        return a
    return Aff({k: c // g for k, c in a.vars.items()},
               {p: c // g for p, c in a.params.items()}, a.const // g)  # floor: exact on integers
