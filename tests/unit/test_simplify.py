"""Index simplification: each rewrite is checked by evaluating both sides over the whole loop range."""
from __future__ import annotations

import itertools

import pytest

from texpr_ad.te import expr_str
from texpr_ad.te.expr import Const, IterVar, const
from texpr_ad.te.interp import NUMPY_IMPL
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
