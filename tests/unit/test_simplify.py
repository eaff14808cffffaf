"""Index simplification: each rewrite is checked by evaluating both sides over the whole loop range."""
from __future__ import annotations

import itertools

import pytest

from texpr_ad.te import expr_str
from texpr_ad.te.expr import Const, IterVar, const
from texpr_ad.te.interp import NUMPY_IMPL
from texpr_ad.te.ops import Op
from texpr_ad.te.simplify import simplify

I = IterVar("i", const(0), const(3))
J = IterVar("j", const(0), const(4))
K = IterVar("k", const(0), const(80))
FLAT = (I * 4 + J) * 80 + K  # the flat index of a (3, 4, 80) reshape


def _eval(e, env):
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, IterVar):
        return env[e]
    if e.op is Op.CAST:
        return _eval(e.args[0], env)  # integer widening: the value is unchanged
    return int(NUMPY_IMPL[e.op](*[_eval(a, env) for a in e.args]))


@pytest.mark.parametrize("e, want", [
    (FLAT // 16 // 5 // 4, "i"),            # x // a // b -> x // (a*b), then the affine rule
    (FLAT // 80 % 4, "j"),                  # x // a % b -> x % (a*b) // a
    (FLAT // 16 % 5, "k // 16"),
    (FLAT % 16, "k % 16"),                  # multiples of 16 drop out of the mod
    ((K - 3) % 16, "(k - 3) % 16"),         # nothing to drop: unchanged
])
def test_div_mod_chains_simplify_and_keep_their_value(e, want):
    s = simplify(e)
    assert expr_str(s) == want
    for i, j, k in itertools.product(range(3), range(4), range(80)):
        env = {I: i, J: j, K: k}
        assert _eval(s, env) == _eval(e, env), (i, j, k)


def test_negative_offsets_keep_floor_semantics():
    e = (K * 16 - 40) // 8 // 2
    s = simplify(e)
    assert all(_eval(s, {K: k}) == _eval(e, {K: k}) for k in range(80)), expr_str(s)


H = IterVar("h", const(-7), const(20))  # negative values too: floor semantics


@pytest.mark.parametrize("e, want", [
    (2 * (H // 2) + (H - 2 * (H // 2)), "h"),            # c*(E//c) + E%c -> E
    (3 * (2 * ((H + 1) // 2) + (H + 1) % 2) - 1, "3 * h + 2"),
    (const(2, "int64") * (H // 2).astype("int64") + (H % 2).astype("int64"),
     'h.astype("int64")'),                                 # through widening casts
    (2 * (H // 2) + H % 3, "2 * (h // 2) + h % 3"),      # not a pair: unchanged
    (4 * (H // 2) + H % 2, "4 * (h // 2) + h % 2"),
])
def test_index_rules_recombine_div_mod_pairs(e, want):
    from texpr_ad.te.simplify import INDEX_RULES
    s = simplify(e, INDEX_RULES)
    assert expr_str(s) == want
    for h in range(-7, 13):
        assert _eval(s, {H: h}) == _eval(e, {H: h}), h
