"""Every scalar derivative rule against sympy.diff at random points (seeded)."""
import math

import numpy as np
import pytest
import sympy as sp

from texpr_ad import te
from texpr_ad.deriv.rules import PARTIALS
from texpr_ad.te import Op
from texpr_ad.te.expr import Call, Var

a_, b_ = sp.symbols("a b", real=True)
SYMPY = {
    Op.ADD: a_ + b_, Op.SUB: a_ - b_, Op.MUL: a_ * b_, Op.DIV: a_ / b_, Op.NEG: -a_,
    Op.POW: a_ ** b_, Op.EXP: sp.exp(a_), Op.LOG: sp.log(a_), Op.LOG1P: sp.log(1 + a_),
    Op.SQRT: sp.sqrt(a_), Op.RSQRT: 1 / sp.sqrt(a_), Op.TANH: sp.tanh(a_),
    Op.SIGMOID: 1 / (1 + sp.exp(-a_)), Op.ERF: sp.erf(a_), Op.SIN: sp.sin(a_),
    Op.COS: sp.cos(a_), Op.ATAN: sp.atan(a_), Op.ABS: sp.Abs(a_),
    Op.MAX: sp.Max(a_, b_), Op.MIN: sp.Min(a_, b_),
    Op.FLOOR: sp.floor(a_), Op.CEIL: sp.ceiling(a_), Op.TRUNC: sp.sign(a_) * sp.floor(sp.Abs(a_)),
    Op.ROUND: sp.floor(a_ + sp.Rational(1, 2)), Op.SIGN: sp.sign(a_),
    Op.FLOORMOD: a_ - b_ * sp.floor(a_ / b_),
    Op.TAN: sp.tan(a_), Op.SINH: sp.sinh(a_), Op.COSH: sp.cosh(a_), Op.ASIN: sp.asin(a_),
    Op.ACOS: sp.acos(a_), Op.ASINH: sp.asinh(a_), Op.ACOSH: sp.acosh(a_), Op.ATANH: sp.atanh(a_),
    Op.ATAN2: sp.atan2(a_, b_),
}
# where the function is real and smooth (the default is uniform(0.3, 2.5), either sign for some)
DOMAIN = {Op.ASIN: (-0.9, 0.9), Op.ACOS: (-0.9, 0.9), Op.ATANH: (-0.9, 0.9), Op.ACOSH: (1.1, 3.0),
          Op.ASINH: (-2.5, 2.5), Op.ATAN2: (-2.5, 2.5), Op.TAN: (-1.4, 1.4)}
ZERO_ALWAYS = {Op.FLOORDIV, Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE, Op.AND, Op.OR, Op.NOT,
               Op.SHL, Op.SHR, Op.ISNAN, Op.BITWISE_AND, Op.BITWISE_OR, Op.BITWISE_XOR,
               Op.BITWISE_NOT}


def _eval_expr(e, env):
    out = te.compute((), lambda: e, name="probe")
    return float(te.evaluate([out], {}, var_values=env)[0])


@pytest.mark.parametrize("op", sorted(SYMPY, key=lambda o: o.name), ids=lambda o: o.name)
def test_rule_matches_sympy(op):
    seed = 1234 + op.value
    rng = np.random.default_rng(seed)
    a, b = Var("a", "float64"), Var("b", "float64")
    f = SYMPY[op]
    nargs = 2 if b_ in f.free_symbols else 1
    node = Call(op, (a, b)[:nargs], "float64")
    parts = PARTIALS[op](node)
    for _ in range(5):
        va, vb = rng.uniform(*DOMAIN.get(op, (0.3, 2.5))), rng.uniform(*DOMAIN.get(op, (0.3, 2.5)))
        if op in (Op.MAX, Op.MIN, Op.ABS, Op.SIGN) and rng.random() < 0.5:
            va, vb = -va, -vb
        env = {a: va, b: vb}
        for k, sym in enumerate((a_, b_)[:nargs]):
            d = sp.diff(f, sym)
            tol = 1e-10
            if d.has(sp.Derivative):  # floor/ceil/...: sympy leaves it symbolic; difference it
                g = sp.lambdify((a_, b_), f)
                want = (g(va + 1e-7, vb) - g(va - 1e-7, vb)) / 2e-7 if k == 0 else (g(va, vb + 1e-7) - g(va, vb - 1e-7)) / 2e-7
                tol = 1e-6
            else:
                want = float(d.subs({a_: va, b_: vb}).evalf())
            got = 0.0 if parts[k] is None else _eval_expr(parts[k], env)
            assert math.isclose(got, want, rel_tol=tol, abs_tol=1e-12), (op, k, va, vb, seed)


def test_every_op_has_a_rule_or_is_structural():
    structural = {Op.SELECT}  # handled as guards by the differentiator
    for op in Op:
        assert op in PARTIALS or op in structural, op
    for op in ZERO_ALWAYS:
        assert all(p is None for p in PARTIALS[op](Call(op, (Var("a"), Var("b"))[: 1 if op in (Op.NOT, Op.ISNAN, Op.BITWISE_NOT) else 2], "bool"))), op


def test_max_tie_splits_half():
    a = Var("a", "float64")
    parts = PARTIALS[Op.MAX](Call(Op.MAX, (a, a), "float64"))
    assert [_eval_expr(p, {a: 1.0}) for p in parts] == [0.5, 0.5]
